"""Slurm's backfill in the node engine: one reservation per blocked queue head (pure).

When a queue's head cannot start it gets one reservation, the earliest time
and units where it fits as running jobs end (their time limits); up to
``bf_depth`` jobs behind it may start now if they fit on free GPUs and either
end before that time or stay off the reserved units.  Functions of the
engine's state (:class:`.nodes._Sim`), split from :mod:`.nodes` for size.
"""

from __future__ import annotations

import math
from collections import deque
from itertools import islice
from typing import TYPE_CHECKING, Sequence

from slurm_pool.sim.engine import BORROWED, GUARANTEED, Job

if TYPE_CHECKING:
    from slurm_pool.sim.nodes import _Run, _Sim


def expected_end(sim: _Sim, r: _Run) -> float:
    """When ``r``'s GPUs are expected to come free: its grace window's end, time limit or exact end."""
    if r.free_at is not None:
        return r.free_at
    if sim.pol.time_limit is not None:
        return max(sim.now, r.begin + sim.pol.time_limit)
    return r.start + r.job.work - sim.state[r.job.id].done


def reserve(sim: _Sim, job: Job, scope: str, preemptible: bool, tier: str) -> tuple[float, dict[int, int]]:
    """The earliest time (and nodes) ``job`` fits in ``scope`` as running jobs end.

    A lent node is free now to a job that preempts placeholders, and never (until the rebalancer
    gives it back) to any other.
    """
    lent = sim.lender.lent if sim.lender is not None else {}
    reclaims = bool(lent) and sim.lender is not None and sim.lender.reclaims(job, tier)
    idx = sim.index[(scope, job.profile)]
    whole = job.profile is None and job.gpus > idx.top
    times: list[tuple[float, int]] = []
    cache = sim.pol.time_limit is None  # else expected ends move with the clock
    for n in idx.members:
        need = sim.size[n] if whole else job.gpus
        if need > sim.size[n]:
            continue
        if sim.units.node[n] in lent:
            times.append((sim.now if reclaims else math.inf, n))
            continue
        key = (n, need, preemptible)
        hit = sim.tcache.get(key) if cache else None
        if hit is not None and hit[0] == sim.ver[n]:
            times.append((max(hit[1], sim.now), n))
            continue
        avail = sim.free[n] + (sim.bheld[n] if preemptible else 0)
        rel = []
        for r in sim.on_node[n].values():
            if preemptible and r.tier == BORROWED:
                continue
            rel.append((expected_end(sim, r), r.alloc[n] - r.claimed.get(n, 0)))
        rel.sort()
        t = sim.now
        for end, c in rel:
            if avail >= need:
                break
            avail += c
            t = end
        if avail < need:  # lent to the inference tier: no job's end frees it
            t = math.inf
        times.append((t, n))
        if cache:
            sim.tcache[key] = (sim.ver[n], t)
    if not whole:
        times = [min(times)] if times else []  # one node: the earliest (lowest index on ties)
    else:
        times = [(e[0], e[2]) for e in sorted((t, -sim.size[n], n) for t, n in times)]
    got, total, t = {}, 0, math.inf
    for tn, n in times:
        got[n] = sim.ver[n]
        total += sim.size[n] if whole else job.gpus
        t = tn
        if total >= job.gpus:
            break
    return (t, got) if total >= job.gpus else (math.inf, {})


def head_reservation(sim: _Sim, key: str | None, q: deque[Job]) -> tuple[float, dict[int, int]]:
    """Queue ``key``'s blocked head's reservation: when and where it fits (kept while nothing changed)."""
    head = q[0]
    cached = sim.resv.get(key)
    if (
        cached
        and cached[0] == head.id
        and cached[1] == sim.epoch
        and all(sim.ver[n] == v for n, v in cached[3].items())
    ):
        return cached[2], dict(cached[3])
    head_tier, head_scope = sim._tier(head)
    pre = head_tier == GUARANTEED and sim.pol.preempt and sim.pol.pooled
    t_res, nodes = reserve(sim, head, head_scope, pre, head_tier or BORROWED)
    sim.resv[key] = (head.id, sim.epoch, t_res, nodes)
    return t_res, dict(nodes)


def backfill(
    sim: _Sim,
    key: str | None,
    q: deque[Job],
    higher: Sequence[tuple[str | None, deque[Job]]] = (),
    from_head: bool = False,
) -> None:
    """Start jobs behind queue ``key``'s blocked head that delay neither its reservation nor those of the
    blocked heads of the queues scheduled before it (``higher``, as Slurm's backfill reserves for every
    pending job in priority order).  ``from_head``: the head itself is a candidate too (it waits only
    because the main scheduler's pass left a blocked queue's nodes alone); if it starts, that is all."""
    head = q[0]
    resolved = False
    t_res = math.inf
    nodes: dict[int, int] = {}
    above: list[tuple[float, frozenset[int]]] | None = None  # the higher heads' reservations
    started: list[Job] = []
    # (scope, kind) -> fewest GPUs found not to fit (starts only shrink free GPUs)
    no_fit: dict[tuple[str, str | None], int] = {}
    no_fit_off: dict[tuple[tuple[str, str | None], frozenset[int]], int] = {}  # the same, off reserved nodes
    for job in islice(q, 0 if from_head else 1, 1 + sim.pol.bf_depth):
        if sim.total_free == 0:
            break
        tier, scope = sim._tier(job)
        kind = (scope, job.profile)
        if tier is None or job.gpus >= no_fit.get(kind, job.gpus + 1):
            continue
        if sim._fit(job, scope) is None:
            no_fit[kind] = job.gpus
            continue
        if above is None:
            above = [(t, frozenset(n)) for t, n in (head_reservation(sim, k, hq) for k, hq in higher)]
        if not resolved and job is not head:
            t_res, nodes = head_reservation(sim, key, q)
            resolved = True
        st = sim.state[job.id]
        overhead = sim.pol.restart_overhead if st.done > 0 else 0.0
        lim = sim.pol.time_limit if sim.pol.time_limit is not None else job.work - st.done + overhead
        ends = sim.now + lim
        skip = frozenset(nodes if ends > t_res else ()).union(*(n for t, n in above if ends > t))
        if skip and job.gpus >= no_fit_off.get((kind, skip), job.gpus + 1):
            continue
        alloc = sim._fit(job, scope, skip)
        if alloc is None:
            no_fit_off[(kind, skip)] = job.gpus  # nor off the reserved nodes
            continue
        sim._launch(job, tier, alloc, alloc, sim.now)
        sim.res.backfilled += 1
        started.append(job)
        if job is head:
            break  # the next pass schedules the rest behind the new head
        for n in nodes:
            nodes[n] = sim.ver[n]  # a start that keeps the reservation does not void it
    if resolved:
        sim.resv[key] = (head.id, sim.epoch, t_res, nodes)
    for job in started:
        q.remove(job)
