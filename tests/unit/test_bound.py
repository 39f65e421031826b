"""The lower bound on GPUs for an owners' wait bar (``slurm_pool.sim.bound``), against exhaustive search."""

from __future__ import annotations

import random

import pytest

from slurm_pool.sim import bound
from slurm_pool.sim.bound import Task
from slurm_pool.sim.engine import Job, quantile
from tests.support.schedules import optimum, placeable


def instance(rng: random.Random, n: int, fractional: bool = False, span: int = 20) -> list[Task]:
    """``n`` tasks arriving within ``span`` seconds, running 1 to 12 s, on 1 to 3 GPUs (or MIG shares)."""
    return [
        Task(
            float(rng.randint(0, span)),
            float(rng.randint(1, 12)),
            rng.choice([0.25, 0.5, 1.0, 2.0]) if fractional else float(rng.randint(1, 3)),
        )
        for _ in range(n)
    ]


def as_jobs(ts: list[Task]) -> list[Job]:
    return [Job(f"j{i}", "a", t.arrival, t.runtime, int(t.demand)) for i, t in enumerate(ts)]


@pytest.mark.parametrize(
    ("n", "q", "late"),
    [(0, 0.95, 0), (1, 0.95, 0), (8, 0.95, 0), (19, 0.95, 0), (20, 0.95, 1), (40, 0.95, 2), (8, 0.75, 2), (4, 1.0, 0)],
)
def test_late_allowed_matches_the_nearest_rank_quantile(n, q, late):
    assert bound.late_allowed(n, q) == late
    waits = [0.0] * (n - late) + [99.0] * late  # the late ones wait longest: the quantile stays at 0
    assert quantile(waits, q) == 0.0
    if n and late < n:
        assert quantile([0.0] * (n - late - 1) + [99.0] * (late + 1), q) == 99.0


#: Seeds of 8-job instances (half of them where the relaxations alone fall short), then of 5 to 7 jobs.
EXACT_CASES = [(s, 8) for s in (10, 13, 20, 27, 32, 36)] + [(s, 5 + s % 3) for s in (6, 7, 8, 9, 10, 12)]


@pytest.mark.parametrize(("seed", "n"), EXACT_CASES)
def test_bound_equals_the_exhaustive_optimum_up_to_8_jobs_and_4_gpus(seed, n):
    q = 0.95 if seed % 2 else 0.75  # none or two of 8 may wait past the bar
    rng = random.Random(seed)
    ts = instance(rng, n, span=30)
    bar = float(rng.choice([2, 5, 8]))
    best = optimum(ts, bar, bound.late_allowed(n, q))
    assert best <= 4 or pytest.fail(f"instance needs {best} GPUs: pick another seed")
    assert bound.lower_bound(as_jobs(ts), bar, q) == best


@pytest.mark.parametrize("seed", range(60))
def test_relaxed_bound_at_most_the_exhaustive_optimum(seed):
    rng = random.Random(1000 + seed)
    n = rng.randint(1, 7)
    ts = instance(rng, n, fractional=seed % 2 == 1)
    bar = float(rng.choice([0, 1, 3, 8]))
    late = rng.choice([0, 0, 1, 2])
    assert bound.relaxed_bound(ts, bar, late) <= optimum(ts, bar, late)


def test_the_bound_is_reached_by_a_schedule_on_its_gpus():
    # two 2-GPU jobs at once, a bar of 0: 4 GPUs; a bar of 10 lets the second follow the first: 2
    ts = [Task(0, 10, 2), Task(0, 10, 2)]
    assert bound.lower_bound(as_jobs(ts), 0) == 4 and bound.lower_bound(as_jobs(ts), 10) == 2
    assert placeable(ts, 10, 2) and not placeable(ts, 9, 2)


@pytest.mark.parametrize(
    ("jobs", "bar", "gpus"),
    [
        pytest.param([], 0, 0, id="no-jobs"),
        pytest.param([Job("b", None, 0, 100, 8)], 0, 0, id="borrowers-left-out"),
        pytest.param([Job("m", "a", 0, 10, 7, profile="1g.10gb")], 0, 1, id="mig-share"),
        pytest.param(
            [Job(f"j{i}", "a", 10.0 * i, 10, 1) for i in range(19)] + [Job("big", "a", 0, 10, 8)],
            0,
            8,
            id="the-biggest-runs-too",
        ),
        pytest.param([Job("m", "a", 0, 10, 2, profile="3g.40gb")] * 2, 0, 2, id="mig-shares-add-up"),
        pytest.param([Job(f"j{i}", "a", 0, 10, 1) for i in range(20)], 0, 19, id="one-of-20-may-wait"),
    ],
)
def test_lower_bound_cases(jobs, bar, gpus):
    assert bound.lower_bound(jobs, bar) == gpus


def test_relaxations_on_many_jobs():
    # 40 one-GPU jobs of 100 s every 10 s, bar 0: 10 run at once in steady state; the 2 that may wait
    # lower that only while they would have run, and an interval longer than a job sees it
    jobs = [Job(f"j{i}", "a", 10.0 * i, 100.0, 1) for i in range(40)]
    ts = bound.tasks(jobs)
    assert bound.compulsory_bound(ts, 0, 2) == 8 and bound.energy_bound(ts, 0, 2) == 10
    assert bound.lower_bound(jobs, 0) == 10
    assert bound.lower_bound(jobs, 1e6) == 1


@pytest.mark.parametrize(
    ("bar", "q", "message"), [(-1, 0.95, "bar: -1"), (float("nan"), 0.95, "bar: nan"), (0, 0, "q: 0")]
)
def test_lower_bound_rejects(bar, q, message):
    with pytest.raises(ValueError, match=message):
        bound.lower_bound([], bar, q)


def test_the_joint_bound_leaves_out_the_same_jobs_everywhere():
    # two bursts of a 4-GPU job and nine 1-GPU jobs, bar 0, one of 20 may wait: each interval alone may leave
    # its burst's big job out (9 GPUs), but only one of the two can be, so the other burst needs 13
    burst = [Task(0, 100, 4)] + [Task(0, 100, 1)] * 9
    ts = burst + [Task(1000, 100, t.demand) for t in burst]
    assert bound.late_allowed(20) == 1
    assert bound.energy_bound(ts, 0, 1) == 9 and bound.compulsory_bound(ts, 0, 1) == 9
    assert bound.joint_bound(ts, 0, 1) == 13 and bound.lower_bound(as_jobs(ts), 0) == 13
