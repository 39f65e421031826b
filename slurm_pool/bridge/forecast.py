"""Demand forecasts by hour of week, and the history they are made from (pure).

A forecast is a :class:`Profile`: one value per hour of the week (168), each a
quantile of what that hour saw in the history.  The bridge keeps two kinds:

* **Slurm demand per node group** (:func:`slurm_demand`): from ``sacct``
  history, the GPUs that group's jobs wanted each hour, counted from
  submission (a waiting job wants GPUs too) to end, placed on the group its
  nodes belong to;
* **inference demand** (:func:`profile` of the exporter's
  ``slurm_pool_inference_demand_gpus`` samples from Prometheus).

An hour of the week no history has seen falls back to the same hour of the
day on other days, then to the whole history, so a one-week history still
gives a forecast.  Times are Unix seconds; the hour of the week is taken in
the zone the caller passes (``bridge.timezone``), Monday 00:00 first.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timezone, tzinfo
from typing import Iterable, Mapping, Sequence

from slurm_pool.adapters.records import JobRecord
from slurm_pool.spec.hosts import HostlistError, expand

HOURS_PER_WEEK = 168
HOUR = 3600.0


def hour_of_week(t: float, zone: tzinfo | None = None) -> int:
    """0 (Monday 00:00-01:00) to 167 for Unix time ``t`` in ``zone`` (UTC when None)."""
    local = datetime.fromtimestamp(t, zone or timezone.utc)
    return local.weekday() * 24 + local.hour


def quantile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile of ``values`` (linear between order statistics; 0 for none)."""
    if not values:
        return 0.0
    xs = sorted(values)
    pos = q * (len(xs) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


@dataclass(frozen=True)
class Profile:
    """A value per hour of the week, and how many history samples made each."""

    values: tuple[float, ...]
    samples: tuple[int, ...]
    zone: tzinfo | None = None

    def at(self, t: float) -> float:
        return self.values[hour_of_week(t, self.zone)]

    def peak(self, start: float, seconds: float) -> float:
        """The highest hourly value of the hours that ``[start, start + seconds]`` touches."""
        first, last = math.floor(start / HOUR), math.floor((start + max(seconds, 0.0)) / HOUR)
        return max(self.at(h * HOUR) for h in range(first, last + 1))

    def first_above(self, start: float, seconds: float, level: float) -> float | None:
        """Seconds from ``start`` to the first hour within ``seconds`` whose value exceeds ``level``."""
        t = start
        while t <= start + seconds:
            if self.at(t) > level:
                return max(0.0, t - start)
            t = (math.floor(t / HOUR) + 1) * HOUR
        return None

    @property
    def empty(self) -> bool:
        return not any(self.samples)


def flat(value: float = 0.0, zone: tzinfo | None = None) -> Profile:
    """The same value every hour (no history)."""
    return Profile((float(value),) * HOURS_PER_WEEK, (0,) * HOURS_PER_WEEK, zone)


def profile(
    samples: Iterable[tuple[float, float]], q: float = 0.5, zone: tzinfo | None = None, *, daily: bool = False
) -> Profile:
    """The ``q`` quantile per hour of week of ``(time, value)`` samples (several per hour are averaged first).

    ``daily``: per hour of the day instead, every day alike (more samples per
    hour from a short history, for load whose cycle is daily).
    """
    per_hour: dict[int, list[float]] = defaultdict(list)
    for t, v in samples:
        per_hour[int(t // HOUR)].append(float(v))
    buckets: dict[int, list[float]] = defaultdict(list)
    for h, vs in per_hour.items():
        how = hour_of_week(h * HOUR, zone)
        buckets[how % 24 if daily else how].append(sum(vs) / len(vs))
    every = [v for vs in buckets.values() for v in vs]
    values, counts = [], []
    for how in range(HOURS_PER_WEEK):
        vs = buckets.get(how % 24 if daily else how) or []
        if not vs:  # the same hour on other days, else the whole history
            vs = [v for d in range(7) for v in buckets.get(d * 24 + how % 24, [])] or every
        values.append(quantile(vs, q))
        counts.append(len(buckets.get(how % 24 if daily else how, [])))
    return Profile(tuple(values), tuple(counts), zone)


def slurm_demand(
    jobs: Iterable[JobRecord],
    group_of: Mapping[str, str],
    start: float,
    end: float,
    *,
    skip_partitions: Iterable[str] = (),
) -> dict[str, list[tuple[float, float]]]:
    """GPUs wanted per node group, one sample per hour of ``[start, end)``: from each job's submission to its end.

    A job is placed on the groups of the nodes it ran on (shared out by node
    count); one that never ran is left out, since no node says where it would
    have run.  Jobs of ``skip_partitions`` (the lend partition's placeholders)
    are not Slurm demand.
    """
    skip = set(skip_partitions)
    first = math.floor(start / HOUR)
    hours = max(0, math.ceil(end / HOUR) - first)
    load: dict[str, list[float]] = {g: [0.0] * hours for g in sorted(set(group_of.values()))}
    for job in jobs:
        if job.partition in skip or job.gpus <= 0 or not job.submit_time or not job.nodes:
            continue
        try:
            nodes = [n for n in expand(job.nodes) if n in group_of]
        except HostlistError:
            continue
        if not nodes:
            continue
        stop = job.end_time if job.end_time else end
        for n in nodes:
            share = job.gpus / len(nodes)
            series = load[group_of[n]]
            a, b = max(job.submit_time, start), min(stop, end)
            h = math.floor(a / HOUR)
            while a < b:
                edge = min(b, (h + 1) * HOUR)
                series[h - first] += share * (edge - a) / HOUR
                a, h = edge, h + 1
    return {g: [((first + k) * HOUR, v) for k, v in enumerate(series)] for g, series in load.items()}


@dataclass(frozen=True)
class Forecast:
    """What the planner needs to look ahead: the node groups, and (when forecasting) the demand profiles.

    Without profiles it still tells the planner which group each node is in,
    so lending spreads across groups.
    """

    #: node -> its node group, and each group's GPUs
    group_of: Mapping[str, str]
    capacity: Mapping[str, int]
    inference: Profile | None = None
    slurm: Mapping[str, Profile] = field(default_factory=dict)

    @property
    def enabled(self) -> bool:
        return self.inference is not None or bool(self.slurm)

    def slurm_peak(self, group: str, start: float, seconds: float) -> float:
        p = self.slurm.get(group)
        return p.peak(start, seconds) if p is not None else 0.0

    def summary(self, start: float, inference_ahead: float, slurm_ahead: float) -> dict[str, object]:
        """The numbers behind a plan, for ``--dry-run`` and the JSON report."""
        inference = self.inference.peak(start, inference_ahead) if self.inference is not None else None
        return {
            "inference_gpus": None if inference is None else round(inference, 2),
            "inference_ahead_seconds": inference_ahead,
            "slurm_ahead_seconds": slurm_ahead,
            "slurm_gpus": {
                g: {"forecast": round(self.slurm_peak(g, start, slurm_ahead), 2), "capacity": self.capacity.get(g, 0)}
                for g in sorted(self.capacity)
            },
        }
