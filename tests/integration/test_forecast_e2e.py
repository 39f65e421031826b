"""The bridge's forecast reads the real ``sacct --json`` of the local cluster (both Slurm releases)."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from slurm_pool.adapters.prometheus import QueryError
from slurm_pool.bridge.forecast import hour_of_week
from slurm_pool.bridge.history import Sources, build_forecast
from slurm_pool.spec.bridge import Bridge, ForecastSettings

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
    now = datetime.now(timezone.utc)
    fc, notes = build_forecast(cluster.spec, config, Sources(cluster.slurm, _no_prometheus), now)
    assert notes and "no inference history" in notes[0]
    # The hour bob's job ran in saw it on b-gpu1 (2 GPUs for a few seconds of the hour); other tests' jobs of
    # this session may add to any group, so only group b's is certain.
    assert fc.slurm["b"].at(ran) > 0 and fc.slurm["b"].samples[hour_of_week(ran)] == 1
    assert set(fc.slurm) == {"a", "b", "c"}
    assert fc.capacity == {"a": 4, "b": 2, "c": 2} and fc.group_of["b-gpu1"] == "b"
