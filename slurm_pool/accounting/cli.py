"""``slurm-pool apply accounting``: sync the spec's accounts, users and QOS into Slurm."""

from __future__ import annotations

import click

from slurm_pool.clitypes import Progress
from slurm_pool.spec import load_spec
from slurm_pool.text import shown


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
    with Progress() as bars:
        apply_accounting(
            load_spec(spec),
            SlurmClient(),
            prune=prune,
            dry_run=dry_run,
            echo=lambda line: click.echo(shown(line)),
            progress=bars.step("applying the accounting changes"),
        )


__all__ = ["apply"]
