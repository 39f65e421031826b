"""``slurm-pool status``: the running pool in the terminal (rich tables) or as JSON.

One narrow node read and one narrow job read (``sinfo``/``squeue --Format``,
through :class:`~slurm_pool.adapters.slurm.SlurmClient`, as the exporter reads them),
and the tail of each node's ``outcomes.jsonl`` under node.conf's
``state_dir`` for the last preemptions.  With ``--spec`` whose bridge has
``gangs:``, one observation of the bridge too (Slurm and Kubernetes, as
``rebalance --dry-run`` reads them) for the Volcano gangs on lent nodes.
"""

from __future__ import annotations

import json
from typing import Any, Iterator

import click

from slurm_pool.adapters.slurm import read_records
from slurm_pool.clitypes import Finite, StrictInt
from slurm_pool.errors import InputError
from slurm_pool.metrics.outcomes import TAIL_BYTES, tail_lines
from slurm_pool.metrics.status import DEFAULT_LAST, build, guarantee_status, preemption, tables
from slurm_pool.text import shown, strict_float


def tail_preemptions(state_dir: str, tail: int = TAIL_BYTES) -> Iterator[dict[str, Any]]:
    """Preemption entries from the last ``tail`` bytes of every ``<state_dir>/<node>/outcomes.jsonl``."""
    for node, line in tail_lines(state_dir, tail):
        entry = preemption(node, line)
        if entry is not None:
            yield entry


def tier_usage(slurm: Any, hours: float, now: float | None = None) -> dict[str, Any]:
    """GPU-hours used and charged per tier over the last ``hours``: every run (``sacct -D``) of every user's
    jobs, priced at its QOS's UsageFactor as slurmdbd has it.  A failed or unreadable query is reported,
    not raised."""
    import time

    from slurm_pool.adapters.runner import CommandError
    from slurm_pool.errors import PoolError
    from slurm_pool.metrics.charges import usage_by_tier

    end = time.time() if now is None else now
    start = end - hours * 3600
    since = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(start))
    try:
        runs = read_records(
            lambda: slurm.accounting(since, "now", all_users=True, allocations=True, duplicates=True),
            "sacct --json",
            "job records",
        )
        rows = slurm.sacctmgr_show("qos", ["Name", "UsageFactor"])
    except CommandError as exc:
        return {"hours": hours, "error": shown(f"sacctmgr failed: {exc}")}
    except PoolError as exc:
        failed = not isinstance(exc, InputError)
        return {"hours": hours, "error": f"sacct failed: {exc}" if failed else str(exc)}
    factors = {}
    for row in rows:
        try:
            factor = strict_float(row["UsageFactor"], f"UsageFactor of QOS {row['Name']!r}")
            if factor < 0:
                raise ValueError(f"UsageFactor of QOS {row['Name']!r}: {factor:g} is negative")
        except (KeyError, ValueError) as exc:
            return {"hours": hours, "error": shown(f"sacctmgr show qos printed no readable UsageFactor: {exc}")}
        factors[row["Name"]] = factor
    return {"hours": hours, "tiers": usage_by_tier(runs, factors, start, end)}


def gang_part(spec: Any, kubeconfig: str | None) -> dict[str, Any] | None:
    """The gangs on lent nodes (:func:`slurm_pool.metrics.gangs.gang_status`) when the spec's bridge has
    ``gangs:`` (None otherwise); a failed read is reported (``{"error": why}``), not raised."""
    from slurm_pool.metrics.cli import gang_observer

    config = spec.bridge
    if config is None or config.gangs is None:
        return None
    try:
        from slurm_pool.bridge.k8s import KubernetesAPI

        api = KubernetesAPI.connect(config, kubeconfig)
    except Exception as exc:  # noqa: BLE001 -- the client raises several kinds for an unusable config
        return {"error": shown(f"cannot reach Kubernetes: {exc}")}
    try:
        return dict(gang_observer(config, api)())
    except Exception as exc:  # noqa: BLE001 -- any failed read is shown in its place
        return {"error": shown(f"cannot read the gangs: {exc}")}
    finally:
        api.close()


@click.command("status")
@click.option("--json", "as_json", is_flag=True, help="Print the status as JSON (schema in slurm_pool.metrics.status).")
@click.option(
    "--spec",
    "spec_path",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="Pool spec; its bridge: section names the lend partition [k8s-lend]; with guarantees: each floating "
    "project's guarantee, GPUs in use in it and GPUs borrowed.",
)
@click.option(
    "--kubeconfig",
    default=None,
    type=click.Path(dir_okay=False),
    help="Kubeconfig for a --spec whose bridge has gangs: [$KUBECONFIG, ~/.kube/config, else in-cluster].",
)
@click.option(
    "--state-dir",
    default=None,
    help="Directory with <node>/outcomes.jsonl [node.conf's state_dir]; '' lists no preemptions.",
)
@click.option("--last", default=DEFAULT_LAST, show_default=True, type=StrictInt(0), help="Preemptions listed.")
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
    as_json: bool,
    spec_path: str | None,
    kubeconfig: str | None,
    state_dir: str | None,
    last: int,
    usage_hours: float,
    slurm_timeout: float,
) -> None:
    """Show GPUs by state, tier and project, floating guarantees, pending demand, lent nodes (and gang jobs on
    them) and the last preemptions."""
    from slurm_pool.adapters.runner import CommandError, SubprocessRunner
    from slurm_pool.adapters.slurm import SlurmClient
    from slurm_pool.errors import PoolError
    from slurm_pool.metrics.cli import default_state_dir
    from slurm_pool.metrics.collector import DEFAULT_LEND_PARTITION

    lend_partition = DEFAULT_LEND_PARTITION
    spec = None
    if spec_path:
        from slurm_pool.spec import load_spec
        from slurm_pool.spec.bridge import bridge_of

        spec = load_spec(spec_path)
        lend_partition = bridge_of(spec).partition
    if state_dir is None:
        state_dir = default_state_dir()
    slurm = SlurmClient(SubprocessRunner(default_timeout=slurm_timeout))
    try:
        slurm.version()  # asked first: a Slurm that cannot say its release fails here, not mid-read
    except CommandError as exc:
        raise PoolError(shown(exc)) from None
    nodes = read_records(slurm.nodes, "sinfo --Format", "node records")
    jobs = read_records(slurm.jobs, "squeue --Format", "job records")
    pre = list(tail_preemptions(state_dir)) if state_dir else []
    usage = tier_usage(slurm, usage_hours) if usage_hours > 0 else None
    guarantees = guarantee_status(spec, jobs, lend_partition) if spec is not None else None
    gangs = gang_part(spec, kubeconfig) if spec is not None else None
    data = build(
        nodes, jobs, pre, lend_partition=lend_partition, last=last, usage=usage, guarantees=guarantees, gangs=gangs
    )
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
