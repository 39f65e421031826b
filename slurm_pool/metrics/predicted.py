"""The exporter's view of the start-time predictor: each pending job's predicted wait, per tier.

A forecast (:func:`slurm_pool.predict.live.forecast`) reads ``squeue --json``, ``sinfo``
and ``sacct`` (after the first, only the runs that ended since:
:class:`slurm_pool.predict.live.RecentRuns`) and runs the queue forward once (the waits read
only each start, so not the late run), and the exporter makes one at most every ``interval``
seconds and serves the last one in between.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Mapping

from prometheus_client.core import GaugeMetricFamily, Metric, SummaryMetricFamily

#: Tier -> (predicted waits in seconds of the pending jobs with an estimate, pending jobs without one).
Waits = Mapping[str, tuple[list[float], int]]


def waits_by_tier(fc: Any) -> dict[str, tuple[list[float], int]]:
    """A forecast's pending jobs' predicted waits (start less now), by tier (the job's QOS)."""
    out: dict[str, tuple[list[float], int]] = {}
    for jid, p in fc.predictions.items():
        tier = fc.jobs[jid].qos or fc.jobs[jid].partition
        waits, missing = out.get(tier, ([], 0))
        if p.start is None:
            missing += 1
        else:
            waits.append(max(0.0, p.start - fc.now))
        out[tier] = (waits, missing)
    return out


class PredictionReader:
    """Forecasts made at most every ``interval`` seconds; a call in between returns the last one."""

    def __init__(self, make: Callable[[], Any], interval: float = 60.0, clock: Callable[[], float] = time.monotonic):
        self.make, self.interval, self.clock = make, interval, clock
        self._lock = threading.Lock()
        self._at = float("-inf")
        self._last: dict[str, tuple[list[float], int]] | None = None

    def __call__(self) -> Waits:
        with self._lock:
            if self._last is None or self.clock() - self._at >= self.interval:
                self._at = self.clock()  # a failure waits the interval too, rather than retrying every scrape
                self._last = waits_by_tier(self.make())
            return self._last


def prediction_metrics(waits: Waits) -> list[Metric]:
    """``slurm_pool_pending_predicted_wait_seconds`` (a summary per tier) and the jobs without an estimate."""
    summary = SummaryMetricFamily(
        "slurm_pool_pending_predicted_wait_seconds",
        "Predicted wait of each pending job from now to its start (slurm-pool why), by tier.",
        labels=["tier"],
    )
    missing = GaugeMetricFamily(
        "slurm_pool_pending_unpredicted_jobs",
        "Pending jobs the predictor gives no start (held, outside the model, or beyond its horizon), by tier.",
        labels=["tier"],
    )
    for tier in sorted(waits):
        got, none = waits[tier]
        summary.add_metric([tier], count_value=len(got), sum_value=sum(got))
        missing.add_metric([tier], float(none))
    return [summary, missing]
