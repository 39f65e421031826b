"""``slurm-pool prolog|epilog|healthcheck``: the node hooks behind the main CLI.

slurm.conf should name the scripts from
:func:`slurm_pool.nodeconf.render_hook`, which use the faster
``python3 -I -m slurm_pool.node``; these commands are the same hooks for
people and for wrappers that go through ``slurm-pool``.
"""

from __future__ import annotations

import sys

import click

from slurm_pool.clitypes import Finite
from slurm_pool.cronexit import fail, for_cron

_config = click.option(
    "--config",
    "config_path",
    default=None,
    metavar="PATH",
    help="node.conf (root-owned; default: slurm-pool-node.conf beside $SLURM_CONF, else /etc/slurm-pool/node.conf).",
)
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


@click.group()
def checkpoints() -> None:
    """Checkpoint directories on this node's (or the shared) checkpoint_base_dir."""


@checkpoints.command()
@_config
@click.option("--base", default=None, metavar="DIR", help="checkpoint_base_dir (default: from node.conf).")
@click.option(
    "--keep-days",
    type=Finite(min=0),
    default=7.0,
    show_default=True,
    help="Keep a gone job's directory until nothing in it changed for this long.",
)
@click.option("--dry-run", is_flag=True, help="Only say what would be removed.")
@for_cron
def prune(config_path: str | None, base: str | None, keep_days: float, dry_run: bool) -> None:
    """Remove the directories of jobs that left the queue KEEP_DAYS ago (for cron, as root)."""
    import os
    import time

    from slurm_pool import nodeconf as config
    from slurm_pool.adapters.runner import CommandError, SubprocessRunner
    from slurm_pool.errors import InputError, PoolError
    from slurm_pool.node import prune as pr
    from slurm_pool.text import shown

    try:
        base = base or config.load(config_path, trusted=True, env=dict(os.environ)).get("checkpoint_base_dir")
    except config.ConfigError as exc:
        raise click.ClickException(shown(exc)) from None
    try:
        entries = pr.scan(base)
    except OSError as exc:
        raise PoolError(shown(f"{base}: cannot list the checkpoint directories: {exc.strerror or exc}")) from None
    try:  # assert first: without the whole queue nothing is removed
        queued = pr.queued(SubprocessRunner())
    except (CommandError, OSError) as exc:  # squeue failed (or could not be run): exit 1
        raise PoolError(f"cannot read the queue, nothing removed: {exc}") from None
    except InputError as exc:  # squeue answered, but not with a queue: exit 2
        raise InputError(f"cannot read the queue, nothing removed: {exc}") from None
    failed = removed = 0
    for d in pr.plan(entries, queued, time.time(), keep_days):
        where = shown(f"{base}/{d.entry.rel}")
        if not d.remove:
            if dry_run:
                click.echo(f"keep   {where}: {d.why}")
            continue
        if dry_run:
            click.echo(f"remove {where}: {d.why}")
            continue
        try:
            pr.remove(base, d.entry)
            removed += 1
            click.echo(f"removed {where}: {d.why}")
        except OSError as exc:
            failed += 1
            click.echo(f"error: {where}: {shown(exc)}", err=True)
    if not dry_run:
        click.echo(f"{removed} removed, {len(entries) - removed - failed} kept, {failed} failed")
    if failed:
        fail(f"checkpoints prune: {failed} director{'y' if failed == 1 else 'ies'} could not be removed")


@click.command("gpu-cores")
@click.option(
    "--snapshot",
    default=None,
    metavar="PATH",
    help="A recorded GPU snapshot (python3 -m slurm_pool.adapters.nvml) instead of asking NVML on this node.",
)
@click.option("--sysfs", default=None, metavar="DIR", help="The CPU topology's directory [/sys/devices/system/cpu].")
def gpu_cores(snapshot: str | None, sysfs: str | None) -> None:
    """Print gres.conf Cores= for this node's GPUs, as a node group's `gpus.cores` (read-only)."""
    from slurm_pool.adapters.cputopo import SYSFS_CPU, read_cpu_topology
    from slurm_pool.adapters.nvml import NvmlSource, ReplaySource, validate_snapshot
    from slurm_pool.errors import InputError
    from slurm_pool.node.gpucores import gpu_cores as cores_of
    from slurm_pool.text import shown

    source = ReplaySource(snapshot, trusted=False) if snapshot else NvmlSource(with_mig=False)
    snap = source.snapshot()
    problems = validate_snapshot(snap)
    if snap.get("error") or problems or not snap.get("gpus"):
        why = snap.get("error") or "; ".join(problems) or "no GPUs"
        raise InputError(f"{snapshot or 'NVML'}: {shown(str(why))}")
    rows = cores_of(snap["gpus"], read_cpu_topology(sysfs or SYSFS_CPU))
    by_index = {g["index"]: g for g in snap["gpus"]}
    for index, sockets, _ in rows:
        gpu = by_index[index]
        where = "socket " + ",".join(map(str, sockets))
        click.echo(f"# GPU {index} ({shown(str(gpu.get('name')))}, {shown(str(gpu.get('pci_bus_id')))}): {where}")
    lists = [cores for _, _, cores in rows]
    same = all(c == lists[0] for c in lists)
    click.echo("cores: [" + ", ".join(f'"{c}"' for c in (lists[:1] if same else lists)) + "]")
