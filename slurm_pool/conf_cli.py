"""``slurm-pool validate``, ``render`` and ``apply accounting``."""

from __future__ import annotations

from pathlib import Path

import click

from slurm_pool.cronexit import fail, for_cron
from slurm_pool.spec import load_spec
from slurm_pool.text import shown


def target_version(explicit: str | None):
    """``--slurm-version``, else the installed Slurm's, else 22.05 with a warning."""
    from slurm_pool.adapters.slurm import installed_version
    from slurm_pool.versions import DEFAULT_VERSION, SlurmVersion

    if explicit:
        return SlurmVersion.parse(explicit)
    found = installed_version()
    if found is not None:
        return found
    click.echo(f"warning: Slurm not found; using {DEFAULT_VERSION}'s names (use --slurm-version)", err=True)
    return DEFAULT_VERSION


slurm_version_option = click.option(
    "--slurm-version", help="Target Slurm release, e.g. 22.05 or 24.11.5 (default: the installed one)."
)


@click.command()
@click.argument("spec", type=click.Path(dir_okay=False))
def validate(spec: str) -> None:
    """Check a pool spec: schema, hostlists, preemption graph, MIG layouts."""
    from slurm_pool.spec.hosts import expand

    s = load_spec(spec)
    nodes = sum(len(expand(g.hosts)) for g in s.node_groups)
    click.echo(
        f"{shown(spec)}: valid (version {s.version}, cluster {s.cluster.name}, {nodes} nodes, "
        f"{len(s.partitions)} partitions, {len(s.tiers)} tiers)"
    )


@click.command()
@click.argument("spec", type=click.Path(dir_okay=False))
@click.option("-o", "--output", "outdir", required=True, type=click.Path(file_okay=False), help="Output directory.")
@slurm_version_option
@click.option("--templates", type=click.Path(file_okay=False), help="Directory of modified Jinja2 templates.")
def render(spec: str, outdir: str, slurm_version: str | None, templates: str | None) -> None:
    """Render slurm.conf, gres.conf, plugstack.conf, job_submit.lua and the accounting plan.

    Everything is rendered in memory first; on any error nothing is written.
    Files the previous render wrote into the directory (its manifest.json lists them) and
    this one no longer produces are removed in the same step; nothing else is.
    """
    from slurm_pool.outfiles import check_targets, previous_outputs, write_all
    from slurm_pool.render import render_all

    s = load_spec(spec)
    out = Path(outdir)
    check_targets(out, [])  # -o below a file: say so before rendering
    files = render_all(s, version=target_version(slurm_version), templates_dir=Path(templates) if templates else None)
    stale, notes = previous_outputs(out, files)
    removed: list[Path] = []
    for path in write_all(out, files, remove=stale, removed=removed):
        click.echo(shown(str(path)))
    for path in removed:
        click.echo(f"removed {shown(str(path))} (no longer rendered)", err=True)
    for note in notes:
        click.echo(f"warning: {shown(note)}", err=True)


@click.group()
def apply() -> None:
    """Apply parts of the spec to a running Slurm."""


@apply.command("accounting")
@click.argument("spec", type=click.Path(dir_okay=False))
@click.option("--dry-run", is_flag=True, help="Print the diff only.")
@click.option("--prune", is_flag=True, help="Also remove slurm-pool objects the spec no longer has.")
def apply_accounting_cmd(spec: str, dry_run: bool, prune: bool) -> None:
    """Sync accounts, users and QOS through sacctmgr (idempotent)."""
    from slurm_pool.accounting.apply import apply_accounting
    from slurm_pool.adapters.slurm import SlurmClient

    # A failed sacctmgr call is a CommandError (PoolError): cli.main reports it, exit 1.
    apply_accounting(
        load_spec(spec), SlurmClient(), prune=prune, dry_run=dry_run, echo=lambda line: click.echo(shown(line))
    )


@click.command()
@click.option("--spec", "spec_path", required=True, type=click.Path(dir_okay=False), help="The pool spec.")
@for_cron
def doctor(spec_path: str) -> None:
    """Compare the running cluster with what SPEC renders; print each problem and its fix.

    Exit status 1 on any problem (or when Slurm cannot be asked), 0 when all is well.
    """
    from slurm_pool import doctor as doc
    from slurm_pool.adapters.runner import CommandError, SubprocessRunner

    s = load_spec(spec_path)
    try:
        findings, lines = doc.run(s, SubprocessRunner())
    except CommandError as exc:
        fail(f"doctor: cannot ask Slurm: {exc}")
    for line in lines:  # node names, GRES and reasons as Slurm printed them
        click.echo(shown(line))
    if findings:
        fail(f"doctor: {len(findings)} problem(s) found, each printed above with its fix")


__all__ = ["validate", "render", "apply", "doctor"]
