"""Start-time prediction (slurm_pool.predict): hand-worked forward runs of the example pool, runtimes, causes.

The pool is examples/pool.yaml: a-gpu1, a-gpu2 (2 GPUs each, proja's), b-gpu1 (2, projb's), c-gpu1 (one
MIG GPU and one whole GPU, projc's); borrowed partitions shared and scavenger (GraceTime 20 s), and the
bridge's k8s-lend, lending 19:00-07:00 (UTC here).
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from slurm_pool.predict.explain import REASONS, explain, reason_text
from slurm_pool.predict.forward import LiveJob, dependencies, predict
from slurm_pool.predict.plan_fit import earliest, free_windows
from slurm_pool.predict.pool import PoolModel
from slurm_pool.predict.runtimes import DEFAULT, Estimate, Finished, Runtimes, remaining
from slurm_pool.spec import load_spec_text

REPO = Path(__file__).resolve().parents[2]
NOW = 1_796_018_400.0  # 2026-11-30 06:00:00 UTC: one hour before the off-peak window ends


@pytest.fixture(scope="module")
def pool() -> PoolModel:
    text = (REPO / "examples" / "pool.yaml").read_text()
    return PoolModel.from_spec(
        load_spec_text(text.replace("  max_lent_nodes: 3", "  max_lent_nodes: 3\n  timezone: UTC"))
    )


def run(
    user: str, partition: str, jid: int, gpus: int, nodes: tuple[tuple[str, int], ...], ran: float, limit=None, **kw
):
    return LiveJob(
        jid,
        user,
        kw.pop("account", "projc"),
        partition,
        kw.pop("state", "running"),
        gpus,
        nodes=nodes,
        start=NOW - ran,
        limit=limit,
        submit=NOW - ran - 1,
        **kw,
    )


def wait(user: str, partition: str, jid: int, gpus: int, limit=None, **kw):
    return LiveJob(
        jid,
        user,
        kw.pop("account", "projc"),
        partition,
        "pending",
        gpus,
        limit=limit,
        submit=kw.pop("submit", NOW - 5),
        priority=kw.pop("priority", 100),
        **kw,
    )


def history(*items: tuple[str, str, int, float]) -> Runtimes:
    return Runtimes(Finished(u, p, g, NOW - 1000 + i, s) for i, (u, p, g, s) in enumerate(items))


OWNERS_FULL = [  # every whole GPU held by owners: alice's a-gpu1 for 400 s more, a-gpu2 and b-gpu1 longer
    run("alice", "a-owner", 1, 2, (("a-gpu1", 2),), 100, account="proja"),
    run("alice", "a-owner", 2, 2, (("a-gpu2", 2),), 100, account="proja"),
    run("bob", "b-owner", 3, 2, (("b-gpu1", 2),), 100, account="projb"),
    run("carol", "c-owner", 4, 1, (("c-gpu1", 1),), 100),
]
OWNER_HISTORY = [
    ("alice", "a-owner", 2, 500.0),
    ("alice", "a-owner", 2, 500.0),
    ("bob", "b-owner", 2, 2000.0),
    ("carol", "c-owner", 1, 3000.0),
    ("carol", "scavenger", 2, 600.0),
]


def test_a_borrower_waits_behind_an_owners_burst(pool):
    jobs = [*OWNERS_FULL, wait("carol", "scavenger", 10, 2, limit=3600.0)]
    fc = predict(pool, jobs, history(*OWNER_HISTORY), NOW)
    p = fc.predictions[10]
    assert p.start == NOW + 400  # alice's jobs ran 100 s of their usual 500
    assert (p.low, p.high) == (NOW + 400, NOW + 400)  # owners have no time limit: the late run agrees
    assert p.runtime == Estimate(600.0, "history")
    ex = explain(fc, 10)
    owner = next(c for c in ex.causes if c.kind == "owner")
    assert "proja" in owner.text and owner.jobs in ((1,), (2,), (1, 2))


def test_an_owner_starts_after_one_gracetime(pool):
    jobs = [
        run("carol", "scavenger", 1, 2, (("a-gpu1", 2),), 50, limit=3600.0),
        run("carol", "scavenger", 2, 2, (("a-gpu2", 2),), 50, limit=3600.0),
        wait("alice", "a-owner", 10, 2, account="proja", priority=10000),
    ]
    fc = predict(pool, jobs, history(("carol", "scavenger", 2, 3000.0)), NOW)
    assert fc.predictions[10].start == NOW + 20  # the scavenger tier's GraceTime
    assert fc.predictions[10].high == NOW + 20 + 30  # ... and KillWait, for a victim that ignores SIGTERM
    ex = explain(fc, 10)
    assert [c.kind for c in ex.causes] == ["preempts"]
    assert ex.causes[0].jobs in ((1,), (2,))


def test_a_spot_job_waits_for_a_lent_node(pool):
    lent = run("slurmpool", "k8s-lend", 5, 2, (("b-gpu1", 2),), 3000, account="k8s-bridge")
    jobs = [*[j for j in OWNERS_FULL if j.job_id != 3], lent, wait("carol", "scavenger", 10, 2)]
    long = [("alice", "a-owner", 2, 90_000.0), ("carol", "c-owner", 1, 90_000.0)]
    fc = predict(pool, jobs, history(*long), NOW)
    assert fc.predictions[10].start == NOW + 3600  # 07:00 UTC, when lending stops
    ex = explain(fc, 10)
    assert [c.kind for c in ex.causes] == ["lent"] and ex.causes[0].nodes == ("b-gpu1",)


def test_a_shorter_time_limit_would_backfill(pool):
    jobs = [
        run("alice", "a-owner", 1, 2, (("a-gpu1", 2),), 0, account="proja"),
        run("bob", "b-owner", 3, 2, (("b-gpu1", 2),), 0, account="projb"),
        run("carol", "c-owner", 4, 1, (("c-gpu1", 1),), 0),
        wait("carol", "scavenger", 10, 4, limit=7200.0, priority=200),  # the head: a-gpu2 and a-gpu1 at 1000
        wait("carol", "scavenger", 11, 2, limit=7200.0, priority=100),  # fits a-gpu2 now, but its limit is long
    ]
    runs = history(
        ("alice", "a-owner", 2, 1000.0),
        ("bob", "b-owner", 2, 50_000.0),
        ("carol", "c-owner", 1, 50_000.0),
        ("carol", "scavenger", 2, 300.0),
        ("carol", "scavenger", 4, 600.0),
    )
    fc = predict(pool, jobs, runs, NOW)
    assert fc.predictions[10].start == NOW + 1000
    assert fc.predictions[11].start == NOW + 1600  # after the head, which ends at 1600
    ex = explain(fc, 11)
    limit = next(a for a in ex.alternatives if a.what.startswith("a time limit"))
    assert limit.what == "a time limit of 7 min instead of 2 h 0 min"
    assert limit.start == NOW  # a-gpu2 is free for 7 minutes before the head's reservation
    assert "TimeLimit=7" in limit.how


SHORTER_LIMIT = (
    [
        run("alice", "a-owner", 1, 2, (("a-gpu1", 2),), 0, account="proja"),
        run("bob", "b-owner", 3, 2, (("b-gpu1", 2),), 0, account="projb"),
        run("carol", "c-owner", 4, 1, (("c-gpu1", 1),), 0),
        wait("carol", "scavenger", 10, 4, limit=7200.0, priority=200),
        wait("carol", "scavenger", 11, 2, limit=7200.0, priority=100),
    ],
    [("alice", "a-owner", 2, 1000.0), ("carol", "scavenger", 2, 300.0), ("carol", "scavenger", 4, 600.0)],
)


@pytest.mark.parametrize(
    ("jobs", "items", "late_moves"),
    [
        ([*OWNERS_FULL, wait("carol", "scavenger", 10, 2, limit=3600.0)], OWNER_HISTORY, False),
        (*SHORTER_LIMIT, True),
    ],
)
def test_without_the_late_run_each_range_is_its_start(pool, jobs, items, late_moves):
    full = predict(pool, jobs, history(*items), NOW)
    lean = predict(pool, jobs, history(*items), NOW, late_range=False)
    assert full.predictions.keys() == lean.predictions.keys()
    for jid, p in full.predictions.items():
        q = lean.predictions[jid]
        assert (q.start, q.runtime, q.note) == (p.start, p.runtime, p.note)
        assert (q.low, q.high) == (q.start, q.start)
    assert any(p.high != p.start for p in full.predictions.values()) == late_moves


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("", ([], True)),
        ("afterok:12(unfulfilled)", ([("afterok", 12)], True)),
        ("afterany:12:13", ([("afterany", 12), ("afterany", 13)], True)),
        ("afterok:12(unfulfilled),after:14(unfulfilled)", ([("afterok", 12), ("after", 14)], True)),
        ("afterok:12(unfulfilled)?afterany:13(unfulfilled)", ([("afterok", 12), ("afterany", 13)], False)),
        ("afterok:12(fulfilled)", ([], True)),
        ("singleton", None),
        ("afterok:12\nafterok:13", None),
        ("afterok:x", None),
    ],
)
def test_dependencies(text, want):
    assert dependencies(text) == want


def test_a_dependent_job_arrives_when_its_dependency_ends(pool):
    jobs = [
        run("alice", "a-owner", 1, 2, (("a-gpu1", 2),), 100, account="proja"),
        wait("alice", "a-owner", 10, 2, account="proja", dependency="afterok:1(unfulfilled)"),
        wait("alice", "a-owner", 11, 2, account="proja", dependency="afterok:10(unfulfilled)"),
    ]
    fc = predict(pool, jobs, history(("alice", "a-owner", 2, 500.0)), NOW)
    assert fc.predictions[10].start == NOW + 400  # job 1 ends at 400 (a-gpu2 is free, but 10 depends on 1)
    assert fc.predictions[11].start == NOW + 900  # job 10 then runs 500 s


@pytest.mark.parametrize(
    ("items", "user", "partition", "gpus", "limit", "want"),
    [
        (
            [("u", "p", 1, 100.0), ("u", "p", 1, 300.0), ("u", "p", 1, 500.0)],
            "u",
            "p",
            1,
            None,
            Estimate(400.0, "history"),
        ),
        ([("u", "p", 1, 100.0)], "u", "p", 1, 60.0, Estimate(60.0, "history")),
        ([("u", "q", 2, 100.0), ("u", "p", 1, 900.0)], "u", "p", 2, None, Estimate(500.0, "user history")),
        ([("v", "p", 1, 100.0)], "u", "p", 1, 1800.0, Estimate(1800.0, "time limit")),
        ([], "u", "p", 1, None, Estimate(DEFAULT, "default")),
    ],
)
def test_runtime_estimates(items, user, partition, gpus, limit, want):
    assert history(*items).estimate(user, partition, gpus, limit) == want


@pytest.mark.parametrize(
    ("expected", "elapsed", "limit", "want"),
    [(600, 100, None, 500), (600, 700, None, 700), (600, 700, 1000, 300), (600, 100, 300, 200), (600, 400, 400, 1)],
)
def test_remaining(expected, elapsed, limit, want):
    assert remaining(expected, elapsed, limit) == want


def test_jobs_the_model_cannot_place_get_no_estimate_and_say_why(pool):
    jobs = [
        wait("carol", "scavenger", 1, 2, reason="JobHeldUser", held=True),
        wait("carol", "scavenger", 2, 0),
        wait("carol", "nosuch", 3, 1),
        wait("alice", "a-owner", 4, 5, account="proja"),
    ]
    fc = predict(pool, jobs, Runtimes([]), NOW, down={"a-gpu2"})
    notes = {j: p.note for j, p in fc.predictions.items()}
    assert all(fc.predictions[j].start is None for j in notes)
    assert notes[1].startswith("held")
    assert "no whole GPU" in notes[2]
    assert "'nosuch'" in notes[3]
    assert notes[4] == "asks for 5 GPUs; project proja's nodes that are up have at most 2"


def test_every_reason_reads(pool):
    for code in REASONS:
        assert "{" not in reason_text(wait("u", "shared", 1, 1, reason=code, qos="shared"))
    assert reason_text(wait("u", "shared", 1, 1, reason="Odd\x1b[2J")).startswith("Slurm's reason: Odd")


@pytest.mark.parametrize(
    ("held", "cap", "need", "want"),
    [
        ([], 2, 1, [(0.0, math.inf)]),
        ([(0, 100, 2)], 2, 1, [(100, math.inf)]),
        ([(0, 100, 1)], 2, 1, [(0.0, math.inf)]),
        ([(0, 100, 1), (50, 150, 1)], 2, 1, [(0.0, 50), (100, math.inf)]),
        ([(10, 20, 2), (30, 40, 2)], 2, 2, [(0.0, 10), (20, 30), (40, math.inf)]),
        ([(0, 10, 1)], 1, 2, []),
    ],
)
def test_free_windows(held, cap, need, want):
    assert free_windows(held, cap, need) == want


@pytest.mark.parametrize(
    ("windows", "nodes", "duration", "want"),
    [
        ({"a": [(0.0, 50.0), (100.0, math.inf)]}, 1, 60, 100.0),
        ({"a": [(0.0, 50.0)], "b": [(20.0, math.inf)]}, 1, 40, 0.0),
        ({"a": [(0.0, 50.0), (80.0, math.inf)], "b": [(20.0, math.inf)]}, 2, 20, 20.0),
        ({"a": [(0.0, 50.0), (80.0, math.inf)], "b": [(20.0, math.inf)]}, 2, 60, 80.0),
        ({"a": [(0.0, 50.0)]}, 1, 60, None),
    ],
)
def test_earliest(windows, nodes, duration, want):
    assert earliest(windows, nodes, duration) == want


def test_an_alternative_in_the_owners_partition_preempts_after_gracetime(pool):
    jobs = [
        run("carol", "scavenger", 1, 2, (("a-gpu1", 2),), 0, limit=7200.0),
        run("carol", "scavenger", 2, 2, (("a-gpu2", 2),), 0, limit=7200.0),
        run("bob", "b-owner", 3, 2, (("b-gpu1", 2),), 0, account="projb"),
        run("carol", "c-owner", 4, 1, (("c-gpu1", 1),), 0),
        wait("alice", "shared", 10, 2, limit=3600.0, account="proja"),
    ]
    runs = history(("carol", "scavenger", 2, 5000.0), ("bob", "b-owner", 2, 9000.0), ("carol", "c-owner", 1, 9000.0))
    fc = predict(pool, jobs, runs, NOW)
    assert fc.predictions[10].start == NOW + 5000  # a borrower itself: behind carol's scavenger jobs
    alts = {a.what: a for a in explain(fc, 10).alternatives}
    assert alts["partition a-owner (tier guaranteed)"].start == NOW + 20  # preempts carol, after GraceTime
    assert alts["1 GPU instead of 2"].start == NOW + 5000
    assert "partition c-owner (tier guaranteed)" not in alts  # not proja's


def test_a_mig_slice_alternative_fits_a_free_instance(pool):
    jobs = [*OWNERS_FULL, wait("carol", "scavenger", 10, 1, limit=600.0)]
    fc = predict(pool, jobs, history(*OWNER_HISTORY), NOW)
    alts = {a.what: a for a in explain(fc, 10).alternatives}
    assert alts["a MIG slice (1g.5gb)"].start == NOW  # c-gpu1's MIG GPU is idle


@pytest.mark.parametrize("running", [(), (("a-gpu1", 2),)])
def test_a_job_no_node_can_hold_still_gets_its_alternatives(pool, running):
    """A job the model cannot place, alone in the queue (once an assertion inside ``why``): the forecast
    still plans what runs, so the smaller alternatives are fitted into it."""
    jobs = [wait("alice", "a-owner", 1, 6, account="proja")]
    if running:
        jobs.append(run("bob", "scavenger", 2, 2, running, ran=60.0, limit=3600.0, account="projb"))
    fc = predict(pool, jobs, Runtimes([]), NOW)
    ex = explain(fc, 1)
    assert ex.prediction.start is None and "have at most 4" in ex.prediction.note
    starts = {a.what: a.start for a in ex.alternatives}
    assert starts["1 GPU instead of 6"] is not None
