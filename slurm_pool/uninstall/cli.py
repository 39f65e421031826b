"""``slurm-pool uninstall``: remove what slurm-pool created from a site's cluster, and nothing else."""

from __future__ import annotations

import os
from pathlib import Path

import click

from slurm_pool.spec import load_spec
from slurm_pool.text import shown


@click.command()
@click.option("--spec", "spec_path", required=True, type=click.Path(dir_okay=False), help="The pool spec.")
@click.option("--dry-run", is_flag=True, help="Print every step (`would remove ...`) and change nothing.")
@click.option(
    "--installed",
    type=click.Path(file_okay=False),
    default=None,
    help="Where the pool's files are installed [the directory of the cluster's slurm.conf].",
)
@click.option(
    "--cron-dir", type=click.Path(file_okay=False), default="/etc/cron.d", show_default=True, help="The cron entries."
)
@click.option(
    "--unit-dir",
    type=click.Path(file_okay=False),
    default="/etc/systemd/system",
    show_default=True,
    help="The systemd units.",
)
def uninstall(spec_path: str, dry_run: bool, installed: str | None, cron_dir: str, unit_dir: str) -> None:
    """Remove the QOS, accounts, users, files, Include lines, hooks, cron entries and units slurm-pool created.

    The site's objects and the ones the spec adopts stay as they are, field by
    field.  Refuses (exit 2, nothing changed) while the pool has jobs pending
    or running, or nodes lent to Kubernetes.  A second run has nothing to do.
    """
    from slurm_pool.adapters.runner import SubprocessRunner
    from slurm_pool.adapters.slurm import SlurmClient
    from slurm_pool.errors import InputError
    from slurm_pool.render.remove import TOP_FILES
    from slurm_pool.uninstall.files import Paths
    from slurm_pool.uninstall.run import build, execute

    spec = load_spec(spec_path)
    runner = SubprocessRunner()
    slurm = SlurmClient(runner)
    config = slurm.config()
    conf = config.get("SLURM_CONF") or os.environ.get("SLURM_CONF", "")
    if not conf.startswith("/"):
        raise InputError(f"SLURM_CONF: {conf!r} is not an absolute path (scontrol show config names no slurm.conf)")
    conf_dir = Path(conf).parent
    plugstack = config.get("PlugStackConfig", "")
    tops = dict(zip(TOP_FILES, (Path(conf), conf_dir / "gres.conf", conf_dir / "plugstack.conf"), strict=True))
    if plugstack.startswith("/"):
        tops["plugstack.conf"] = Path(plugstack)
    paths = Paths(Path(installed) if installed else conf_dir, tops, Path(cron_dir), Path(unit_dir))
    p = build(spec, slurm, paths)
    execute(p, slurm, runner, dry_run=dry_run, echo=lambda line: click.echo(shown(line)))


__all__ = ["uninstall"]
