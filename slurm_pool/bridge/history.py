"""The forecast's inputs, read once per run: the spec's node groups, sacct and Prometheus history.

Slurm's history is ``sacct --json`` over ``forecast.history_days`` (allocations
only, every user), read as a stream (:mod:`slurm_pool.adapters.sacct_stream`:
one job at a time, only the hourly demand kept, no size cap); inference history is the exporter's
``slurm_pool_inference_demand_gpus`` in Prometheus, at one-hour steps.  An
unreachable Prometheus is reported and the run goes on without an inference
forecast (lending then follows current demand), so a monitoring outage never
stops a reclaim.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable

from slurm_pool.adapters.prometheus import QueryError, query_range
from slurm_pool.adapters.slurm import SlurmClient
from slurm_pool.bridge.forecast import HOUR, Forecast, profile, slurm_demand
from slurm_pool.spec.bridge import Bridge
from slurm_pool.spec.hosts import expand

DAY = 86400.0


def node_groups(spec: Any) -> tuple[dict[str, str], dict[str, int]]:
    """node -> node group, and each group's GPUs, from the spec."""
    group_of, capacity = {}, {}
    for g in spec.node_groups:
        hosts = expand(g.hosts)
        for h in hosts:
            group_of[h] = g.name
        capacity[g.name] = len(hosts) * (g.gpus.count if g.gpus is not None else 0)
    return group_of, capacity


@dataclass
class Sources:
    """Where the history comes from (tests replace either)."""

    slurm: SlurmClient
    prometheus: Callable[[str, str, float, float, float], list[tuple[float, float]]] = query_range


def build_forecast(spec: Any, config: Bridge, sources: Sources, now: datetime) -> tuple[Forecast, list[str]]:
    """The plan's :class:`Forecast` (groups only when ``bridge.forecast`` is unset), and warnings."""
    group_of, capacity = node_groups(spec)
    settings = config.forecast
    if settings is None:
        return Forecast(group_of, capacity), []
    zone = None
    if config.timezone:
        from zoneinfo import ZoneInfo

        zone = ZoneInfo(config.timezone)
    end = now.timestamp()
    start = end - settings.history_days * DAY
    stamp = "%Y-%m-%dT%H:%M:%S"
    since, until = (datetime.fromtimestamp(t, timezone.utc).astimezone().strftime(stamp) for t in (start, end))
    # never the whole history in memory
    with sources.slurm.accounting_stream(since, until, all_users=True, allocations=True) as jobs:
        series = slurm_demand(jobs, group_of, start, end, skip_partitions=[config.partition])
    slurm = {g: profile(s, settings.slurm_quantile, zone) for g, s in series.items()}
    warnings = []
    try:
        samples = sources.prometheus(settings.prometheus_url, settings.inference_query, start, end, HOUR)
        daily = settings.inference_cycle == "day"
        inference = profile(samples, settings.inference_quantile, zone, daily=daily) if samples else None
        if not samples:
            warnings.append(f"forecast: Prometheus has no {settings.inference_query} history; current demand only")
    except QueryError as exc:
        inference = None
        warnings.append(f"forecast: no inference history ({exc}); current demand only")
    return Forecast(group_of, capacity, inference, slurm), warnings
