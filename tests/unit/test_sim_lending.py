"""The inference-lending replay (bench/forecast_replay.py's model of the planner), on hand-worked cases."""

from __future__ import annotations

import pytest

from slurm_pool.sim.lending import LendPolicy, replay_inference_lending

H = 3600.0
DAY = 24 * H
# Three days of history: 8 GPUs wanted from 10:00 to 12:00, nothing else.  Then day 3 is replayed.
NEED = [(d * DAY + h * H, 8.0 if 10 <= h < 12 else 0.0) for d in range(4) for h in range(24)]
START, END = 3 * DAY, 4 * DAY


def replay(policy: LendPolicy, idle=((0.0, 16),)):
    return replay_inference_lending(list(idle), NEED, START, END, 16, 8, 300.0, policy)


@pytest.mark.parametrize(
    "policy, lends, cold, served_h",
    [
        # Lent as the demand comes: the rise at 10:00 finds nothing warm, and 10:00-10:10 is lost to warm-up.
        (LendPolicy("demand"), 1, 1, 2 - 600 / H),
        # Lent 600 s ahead of the forecast rise: warm at 10:00, both hours served, no cold start.
        (LendPolicy("forecast", forecast=True, warmup=600.0, min_lease=0.0), 1, 0, 2.0),
        # Only 19:00-07:00: the demand at 10:00 is never served.
        (LendPolicy("window", window=lambda t: (t % DAY) < 7 * H or (t % DAY) >= 19 * H), 0, 1, 0.0),
    ],
)
def test_cold_starts_and_served_demand(policy, lends, cold, served_h):
    rep = replay(policy)
    assert (rep.lends, rep.cold_starts, rep.reclaims) == (lends, cold, 0)
    assert rep.served_gpu_seconds == pytest.approx(served_h * 8 * H)
    assert rep.demand_gpu_seconds == pytest.approx(2 * 8 * H)


def test_slurm_taking_its_gpus_back_is_a_reclaim_of_a_busy_node():
    idle = [(0.0, 16), (START + 10.5 * H, 0), (START + 11 * H, 16)]  # Slurm's jobs fill the pool 10:30-11:00
    rep = replay(LendPolicy("demand"), idle)
    assert (rep.reclaims, rep.busy_reclaims, rep.reclaim_times) == (1, 1, [START + 10.5 * H])
    assert rep.lends == 2  # lent again at 11:00


def test_the_forecast_keeps_new_lends_clear_of_a_forecast_slurm_rise():
    # Every day Slurm's jobs take the whole pool from 10:00 to 12:00: the forecast lends nothing then.
    idle = [(d * DAY + h * H, 0 if 10 <= h < 12 else 16) for d in range(4) for h in range(24)]
    fc = replay(LendPolicy("forecast", forecast=True, min_lease=0.0), idle)
    assert fc.lends == 0 and fc.reclaims == 0
