"""The fewest GPUs on which any schedule could keep owners' p95 wait under a bar (issue 48).

Pure: jobs, a wait bar ``T`` and a quantile in, a GPU count out.  The bound
holds for every schedule that knows each runtime in advance, places jobs on
interchangeable GPUs (a MIG job counts its compute slices as a share of a
GPU) and runs an owner's job, once started, to its end (a guaranteed job is
never preempted).  Borrowers are left out: serving them only adds demand.

An owners' p95 (nearest rank, :func:`.engine.quantile`) at most ``T`` means
at least ``ceil(q n)`` of the ``n`` owner jobs start within ``T`` of their
arrival, so at most ``k = n - ceil(q n)`` may wait longer (:func:`late_allowed`).
Every other job runs inside ``[a, a + T + p]`` for its arrival ``a`` and
runtime ``p``.  The bound is the largest of:

* **biggest job**: the largest demand (every owner job runs at some time: an
  unfinished one fails the bar, and a job needs its GPUs at once);
* **energy**: for a time interval ``[t1, t2]``, every kept job overlaps it by
  at least the smaller overlap of its earliest and latest placement (the
  overlap is concave in the start); the demand-weighted overlaps, less the
  ``k`` largest (the jobs a schedule may leave out), fit in
  ``m x (t2 - t1)`` GPU-seconds; jointly, the same ``k`` jobs are left out of
  every interval (:func:`joint_bound`: a linear program, an integer one up to
  :data:`MILP_JOBS` jobs);
* **compulsory parts**: a kept job with ``p > T`` surely runs in
  ``[a + T, a + p)``; at any instant, those demands less the ``k`` largest fit
  in ``m``.

Each is a necessary condition, so their maximum is a lower bound.  The jobs
left out of the bar may run after all the others, so with the biggest job's
GPUs they never stand in the way of the rest.  Up to
:data:`EXACT_JOBS` owner jobs the bound is exact instead (:func:`feasible`:
a search over semi-active schedules, in which every job starts at an arrival
or at another job's end; any feasible schedule can be shifted left into one).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from slurm_pool.sim.engine import Job
from slurm_pool.sim.units import compute_slices

#: Up to this many owner jobs the bound is found by exact search.
EXACT_JOBS = 10
#: Interval lengths tried by the energy bound, per start point (a geometric ladder).
LENGTHS = 48
#: The most start points the energy bound tries (evenly spread over the earliest and latest starts).
STARTS = 256
#: The densest intervals per start point the linear program keeps.
KEEP = 3
#: What the linear program's optimum is lowered by before rounding up (its solver's tolerances).
LP_SLACK = 1e-6
#: Seconds the integer program may search for a better bound than the linear program's.
MILP_SECONDS = 5.0
#: Up to this many owner jobs the integer program runs (beyond, its solver outruns its time limit).
MILP_JOBS = 200
_EPS = 1e-9


@dataclass(frozen=True)
class Task:
    """An owner job as the bound sees it: arrival, runtime, GPUs (a share for MIG instances)."""

    arrival: float
    runtime: float
    demand: float


def tasks(jobs: Sequence[Job], slices_per_gpu: int = 7) -> list[Task]:
    """The owners' jobs of ``jobs`` (borrowers left out) as tasks."""
    out = []
    for j in jobs:
        if j.project is None:
            continue
        share = 1.0 if j.profile is None else (compute_slices(j.profile) or slices_per_gpu) / slices_per_gpu
        out.append(Task(float(j.arrival), float(j.work), j.gpus * share))
    return out


def late_allowed(n: int, q: float = 0.95) -> int:
    """How many of ``n`` waits may exceed the bar while their nearest-rank ``q`` quantile stays under it."""
    if n == 0:
        return 0
    rank = min(n - 1, max(0, math.ceil(q * n) - 1))  # the index .engine.quantile reads
    return n - rank - 1


def _up(x: float) -> int:
    return max(0, math.ceil(x - _EPS))


def biggest_bound(ts: Sequence[Task]) -> int:
    """The largest demand, rounded up (every job runs at some time; 0: no jobs)."""
    return _up(max((t.demand for t in ts), default=0.0))


def _less_top(rows: np.ndarray, k: int) -> np.ndarray:
    """Each row's sum less its ``k`` largest entries."""
    total = rows.sum(axis=-1)
    if k <= 0:
        return total
    if k >= rows.shape[-1]:
        return np.zeros_like(total)
    top = np.partition(rows, rows.shape[-1] - k, axis=-1)[..., rows.shape[-1] - k :]
    return total - top.sum(axis=-1)


def _intervals(
    ts: Sequence[Task], bar: float, k: int, lengths: int, starts: int, keep: int
) -> tuple[float, list[np.ndarray]]:
    """The energy bound's largest density, and for each start point the ``keep`` densest intervals' rows
    (each job's GPU-seconds surely inside, over the interval's length)."""
    a = np.array([t.arrival for t in ts])
    p = np.array([t.runtime for t in ts])
    d = np.array([t.demand for t in ts])
    lo, hi = float(max(p.min(), 1.0)), float((a + bar + p).max() - a.min())
    if hi <= 0:
        return 0.0, []
    ladder = np.unique(np.geomspace(lo, max(lo, hi), lengths))
    best, rows = 0.0, []
    points = np.unique(np.concatenate([a, a + bar]))
    if len(points) > starts:
        points = points[np.linspace(0, len(points) - 1, starts).round().astype(int)]
    for t1 in points:
        t2 = t1 + ladder[:, None]  # (lengths, 1)
        early = np.clip(np.minimum(a + p, t2) - np.maximum(a, t1), 0, None)
        late = np.clip(np.minimum(a + bar + p, t2) - np.maximum(a + bar, t1), 0, None)
        energy = np.minimum(early, late) * d / ladder[:, None]
        density = _less_top(energy, k)
        best = max(best, float(density.max()))
        rows += list(energy[np.argsort(density)[-keep:]])
    return best, rows


def energy_bound(ts: Sequence[Task], bar: float, k: int, lengths: int = LENGTHS, starts: int = STARTS) -> int:
    """The energy bound over intervals of ``lengths`` lengths starting at the earliest and latest starts (at
    most ``starts`` of them, evenly spread: any interval gives a valid bound), each less its ``k`` largest."""
    if len(ts) <= k:
        return 0
    return _up(_intervals(ts, bar, k, lengths, starts, 0)[0])


def joint_bound(
    ts: Sequence[Task],
    bar: float,
    k: int,
    lengths: int = LENGTHS,
    starts: int = STARTS,
    time_limit: float = MILP_SECONDS,
) -> int:
    """The energy bound with the same ``k`` jobs left out of every interval: a linear program over the densest
    intervals (each job kept by a share ``x`` from 0 to 1, the shares summing to at least ``n - k``;
    minimise the GPUs ``m`` with every interval's kept GPU-seconds within ``m`` times its length), then with
    each share 0 or 1 up to :data:`MILP_JOBS` jobs (``scipy.optimize.milp``; past ``time_limit`` seconds, the
    bound it has proven)."""
    n = len(ts)
    if n <= k:
        return 0
    _, rows = _intervals(ts, bar, k, lengths, starts, KEEP)
    if not rows:
        return 0
    from scipy.optimize import linprog

    energy = np.array(rows)
    a_ub = np.vstack([np.hstack([energy, -np.ones((len(rows), 1))]), np.append(-np.ones(n), 0.0)])
    b_ub = np.append(np.zeros(len(rows)), -(n - k))
    cost = np.append(np.zeros(n), 1.0)
    got = linprog(cost, A_ub=a_ub, b_ub=b_ub, bounds=[(0, 1)] * n + [(0, None)], method="highs")
    best = float(got.fun) if got.status == 0 else 0.0
    if (
        time_limit > 0 and n <= MILP_JOBS
    ):  # each job kept or not: the integer program's proven bound, within the time limit
        from scipy.optimize import Bounds, LinearConstraint, milp

        whole = milp(
            cost,
            constraints=LinearConstraint(a_ub, -np.inf, b_ub),
            integrality=np.append(np.ones(n), 0),
            bounds=Bounds(np.zeros(n + 1), np.append(np.ones(n), np.inf)),
            options={"time_limit": time_limit},
        )
        proven = whole.fun if whole.status == 0 else getattr(whole, "mip_dual_bound", None)
        if proven is not None and math.isfinite(proven):
            best = max(best, float(proven))
    return _up(best - LP_SLACK)


def compulsory_bound(ts: Sequence[Task], bar: float, k: int) -> int:
    """The most demand surely running at one instant: parts ``[a + T, a + p)``, less the ``k`` largest."""
    parts = [(t.arrival + bar, t.arrival + t.runtime, t.demand) for t in ts if t.runtime > bar]
    if len(parts) <= k:
        return 0
    starts = np.array([s for s, _, _ in parts])
    ends = np.array([e for _, e, _ in parts])
    d = np.array([x for _, _, x in parts])
    on = (starts[None, :] <= starts[:, None]) & (starts[:, None] < ends[None, :])
    return _up(float(_less_top(np.where(on, d[None, :], 0.0), k).max()))


def relaxed_bound(ts: Sequence[Task], bar: float, k: int) -> int:
    """The largest of the biggest-job, energy (joint: the same jobs left out everywhere) and compulsory-part
    bounds (the joint bound is at least the energy bound's on the intervals it keeps)."""
    return max(biggest_bound(ts), joint_bound(ts, bar, k), compulsory_bound(ts, bar, k))


def feasible(ts: Sequence[Task], bar: float, k: int, gpus: float) -> bool:
    """Whether some non-preemptive schedule on ``gpus`` starts all but at most ``k`` tasks within ``bar``
    of their arrival (search over semi-active schedules; exponential: small instances only)."""
    n = len(ts)
    order = sorted(range(n), key=lambda i: (ts[i].arrival, i))
    late = [ts[i].arrival + bar for i in range(n)]

    def search(now: float, waiting: frozenset[int], running: tuple[tuple[float, float], ...], dropped: int) -> bool:
        running = tuple(r for r in running if r[0] > now + _EPS)
        expired = {i for i in waiting if late[i] < now - _EPS}
        dropped += len(expired)
        if dropped > k:
            return False
        waiting = waiting - expired
        if not waiting:
            return True
        used = sum(dem for _, dem in running)
        ready = [i for i in order if i in waiting and ts[i].arrival <= now + _EPS]

        def choose(pos: int, used: float, started: tuple[int, ...]) -> bool:
            if pos == len(ready):
                left = waiting - set(started)
                runs = running + tuple((now + ts[i].runtime, ts[i].demand) for i in started)
                if not left:
                    return True
                events = [ts[i].arrival for i in left if ts[i].arrival > now + _EPS] + [e for e, _ in runs]
                later = [e for e in events if e > now + _EPS]
                if not later:  # nothing left can start any more
                    return dropped + len(left) <= k
                return search(min(later), frozenset(left), runs, dropped)
            i = ready[pos]
            if used + ts[i].demand <= gpus + _EPS and choose(pos + 1, used + ts[i].demand, (*started, i)):
                return True
            return choose(pos + 1, used, started)

        return choose(0, used, ())

    if n <= k:
        return True
    first = min(t.arrival for t in ts)
    return search(first, frozenset(range(n)), (), 0)


def lower_bound(jobs: Sequence[Job], bar: float, q: float = 0.95, slices_per_gpu: int = 7) -> int:
    """The fewest GPUs on which any schedule keeps the owners' ``q`` wait quantile of ``jobs`` at most ``bar``
    seconds (exact up to :data:`EXACT_JOBS` owner jobs, else the relaxations' largest)."""
    if not (math.isfinite(bar) and bar >= 0):
        raise ValueError(f"bar: {bar!r} is not a number of seconds at least 0")
    if not 0 < q <= 1:
        raise ValueError(f"q: {q!r} is not a share above 0, at most 1")
    ts = tasks(jobs, slices_per_gpu)
    k = late_allowed(len(ts), q)
    m = relaxed_bound(ts, bar, k)
    if len(ts) > EXACT_JOBS:
        return m
    while not feasible(ts, bar, k, m):
        m += 1
    return m
