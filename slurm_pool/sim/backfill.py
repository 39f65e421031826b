"""Slurm's backfill in the node engine: one reservation per blocked queue head (pure).

When a queue's head cannot start it gets one reservation, the earliest time
and units where it fits as running jobs end (their time limits); up to
``bf_depth`` jobs behind it may start now if they fit on free GPUs and either
end before that time or stay off the reserved units.  Functions of the
engine's state (:class:`.nodestate.EngineState`), split from :mod:`.nodes` for size.

Kept near-linear in the history, with the same schedules as a full scan:

* Reservations come from a per-(scope, kind, need) heap of each node's time
  (:class:`.freeindex.TimeIndex`), recomputed only for nodes whose version
  moved, not from every node at every pass (without time limits and while
  nothing is lent; else every node is scanned).
* A pass in which no job fitted at all is remembered with what it saw: the
  queue's first jobs, the project's guaranteed GPUs, and the free-GPU levels
  that would let one fit (``EngineState.rises``); while none of them changed,
  the next pass is the same empty pass and is skipped.
* Within a pass, the first fit test reads counts of nodes per free level, and
  a job that failed off a set of reserved nodes tells that every job as large
  fails off any larger set (the sets nest as reservation times grow).
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections import deque
from itertools import islice
from typing import Sequence

from slurm_pool.sim.engine import BORROWED, GUARANTEED, Job
from slurm_pool.sim.lendrule import job_class
from slurm_pool.sim.nodestate import ALL, EngineState, Run, drop


def expected_end(sim: EngineState, r: Run, clamp: bool = True) -> float:
    """When ``r``'s GPUs are expected to come free: its grace window's end, time limit or exact end
    (a time limit already passed: now, unless not ``clamp``)."""
    if r.free_at is not None:
        return r.free_at
    lim = sim.limit_of(r.job)
    if lim is not None:
        end = r.begin + lim
        return max(sim.now, end) if clamp else end
    return r.start + r.job.work - sim.state[r.job.id].done


def node_time(sim: EngineState, n: int, need: int, preemptible: bool, t: float, clamp: bool = True) -> float:
    """When ``need`` GPUs of unit ``n`` are free (``t`` if they are now) as its runs end, preemptible
    borrowers' GPUs counting as free; inf when no end frees them (lent to the inference tier).
    ``clamp``: see :func:`expected_end`."""
    avail = sim.free[n] + (sim.bheld[n] if preemptible else 0)
    if avail >= need:
        return t
    rel = []
    for r in sim.on_node[n].values():
        if preemptible and r.tier == BORROWED:
            continue
        rel.append((expected_end(sim, r, clamp), r.alloc[n] - r.claimed.get(n, 0)))
    rel.sort()
    for end, c in rel:
        if avail >= need:
            break
        avail += c
        t = end
    return t if avail >= need else math.inf


def _indexed(sim: EngineState, job: Job, scope: str, pre: bool, whole: bool) -> list[tuple[float, int]] | None:
    """:func:`reserve`'s nodes in order from the time index; None where it cannot tell (the scan decides).

    A node's time, computed with unclamped ends and -inf for free now, only changes with its version;
    what the scan sees is that time or the clock, whichever is later (with time limits, an end past
    its limit is the clock).  Without time limits every end is ahead of the clock, so a time the clock
    has reached is left to the scan; with a lent node, so is everything.
    """
    if sim.lent:
        return None
    idx = sim.index[(scope, job.profile)]
    need = 0 if whole else job.gpus
    members = idx.members if whole else [n for n in idx.members if sim.size[n] >= need]
    home = sim.home((scope, job.profile))  # floating projects share the floating scope's index
    ti = sim.time_index((home[0], job.profile, pre, need), members, whole)
    ti.refresh(lambda n: node_time(sim, n, sim.size[n] if whole else need, pre, -math.inf, False), sim.ver)
    got, reached = ti.earliest(sim.ver, job.gpus if whole else None, sim.now)
    if reached and not sim.limited:
        return None  # an end at the clock: the scan decides
    return [(max(t, sim.now), n) for t, n in got]


def reserve(sim: EngineState, job: Job, scope: str, preemptible: bool, tier: str) -> tuple[float, dict[int, int]]:
    """The earliest time (and nodes) ``job`` fits in ``scope`` as running jobs end.

    A lent node is free now to a job that preempts placeholders, and never (until the rebalancer
    gives it back) to any other.
    """
    idx = sim.index[(scope, job.profile)]
    whole = job.profile is None and job.gpus > idx.top
    times = _indexed(sim, job, scope, preemptible, whole)
    if times is None:
        times = _scan(sim, job, scope, preemptible, tier, whole)
    got, total, t = {}, 0, math.inf
    for tn, n in times:
        got[n] = sim.ver[n]
        total += sim.size[n] if whole else job.gpus
        t = tn
        if total >= job.gpus:
            break
    return (t, got) if total >= job.gpus else (math.inf, {})


def _scan(sim: EngineState, job: Job, scope: str, preemptible: bool, tier: str, whole: bool) -> list[tuple[float, int]]:
    """:func:`reserve`'s nodes in order, from every node of the scope."""
    lent = sim.lent
    rule = sim.pol.lend
    reclaims = bool(lent) and rule is not None and job_class(job, tier) in rule.preemptors
    idx = sim.index[(scope, job.profile)]
    times: list[tuple[float, int]] = []
    cache = not sim.limited  # else expected ends move with the clock
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
        t = node_time(sim, n, need, preemptible, sim.now)
        times.append((t, n))
        if cache:
            sim.tcache[key] = (sim.ver[n], t)
    if not whole:
        return [min(times)] if times else []  # one node: the earliest (lowest index on ties)
    return [(e[0], e[2]) for e in sorted((t, -sim.size[n], n) for t, n in times)]


def head_reservation(sim: EngineState, key: str | None, q: deque[Job]) -> tuple[float, dict[int, int]]:
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
    head_tier, head_scope = sim.tier(head)
    pre = head_tier == GUARANTEED and sim.pol.preempt and sim.pol.pooled
    t_res, nodes = reserve(sim, head, head_scope, pre, head_tier or BORROWED)
    sim.resv[key] = (head.id, sim.epoch, t_res, nodes)
    return t_res, dict(nodes)


def same_idle_pass(sim: EngineState, key: str | None, seen: object) -> bool:
    """Whether queue ``key``'s last pass found no job fitting at all, and neither its jobs and their tiers
    (``seen``) nor any free GPUs that could make one fit have changed since (so this pass would do the same)."""
    idle = sim.bf_idle.get(key)
    return idle is not None and idle[0] == seen and all(counts[g] == c for counts, g, c in idle[1])


def backfill(
    sim: EngineState,
    key: str | None,
    q: deque[Job],
    higher: Sequence[tuple[str | None, deque[Job]]] = (),
    from_head: bool = False,
) -> None:
    """Start jobs behind queue ``key``'s blocked head that delay neither its reservation nor those of the
    blocked heads of the queues scheduled before it (``higher``, as Slurm's backfill reserves for every
    pending job in priority order).  ``from_head``: the head itself is a candidate too (it waits only
    because the main scheduler's pass left a blocked queue's nodes alone); if it starts, that is all."""
    seen = (sim.qgen[key], sim.usedgen.get(key, 0) if key is not None else 0, from_head)
    if same_idle_pass(sim, key, seen):
        return  # the same jobs, and no node came to fit any of them: the same empty pass
    head = q[0]
    resolved = False
    t_res = math.inf
    nodes: dict[int, int] = {}
    above: list[tuple[float, frozenset[int]]] | None = None  # the higher heads' reservations, by time
    above_t: list[float] = []
    skips: dict[tuple[int, bool], frozenset[int]] = {}  # (reservations above before its end, the head's too)
    started: list[Job] = []
    # (scope, kind) -> fewest GPUs found not to fit (starts only shrink free GPUs)
    no_fit: dict[tuple[str, str | None], int] = {}
    no_fit_off: dict[tuple[tuple[str, str | None], frozenset[int]], int] = {}  # the same, off reserved nodes
    off_fails: dict[tuple[str, str | None], list[tuple[int, bool, int]]] = {}  # (k, mine, GPUs) that failed
    full = False
    borrows = sim.pol.pooled and (key is None or sim.pol.owners_borrow)
    room_at: dict[tuple[str, str | None], int] = {}  # per kind, the most free GPUs on one node
    room: dict[str | None, int] = {}  # per kind, the guaranteed GPUs the project has left (whole GPUs only)
    state, index, pol = sim.state, sim.index, sim.pol
    overhead_of, time_limit, now = pol.restart_overhead, pol.time_limit, sim.now
    for job in islice(q, 0 if from_head else 1, 1 + pol.bf_depth):
        if sim.total_free == 0:
            full = True
            break
        # sim.tier(job), inlined: every job of the queue is of project ``key``
        g, prof = job.gpus, job.profile
        left = room.get(prof)
        if left is None and key is not None:
            pk = (key, prof)
            left = room[prof] = sim.share[pk] - sim.used[pk] if prof is None or g <= sim.index[pk].top else -1
            if prof is not None:
                del room[prof]  # the MIG test depends on the job's count: not kept
        if key is not None and left is not None and g <= left and (prof is not None or g <= sim.span[(key, None)]):
            tier, scope = GUARANTEED, key
        elif borrows:
            tier, scope = BORROWED, ALL
        else:
            continue
        kind = (scope, prof)
        if g >= no_fit.get(kind, g + 1):
            continue
        idx = index[kind]
        most = room_at.get(kind)  # sim.fits(job, scope), from the most free GPUs on one node (kept until a start)
        if most is None:
            count = idx.count
            most = room_at[kind] = next((k for k in range(idx.top, 0, -1) if count[k]), 0)
        if not (g <= most if g <= idx.top else prof is None and idx.whole_free >= g):
            no_fit[kind] = job.gpus
            continue
        if above is None:
            above = sorted(
                ((t, frozenset(n)) for t, n in (head_reservation(sim, k, hq) for k, hq in higher)), key=lambda e: e[0]
            )
            above_t = [t for t, _ in above]
        if not resolved and job is not head:
            t_res, nodes = head_reservation(sim, key, q)
            resolved = True
        lim = job.limit if job.limit is not None else time_limit  # sim.limit_of(job), inlined
        if lim is None:
            done = state[job.id].done
            lim = job.work - done + (overhead_of if done > 0 else 0.0)
        ends = now + lim
        # the reserved nodes it would overstay: those of the reservations before its end (a prefix of above)
        k, mine = bisect_left(above_t, ends), ends > t_res
        skip = skips.get((k, mine))
        if skip is None:
            skip = skips[(k, mine)] = frozenset(nodes if mine else ()).union(*(n for _, n in above[:k]))
        if skip and job.gpus >= no_fit_off.get((kind, skip), job.gpus + 1):
            continue
        # skip sets nest ((k, mine) below (k', mine') is a subset): a job failed off a smaller one, with no more
        # GPUs, fails here too (on whole nodes: only after a whole-node job failed, fewer free nodes remaining)
        fails = off_fails.setdefault(kind, [])
        top = idx.top
        if any(k1 <= k and m1 <= mine and g1 <= g and (g <= top or g1 > top) for k1, m1, g1 in fails):
            alloc = None
        else:
            alloc = sim.fit(job, scope, skip)
        if alloc is None:
            no_fit_off[(kind, skip)] = job.gpus  # nor off the reserved nodes
            fails.append((k, mine, g))
            continue
        sim.launch(job, tier, alloc, alloc, sim.now)
        sim.res.backfilled += 1
        room.clear()
        room_at.clear()
        started.append(job)
        if job is head:
            break  # the next pass schedules the rest behind the new head
        for n in nodes:
            nodes[n] = sim.ver[n]  # a start that keeps the reservation does not void it
    if resolved:
        sim.resv[key] = (head.id, sim.epoch, t_res, nodes)
    if above is None and not full:  # every job failed to fit at all: remember what would change that
        watch = []
        for kind, g in no_fit.items():
            counts = sim.rises[kind]
            watch.append((counts, -1, counts[-1]))  # a node all free (whole nodes)
            if g < len(counts) - 1:
                watch.append((counts, g, counts[g]))  # a node with g free
        sim.bf_idle[key] = (seen, watch)
    drop(q, started)
    sim.qgen[key] += len(started)  # jobs behind them move into the window
