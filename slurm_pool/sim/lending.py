"""What the bridge could lend to the inference tier, replayed on a simulated pool (pure).

The rebalancer (``slurm-pool rebalance``, from cron) lends whole idle nodes
while an off-peak window is open and Slurm takes a lent node back the moment
one of its jobs needs it (the placeholder job is in the lowest tier).  Given
the pool's idle GPUs over time (:attr:`.engine.Result.idle_timeline`, in
GPU-equivalents: MIG instances count as their share of a GPU), this
replays exactly that: at each cron tick, lend ``idle // node_gpus`` nodes (up
to ``max_nodes``) if lending is allowed, return them all when the window
closes, and count a *reclaim* whenever Slurm's own demand takes a lent node
back between ticks.  GPUs are interchangeable in the simulator, so "whole
idle nodes" is an upper bound: fragmentation across real nodes is ignored.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field
from typing import Callable, Sequence

from slurm_pool.bridge.forecast import profile


@dataclass(frozen=True)
class LendReport:
    lent_gpu_seconds: float
    idle_gpu_seconds: float  # idle GPU time while lending was allowed
    lends: int  # nodes lent (counted each time one is)
    reclaims: int  # lent nodes Slurm took back before the window closed


def replay_lending(
    timeline: Sequence[tuple[float, float]],
    window: float,
    node_gpus: int,
    period: float,
    allowed: Callable[[float], bool],
    max_nodes: int | None = None,
) -> LendReport:
    """Replay the rebalancer over ``[0, window)`` on the pool's idle-GPU step function."""
    if node_gpus < 1 or period <= 0 or window <= 0:
        raise ValueError(f"node_gpus {node_gpus}, period {period} and window {window} must be positive")
    times = [t for t, _ in timeline]
    ticks = [k * period for k in range(math.ceil(window / period))]
    points = sorted(set(t for t in times if 0 <= t < window) | set(ticks) | {0.0})
    tick_set = set(ticks)
    lent = lends = reclaims = 0
    lent_s = idle_s = 0.0
    for i, t in enumerate(points):
        k = bisect.bisect_right(times, t) - 1
        idle = timeline[k][1] if k >= 0 else 0
        free_nodes = int(idle // node_gpus)
        if lent > free_nodes:  # Slurm needed them: the placeholder job was preempted
            reclaims += lent - free_nodes
            lent = free_nodes
        ok = allowed(t)
        if t in tick_set:
            if not ok:
                lent = 0  # the window closed: the rebalancer gives them back
            else:
                target = free_nodes if max_nodes is None else min(free_nodes, max_nodes)
                if target > lent:
                    lends += target - lent
                    lent = target
        nxt = points[i + 1] if i + 1 < len(points) else window
        lent_s += lent * node_gpus * (nxt - t)
        if ok:
            idle_s += idle * (nxt - t)
    return LendReport(lent_s, idle_s, lends, reclaims)


# -- lending that follows inference demand, with and without a forecast ---------------------------


@dataclass(frozen=True)
class LendPolicy:
    """How the rebalancer decides, as :mod:`slurm_pool.bridge.plan` does, in whole nodes.

    ``window``: lending only while it says so (None: at any time).  With
    ``forecast`` the target looks ``warmup`` seconds ahead on the inference
    profile, new lends stay clear of the forecast Slurm load over
    ``min_lease + return_ahead``, and nodes go back one per tick ahead of a
    forecast Slurm rise (``return_ahead + (m - 1) x stagger`` ahead with ``m``
    lent), not below their ``min_lease`` for a drop in demand.
    """

    name: str
    window: Callable[[float], bool] | None = None
    forecast: bool = False
    warmup: float = 600.0
    min_lease: float = 1800.0
    return_ahead: float = 900.0
    stagger: float = 300.0
    history: float = 28 * 86400.0
    slurm_quantile: float = 0.5
    inference_quantile: float = 0.9
    inference_daily: bool = True


@dataclass
class InferenceLendReport:
    """What lending did for the inference tier, and what it cost Slurm."""

    policy: str
    demand_gpu_seconds: float = 0.0  # inference demand beyond the base capacity
    served_gpu_seconds: float = 0.0  # of that, served on warm lent nodes
    lent_gpu_seconds: float = 0.0
    lends: int = 0
    cold_starts: int = 0  # hours whose rise in demand found too few warm lent GPUs
    reclaims: int = 0  # lent nodes Slurm took back
    busy_reclaims: int = 0  # ... while they served inference
    reclaim_times: list[float] = field(default_factory=list)

    @property
    def served_share(self) -> float:
        return self.served_gpu_seconds / self.demand_gpu_seconds if self.demand_gpu_seconds else 0.0


def _hourly(samples: Sequence[tuple[float, float]], t: float, span: float) -> list[tuple[float, float]]:
    """The samples of the ``span`` seconds before ``t`` (the forecast sees only the past)."""
    lo = bisect.bisect_left(samples, (t - span, -math.inf))
    hi = bisect.bisect_left(samples, (t, -math.inf))
    return list(samples[lo:hi])


def replay_inference_lending(
    idle: Sequence[tuple[float, float]],
    need: Sequence[tuple[float, float]],
    start: float,
    end: float,
    capacity: int,
    node_gpus: int,
    period: float,
    policy: LendPolicy,
) -> InferenceLendReport:
    """Replay the rebalancer every ``period`` s over ``[start, end)``.

    ``idle`` is Slurm's idle-GPU step function (a lent node is idle to
    Slurm's jobs until they need it: then it is reclaimed between ticks);
    ``need`` is hourly inference demand beyond the base capacity, in GPUs.
    A lent node serves from ``warmup`` seconds after it was lent.
    """
    hours = [t for t, _ in need]
    times = [t for t, _ in idle]

    def step(series_t: list[float], series: Sequence[tuple[float, float]], t: float) -> float:
        k = bisect.bisect_right(series_t, t) - 1
        return float(series[k][1]) if k >= 0 else 0.0

    busy_hours = []  # Slurm's GPUs in use, hourly, for its forecast: only where the timeline says
    h = math.ceil(max(times[0] if times else start, start - policy.history) / 3600) * 3600
    while h < end:
        busy_hours.append((h, capacity - step(times, idle, h)))
        h += 3600
    ticks = [start + k * period for k in range(math.ceil((end - start) / period))]
    points = sorted({t for t in times if start <= t < end} | set(ticks))
    tick_set = set(ticks)
    rep = InferenceLendReport(policy.name)
    lent: list[float] = []  # lend times, oldest first
    inf_p = slurm_p = None
    made_for = -1.0
    rises = {t for (t, v), (_, before) in zip(need[1:], need, strict=False) if v > before}
    points = sorted(set(points) | {t for t in rises if start <= t < end})
    warmup = policy.warmup
    for i, t in enumerate(points):
        free_nodes = int(step(times, idle, t)) // node_gpus
        wanted = step(hours, need, t)
        while len(lent) > free_nodes:  # Slurm's jobs need the GPUs: the newest lend goes first
            warm = sum(1 for s in lent if t - s >= warmup) * node_gpus
            lent.pop()
            rep.reclaims += 1
            rep.reclaim_times.append(t)
            if wanted > min(warm, len(lent) * node_gpus):
                rep.busy_reclaims += 1
        if t in tick_set:
            allowed = policy.window(t) if policy.window is not None else True
            target = math.ceil(wanted / node_gpus - 1e-9)
            limit = free_nodes
            if policy.forecast and allowed:
                hour = math.floor(t / 3600) * 3600
                if hour != made_for:
                    made_for = hour
                    inf_p = profile(
                        _hourly(need, t, policy.history), policy.inference_quantile, daily=policy.inference_daily
                    )
                    slurm_p = profile(_hourly(busy_hours, t, policy.history), policy.slurm_quantile)
                assert inf_p is not None and slurm_p is not None
                target = max(target, math.ceil(inf_p.peak(t, warmup) / node_gpus - 1e-9))
                ahead = slurm_p.peak(t, policy.return_ahead + policy.stagger * max(len(lent) - 1, 0))
                if lent and ahead > capacity - len(lent) * node_gpus:
                    lent.pop()  # ahead of a Slurm rise: one per tick, the newest first
                horizon = slurm_p.peak(t, policy.min_lease + policy.return_ahead)
                limit = min(limit, max(0, int((capacity - horizon) // node_gpus)))
            if not allowed:
                lent.clear()
            elif target < len(lent):
                old = [s for s in lent if not policy.forecast or t - s >= policy.min_lease]
                for s in sorted(old, reverse=True)[: len(lent) - target]:
                    lent.remove(s)
            while allowed and len(lent) < min(target, limit):
                rep.lends += 1
                lent.append(t)
        nxt = points[i + 1] if i + 1 < len(points) else end
        warm = sum(1 for s in lent if t - s >= warmup) * node_gpus
        if t in rises and wanted > warm:  # demand arrived before the capacity for it
            rep.cold_starts += 1
        dt = nxt - t
        rep.demand_gpu_seconds += wanted * dt
        rep.served_gpu_seconds += min(wanted, warm) * dt
        rep.lent_gpu_seconds += len(lent) * node_gpus * dt
    return rep
