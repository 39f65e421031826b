"""``slurm-pool prolog|epilog|healthcheck``: the node hooks behind the main CLI.

slurm.conf should name the scripts from
:func:`slurm_pool.node.config.render_hook`, which use the faster
``python3 -I -m slurm_pool.node``; these commands are the same hooks for
people and for wrappers that go through ``slurm-pool``.
"""

from __future__ import annotations

import sys

import click

_config = click.option("--config", "config_path", default=None, metavar="PATH",
                       help="node.conf (root-owned; default: slurm-pool-node.conf beside $SLURM_CONF, "
                            "else /etc/slurm-pool/node.conf).")
_node = click.option("--node", default=None, help="Node name (default: $SLURMD_NODENAME, else the host name).")


def _run(hook: str, config_path: str | None, node: str | None, ack_xids: bool = False) -> None:
    from slurm_pool.node.hooks import main

    sys.exit(main(hook, config_path, node=node, ack_xids=ack_xids))


@click.command()
@_config
@_node
def prolog(config_path: str | None, node: str | None) -> None:
    """Slurm Prolog: prepare the checkpoint dir, check the GPUs, drain on failure (exit 1)."""
    _run("prolog", config_path, node)


@click.command()
@_config
@_node
def epilog(config_path: str | None, node: str | None) -> None:
    """Slurm Epilog: record the job's outcome, re-check the GPUs (always exits 0)."""
    _run("epilog", config_path, node)


@click.command()
@_config
@_node
@click.option("--ack-xids", is_flag=True, help="Forget the sticky critical XIDs (after a GPU reset).")
def healthcheck(config_path: str | None, node: str | None, ack_xids: bool) -> None:
    """HealthCheckProgram: check the GPUs, drain on failure, clear our own drain when healthy."""
    _run("healthcheck", config_path, node, ack_xids)
