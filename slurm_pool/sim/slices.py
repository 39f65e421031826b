"""Fractional-GPU jobs on MIG slices, replayed over time (pure).

The Alibaba 2023 pods ask for a fraction of a GPU (``gpu_milli``).  On a
Slurm pool such a job asks for one MIG instance as a typed GRES, so:

* A job's **profile** is the smallest one of the GPU model with enough
  compute slices for its fraction (:func:`slurm_pool.mig.planner.profile_for_need`,
  the rule ``slurm-pool mig plan`` uses).
* The GPUs' **layouts** come from the project's MIG planner
  (:func:`slurm_pool.mig.planner.plan`) for a demand per profile: by default
  the most jobs of that profile running at once when each starts the moment
  it arrives (:func:`peak_demand`).  When that does not fit the GPUs, the
  planner covers as much of it as it can.
* A job runs on a free instance of its own profile only (a typed GRES request
  gets nothing larger), first come first served per profile; otherwise it
  waits.  A job whose profile no layout holds never starts.
* The baseline gives every job a whole GPU, first come first served.

Layouts stay fixed through a replay: repartitioning a GPU needs it empty,
which ``mig apply``'s drain, repartition and resume plan does between replays,
not within one.
"""

from __future__ import annotations

import heapq
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

from slurm_pool.mig.placement import Layout
from slurm_pool.mig.planner import gpus_from_count, plan, profile_for_need
from slurm_pool.mig.profiles import geometry
from slurm_pool.sim.engine import quantile

WHOLE = "whole"  # the baseline's one "profile": a whole GPU


@dataclass(frozen=True)
class SliceJob:
    """One fractional-GPU job: ``milli`` thousandths of a GPU for ``work`` seconds."""

    id: str
    arrival: float
    work: float
    milli: int


@dataclass
class SliceResult:
    """One replay: per job its wait, plus how busy the GPUs' compute slices were."""

    gpus: int
    layouts: list[Layout | None]
    waits: dict[str, float] = field(default_factory=dict)
    unstarted: list[str] = field(default_factory=list)
    #: Compute-slice seconds held by running jobs, over the GPUs' compute-slice seconds.
    busy_slice_seconds: float = 0.0
    span: float = 0.0
    compute_slices: int = 7

    @property
    def p95_wait(self) -> float:
        return quantile(list(self.waits.values()), 0.95)

    @property
    def utilisation(self) -> float:
        total = self.gpus * self.compute_slices * self.span
        return self.busy_slice_seconds / total if total > 0 else 0.0


def profile_of(model: str, milli: int) -> str:
    """The smallest profile with compute for ``milli`` thousandths of a GPU."""
    if not 0 < milli <= 1000:
        raise ValueError(f"milli: {milli} is not in 1..1000")
    name = profile_for_need(model, 0.0, milli / 1000)
    assert name is not None  # the whole GPU's profile always fits
    return name


def _peaks(spans: Iterable[tuple[float, float, str]]) -> dict[str, int]:
    """Per key, the most of its (start, end, key) spans open at once (an end before a start at one instant)."""
    events = [(t, d, k) for start, end, k in spans for t, d in ((start, 1), (end, -1))]
    now: Counter[str] = Counter()
    peak: Counter[str] = Counter()
    for _, d, k in sorted(events):
        now[k] += d
        peak[k] = max(peak[k], now[k])
    return dict(sorted(peak.items()))


def peak_demand(model: str, jobs: Iterable[SliceJob]) -> dict[str, int]:
    """Per profile, the most jobs running at once if each started on arrival."""
    return _peaks((j.arrival, j.arrival + j.work, profile_of(model, j.milli)) for j in jobs)


def planned_layouts(model: str, gpus: int, demand: dict[str, int]) -> list[Layout | None]:
    """The MIG planner's layouts for ``demand`` on ``gpus`` empty GPUs."""
    return plan(model, gpus_from_count(gpus), demand).layouts


def _replay(units: Counter[str], jobs: Sequence[SliceJob], kind: dict[str, str], size: dict[str, int]) -> SliceResult:
    """Event replay: ``units`` free instances per kind; ``kind[job]`` its instance kind of ``size`` slices."""
    res = SliceResult(gpus=0, layouts=[])
    free = Counter(units)
    queues: dict[str, deque[SliceJob]] = {k: deque() for k in set(kind.values())}
    events: list[tuple[float, int, int, str]] = []  # (time, 0 end / 1 arrival, seq, job id)
    by_id = {j.id: j for j in jobs}
    for seq, j in enumerate(sorted(jobs, key=lambda j: (j.arrival, j.id))):
        events.append((j.arrival, 1, seq, j.id))
    heapq.heapify(events)
    seq = len(events)
    first = min((j.arrival for j in jobs), default=0.0)
    last = first
    while events:
        t, what, _, jid = heapq.heappop(events)
        last = max(last, t)
        k = kind[jid]
        if what == 0:
            free[k] += 1
        else:
            queues[k].append(by_id[jid])
        q = queues[k]
        while q and free[k] > 0:
            job = q.popleft()
            free[k] -= 1
            res.waits[job.id] = t - job.arrival
            res.busy_slice_seconds += job.work * size[k]
            seq += 1
            heapq.heappush(events, (t + job.work, 0, seq, job.id))
    res.unstarted = sorted(j.id for q in queues.values() for j in q)
    res.span = last - first
    return res


def replay_slices(model: str, jobs: Sequence[SliceJob], layouts: Sequence[Layout | None]) -> SliceResult:
    """``jobs`` on GPUs partitioned as ``layouts`` (None: a whole GPU, which no slice job uses)."""
    geo = geometry(model)
    units = Counter(p for lay in layouts if lay for p in lay)
    kind = {j.id: profile_of(model, j.milli) for j in jobs}
    size = {p.name: p.compute for p in geo.profiles.values()}
    res = _replay(units, jobs, kind, size)
    res.gpus, res.layouts, res.compute_slices = len(layouts), list(layouts), geo.compute_slices
    return res


def replay_whole(model: str, jobs: Sequence[SliceJob], gpus: int) -> SliceResult:
    """The baseline: every job on a whole GPU of ``gpus``."""
    geo = geometry(model)
    res = _replay(Counter({WHOLE: gpus}), jobs, {j.id: WHOLE for j in jobs}, {WHOLE: geo.compute_slices})
    res.gpus, res.layouts, res.compute_slices = gpus, [None] * gpus, geo.compute_slices
    return res


@dataclass(frozen=True)
class SliceSizing:
    """Fewest GPUs for the jobs, whole and partitioned, with the replays at those sizes."""

    whole: SliceResult
    mig: SliceResult

    @property
    def ratio(self) -> float:
        return self.mig.gpus / self.whole.gpus if self.whole.gpus else 0.0


def _smallest(lo: int, hi: int, ok: Callable[[int], bool]) -> int:
    """The smallest n in lo..hi with ok(n), by bisection: ok is taken as monotone, and hi passes."""
    while lo < hi:
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid + 1
    return hi


def size_pool(model: str, jobs: Sequence[SliceJob], max_wait: float = 0.0) -> SliceSizing:
    """The fewest GPUs on which every job starts and the p95 wait is at most ``max_wait`` seconds:
    with a whole GPU per job, and on MIG layouts the planner makes for the jobs' peak demand."""
    if not jobs:
        raise ValueError("jobs: none to size for")
    demand = peak_demand(model, jobs)
    peak_whole = max(peak_demand_whole(jobs), 1)

    def whole_ok(n: int) -> bool:
        r = replay_whole(model, jobs, n)
        return not r.unstarted and r.p95_wait <= max_wait

    def mig_ok(n: int) -> bool:
        r = replay_slices(model, jobs, planned_layouts(model, n, demand))
        return not r.unstarted and r.p95_wait <= max_wait

    w = _smallest(1, peak_whole, whole_ok)
    # Enough GPUs for one instance of every job of the peak: every job then starts on arrival.
    m = _smallest(1, sum(demand.values()), mig_ok)
    return SliceSizing(replay_whole(model, jobs, w), replay_slices(model, jobs, planned_layouts(model, m, demand)))


def peak_demand_whole(jobs: Iterable[SliceJob]) -> int:
    """The most jobs running at once if each started on arrival (whole GPUs for zero wait)."""
    return _peaks((j.arrival, j.arrival + j.work, WHOLE) for j in jobs).get(WHOLE, 0)
