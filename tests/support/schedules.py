"""Exhaustive search for the fewest GPUs that keep a wait quantile under a bar (tests of ``sim.bound``).

Every subset of jobs kept within the bar, every order of it, each job placed at its earliest start that
fits the GPUs already taken (the serial schedule generation scheme: over all orders it gives every active
schedule, and an active schedule meets every deadline whenever any schedule does).
"""

from __future__ import annotations

import math
from itertools import combinations, permutations
from typing import Sequence

from slurm_pool.sim.bound import Task


def fits(placed: list[tuple[float, float, float]], start: float, task: Task, gpus: float) -> bool:
    """Whether ``task`` started at ``start`` keeps every instant of its run within ``gpus``."""
    end = start + task.runtime
    points = [start] + [s for s, _, _ in placed if start < s < end]
    return all(sum(d for s, e, d in placed if s <= t < e) + task.demand <= gpus + 1e-9 for t in points)


def placeable(order: Sequence[Task], bar: float, gpus: float) -> bool:
    """Whether each task of ``order``, placed in turn at its earliest fitting start, starts within ``bar``."""
    placed: list[tuple[float, float, float]] = []
    for t in order:
        if t.demand > gpus + 1e-9:
            return False
        cands = sorted({t.arrival} | {e for _, e, _ in placed if e > t.arrival})
        start = next(s for s in cands if fits(placed, s, t, gpus))
        if start > t.arrival + bar + 1e-9:
            return False
        placed.append((start, start + t.runtime, t.demand))
    return True


def optimum(tasks: Sequence[Task], bar: float, late: int) -> int:
    """The fewest whole GPUs on which all but ``late`` tasks start within ``bar`` of arriving and every task runs
    (the late ones after all the others: they need only the biggest task's GPUs)."""
    keep = max(0, len(tasks) - late)
    gpus = math.ceil(max((t.demand for t in tasks), default=0) - 1e-9)
    while True:
        for subset in combinations(tasks, keep):
            if any(placeable(order, bar, gpus) for order in permutations(subset)):
                return gpus
        gpus += 1
