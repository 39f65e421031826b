"""What the bridge could lend to the inference tier, replayed on a simulated pool (pure).

The rebalancer (``slurm-pool rebalance``, from cron) lends whole idle nodes
while an off-peak window is open and Slurm takes a lent node back the moment
one of its jobs needs it (the placeholder job is in the lowest tier).  Given
the pool's idle GPUs over time (:attr:`.engine.Result.idle_timeline`), this
replays exactly that: at each cron tick, lend ``idle // node_gpus`` nodes (up
to ``max_nodes``) if lending is allowed, return them all when the window
closes, and count a *reclaim* whenever Slurm's own demand takes a lent node
back between ticks.  GPUs are interchangeable in the simulator, so "whole
idle nodes" is an upper bound: fragmentation across real nodes is ignored.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from typing import Callable, Sequence


@dataclass(frozen=True)
class LendReport:
    lent_gpu_seconds: float
    idle_gpu_seconds: float  # idle GPU time while lending was allowed
    lends: int  # nodes lent (counted each time one is)
    reclaims: int  # lent nodes Slurm took back before the window closed


def replay_lending(
    timeline: Sequence[tuple[float, int]],
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
        free_nodes = idle // node_gpus
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
