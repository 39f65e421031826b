"""GPUs by state from node and job records (:mod:`slurm_pool.adapters.records`).  Pure."""

from __future__ import annotations

from functools import lru_cache
from typing import Iterable

from slurm_pool.adapters.gres import gpu_counts
from slurm_pool.adapters.records import JobRecord

#: Node base states or flags that make a node's free GPUs unusable (down).
DOWN_STATES = frozenset({"DOWN", "UNKNOWN", "FUTURE", "ERROR", "NOT_RESPONDING", "POWERED_DOWN", "POWER_DOWN"})
#: Node flags that make its free GPUs unusable on purpose (drained).
DRAIN_STATES = frozenset({"DRAIN", "DRAINED", "DRAINING", "FAIL", "FAILING"})


def job_nodes(job: JobRecord) -> list[str]:
    """Names of the nodes a job is allocated."""
    return expand_hostlist(job.nodes)


def lent_nodes(jobs: Iterable[JobRecord], lend_partition: str) -> set[str]:
    """Nodes running a job of the lend partition (lent to Kubernetes)."""
    return {n for job in jobs if job.partition == lend_partition and job.running for n in job_nodes(job)}


def expand_hostlist(text: str) -> list[str]:
    """``a-gpu[1-2],b-gpu1`` -> names (ClusterShell; no spec machinery)."""
    if not text:
        return []
    from ClusterShell.NodeSet import NodeSet, NodeSetParseError

    try:
        return list(NodeSet(text))
    except (NodeSetParseError, ValueError):
        return [text]


def node_gpu_states(state: Iterable[str], gres: str, gres_used: str) -> dict[str, dict[str, int]]:
    """GPU units of one node by type and state (allocated, idle, drained, down).

    Units in use are ``allocated`` whatever the node's state; free units are
    ``drained`` on a drained/draining/failing node, ``down`` on a node that is
    down or not responding, and ``idle`` otherwise.
    """
    states = {s.upper() for s in state}
    total = dict(_gpu_counts(gres))
    used = dict(_gpu_counts(gres_used))
    if states & DRAIN_STATES:
        free_state = "drained"
    elif states & DOWN_STATES:
        free_state = "down"
    else:
        free_state = "idle"
    out: dict[str, dict[str, int]] = {}
    for gtype in list(total) + [t for t in used if t not in total]:
        n_used = used.get(gtype, 0)
        free = max(0, total.get(gtype, 0) - n_used)
        row = {"allocated": n_used, "idle": 0, "drained": 0, "down": 0}
        row[free_state] += free
        out[gtype] = row
    return out


@lru_cache(maxsize=8192)
def _gpu_counts(text: str) -> tuple[tuple[str, int], ...]:
    """:func:`~slurm_pool.adapters.gres.gpu_counts`, cached: 10,000 nodes print a few GRES strings."""
    return tuple(gpu_counts(text).items())


#: Seconds after a lend placeholder ended within which a job starting on its node took that node back.
RECLAIM_SLACK = 30.0


def reclaim_latencies(
    jobs: Iterable[JobRecord], lend_partition: str, slack: float = RECLAIM_SLACK, since: float = 0.0
) -> dict[int, float]:
    """Job id -> seconds from submission to start, for each job that took a lent node back.

    Such a job waited while a placeholder of ``lend_partition`` held a node
    (submitted before the placeholder ended) and started on that node within
    ``slack`` seconds of its end, at or after ``since``.  Jobs are accounting
    records (``sacct``).
    """
    ended: dict[str, list[float]] = {}
    others = []
    for job in jobs:
        if job.partition == lend_partition:
            if job.end_time and job.start_time:
                for n in job_nodes(job):
                    ended.setdefault(n, []).append(job.end_time)
        elif job.start_time and job.submit_time and job.start_time >= since:
            others.append(job)
    out = {}
    for job in others:
        assert job.start_time is not None and job.submit_time is not None
        for n in job_nodes(job):
            if any(job.submit_time <= e and e - 1 <= job.start_time <= e + slack for e in ended.get(n, ())):
                out[job.job_id] = max(0.0, job.start_time - job.submit_time)
                break
    return out
