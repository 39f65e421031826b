"""Where a changed job fits into a forecast's plan, without running the queue again (pure).

An alternative (fewer GPUs, a MIG slice, another partition, a shorter time
limit) is placed as conservative backfill would: in the earliest hole of the
forecast's schedule, the other jobs keeping their predicted runs, for as long
as its time limit (its runtime, without one).  A job moved to its owner's
partition (a floating project's: to its guarantee, on the nodes nobody owns)
may preempt the borrowers there, after GraceTime; the guarantee's other jobs
are not counted against it.  The answer is a start no later than the job
would get: a higher-priority job may also take GPUs from jobs behind it,
which this does not count.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Iterable

from slurm_pool.predict.forward import Forecast
from slurm_pool.sim.engine import BORROWED
from slurm_pool.sim.units import mig_counts

Interval = tuple[float, float, int]  # start, end (from now), GPUs or instances held


def free_windows(held: Iterable[Interval], cap: int, need: int) -> list[tuple[float, float]]:
    """The times (``[a, b)``, from 0) during which at least ``need`` of ``cap`` units are free."""
    steps: dict[float, int] = defaultdict(int)
    for s, e, c in held:
        if e > s:
            steps[max(s, 0.0)] += c
            steps[e] -= c
    out: list[tuple[float, float]] = []
    used, open_at = 0, 0.0 if cap >= need else None
    for t in sorted(steps):
        if steps[t] == 0:
            continue
        was_free = cap - used >= need
        used += steps[t]
        now_free = cap - used >= need
        if was_free and not now_free:
            assert open_at is not None
            if t > open_at:
                out.append((open_at, t))
            open_at = None
        elif now_free and not was_free:
            open_at = t
    if open_at is not None:
        out.append((open_at, math.inf))
    return out


def earliest(windows: dict[str, list[tuple[float, float]]], nodes: int, duration: float) -> float | None:
    """The first time from which ``nodes`` of the nodes each have a window lasting ``duration``."""
    events: list[tuple[float, int]] = []
    for spans in windows.values():
        for a, b in spans:
            if b - a >= duration:
                events += [(a, 0), (b - duration, 1)]  # an opening before a closing at the same time
    count = 0
    for t, kind in sorted(events):
        count += 1 if kind == 0 else -1
        if kind == 0 and count >= nodes:
            return t
    return None


def fit(
    fc: Forecast,
    job_id: int,
    gpus: int,
    profile: str | None,
    duration: float,
    owner: str | None,
    grace: float,
    floating: bool = False,
) -> float | None:
    """When job ``job_id``, changed to ``gpus`` of ``profile`` lasting ``duration``, fits the plan (Unix time).

    ``owner``: it runs in that owner's partition (its nodes; borrowers there are preempted, after
    ``grace``); ``floating``: in a floating project's guarantee (the nodes nobody owns, preempting likewise);
    else a borrower anywhere.
    """
    assert fc.pool is not None and fc.result is not None
    held: dict[tuple[str, bool], list[Interval]] = defaultdict(list)  # (node, borrowed) -> intervals of the kind
    me = str(job_id)
    for p in fc.result.schedule:
        if p.job == me or p.profile != profile:
            continue
        end = fc.ends.get(p.job, p.end) if p.outcome == "running" else p.end
        for node, c in p.nodes:
            held[(node, p.tier == BORROWED)].append((p.start, end, c))
    nodes = [
        n
        for n in fc.pool.nodes
        if n.name not in fc.down and (n.owner is None if floating else owner is None or n.owner == owner)
    ]
    best: float | None = None
    for preempt in (False, True) if owner is not None or floating else (False,):
        windows: dict[str, list[tuple[float, float]]] = {}
        size = 0
        for n in nodes:
            cap = mig_counts(n).get(profile, 0) if profile else n.gpus - len(n.mig)
            if cap <= 0:
                continue
            size = max(size, cap)
            intervals = held[(n.name, False)] + ([] if preempt else held[(n.name, True)])
            whole = gpus > cap
            windows[n.name] = free_windows(intervals, cap, cap if whole else gpus)
        if not windows or (profile and gpus > size):
            continue
        count = 1 if gpus <= size else -(-gpus // size)
        if count > 1 and profile:
            continue  # MIG instances on one node only
        t = earliest(windows, count, duration)
        if t is not None:
            t += grace if preempt else 0.0
            best = t if best is None else min(best, t)
    return None if best is None else fc.now + best
