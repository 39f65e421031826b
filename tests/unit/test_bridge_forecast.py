"""Forecasts by hour of week, and the cost model they drive in the bridge's planner (table-driven)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from slurm_pool.adapters.prometheus import QueryError, range_samples
from slurm_pool.adapters.records import JobRecord, State
from slurm_pool.bridge.forecast import HOUR, Forecast, flat, hour_of_week, profile, quantile, slurm_demand
from slurm_pool.bridge.history import Sources, build_forecast, node_groups
from slurm_pool.spec import load_spec
from slurm_pool.spec.bridge import ForecastSettings
from tests.unit.test_bridge_plan import EXAMPLE_SPEC, NIGHT, world

pytestmark = pytest.mark.usefixtures("narrow_from_json")

MONDAY = datetime(2026, 1, 5, tzinfo=timezone.utc).timestamp()  # a Monday, 00:00 UTC
GROUP_OF = {"a-gpu1": "a", "a-gpu2": "a", "b-gpu1": "b", "c-gpu1": "c"}
CAPACITY = {"a": 4, "b": 2, "c": 2}


@pytest.mark.parametrize(
    "t, expected",
    [(MONDAY, 0), (MONDAY + 3 * HOUR + 59, 3), (MONDAY + 24 * HOUR, 24), (MONDAY + 167 * HOUR, 167)],
)
def test_hour_of_week(t, expected):
    assert hour_of_week(t) == expected


@pytest.mark.parametrize(
    "values, q, expected", [([], 0.5, 0.0), ([3.0], 0.9, 3.0), ([1, 2, 3, 4], 0.5, 2.5), ([0, 10], 0.9, 9.0)]
)
def test_quantile(values, q, expected):
    assert quantile(values, q) == pytest.approx(expected)


def test_profile_takes_each_hour_of_week_and_falls_back_to_the_hour_of_day_then_everything():
    week = 7 * 24 * HOUR
    # Two Mondays at 03:00 (4 and 8), one Tuesday 10:00 (6); several samples in one hour are averaged.
    samples = [(MONDAY + 3 * HOUR, 4.0), (MONDAY + 3 * HOUR + 60, 4.0), (MONDAY + week + 3 * HOUR, 8.0)]
    samples.append((MONDAY + 34 * HOUR, 6.0))
    p = profile(samples, q=0.5)
    assert p.at(MONDAY + 3 * HOUR) == pytest.approx(6.0)  # median of 4 and 8
    assert p.samples[3] == 2 and p.samples[4] == 0
    assert p.at(MONDAY + 27 * HOUR) == pytest.approx(6.0)  # Tuesday 03:00: Monday's 03:00 stands in
    assert p.at(MONDAY + 5 * HOUR) == pytest.approx(6.0)  # no 05:00 anywhere: the whole history's median
    assert p.peak(MONDAY + HOUR, 2 * HOUR) == pytest.approx(6.0)
    assert flat(2.0).peak(MONDAY, 10 * HOUR) == 2.0 and flat().empty


def test_first_above_finds_the_first_hour_over_a_level():
    p = profile([(MONDAY + h * HOUR, 5.0 if h == 8 else 0.0) for h in range(24)], q=0.5)
    assert p.first_above(MONDAY + 6.5 * HOUR, 3 * HOUR, 1.0) == pytest.approx(1.5 * HOUR)
    assert p.first_above(MONDAY + 6.5 * HOUR, HOUR, 1.0) is None


def _job(job_id, submit, start, end, gpus, nodes, partition="a-owner"):
    return JobRecord(
        job_id, state=State("COMPLETED"), partition=partition, nodes=nodes, submit_time=submit,
        start_time=start, end_time=end, gpus=gpus,
    )  # fmt: skip


def test_slurm_demand_counts_from_submission_to_end_on_the_group_it_ran_on():
    jobs = [
        _job(1, MONDAY + 0.5 * HOUR, MONDAY + HOUR, MONDAY + 2.5 * HOUR, 2, "a-gpu1"),
        _job(2, MONDAY, MONDAY, MONDAY + HOUR, 4, "a-gpu1,b-gpu1"),  # shared out by node
        _job(3, MONDAY, MONDAY, MONDAY + 3 * HOUR, 2, "a-gpu2", partition="k8s-lend"),  # a placeholder
        _job(4, MONDAY, None, None, 2, ""),  # never ran: no group to put it on
    ]
    series = slurm_demand(jobs, GROUP_OF, MONDAY, MONDAY + 3 * HOUR, skip_partitions=["k8s-lend"])
    assert [v for _, v in series["a"]] == pytest.approx([1.0 + 2.0, 2.0, 1.0])
    assert [v for _, v in series["b"]] == pytest.approx([2.0, 0.0, 0.0])
    assert [t for t, _ in series["c"]] == [MONDAY, MONDAY + HOUR, MONDAY + 2 * HOUR]


@pytest.mark.parametrize(
    "data, expected",
    [
        ({"resultType": "matrix", "result": []}, []),
        (
            {
                "resultType": "matrix",
                "result": [{"values": [[10, "1"], [20, "2"]]}, {"values": [[10, "3"], [20, "NaN"]]}],
            },
            [(10.0, 4.0), (20.0, 2.0)],
        ),
    ],
)
def test_range_samples_sum_series_per_time(data, expected):
    assert range_samples(data) == expected


def test_range_samples_refuse_a_vector():
    with pytest.raises(QueryError, match="matrix"):
        range_samples({"resultType": "vector", "result": []})


@pytest.mark.parametrize(
    "result",
    [
        {"values": [[10, "1_0"]]},  # float() reads 10
        {"values": [[10, "١"]]},  # float() reads 1
        {"values": [[10, True]]},
        {"values": [[10, "1"], [20]]},
        {"values": [["x", "1"]]},
        {"values": "1"},
        ["values"],
        "series",
    ],
    ids=ascii,
)
def test_range_samples_refuse_what_prometheus_does_not_print(result):
    # Issue 30: a matrix of the wrong shape ended the forecast (and `rebalance`) in a traceback, and
    # Python's float() took numbers Prometheus never prints.
    with pytest.raises(QueryError):
        range_samples({"resultType": "matrix", "result": [result]})


def test_range_samples_skip_what_prometheus_has_no_value_for():
    data = {"resultType": "matrix", "result": [{"values": [[10, "+Inf"], [10, "-Inf"], [10, "NaN"], [10, "2"]]}]}
    assert range_samples(data) == [(10.0, 2.0)]


def test_build_forecast_reads_sacct_and_prometheus_and_survives_a_prometheus_outage():
    spec = load_spec(EXAMPLE_SPEC)
    group_of, capacity = node_groups(spec)
    assert group_of == GROUP_OF and capacity == CAPACITY
    w = world()
    w.runner.on(["sacct", "--json"], '{"jobs": []}')
    cfg = w.config.model_copy(update={"forecast": ForecastSettings(history_days=7)})
    seen = []

    def prom(url, query, start, end, step):
        seen.append((query, end - start, step))
        return [(MONDAY + 3 * HOUR, 2.0)]

    fc, notes = build_forecast(spec, cfg, Sources(w.side.client, prom), NIGHT)
    assert fc.enabled and notes == [] and seen == [("slurm_pool_inference_demand_gpus", 7 * 86400.0, HOUR)]
    sacct = [c for c in w.runner.calls if c[0] == "sacct"][-1]
    assert "--allusers" in sacct and "--allocations" in sacct and "--starttime" in sacct

    def down(*_a):
        raise QueryError("http://prom: connection refused")

    fc, notes = build_forecast(spec, cfg, Sources(w.side.client, down), NIGHT)
    assert fc.inference is None and set(fc.slurm) == {"a", "b", "c"}
    assert notes == ["forecast: no inference history (http://prom: connection refused); current demand only"]
    fc, notes = build_forecast(spec, w.config, Sources(w.side.client, down), NIGHT)
    assert not fc.enabled and notes == [] and fc.group_of == GROUP_OF


# -- the cost model --------------------------------------------------------------------------------


def forecast(inference: float | None = None, **slurm: float) -> Forecast:
    return Forecast(
        GROUP_OF, CAPACITY, None if inference is None else flat(inference), {g: flat(v) for g, v in slurm.items()}
    )


def lent(plan) -> list[str]:
    return sorted(n.node for n in plan.nodes if n.intent in ("lend", "lent"))


@pytest.mark.parametrize(
    "demand, fc, expected",
    [
        # Spread across groups (owners), not alphabetical: a-gpu1 then b-gpu1, not a-gpu2.
        (4, forecast(), ["a-gpu1", "b-gpu1"]),
        # Cheapest reclaim first: group a is forecast busier, so b and c go first.
        (4, forecast(a=2.0), ["b-gpu1", "c-gpu1"]),
        # Slurm wants all of group b's GPUs within the horizon: b is not lent.
        (2, forecast(b=2.0), ["a-gpu1"]),
        # No demand now, but the inference forecast within the warm-up asks for 2 GPUs: lend ahead.
        (0, forecast(inference=2.0), ["a-gpu1"]),
    ],
)
def test_which_nodes_are_lent(demand, fc, expected):
    w = world(demand_gpus=demand, forecast=ForecastSettings())
    assert lent(w.plan(forecast=fc)) == expected


def test_a_forecast_veto_says_why_in_the_dry_run_report():
    w = world(demand_gpus=2, forecast=ForecastSettings())
    report = w.run(forecast=forecast(inference=0.0, a=4.0, b=2.0, c=2.0), dry_run=True)
    assert lent(report.plan) == []
    reasons = {n.node: n.reasons for n in report.plan.nodes}
    assert any("forecast: group b's Slurm jobs want 2.0 of its 2 GPU(s)" in r for r in reasons["b-gpu1"])
    assert report.plan.forecast["slurm_gpus"]["a"] == {"forecast": 4.0, "capacity": 4}
    assert "forecast: inference 0 GPU(s) within 600s; Slurm GPUs wanted of each group's within 900s: a 4/4" in (
        report.text()
    )


@pytest.mark.parametrize(
    "min_lease, hysteresis, later, demand, still_lent",
    [
        (600, 0, 60, 0, 2),  # demand went, but the minimum lease has 540 s left
        (600, 0, 700, 0, 0),  # the lease ran out: back to Slurm
        (0, 0, 60, 0, 0),  # no minimum lease
        (0, 0, 60, 2, 1),  # half the demand went: one node goes back
        (0, 1, 60, 2, 2),  # ... but not within the hysteresis of 1 GPU
        (0, 2, 60, 3, 2),
        (0, 0, -3600, 0, 0),  # this host's clock an hour behind Slurm's: no minimum lease is still none
        (600, 0, -3600, 0, 2),  # ... and a lease is held no longer than itself
    ],
)
def test_minimum_lease_and_hysteresis(min_lease, hysteresis, later, demand, still_lent):
    w = world(demand_gpus=4, min_lease_seconds=min_lease, hysteresis_gpus=hysteresis)
    assert w.run().ok and len(w.placeholders()) == 2
    for j in w.slurm.jobs:
        j["start_time"] = int(NIGHT.timestamp())
    w.k8s.isvcs[0]["spec"]["predictor"]["minReplicas"] = demand
    p = w.plan(now=NIGHT + timedelta(seconds=later))
    assert len(lent(p)) == still_lent
    if min_lease and still_lent:
        left = min(min_lease, min_lease - later)
        assert f"minimum lease ({left}s left)" in p.node("a-gpu1").reasons[0]


def test_nodes_go_back_one_per_run_ahead_of_the_window_closing():
    w = world(demand_gpus=6, stagger_seconds=300)
    assert w.run().ok and len(w.placeholders()) == 3
    closing = datetime(2026, 1, 7, 6, 51, tzinfo=timezone.utc)  # the window ends at 07:00
    assert len(lent(w.plan(now=closing))) == 2  # 2 x 300 s ahead: the first goes back
    assert w.run(now=closing).ok and len(w.placeholders()) == 2
    assert len(lent(w.plan(now=closing))) == 2  # one per run: 300 s ahead is still open
    assert len(lent(w.plan(now=closing + timedelta(minutes=5)))) == 1


def test_nodes_go_back_staggered_ahead_of_a_forecast_slurm_rise():
    week = [(MONDAY + h * HOUR, 4.0 if h % 24 == 8 else 0.0) for h in range(168)]  # group a busy at 08:00
    fc = Forecast(GROUP_OF, CAPACITY, None, {"a": profile(week)})
    w = world(
        demand_gpus=8, return_ahead_seconds=900, stagger_seconds=300, forecast=ForecastSettings(),
        lend_outside_off_peak=True,
    )  # fmt: skip
    assert w.run(forecast=fc, now=NIGHT.replace(hour=4)).ok  # 04:00
    assert sorted(w.placeholders()) == ["a-gpu1", "a-gpu2", "b-gpu1", "c-gpu1"]
    early = NIGHT.replace(hour=7, minute=35)  # 08:00 - 900 s - 300 s is 07:40
    assert "a-gpu1" in lent(w.plan(forecast=fc, now=early)) and "a-gpu2" in lent(w.plan(forecast=fc, now=early))
    first = w.plan(forecast=fc, now=NIGHT.replace(hour=7, minute=41))
    assert [n for n in ("a-gpu1", "a-gpu2") if n not in lent(first)] == ["a-gpu1"]
    assert "nodes go back ahead of it, one per run" in first.node("a-gpu1").reasons[0]


def test_an_empty_off_peak_list_allows_lending_at_any_hour():
    noon = NIGHT.replace(hour=12)
    assert lent(world(demand_gpus=2).plan(now=noon)) == []
    assert lent(world(demand_gpus=2, off_peak=[]).plan(now=noon)) == ["a-gpu1"]
