"""The exporter's predicted waits (slurm_pool.metrics.predicted) on recorded Slurm output, and their failures."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from slurm_pool.adapters.slurm import SlurmClient
from slurm_pool.metrics.collector import PoolCollector
from slurm_pool.metrics.predicted import PredictionReader, prediction_metrics, waits_by_tier
from slurm_pool.predict.live import forecast
from slurm_pool.spec import load_spec
from tests.unit.test_metrics import replay

pytestmark = pytest.mark.usefixtures("narrow_from_json")

SPEC = load_spec(Path(__file__).resolve().parents[2] / "examples" / "pool.yaml")


@pytest.mark.parametrize("version", ["22.05", "26.05"])
def test_recorded_queue_predicted_waits_by_tier(version):
    slurm = SlurmClient(replay("busy", version))
    submit = max(j.submit_time or 0 for j in slurm.jobs_json())
    fc = forecast(slurm, SPEC, now=submit + 10, history=[])
    waits = waits_by_tier(fc)
    # Job 2 (shared) is held: no estimate.  Job 4 (guaranteed) waits for job 1 (afterok), which has no
    # limit and no history: an hour from its start.
    assert waits["shared"] == ([], 1)
    (wait,), missing = waits["guaranteed"]
    assert missing == 0 and 3580 <= wait <= 3600
    text = "".join(generate_latest(_registry(lambda: waits)).decode())
    assert 'slurm_pool_pending_predicted_wait_seconds_count{tier="guaranteed"} 1.0' in text
    assert 'slurm_pool_pending_predicted_wait_seconds_count{tier="shared"} 0.0' in text
    assert 'slurm_pool_pending_unpredicted_jobs{tier="shared"} 1.0' in text


@pytest.mark.parametrize("version", ["22.05", "26.05"])
def test_the_exporters_forecast_without_the_late_run_gives_the_same_waits(version):
    slurm = SlurmClient(replay("busy", version))
    submit = max(j.submit_time or 0 for j in slurm.jobs_json())
    full = forecast(slurm, SPEC, now=submit + 10, history=[])
    lean = forecast(slurm, SPEC, now=submit + 10, history=[], late_range=False)
    assert waits_by_tier(lean) == waits_by_tier(full)
    assert all(p.low == p.high == p.start for p in lean.predictions.values())


def _registry(predict) -> CollectorRegistry:
    reg = CollectorRegistry()
    reg.register(PoolCollector(SlurmClient(replay("lent")), predict=predict))
    return reg


def test_a_failed_forecast_is_a_scrape_error_and_slurm_stays_up():
    def fail():
        raise RuntimeError("squeue --json: boom")

    reg = _registry(fail)
    text = generate_latest(reg).decode()
    assert "slurm_pool_up 1.0" in text
    assert 'slurm_pool_scrape_errors_total{source="predict"} 1.0' in text
    assert "slurm_pool_pending_predicted_wait_seconds" not in text


def test_the_reader_forecasts_at_most_once_per_interval():
    calls, clock = [], [0.0]

    class Fc:
        now = 100.0
        predictions: dict = {}
        jobs: dict = {}

    def make():
        calls.append(clock[0])
        return Fc()

    read = PredictionReader(make, interval=60, clock=lambda: clock[0])
    for t in (0.0, 30.0, 59.9, 60.0, 61.0):
        clock[0] = t
        assert read() == {}
    assert calls == [0.0, 60.0]


def test_no_tiers_no_samples():
    assert [m.samples for m in prediction_metrics({})] == [[], []]
