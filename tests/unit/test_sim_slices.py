"""Fractional-GPU jobs on MIG slices over time (slurm_pool.sim.slices): hand-worked replays, sizing, invariants."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurm_pool.sim.slices import (
    SliceJob,
    peak_demand,
    planned_layouts,
    profile_of,
    replay_slices,
    replay_whole,
    size_pool,
)

A100 = "A100-40GB"
SEVEN_1G = ("1g.5gb",) * 7


def job(i: str, t: float, work: float, milli: int) -> SliceJob:
    return SliceJob(i, t, work, milli)


@pytest.mark.parametrize(
    "milli, profile",
    [(1, "1g.5gb"), (142, "1g.5gb"), (143, "2g.10gb"), (300, "3g.20gb"), (500, "4g.20gb"), (571, "4g.20gb"),
     (572, "7g.40gb"), (1000, "7g.40gb")],
)  # fmt: skip
def test_a_fraction_gets_the_smallest_profile_with_enough_compute(milli, profile):
    assert profile_of(A100, milli) == profile


@pytest.mark.parametrize("milli", [0, -5, 1001])
def test_a_fraction_outside_one_gpu_is_named(milli):
    with pytest.raises(ValueError, match=f"milli: {milli} is not in 1..1000"):
        profile_of(A100, milli)


JOBS = [job("a", 0, 100, 100), job("b", 10, 100, 100), job("c", 20, 50, 1000)]


@pytest.mark.parametrize(
    "layouts, waits, unstarted",
    [
        # 7 x 1g: a and b start on arrival; c needs a whole GPU's profile, which no layout holds
        ([SEVEN_1G], {"a": 0, "b": 0}, ["c"]),
        # one 1g slice: b waits for a; c still never starts
        ([("1g.5gb",)], {"a": 0, "b": 90}, ["c"]),
        # a second GPU left whole (7g.40gb): c runs there, a and b share the 1g slices
        ([SEVEN_1G, ("7g.40gb",)], {"a": 0, "b": 0, "c": 0}, []),
    ],
)
def test_hand_worked_slice_replays(layouts, waits, unstarted):
    r = replay_slices(A100, JOBS, layouts)
    assert r.waits == waits and r.unstarted == unstarted
    assert r.gpus == len(layouts)


def test_the_whole_gpu_baseline_queues_every_job_for_a_gpu():
    r = replay_whole(A100, JOBS, 1)
    assert r.waits == {"a": 0, "b": 90, "c": 180} and not r.unstarted
    # 250 s of jobs on 1 GPU over the 250 s from the first arrival to the last end: all busy
    assert r.span == 250 and r.utilisation == pytest.approx(1.0)


def test_peak_demand_counts_jobs_running_at_once_per_profile():
    jobs = [job("a", 0, 10, 100), job("b", 5, 10, 100), job("c", 10, 10, 100), job("d", 0, 5, 300)]
    assert peak_demand(A100, jobs) == {"1g.5gb": 2, "3g.20gb": 1}  # a ends as c starts


def test_the_planner_makes_the_layouts():
    assert planned_layouts(A100, 1, {"1g.5gb": 7}) == [SEVEN_1G]


def test_seven_small_jobs_need_one_partitioned_gpu_instead_of_seven():
    jobs = [job(f"j{i}", 0, 100, 100) for i in range(7)]
    s = size_pool(A100, jobs)
    assert (s.whole.gpus, s.mig.gpus) == (7, 1) and s.ratio == pytest.approx(1 / 7)
    assert s.mig.p95_wait == 0 and s.mig.utilisation == pytest.approx(1.0)
    assert s.whole.utilisation == pytest.approx(1.0)  # the baseline's GPUs are held whole


def test_a_wait_allowed_needs_fewer_gpus():
    jobs = [job(f"j{i}", 0, 100, 1000) for i in range(4)]
    assert size_pool(A100, jobs).whole.gpus == 4
    assert size_pool(A100, jobs, max_wait=100).whole.gpus == 2  # the p95 job waits one run


def test_no_jobs_is_named():
    with pytest.raises(ValueError, match="jobs: none"):
        size_pool(A100, [])


@st.composite
def workloads(draw):  # type: ignore[no-untyped-def]
    n = draw(st.integers(1, 25))
    return [
        job(f"j{i}", draw(st.sampled_from([0, 0, 5, 20, 60])), draw(st.integers(1, 100)), draw(st.integers(1, 1000)))
        for i in range(n)
    ]


@settings(max_examples=200, deadline=None, derandomize=True)
@given(workloads(), st.integers(1, 3))
def test_no_instance_is_ever_double_booked(jobs, gpus):
    layouts = planned_layouts(A100, gpus, peak_demand(A100, jobs))
    r = replay_slices(A100, jobs, layouts)
    have = Counter(p for lay in layouts if lay for p in lay)
    by_id = {j.id: j for j in jobs}
    events = []
    for jid, w in r.waits.items():
        j = by_id[jid]
        assert w >= 0
        events += [
            (j.arrival + w, 1, profile_of(A100, j.milli)),
            (j.arrival + w + j.work, -1, profile_of(A100, j.milli)),
        ]
    held: Counter[str] = Counter()
    for _, d, p in sorted(events):
        held[p] += d
        assert held[p] <= have[p], (p, held[p], have[p])
    # every job either ran or waits for a profile that is short
    assert set(r.waits) | set(r.unstarted) == set(by_id)
    assert all(have[profile_of(A100, by_id[i].milli)] == 0 for i in r.unstarted)
