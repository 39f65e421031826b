"""Jobs by partition and state, nodes by state: from slurmctld's own counts where it serves them.

Where the running slurmctld serves its OpenMetrics endpoint (Slurm 25.11+ with
``MetricsType=metrics/openmetrics``, see :mod:`slurm_pool.adapters.openmetrics`), the
exporter takes these counts from it; where it does not (an older release, the
endpoint off, refused, slow or unreadable), it counts the node and job records
the scrape read anyway, the same way slurmctld does.  Families::

    slurm_pool_slurm_jobs{partition,state}   jobs of the queue by their one partition and state:
                                             pending | running | suspended | completing (the flag)
    slurm_pool_slurm_nodes{state}            nodes by base state; drain: the flag
    slurm_pool_slurm_counts_source{source}   1 for the source of this scrape's counts:
                                             openmetrics | commands

The endpoint's pending count adds a pending job array's tasks one by one; a
job list shows such an array once, so the two differ by that (statistics.c
``_statistics_part_aggregate_job``, ``job_array_cnt``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from typing import Callable, Iterable, Mapping

from prometheus_client.core import GaugeMetricFamily, Metric

from slurm_pool.adapters import openmetrics
from slurm_pool.adapters.openmetrics import SlurmctldCounts, Unavailable
from slurm_pool.adapters.records import JobRecord, NodeRecord
from slurm_pool.text import shown

log = logging.getLogger(__name__)

SOURCES = ("openmetrics", "commands")
#: Seconds the endpoint found (or not) in ``scontrol show config`` is trusted before asking again.
CONFIG_TTL = 300.0
#: The pool's words for Slurm's base states, as they are spelt in records (upper case).
_JOB_BASE = {state.upper(): state for state in openmetrics.JOB_STATES if state != "completing"}
_NODE_BASE = {"IDLE": "idle", "MIXED": "mixed", "ALLOCATED": "allocated", "DOWN": "down", "FUTURE": "future"}


def counts_from_records(nodes: Iterable[NodeRecord], jobs: Iterable[JobRecord]) -> SlurmctldCounts:
    """The counts slurmctld would give, from the records of a command read."""
    job_counts: Counter[tuple[str, str]] = Counter()
    for job in jobs:
        state = _JOB_BASE.get(job.state.base)
        if state is not None:
            job_counts[(job.partition, state)] += 1
        if "COMPLETING" in job.state:  # 22.05: the base word; later: a flag
            job_counts[(job.partition, "completing")] += 1
    node_counts: Counter[str] = Counter()
    for node in nodes:
        node_counts[_NODE_BASE.get(node.state.base, "unknown")] += 1
        if node.drained:
            node_counts["drain"] += 1
    return SlurmctldCounts(jobs=dict(job_counts), nodes=dict(node_counts))


class EndpointReader:
    """Reads slurmctld's counts; None where its endpoint is not served (found from ``config``)."""

    def __init__(
        self,
        config: Callable[[], Mapping[str, str]],
        *,
        read: Callable[[str, int], SlurmctldCounts] = openmetrics.read,
        ttl: float = CONFIG_TTL,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.config, self._read, self.ttl, self.clock = config, read, ttl, clock
        self._lock = threading.Lock()
        self._where: tuple[str, int] | None = None
        self._asked = -float("inf")

    def _endpoint(self) -> tuple[str, int] | None:
        with self._lock:
            if self.clock() - self._asked >= self.ttl:
                self._asked = self.clock()
                try:
                    self._where = openmetrics.endpoint(self.config())
                except Exception as exc:  # noqa: BLE001 -- no config, no endpoint: the commands count
                    log.warning("reading slurmctld's config failed: %s", shown(exc))
                    self._where = None
            return self._where

    def __call__(self) -> SlurmctldCounts | None:
        where = self._endpoint()
        if where is None:
            return None
        try:
            counts = self._read(*where)
        except Unavailable as exc:
            log.warning("slurmctld's metrics endpoint: %s; counting the command records", shown(exc))
            with self._lock:
                self._asked = -float("inf")  # ask the config again next time
            return None
        for bad in counts.refused:
            log.warning("slurmctld's metrics endpoint: left out %s", shown(bad))
        return counts


def counts_reader(mode: str, config: Callable[[], Mapping[str, str]]) -> Callable[[], SlurmctldCounts | None] | None:
    """The collector's ``slurmctld_counts`` for the exporter's ``--slurmctld-counts`` (auto, commands, off)."""
    if mode == "auto":
        return EndpointReader(config)
    return (lambda: None) if mode == "commands" else None


def count_metrics(counts: SlurmctldCounts, source: str) -> list[Metric]:
    """The families of the counts and of where they came from."""
    jobs = GaugeMetricFamily(
        "slurm_pool_slurm_jobs", "Jobs slurmctld holds by partition and state.", labels=["partition", "state"]
    )
    for (part, state), n in sorted(counts.jobs.items()):
        jobs.add_metric([shown(part), state], float(n))
    nodes = GaugeMetricFamily("slurm_pool_slurm_nodes", "Nodes by state (drain: the flag).", labels=["state"])
    for state, n in sorted(counts.nodes.items()):
        nodes.add_metric([state], float(n))
    where = GaugeMetricFamily(
        "slurm_pool_slurm_counts_source",
        "1 for where this scrape's job and node counts came from: openmetrics (slurmctld) or commands.",
        labels=["source"],
    )
    for name in SOURCES:
        where.add_metric([name], 1.0 if name == source else 0.0)
    return [jobs, nodes, where]
