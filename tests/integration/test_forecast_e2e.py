"""The bridge's forecast reads the real ``sacct --json`` of the local cluster (both Slurm releases)."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from slurm_pool.adapters.prometheus import QueryError
from slurm_pool.bridge.forecast import hour_of_week
from slurm_pool.bridge.history import Sources, build_forecast
from slurm_pool.spec.bridge import Bridge, ForecastSettings
from tests.support.patience import wait_for

pytestmark = pytest.mark.slurm


def _no_prometheus(*_args):
    raise QueryError("no Prometheus in this test")


def test_slurm_demand_per_group_comes_from_the_live_accounting(cluster):
    job = cluster.sbatch(
        "-p", "b-owner", "--qos=guaranteed", "-A", "projb", "--gres=gpu:2", "-o", "/dev/null",
        user="bob", script="#!/bin/bash\nsleep 3\n",
    )  # fmt: skip
    cluster.wait_state(job, ["COMPLETED"])
    cluster.wait_sacct(job, "End", lambda v: v not in ("", "Unknown"))
    ran = datetime.fromisoformat(cluster.sacct_field(job, "Start")).timestamp()  # sacct prints local time
    config = Bridge(forecast=ForecastSettings(history_days=1, slurm_quantile=1.0))
    seen: list[str] = []

    def forecast():
        fc, notes = build_forecast(
            cluster.spec, config, Sources(cluster.slurm, _no_prometheus), datetime.now(timezone.utc)
        )
        seen[:] = [f"group b at the job's hour: {fc.slurm['b'].at(ran)}", *notes]
        return (fc, notes) if fc.slurm["b"].at(ran) > 0 else None

    # The hour bob's job ran in saw it on b-gpu1 (2 GPUs for a few seconds of the hour); other tests' jobs of
    # this session may add to any group, so only group b's is certain.  The accounting is slurmdbd's, which
    # slurmctld fills through its agent queue: read until the job's allocation is in it, as a rebalancer's
    # next run would.
    try:
        fc, notes = wait_for(forecast, 60, "bob's job in group b's forecast")
    except TimeoutError as exc:
        raise AssertionError(f"{exc}; last read: {seen}") from None
    assert notes and "no inference history" in notes[0]
    assert fc.slurm["b"].samples[hour_of_week(ran)] == 1
    assert set(fc.slurm) == {"a", "b", "c"}
    assert fc.capacity == {"a": 4, "b": 2, "c": 2} and fc.group_of["b-gpu1"] == "b"
