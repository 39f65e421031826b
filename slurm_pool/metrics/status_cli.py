"""``slurm-pool status``: the running pool in the terminal (rich tables) or as JSON.

One node-record query and one ``squeue --json`` (through
:class:`~slurm_pool.adapters.slurm.SlurmClient`, as the exporter reads them),
and the tail of each node's ``outcomes.jsonl`` under node.conf's
``state_dir`` for the last preemptions.
"""

from __future__ import annotations

import json
import os
from typing import Any, Iterator

import click

from slurm_pool.clitypes import Finite
from slurm_pool.metrics.outcomes import outcome_files
from slurm_pool.metrics.status import DEFAULT_LAST, build, preemption, tables

#: Bytes read from the end of each node's outcome file.
TAIL_BYTES = 256 * 1024


def tail_preemptions(state_dir: str, tail: int = TAIL_BYTES) -> Iterator[dict[str, Any]]:
    """Preemption entries from the last ``tail`` bytes of every ``<state_dir>/<node>/outcomes.jsonl``.

    Files are not followed through symlinks; unreadable ones are skipped.
    """
    try:
        files = outcome_files(state_dir)
    except OSError:
        return
    for node, path in files:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            size = os.fstat(fd).st_size
            start = max(0, size - tail)
            os.lseek(fd, start, os.SEEK_SET)
            data = os.read(fd, size - start)
        except OSError:
            continue
        finally:
            os.close(fd)
        lines = data.split(b"\n")
        if start > 0:
            lines = lines[1:]  # began mid-line
        for line in lines[:-1]:  # the last piece has no newline yet (or is empty)
            entry = preemption(node, line) if line.strip() else None
            if entry is not None:
                yield entry


def tier_usage(slurm: Any, hours: float, now: float | None = None) -> dict[str, Any]:
    """GPU-hours used and charged per tier over the last ``hours``: every run (``sacct -D``) of every user's
    jobs, priced at its QOS's UsageFactor as slurmdbd has it.  A failed query is reported, not raised."""
    import time

    from slurm_pool.adapters.runner import CommandError
    from slurm_pool.metrics.charges import usage_by_tier

    end = time.time() if now is None else now
    start = end - hours * 3600
    since = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(start))
    try:
        runs = slurm.accounting_jobs("-a", "-X", "-D", "-S", since, "-E", "now")
        rows = slurm.sacctmgr_show("qos", ["Name", "UsageFactor"])
    except CommandError as exc:
        return {"hours": hours, "error": str(exc)}
    factors = {}
    for row in rows:
        try:
            factors[row["Name"]] = float(row["UsageFactor"])
        except (KeyError, ValueError):
            continue
    return {"hours": hours, "tiers": usage_by_tier(runs, factors, start, end)}


@click.command("status")
@click.option("--json", "as_json", is_flag=True, help="Print the status as JSON (schema in slurm_pool.metrics.status).")
@click.option(
    "--spec",
    "spec_path",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="Pool spec; its bridge: section names the lend partition [k8s-lend].",
)
@click.option(
    "--state-dir",
    default=None,
    help="Directory with <node>/outcomes.jsonl [node.conf's state_dir]; '' lists no preemptions.",
)
@click.option("--last", default=DEFAULT_LAST, show_default=True, type=click.IntRange(0), help="Preemptions listed.")
@click.option(
    "--usage-hours",
    default=24.0,
    show_default=True,
    type=Finite(min=0),
    help="Also show GPU-hours used and charged per tier over this many hours (sacct); 0 leaves it out.",
)
@click.option(
    "--slurm-timeout", default=20.0, show_default=True, type=Finite(min=0.001), help="Seconds one Slurm query may take."
)
def status(
    as_json: bool, spec_path: str | None, state_dir: str | None, last: int, usage_hours: float, slurm_timeout: float
) -> None:
    """Show GPUs by state, tier and project, pending demand, lent nodes and the last preemptions."""
    from slurm_pool.adapters.runner import SubprocessRunner
    from slurm_pool.adapters.slurm import SlurmClient
    from slurm_pool.metrics.cli import default_state_dir
    from slurm_pool.metrics.collector import DEFAULT_LEND_PARTITION

    lend_partition = DEFAULT_LEND_PARTITION
    if spec_path:
        from slurm_pool.spec import load_spec
        from slurm_pool.spec.bridge import bridge_of

        lend_partition = bridge_of(load_spec(spec_path)).partition
    if state_dir is None:
        state_dir = default_state_dir()
    slurm = SlurmClient(SubprocessRunner(default_timeout=slurm_timeout))
    nodes = slurm.nodes()
    jobs = slurm.jobs()
    pre = list(tail_preemptions(state_dir)) if state_dir else []
    usage = tier_usage(slurm, usage_hours) if usage_hours > 0 else None
    data = build(nodes, jobs, pre, lend_partition=lend_partition, last=last, usage=usage)
    if as_json:
        click.echo(json.dumps(data, indent=2, sort_keys=False))
        return
    from rich.console import Console

    console = Console(highlight=False)
    for part in tables(data):
        console.print(part)
        console.print()


if __name__ == "__main__":
    status(prog_name="slurm-pool status")
