"""``slurm-pool render``: the spec's files, written all or none.

The command line of this pure package: the only module here that reaches
Slurm (the installed release, when ``--slurm-version`` is not given).
"""

from __future__ import annotations

from pathlib import Path

import click

from slurm_pool.clitypes import slurm_version_option, target_version
from slurm_pool.spec import load_spec_hashed
from slurm_pool.text import shown


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

    s, digest = load_spec_hashed(spec)
    out = Path(outdir)
    check_targets(out, [])  # -o below a file: say so before rendering
    tdir = Path(templates) if templates else None
    files = render_all(s, version=target_version(slurm_version), templates_dir=tdir, spec_sha256=digest)
    stale, notes = previous_outputs(out, files)
    removed: list[Path] = []
    for path in write_all(out, files, remove=stale, removed=removed):
        click.echo(shown(str(path)))
    for path in removed:
        click.echo(f"removed {shown(str(path))} (no longer rendered)", err=True)
    for note in notes:
        click.echo(f"warning: {shown(note)}", err=True)


__all__ = ["render"]
