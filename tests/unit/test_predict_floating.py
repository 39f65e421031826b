"""Start-time prediction with floating guarantees: hand-worked forward runs of a small floating pool.

The pool (below): proja owns a-gpu1 (2 GPUs); projd is promised 2 GPUs and proje 2 H100s on the floating
partition over f-gpu1 and f-gpu2 (2 H100s each, nobody's); projx borrows.  The borrowed tiers' GraceTime
is 20 s and KillWait 30 s (the default).  A floating job in the guarantee's partition belongs to its account.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_pool.predict.explain import explain
from slurm_pool.predict.forward import LiveJob, predict
from slurm_pool.predict.pool import PoolModel
from slurm_pool.predict.runtimes import Finished, Runtimes
from slurm_pool.sim.engine import BORROWED, GUARANTEED
from slurm_pool.spec import load_spec_text

REPO = Path(__file__).resolve().parents[2]
NOW = 1_796_018_400.0
GRACE = 20.0
KILL_WAIT = 30.0

SPEC = """
version: 1
cluster: {name: floating, control_host: localhost}
node_groups:
  - {name: a, hosts: a-gpu1, cpus: 4, memory_mb: 8000, gpus: {model: A100-80GB, count: 2}}
  - {name: f, hosts: "f-gpu[1-2]", cpus: 4, memory_mb: 8000, gpus: {model: H100-80GB, count: 2}}
tiers:
  - {name: guaranteed, priority: 1000, preempt: [shared, scavenger, k8s-lend], preempt_mode: "off"}
  - {name: shared, priority: 500, preempt: [scavenger, k8s-lend], preempt_mode: requeue, grace_time: 20}
  - {name: scavenger, priority: 100, preempt_mode: requeue, grace_time: 20}
  - {name: k8s-lend, priority: 10, preempt_mode: requeue, grace_time: 10}
partitions:
  - {name: a-owner, nodes: [a], tier: guaranteed, priority_tier: 100, allow_accounts: [proja]}
  - {name: floating, nodes: [f], tier: guaranteed, priority_tier: 100}
  - {name: shared, nodes: [ALL], tier: shared, priority_tier: 50}
  - {name: scavenger, nodes: [ALL], tier: scavenger, priority_tier: 10, default: true}
  - {name: k8s-lend, nodes: [ALL], tier: k8s-lend, priority_tier: 1, allow_accounts: [k8s-bridge]}
projects:
  - {name: proja, users: [alice], owns: [a], tiers: [guaranteed, shared, scavenger], default_tier: guaranteed}
  - name: projd
    users: [dave]
    guarantee: {gres/gpu: 2}
    tiers: [guaranteed, shared, scavenger]
    default_tier: guaranteed
  - name: proje
    users: [erin]
    guarantee: {"gres/gpu:nvidia_h100_80gb_hbm3": 2}
    tiers: [guaranteed, shared, scavenger]
    default_tier: guaranteed
  - {name: projx, users: [xavier], tiers: [shared, scavenger], default_tier: scavenger}
  - {name: k8s-bridge, users: [slurmpool], tiers: [k8s-lend]}
guarantees: {tier: guaranteed, partition: floating, overflow: shared}
"""
#: The same pool without guarantees: projd and proje are plain borrowers, the floating partition borrowed.
PLAIN = (
    SPEC.replace("guarantees: {tier: guaranteed, partition: floating, overflow: shared}\n", "")
    .replace('    guarantee: {"gres/gpu:nvidia_h100_80gb_hbm3": 2}\n', "")
    .replace("    guarantee: {gres/gpu: 2}\n", "")
)
ACCOUNTS = {"alice": "proja", "dave": "projd", "erin": "proje", "xavier": "projx"}


@pytest.fixture(scope="module")
def floating() -> PoolModel:
    return PoolModel.from_spec(load_spec_text(SPEC))


@pytest.fixture(scope="module")
def plain() -> PoolModel:
    return PoolModel.from_spec(load_spec_text(PLAIN))


def run(user: str, partition: str, jid: int, gpus: int, node: str, limit: float | None = 7200.0) -> LiveJob:
    return LiveJob(jid, user, ACCOUNTS[user], partition, "running", gpus, nodes=((node, gpus),), start=NOW, limit=limit)


def wait(user: str, partition: str, jid: int, gpus: int, priority: int = 100) -> LiveJob:
    return LiveJob(jid, user, ACCOUNTS[user], partition, "pending", gpus, priority=priority, submit=NOW - 5)


def history(*items: tuple[str, str, int, float]) -> Runtimes:
    return Runtimes(Finished(u, p, g, NOW - 1000 + i, s) for i, (u, p, g, s) in enumerate(items))


#: Every GPU held: f-gpu1 and f-gpu2 by borrowers for 5000 s (7200 s in the late run: their time limits), a-gpu1
#: by alice in her own partition for 9000 s (no time limit: as long in the late run).
BORROWERS_FULL = [
    run("xavier", "shared", 1, 2, "f-gpu1"),
    run("xavier", "shared", 2, 2, "f-gpu2"),
    run("alice", "a-owner", 3, 2, "a-gpu1", limit=None),
]
RUNTIMES = [("xavier", "shared", 2, 5000.0), ("alice", "a-owner", 2, 9000.0), ("dave", "floating", 2, 1000.0)]

# (id, pool fixture, jobs, job asked about, (start, high) from now)
CASES = [
    (
        # within projd's guarantee: it preempts a borrower on a floating node, starting a GraceTime from now
        # (and KillWait more in the late run)
        "within-the-guarantee-preempts-borrowers",
        "floating",
        [*BORROWERS_FULL, wait("dave", "floating", 10, 2)],
        10,
        (GRACE, GRACE + KILL_WAIT),
    ),
    (
        # proje's H100 guarantee as well (the engine counts whole GPUs)
        "a-typed-guarantee-preempts-likewise",
        "floating",
        [*BORROWERS_FULL, wait("erin", "floating", 10, 2)],
        10,
        (GRACE, GRACE + KILL_WAIT),
    ),
    (
        # without guarantees the same job in that partition is a borrower: it waits for xavier's jobs
        # (5000 s expected; their 7200 s limits in the late run)
        "without-guarantees-it-waits-as-a-borrower",
        "plain",
        [*BORROWERS_FULL, wait("dave", "floating", 10, 2)],
        10,
        (5000.0, 7200.0),
    ),
    (
        # projd's second job, routed beyond its guarantee to shared, waits like a borrower, preempting nobody:
        # for the first GPUs to come free, its first job's f-gpu1 (1000 s expected; 7200 s, every limit, late)
        "beyond-the-guarantee-in-overflow-waits-as-a-borrower",
        "floating",
        [run("dave", "floating", 1, 2, "f-gpu1"), *BORROWERS_FULL[1:], wait("dave", "shared", 10, 2)],
        10,
        (1000.0, 7200.0),
    ),
    (
        # ... and one pending in the floating partition beyond the guarantee (QOSGrpGRES) likewise, though
        # xavier's job on f-gpu2 could be preempted: it waits for projd's running job
        "beyond-the-guarantee-in-its-qos-waits-for-it",
        "floating",
        [run("dave", "floating", 1, 2, "f-gpu1"), *BORROWERS_FULL[1:], wait("dave", "floating", 10, 2)],
        10,
        (1000.0, 7200.0),
    ),
    (
        # a running floating job is guaranteed: a borrower does not take its GPUs, and waits for the first
        # GPUs to come free (projd's job at 1000 s)
        "a-running-floating-job-holds-its-gpus",
        "floating",
        [run("dave", "floating", 1, 2, "f-gpu1"), *BORROWERS_FULL[1:], wait("xavier", "scavenger", 10, 2)],
        10,
        (1000.0, 7200.0),
    ),
]


@pytest.mark.parametrize("which,jobs,asked,want", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_hand_worked_floating_predictions(request, which, jobs, asked, want):
    pool = request.getfixturevalue(which)
    fc = predict(pool, jobs, history(*RUNTIMES), NOW)
    p = fc.predictions[asked]
    assert (p.start, p.high) == (NOW + want[0], NOW + want[1]), p.note


def test_the_floating_partition_is_a_guaranteed_queue_of_its_accounts(floating, plain):
    q = floating.queues["floating"]
    assert (q.engine_tier, q.owner, q.floating) == (GUARANTEED, None, True)
    assert floating.guarantees == (("projd", 2), ("proje", 2))
    assert [floating.project(q, a) for a in ("projd", "proje", "projx", "proja")] == ["projd", "proje", None, None]
    assert floating.qos(q, "projd") == "guaranteed-projd"
    assert floating.qos(floating.queues["shared"], "projd") == "shared"
    assert (plain.queues["floating"].engine_tier, plain.queues["floating"].floating, plain.guarantees) == (
        BORROWED,
        False,
        (),
    )


@pytest.mark.parametrize(
    "account,want",
    [
        ("projd", ["floating", "shared", "scavenger"]),
        ("proje", ["floating", "shared", "scavenger"]),
        ("proja", ["a-owner", "shared", "scavenger"]),  # the guaranteed tier, but no guarantee
        ("projx", ["shared", "scavenger"]),
    ],
)
def test_the_floating_partition_is_offered_to_floating_projects_only(floating, account, want):
    assert [q.name for q in floating.partitions_for(account)] == want


def test_a_seeded_floating_job_runs_guaranteed_for_its_account(floating):
    jobs = [run("dave", "floating", 1, 2, "f-gpu1"), *BORROWERS_FULL[1:], wait("xavier", "scavenger", 10, 2)]
    fc = predict(floating, jobs, history(*RUNTIMES), NOW)
    assert fc.result is not None
    assert {p.job: p.tier for p in fc.result.schedule if p.job in ("1", "2")} == {"1": GUARANTEED, "2": BORROWED}
    owner = next(c for c in explain(fc, 10).causes if c.kind == "owner")
    assert owner.text.startswith("guaranteed jobs (projd) hold the GPUs it needs on f-gpu1")
    assert owner.jobs == (1,)


def test_an_overflow_job_is_offered_its_guarantee(floating):
    """projd's job in shared waits as a borrower; moved into its guarantee's QOS it preempts after GraceTime."""
    jobs = [*BORROWERS_FULL, wait("dave", "shared", 10, 2)]
    fc = predict(floating, jobs, history(*RUNTIMES), NOW)
    assert fc.predictions[10].start == NOW + 5000
    alts = {a.what: a for a in explain(fc, 10).alternatives}
    moved = alts["partition floating (tier guaranteed)"]
    assert moved.start == NOW + GRACE
    assert moved.how == "scontrol update JobId=10 Partition=floating QOS=guaranteed-projd"


@pytest.mark.parametrize(
    "job,note",
    [
        (wait("dave", "floating", 10, 3), "asks for 3 GPUs; project projd's guarantee is 2 (its QOS's GrpTRES)"),
        (wait("xavier", "floating", 10, 5), "asks for 5 GPUs; the pool's nodes that are up have at most 2"),
    ],
)
def test_floating_jobs_the_model_cannot_place_say_why(floating, job, note):
    fc = predict(floating, [job], Runtimes([]), NOW, down={"a-gpu1", "f-gpu2"})
    assert (fc.predictions[10].start, fc.predictions[10].note) == (None, note)


def test_a_spec_without_guarantees_keeps_its_model():
    pool = PoolModel.from_spec(load_spec_text((REPO / "examples" / "pool.yaml").read_text()))
    assert pool.guarantees == () and pool.guarantee_tier is None
    assert not any(q.floating for q in pool.queues.values())
