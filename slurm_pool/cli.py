"""The ``slurm-pool`` command line.

Subcommands live next to the code they drive and are imported lazily, so
``slurm-pool prolog`` (run by slurmd for every job) loads only what it needs.
"""

from __future__ import annotations

import importlib
import sys

import click

from slurm_pool import __version__
from slurm_pool.errors import PoolError
from slurm_pool.text import shown
from slurm_pool.wellknown import REMOTE_KEY

# name -> "module:attribute" of a click command or group.
COMMANDS: dict[str, str] = {
    "validate": "slurm_pool.spec.cli:validate",
    "render": "slurm_pool.render.cli:render",
    "apply": "slurm_pool.accounting.cli:apply",
    "doctor": "slurm_pool.doctor.cli:doctor",
    "diff": "slurm_pool.diff.cli:diff_cmd",
    "cluster": "slurm_pool.localcluster.cli:cluster",
    "mig": "slurm_pool.mig.cli:mig",
    "run": "slurm_pool.checkpoint.cli:run",
    "prolog": "slurm_pool.node.cli:prolog",
    "epilog": "slurm_pool.node.cli:epilog",
    "healthcheck": "slurm_pool.node.cli:healthcheck",
    "checkpoints": "slurm_pool.node.cli:checkpoints",
    "gpu-cores": "slurm_pool.node.cli:gpu_cores",
    "exporter": "slurm_pool.metrics.cli:exporter",
    "status": "slurm_pool.metrics.status_cli:status",
    "dashboard-png": "slurm_pool.metrics.panels:dashboard_png",
    "rebalance": "slurm_pool.bridge.cli:rebalance",
    "fence-node": "slurm_pool.bridge.cli:fence_node",
    "simulate": "slurm_pool.sim.cli:simulate",
    "guarantees": "slurm_pool.guarantees.cli:guarantees",
    "elastic": "slurm_pool.elastic.cli:elastic",
    "serve": "slurm_pool.web.cli:serve",
    "why": "slurm_pool.predict.cli:why",
    "spank": "slurm_pool.spank.cli:spank",
    # -- taking the pool out of a site's cluster
    "uninstall": "slurm_pool.uninstall.cli:uninstall",
}


class LazyGroup(click.Group):
    """A click group whose subcommands are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = COMMANDS.get(cmd_name)
        if ctx.params.get("remote") is not None and cmd_name in REMOTE_COMMANDS:
            target = REMOTE_COMMANDS[cmd_name]  # the same command, asked of a slurm-pool service
        if target is None:
            return None
        module, attr = target.split(":")
        return getattr(importlib.import_module(module), attr)

    def invoke(self, ctx: click.Context) -> object:
        """Run the subcommand; a :class:`PoolError` prints one ``error:`` line per problem and sets the exit status.

        The one place user-facing errors are reported (``main`` and click's test
        runner both come through here).
        """
        try:
            return super().invoke(ctx)
        except PoolError as exc:
            for line in exc.lines():
                click.echo(f"error: {shown(line)}", err=True)  # a value quoted in it may hold terminal controls
            raise click.exceptions.Exit(exc.exit_code) from None


#: Subcommands that talk to a remote ``slurm-pool serve`` under ``--remote``: name -> "module:attribute".
REMOTE_COMMANDS: dict[str, str] = {"status": "slurm_pool.remote.cli:status"}


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, package_name="slurm-pool")
@click.option(
    "--remote",
    metavar="URL",
    default=None,
    help=f"Ask a slurm-pool service at URL (its REST API) instead of Slurm; for: {', '.join(sorted(REMOTE_COMMANDS))}.",
)
@click.option(
    "--token",
    metavar="JWT",
    default=None,
    help="Slurm JWT for --remote, as `scontrol token` prints it [$SLURM_JWT, which keeps it out of ps].",
)
@click.pass_context
def cli(ctx: click.Context, remote: str | None, token: str | None) -> None:
    """Turn per-project GPU servers into one shared, preemptible Slurm pool."""
    if remote is None:
        if token is not None:
            raise click.UsageError("--token is for --remote")
        return
    if ctx.invoked_subcommand not in REMOTE_COMMANDS:
        raise click.UsageError(
            f"--remote works with {', '.join(sorted(REMOTE_COMMANDS))}, not {ctx.invoked_subcommand or 'no command'}"
        )
    ctx.meta[REMOTE_KEY] = (remote, token)


def main(argv: list[str] | None = None) -> None:
    """Entry point: click's own errors exit as click says; ours are reported by :meth:`LazyGroup.invoke`."""
    try:
        # Without standalone mode click returns the status of an Exit (see LazyGroup.invoke).
        status = cli.main(args=argv, standalone_mode=False)
        if isinstance(status, int) and status:
            sys.exit(status)
    except click.ClickException as exc:
        setattr(exc, "message", shown(exc.message))  # noqa: B010 -- click types it Final; a value quoted in it may hold controls
        exc.show()
        sys.exit(exc.exit_code)
    except click.Abort:
        click.echo("Aborted!", err=True)
        sys.exit(1)
    sys.exit(0)


if __name__ == "__main__":
    main()
