"""``slurm-pool doctor``: print each problem of the running cluster and its fix (:mod:`slurm_pool.doctor.diagnose`)."""

from __future__ import annotations

import click

from slurm_pool.cronexit import fail, for_cron
from slurm_pool.spec import load_spec
from slurm_pool.text import shown


@click.command()
@click.option("--spec", "spec_path", required=True, type=click.Path(dir_okay=False), help="The pool spec.")
@for_cron
def doctor(spec_path: str) -> None:
    """Compare the running cluster with what SPEC renders; print each problem and its fix.

    Exit status 1 on any problem (or when Slurm cannot be asked), 0 when all is well.
    """
    from slurm_pool.adapters.runner import CommandError, SubprocessRunner
    from slurm_pool.doctor import diagnose as doc

    s = load_spec(spec_path)
    try:
        findings, lines = doc.run(s, SubprocessRunner())
    except CommandError as exc:
        fail(f"doctor: cannot ask Slurm: {exc}")
    for line in lines:  # node names, GRES and reasons as Slurm printed them
        click.echo(shown(line))
    if findings:
        fail(f"doctor: {len(findings)} problem(s) found, each printed above with its fix")


__all__ = ["doctor"]
