"""The pool at a glance, for ``slurm-pool status``: a plain dict, and rich tables of it.  Pure.

Built from one read of the node records and ``squeue --json`` (the same
:class:`~slurm_pool.adapters.records.NodeRecord` / ``JobRecord`` lists the
exporter reads) and the epilog's outcome records.  GPU "units" are whole GPUs
or MIG instances, one GRES unit each, and every unit is in exactly one state:

* ``allocated`` -- held by a job outside the lend partition (split by tier,
  i.e. the job's QOS, and by project, i.e. its account);
* ``lent`` -- held by a job of the lend partition (the bridge's ``k8s-lend``);
* ``idle``, ``drained``, ``down`` -- free, as :func:`~slurm_pool.metrics.parse.node_gpu_states` says.

The dict (``--json``; :data:`SCHEMA` is bumped when a key changes meaning)::

    {"schema": 1, "time": 1733140000.0, "lend_partition": "k8s-lend",
     "gpus": {"total": 11,
              "states": {"allocated": 4, "lent": 2, "idle": 0, "drained": 5, "down": 0},
              "by_type": {"nvidia_a100-sxm4-80gb": {"total": 4, "allocated": 2, ...}, ...},
              "allocated_by_tier": {"guaranteed": 4},
              "allocated_by_project": {"proja": 2, "projc": 2}},
     "jobs": {"running": 4, "pending": 1},
     "pending": {"scavenger": {"jobs": 1, "gpus": 2}},
     "nodes": [{"name": "a-gpu1", "state": "MIXED", "partitions": [...], "total": 2,
                "allocated": 2, "lent": 0, "idle": 0, "drained": 0, "down": 0,
                "lent_out": false, "drain_owner": null, "reason": ""}, ...],
     "lent_nodes": ["b-gpu1"],
     "preemptions": [{"time": ..., "node": "a-gpu1", "job_id": "42", "user": "alice",
                      "checkpointed": true, "checkpoint_age_s": 0.0, "requeued": true}, ...],
     "usage": {"hours": 24, "tiers": {"scavenger": {"usage_factor": 0.3, "runs": 2, "gpu_hours": 4.0,
                                                     "charged_gpu_hours": 1.2}, ...}}}

``usage`` (GPU-hours used and charged per tier, from sacct) is there when it was asked for;
``guarantees`` (:func:`guarantee_status`) when the spec given has floating guarantees::

    "guarantees": {"tier": "guaranteed", "partition": "floating", "overflow": "shared",
                   "projects": [{"project": "projd", "qos": "guaranteed-projd", "guarantee": {"gres/gpu": 2},
                                 "in_use": {"gres/gpu": 2}, "in_use_gpus": 2, "borrowed": 1,
                                 "borrowed_by_tier": {"shared": 1}}, ...]}

``gangs`` (:func:`slurm_pool.metrics.gangs.gang_status`, or ``{"error": why}``) when the spec's
bridge has ``gangs:``: Volcano gangs pending, and the groups of nodes lent for them and their reclaims.

``in_use``: GPUs of the project's running jobs in its guarantee QOS, per guarantee key;
``borrowed``: GPUs of its running jobs in any other tier but the guarantees' own (its own servers, if any).
"""

from __future__ import annotations

import math
import re
import time
from collections import Counter
from typing import TYPE_CHECKING, Any, Iterable, Mapping

from slurm_pool.adapters.records import JobRecord, NodeRecord
from slurm_pool.metrics.collector import DEFAULT_LEND_PARTITION, drain_owner
from slurm_pool.metrics.outcomes import load_record, record_fields
from slurm_pool.metrics.parse import job_nodes, lent_nodes, node_gpu_states
from slurm_pool.spec.guarantees import floating_projects, guarantee_qos, guarantee_text, guarantee_type
from slurm_pool.text import shown

if TYPE_CHECKING:
    from slurm_pool.spec.model import PoolSpec

SCHEMA = 1
#: Every GPU unit is in exactly one of these.
STATES = ("allocated", "lent", "idle", "drained", "down")
#: Preemptions listed by default.
DEFAULT_LAST = 10
#: A job id as the epilog writes it (array and het suffixes allowed); matched in full.
_JOB_ID = re.compile(r"[0-9]{1,20}(?:[_+][0-9]{1,10})?")
#: A user name as listed; matched in full.
_WORD = re.compile(r"[A-Za-z0-9._-]{1,64}")


def _lent_units(
    units: Mapping[str, Mapping[str, Mapping[str, int]]], jobs: Iterable[JobRecord], lend_partition: str
) -> dict[str, Counter[str]]:
    """Units per node and type held by jobs of the lend partition.

    A job's TRES says how many units of each type it holds, not on which of its
    nodes: they are taken from its nodes' allocated units in order (exact for
    one-node jobs, which is how the bridge lends).
    """
    free: dict[str, Counter[str]] = {
        node: Counter({t: row["allocated"] for t, row in rows.items()}) for node, rows in units.items()
    }
    lent: dict[str, Counter[str]] = {node: Counter() for node in units}
    for job in jobs:
        if job.partition != lend_partition or not job.on_node:
            continue
        want = Counter(job.gpu_types)
        untyped = max(0, job.gpus - sum(want.values()))
        for node in job_nodes(job):
            if node not in free:
                continue
            for gtype in list(free[node]):
                take = min(want[gtype], free[node][gtype])
                if untyped and free[node][gtype] > take:
                    extra = min(untyped, free[node][gtype] - take)
                    untyped -= extra
                    take += extra
                want[gtype] -= take
                free[node][gtype] -= take
                lent[node][gtype] += take
    return lent


def preemption(node: str, line: bytes | str) -> dict[str, Any] | None:
    """One outcome record line of ``node`` as a preemption entry, or None if it is not a preempted run.

    Only numbers, booleans and plain words are taken from the record.
    """
    raw = load_record(line)
    if raw is None:
        return None
    rec = record_fields(raw)
    if not rec["preempted"]:
        return None
    stamp: Any = raw.get("event_time") if _is_time(raw.get("event_time")) else raw.get("time")
    job_id = str(raw.get("job_id", ""))
    user = raw.get("user")
    requeued = raw.get("requeued")
    return {
        "time": float(stamp) if _is_time(stamp) else None,
        "node": node,
        "job_id": job_id if _JOB_ID.fullmatch(job_id) else "",
        "user": user if isinstance(user, str) and _WORD.fullmatch(user) else "",
        "checkpointed": rec["checkpointed"],
        "checkpoint_age_s": rec["checkpoint_age_s"],
        "requeued": requeued if isinstance(requeued, bool) else None,
    }


def _is_time(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0


def recent(preemptions: Iterable[Mapping[str, Any]], last: int) -> list[dict[str, Any]]:
    """The newest ``last`` entries, newest first (entries without a time sort last)."""
    ordered = sorted(preemptions, key=lambda p: (p["time"] is not None, p["time"] or 0.0), reverse=True)
    return [dict(p) for p in ordered[: max(0, last)]]


def _key_gpus(job: JobRecord, key: str, keys: int) -> int:
    """GPUs of ``job`` that count against guarantee ``key`` (one of ``keys`` keys).

    A typed key counts the job's GPUs of that type; a job whose TRES names no
    type (no typed TRES in AccountingStorageTRES) counts all its GPUs against a
    guarantee of one type.
    """
    gtype = guarantee_type(key)
    if gtype is None:
        return job.gpus
    if job.gpu_types:
        return int(job.gpu_types.get(gtype, 0))
    return job.gpus if keys == 1 else 0


def guarantee_status(
    spec: PoolSpec, jobs: Iterable[JobRecord], lend_partition: str = DEFAULT_LEND_PARTITION
) -> dict[str, Any] | None:
    """Each floating project's guarantee, GPUs in use in its guarantee QOS and GPUs borrowed (None: the
    spec has no guarantees).  Running jobs only (holding their nodes); the lend partition's are not a project's."""
    g = spec.guarantees
    if g is None:
        return None
    running = [j for j in jobs if j.on_node and j.partition != lend_partition]
    rows = []
    for project in floating_projects(spec):
        qos = guarantee_qos(g.tier, project.name)
        mine = [j for j in running if j.account == project.name]
        held = [j for j in mine if j.qos == qos]
        borrowed: Counter[str] = Counter()
        for j in mine:
            if j.qos not in (qos, g.tier) and j.gpus:
                borrowed[j.qos] += j.gpus
        keys = sorted(project.guarantee)
        rows.append(
            {
                "project": project.name,
                "qos": qos,
                "guarantee": {k: project.guarantee[k] for k in keys},
                "in_use": {k: sum(_key_gpus(j, k, len(keys)) for j in held) for k in keys},
                "in_use_gpus": sum(j.gpus for j in held),
                "borrowed": sum(borrowed.values()),
                "borrowed_by_tier": dict(sorted(borrowed.items())),
            }
        )
    return {"tier": g.tier, "partition": g.partition, "overflow": g.overflow, "projects": rows}


def build(
    nodes: Iterable[NodeRecord],
    jobs: Iterable[JobRecord],
    preemptions: Iterable[Mapping[str, Any]] = (),
    *,
    lend_partition: str = DEFAULT_LEND_PARTITION,
    last: int = DEFAULT_LAST,
    now: float | None = None,
    usage: Mapping[str, Any] | None = None,
    guarantees: Mapping[str, Any] | None = None,
    gangs: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The status dict (see the module docstring) of one read of Slurm.

    ``usage``: GPU-hours used and charged per tier over the last hours (``{"hours": h, "tiers": ...}`` from
    :func:`slurm_pool.metrics.charges.usage_by_tier`, or ``{"hours": h, "error": why}``); absent when None.
    ``guarantees``: :func:`guarantee_status` of the same jobs; absent when None.
    ``gangs``: :func:`slurm_pool.metrics.gangs.gang_status` (or ``{"error": why}``); absent when None.
    """
    nodes = sorted(nodes, key=lambda n: n.name)
    jobs = list(jobs)
    units = {n.name: node_gpu_states(n.state, n.gres, n.gres_used) for n in nodes}
    lent_units = _lent_units(units, jobs, lend_partition)
    lent = lent_nodes(jobs, lend_partition)
    by_type: dict[str, Counter[str]] = {}
    totals: Counter[str] = Counter({s: 0 for s in STATES})
    node_rows: list[dict[str, Any]] = []
    for node in nodes:
        row: Counter[str] = Counter({s: 0 for s in STATES})
        for gtype, states in units[node.name].items():
            t = by_type.setdefault(gtype, Counter({"total": 0, **{s: 0 for s in STATES}}))
            n_lent = lent_units[node.name][gtype]
            cell = {**states, "allocated": states["allocated"] - n_lent, "lent": n_lent}
            for state in STATES:
                row[state] += cell[state]
                totals[state] += cell[state]
                t[state] += cell[state]
                t["total"] += cell[state]
        node_rows.append(
            {
                "name": node.name,
                "state": str(node.state),
                "partitions": list(node.partitions),
                "total": sum(row.values()),
                **{s: row[s] for s in STATES},
                "lent_out": node.name in lent,
                "drain_owner": drain_owner(node) if node.drained else None,
                "reason": node.reason,
            }
        )
    tiers: Counter[str] = Counter()
    projects: Counter[str] = Counter()
    pending: dict[str, Counter[str]] = {}
    running = waiting = 0
    for job in jobs:
        if job.on_node:
            running += 1
            if job.partition == lend_partition:
                continue
            tiers[job.qos] += job.gpus
            projects[job.account] += job.gpus
        elif job.waiting:
            waiting += 1
            p = pending.setdefault(job.qos, Counter({"jobs": 0, "gpus": 0}))
            p["jobs"] += 1
            p["gpus"] += job.gpus
    names = {n.name for n in nodes}
    return {
        "schema": SCHEMA,
        "time": time.time() if now is None else now,
        "lend_partition": lend_partition,
        "gpus": {
            "total": sum(totals.values()),
            "states": dict(totals),
            "by_type": {t: dict(c) for t, c in sorted(by_type.items())},
            "allocated_by_tier": dict(sorted(tiers.items())),
            "allocated_by_project": dict(sorted(projects.items())),
        },
        "jobs": {"running": running, "pending": waiting},
        "pending": {tier: dict(c) for tier, c in sorted(pending.items())},
        "nodes": node_rows,
        "lent_nodes": sorted(lent & names),
        "preemptions": recent(preemptions, last),
        **({"usage": dict(usage)} if usage is not None else {}),
        **({"guarantees": dict(guarantees)} if guarantees is not None else {}),
        **({"gangs": dict(gangs)} if gangs is not None else {}),
    }


# -- rich tables -----------------------------------------------------------------------


def _stamp(t: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t)) if t else "?"


def _cell(value: Any) -> Any:
    """One table cell from data: a rich ``Text`` (never markup) with every control character shown."""
    from rich.text import Text

    return Text(shown(value))


def tables(status: Mapping[str, Any]) -> list[Any]:
    """The status as rich renderables: GPUs by state, tier and project, nodes, pending, lent, preemptions.

    Every cell that holds Slurm's or the user's text goes through :func:`_cell`.
    """
    from rich.table import Table
    from rich.text import Text

    gpus = status["gpus"]
    total = gpus["total"]
    by_state = Table(title="GPU units by state", title_justify="left")
    by_state.add_column("state")
    by_state.add_column("units", justify="right")
    by_state.add_column("share", justify="right")
    for state in STATES:
        n = gpus["states"][state]
        by_state.add_row(state, str(n), f"{100 * n / total:.0f}%" if total else "-")
    by_state.add_row("total", str(total), "100%" if total else "-", style="bold")
    by_type = Table(title="GPU units by type", title_justify="left")
    for col in ("GRES type", "total", *STATES):
        by_type.add_column(col, justify="left" if col == "GRES type" else "right")
    for gtype, row in gpus["by_type"].items():
        by_type.add_row(_cell(gtype or "(untyped)"), str(row["total"]), *(str(row[s]) for s in STATES))

    held = Table(title="Allocated by tier and project", title_justify="left")
    held.add_column("tier (QOS)")
    held.add_column("units", justify="right")
    held.add_column("project (account)")
    held.add_column("units", justify="right")
    tier_rows = list(gpus["allocated_by_tier"].items())
    proj_rows = list(gpus["allocated_by_project"].items())
    for i in range(max(len(tier_rows), len(proj_rows), 1)):
        t = tier_rows[i] if i < len(tier_rows) else ("", "")
        p = proj_rows[i] if i < len(proj_rows) else ("", "")
        held.add_row(
            _cell(t[0] or ("-" if i == 0 else "")), str(t[1]), _cell(p[0] or ("-" if i == 0 else "")), str(p[1])
        )

    nodes = Table(title="Nodes", title_justify="left")
    for col in ("node", "slurm state", *STATES, "reason"):
        nodes.add_column(col, justify="right" if col in STATES else "left")
    for n in status["nodes"]:
        reason = n["reason"] + (f" ({n['drain_owner']})" if n["drain_owner"] else "")
        nodes.add_row(_cell(n["name"]), _cell(n["state"]), *(str(n[s]) for s in STATES), _cell(reason))

    pending = Table(title=f"Pending demand by tier (pending jobs: {status['jobs']['pending']})", title_justify="left")
    pending.add_column("tier (QOS)")
    pending.add_column("jobs", justify="right")
    pending.add_column("GPU units", justify="right")
    for tier, row in status["pending"].items():
        pending.add_row(_cell(tier), str(row["jobs"]), str(row["gpus"]))
    if not status["pending"]:
        pending.add_row("-", "0", "0")

    lent = Text(
        shown(f"Lent nodes ({status['lend_partition']}): " + (", ".join(status["lent_nodes"]) or "none")), style="bold"
    )

    pre = Table(title=f"Last preemptions ({len(status['preemptions'])} shown)", title_justify="left")
    for col in ("time", "node", "job", "user", "checkpointed", "work lost (s)"):
        pre.add_column(col)
    for p in status["preemptions"]:
        age = p["checkpoint_age_s"]
        pre.add_row(
            _stamp(p["time"]),
            _cell(p["node"]),
            _cell(p["job_id"]),
            _cell(p["user"]),
            "yes" if p["checkpointed"] else "no",
            "?" if age is None else f"{age:.0f}",
        )
    parts: list[Any] = [by_state, by_type, held, nodes, pending, lent, pre]
    if "guarantees" in status:
        parts.insert(3, guarantees_table(status["guarantees"]))
    if "gangs" in status:
        from slurm_pool.metrics.gangs import gangs_table

        parts.insert(parts.index(lent) + 1, gangs_table(status["gangs"]))
    if "usage" in status:
        parts.append(usage_table(status["usage"]))
    return parts


def guarantees_table(guarantees: Mapping[str, Any]) -> Any:
    """Each floating project: its guarantee, the GPUs it runs in its guarantee QOS, and the GPUs it borrows."""
    from rich.table import Table
    from rich.text import Text

    title = f"Floating guarantees (partition {guarantees['partition']}, beyond them: {guarantees['overflow']})"
    table = Table(title=Text(shown(title)), title_justify="left")
    for col in ("project", "guarantee QOS", "guarantee", "in use", "borrowed", "borrowed by tier"):
        table.add_column(col, justify="right" if col in ("guarantee", "in use", "borrowed") else "left")
    for row in guarantees["projects"]:
        by_tier = ", ".join(f"{t} {n}" for t, n in row["borrowed_by_tier"].items())
        table.add_row(
            _cell(row["project"]),
            _cell(row["qos"]),
            _cell(guarantee_text(row["guarantee"])),
            _cell(guarantee_text(row["in_use"])),
            str(row["borrowed"]),
            _cell(by_tier or "-"),
        )
    if not guarantees["projects"]:
        table.add_row("-", "", "", "", "0", "")
    return table


def usage_table(usage: Mapping[str, Any]) -> Any:
    """GPU-hours used and charged per tier (a MIG instance counts as one GPU, as in Slurm's gres/gpu)."""
    from rich.table import Table

    table = Table(
        title=f"GPU-hours by tier, last {usage['hours']:g} h (charged at the QOS UsageFactor)", title_justify="left"
    )
    for col in ("tier (QOS)", "usage factor", "runs", "GPU-hours used", "GPU-hours charged"):
        table.add_column(col, justify="left" if col == "tier (QOS)" else "right")
    if "error" in usage:
        table.add_row(_cell(usage["error"]), "", "", "", "")
        return table
    for tier, row in usage["tiers"].items():
        table.add_row(_cell(tier), f"{row['usage_factor']:g}", str(row["runs"]), f"{row['gpu_hours']:.2f}",
                      f"{row['charged_gpu_hours']:.2f}")  # fmt: skip
    if not usage["tiers"]:
        table.add_row("-", "", "0", "0.00", "0.00")
    return table
