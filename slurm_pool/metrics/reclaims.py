"""Reclaims of lent nodes, counted once each from sliding ``sacct`` reads (for the exporter's histogram).

Each read covers the jobs that started in the last ``window`` seconds; a
reclaim seen before is not counted again, and ids fall out of memory two
windows after they were counted, when no read can return them any more.  The
counts are cumulative from the exporter's start, as a Prometheus histogram's
are (a restart is a counter reset).
"""

from __future__ import annotations

import time
from typing import Callable

from prometheus_client.core import HistogramMetricFamily, Metric

from slurm_pool.adapters.records import JobRecord
from slurm_pool.metrics.parse import reclaim_latencies

#: Bucket bounds, seconds: the k8s-lend GraceTime and the fence's deadline sit in this range.
BUCKETS = (1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0)


class ReclaimTally:
    """Reclaim latencies seen so far, and a read of ``sacct`` at most every ``interval`` s."""

    def __init__(
        self,
        read: Callable[[str], list[JobRecord]],
        lend_partition: str,
        *,
        window: float = 3600.0,
        interval: float = 60.0,
        clock: Callable[[], float] = time.time,
    ):
        self.read = read
        self.lend_partition = lend_partition
        self.window, self.interval, self.clock = window, interval, clock
        self.seen: dict[int, float] = {}  # job id -> when it was counted
        self.counts = [0] * (len(BUCKETS) + 1)
        self.total = 0.0
        self._last = -float("inf")

    def refresh(self) -> None:
        """Read the last window again if ``interval`` passed; raises what the read raises."""
        now = self.clock()
        if now - self._last < self.interval:
            return
        jobs = self.read(f"now-{int(self.window)}seconds")
        self._last = now
        for job_id, seconds in sorted(reclaim_latencies(jobs, self.lend_partition, since=now - self.window).items()):
            if job_id in self.seen:
                continue
            self.seen[job_id] = now
            self.counts[next((i for i, b in enumerate(BUCKETS) if seconds <= b), len(BUCKETS))] += 1
            self.total += seconds
        self.seen = {j: t for j, t in self.seen.items() if now - t <= 2 * self.window}

    def metric(self) -> Metric:
        h = HistogramMetricFamily(
            "slurm_pool_reclaim_latency_seconds",
            "Jobs that took a lent node back: from their submission to their start on it.",
        )
        cumulative, buckets = 0, []
        for bound, count in zip((*map(str, BUCKETS), "+Inf"), self.counts, strict=True):
            cumulative += count
            buckets.append((bound, float(cumulative)))
        h.add_metric([], buckets, self.total)
        return h
