"""The node engine: hand-worked schedules, bad input, invariants over random workloads."""

from __future__ import annotations

from collections import defaultdict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurm_pool.sim.engine import Job, Policy
from slurm_pool.sim.nodes import Node, NodePolicy, NodeResult, simulate_nodes

POOL = NodePolicy("pool", grace=60, restart_overhead=0)
FIFO = NodePolicy("fifo", grace=60, restart_overhead=0, backfill=False)
PERIODIC = NodePolicy("periodic", grace=60, restart_overhead=0, checkpoint_on_signal=False, checkpoint_interval=30)
NO_PREEMPT = NodePolicy("no-preempt", preempt=False, restart_overhead=0)
DEDICATED = NodePolicy("dedicated", pooled=False)


def n(name: str, gpus: int, owner: str | None = None) -> Node:
    return Node(name, gpus, owner)


def j(i: str, project: str | None, t: float, work: float, gpus: int) -> Job:
    return Job(i, project, t, work, gpus)


def runs(r: NodeResult) -> dict[str, list[tuple[float, tuple[str, ...]]]]:
    """Each job's runs: (start, node names), in start order."""
    out: dict[str, list[tuple[float, tuple[str, ...]]]] = defaultdict(list)
    for p in sorted(r.schedule, key=lambda p: (p.start, p.job)):
        out[p.job].append((p.start, tuple(name for name, _ in p.nodes)))
    return dict(out)


# (id, nodes, jobs, policy, expected runs per job)
OWNERS_WAIT = NodePolicy("owners-wait", grace=60, restart_overhead=0, owners_borrow=False)

CASES = [
    (
        # a2 waits for a1 on a0: the pass starts no borrower on a's nodes (Slurm's main scheduler drops a
        # failed partition's nodes), and backfill keeps b, which would run past a2's start at 100, off them
        "a-waiting-owner-keeps-borrowers-off-its-nodes",
        [n("a0", 2, "a")],
        [j("a1", "a", 0, 100, 1), j("a2", "a", 1, 50, 2), j("b", None, 2, 200, 1)],
        OWNERS_WAIT,
        {"a1": [(0, ("a0",))], "a2": [(100, ("a0",))], "b": [(150, ("a0",))]},
    ),
    (
        # ... a borrower that ends before then backfills beside it
        "a-short-borrower-backfills-before-the-owners-reservation",
        [n("a0", 2, "a")],
        [j("a1", "a", 0, 100, 1), j("a2", "a", 1, 50, 2), j("b", None, 2, 50, 1)],
        OWNERS_WAIT,
        {"a1": [(0, ("a0",))], "a2": [(100, ("a0",))], "b": [(2, ("a0",))]},
    ),
    (
        # q backfills beside the blocked m at once, or at the next backfill pass (bf_interval 10)
        "backfill-at-once",
        [n("n0", 4)],
        [j("a", None, 0, 100, 3), j("m", None, 1, 50, 4), j("q", None, 2, 30, 1)],
        POOL,
        {"a": [(0, ("n0",))], "m": [(100, ("n0",))], "q": [(2, ("n0",))]},
    ),
    (
        "backfill-at-the-next-pass",
        [n("n0", 4)],
        [j("a", None, 0, 100, 3), j("m", None, 1, 50, 4), j("q", None, 2, 30, 1)],
        NodePolicy("bf10", grace=60, restart_overhead=0, bf_interval=10),
        {"a": [(0, ("n0",))], "m": [(100, ("n0",))], "q": [(10, ("n0",))]},
    ),
    (
        # best fit packs both 1-GPU jobs on n0, so the 2-GPU job finds n1 whole
        "best-fit-leaves-room",
        [n("n0", 2), n("n1", 2)],
        [j("a", None, 0, 100, 1), j("b", None, 10, 100, 1), j("c", None, 20, 100, 2)],
        POOL,
        {"a": [(0, ("n0",))], "b": [(10, ("n0",))], "c": [(20, ("n1",))]},
    ),
    (
        # the fuller node is the best fit even when it is not the first one
        "best-fit-prefers-the-fuller-node",
        [n("n0", 4), n("n1", 4)],
        [j("a", None, 0, 100, 3), j("b", None, 0, 100, 2), j("c", None, 10, 100, 1), j("d", None, 20, 100, 2)],
        POOL,
        {"a": [(0, ("n0",))], "b": [(0, ("n1",))], "c": [(10, ("n0",))], "d": [(20, ("n1",))]},
    ),
    (
        # 8 GPUs on 4-GPU nodes: two whole nodes; the second big job waits until two are whole
        "multi-node-waits-for-whole-nodes",
        [n("n0", 4), n("n1", 4), n("n2", 4)],
        [j("e", None, 0, 100, 1), j("m", None, 0, 500, 8), j("m2", None, 1, 50, 8)],
        FIFO,
        {"e": [(0, ("n0",))], "m": [(0, ("n1", "n2"))], "m2": [(500, ("n0", "n1"))]},
    ),
    (
        # m2 is reserved n0+n1 at 500: a 1-GPU job ending by then backfills on n0 ...
        "backfill-beside-a-multi-node-reservation",
        [n("n0", 4), n("n1", 4), n("n2", 4)],
        [j("e", None, 0, 100, 1), j("m", None, 0, 500, 8), j("m2", None, 1, 50, 8), j("q", None, 2, 400, 1)],
        POOL,
        {"e": [(0, ("n0",))], "m": [(0, ("n1", "n2"))], "m2": [(500, ("n0", "n1"))], "q": [(2, ("n0",))]},
    ),
    (
        # ... one that would run past 500 does not: it waits and takes n2 after m2 starts
        "no-backfill-past-the-reservation",
        [n("n0", 4), n("n1", 4), n("n2", 4)],
        [j("e", None, 0, 100, 1), j("m", None, 0, 500, 8), j("m2", None, 1, 50, 8), j("q", None, 2, 1000, 1)],
        POOL,
        {"e": [(0, ("n0",))], "m": [(0, ("n1", "n2"))], "m2": [(500, ("n0", "n1"))], "q": [(500, ("n2",))]},
    ),
    (
        # the hole before big's reserved start at 100: short (ends 52) fits, long (ends 503) does not
        "backfill-hole",
        [n("n0", 4)],
        [j("r", None, 0, 100, 3), j("big", None, 1, 100, 4), j("short", None, 2, 50, 1), j("long", None, 3, 500, 1)],
        POOL,
        {"r": [(0, ("n0",))], "big": [(100, ("n0",))], "short": [(2, ("n0",))], "long": [(200, ("n0",))]},
    ),
    (
        # without backfill the queue is strict FIFO: short waits behind big
        "no-backfill-is-fifo",
        [n("n0", 4)],
        [j("r", None, 0, 100, 3), j("big", None, 1, 100, 4), j("short", None, 2, 50, 1), j("long", None, 3, 500, 1)],
        FIFO,
        {"r": [(0, ("n0",))], "big": [(100, ("n0",))], "short": [(200, ("n0",))], "long": [(200, ("n0",))]},
    ),
    (
        # the owner of a0 signals x at 100 and starts a GraceTime later; x comes back when a0 is free
        "owner-preempts-with-grace",
        [n("a0", 4, "a"), n("b0", 4, "b")],
        [j("x", None, 0, 1000, 4), j("y", None, 0, 1000, 2), j("o", "a", 100, 50, 4)],
        POOL,
        {"x": [(0, ("a0",)), (210, ("a0",))], "y": [(0, ("b0",))], "o": [(160, ("a0",))]},
    ),
    (
        # two borrowers on a0: the one with less work at risk (x2) is the victim
        "least-work-at-risk-on-the-node",
        [n("a0", 4, "a")],
        [j("x1", None, 0, 1000, 2), j("x2", None, 50, 1000, 2), j("o", "a", 100, 10, 2)],
        POOL,
        {"x1": [(0, ("a0",))], "x2": [(50, ("a0",)), (170, ("a0",))], "o": [(160, ("a0",))]},
    ),
    (
        # of the owner's two nodes, it preempts on the one with less work at risk (a1)
        "least-work-at-risk-node",
        [n("a0", 2, "a"), n("a1", 2, "a")],
        [j("x", None, 0, 1000, 2), j("z", None, 50, 1000, 2), j("o", "a", 100, 10, 2)],
        POOL,
        {"x": [(0, ("a0",))], "z": [(50, ("a1",)), (170, ("a1",))], "o": [(160, ("a1",))]},
    ),
    (
        # an 8-GPU owner job takes both of its nodes back from one multi-node borrower
        "owner-takes-whole-nodes-back",
        [n("a0", 4, "a"), n("a1", 4, "a")],
        [j("x", None, 0, 1000, 8), j("o", "a", 100, 50, 8)],
        POOL,
        {"x": [(0, ("a0", "a1")), (210, ("a0", "a1"))], "o": [(160, ("a0", "a1"))]},
    ),
    (
        # beyond its share an owner borrows (o2 on u0); o3 waits, and at 100 is within the share again
        "beyond-the-share-borrows",
        [n("a0", 2, "a"), n("u0", 2)],
        [j("o1", "a", 0, 100, 2), j("o2", "a", 10, 200, 2), j("o3", "a", 20, 100, 2)],
        POOL,
        {"o1": [(0, ("a0",))], "o2": [(10, ("u0",))], "o3": [(100, ("a0",))]},
    ),
    (
        # without preemption the owner waits for the borrower on its node
        "no-preemption-waits",
        [n("a0", 2, "a"), n("u0", 2)],
        [j("x", None, 0, 300, 2), j("o1", "a", 10, 100, 2)],
        NO_PREEMPT,
        {"x": [(0, ("a0",))], "o1": [(300, ("a0",))]},
    ),
    (
        # dedicated: the borrower never runs, the owner's second job waits for its share
        "dedicated",
        [n("a0", 2, "a"), n("u0", 2)],
        [j("x", None, 0, 300, 2), j("o1", "a", 10, 100, 2), j("o2", "a", 20, 100, 2)],
        DEDICATED,
        {"o1": [(10, ("a0",))], "o2": [(110, ("a0",))]},
    ),
]


@pytest.mark.parametrize("nodes,jobs,policy,expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_hand_worked_schedules(nodes, jobs, policy, expected):
    r = simulate_nodes(nodes, jobs, policy, window=10_000)
    assert runs(r) == expected
    check_no_double_booking(nodes, r)


def test_preemption_accounting():
    jobs = [j("x", None, 0, 1000, 4), j("o", "a", 100, 50, 4)]
    nodes = [n("a0", 4, "a"), n("b0", 4, "b")]
    r = simulate_nodes(nodes, jobs, POOL, window=10_000)
    assert r.owner_waits == [60] and r.preemptions == 1 and r.owner_jobs_preempted == 0
    assert r.grace_gpu_seconds == pytest.approx(60 * 4) and r.lost_gpu_seconds == 0
    # periodic checkpoints every 30 s: 100 s of work keeps 90, 10 s x 4 GPUs are lost
    p = simulate_nodes(nodes, jobs, PERIODIC, window=10_000)
    assert p.lost_gpu_seconds == pytest.approx(40)
    assert p.useful_gpu_seconds == pytest.approx(1000 * 4 + 50 * 4)
    (victim,) = [x for x in p.schedule if x.outcome == "preempted"]
    assert (victim.signalled, victim.end) == (100, 160)


@pytest.mark.parametrize(("borrow", "second"), [(True, ("u0",)), (False, ("a0",))])
def test_owners_beyond_their_share_borrow_only_if_the_policy_says(borrow, second):
    policy = NodePolicy("pool", grace=5, restart_overhead=0, owners_borrow=borrow)
    r = simulate_nodes([n("a0", 2, "a"), n("u0", 2)], [j("o1", "a", 0, 100, 2), j("o2", "a", 0, 100, 2)], policy, 1000)
    assert runs(r)["o2"] == [(0 if borrow else 100, second)]


@pytest.mark.parametrize(("delay", "again"), [(0, 25), (30, 45)])
def test_a_requeued_job_is_held_for_the_requeue_delay(delay, again):
    """x is signalled at 10 and gone at 15; the owner's job runs 15-25.  x starts again when its
    node is free (25) or, held as Slurm holds a requeued job, at 15 + delay."""
    policy = NodePolicy("pool", grace=5, restart_overhead=0, requeue_delay=delay)
    r = simulate_nodes([n("a0", 2, "a")], [j("x", None, 0, 100, 2), j("o", "a", 10, 10, 2)], policy, window=1000)
    assert runs(r) == {"x": [(0, ("a0",)), (again, ("a0",))], "o": [(15, ("a0",))]}


@pytest.mark.parametrize(
    ("delay", "expected"),
    [
        # b waits for a's GPU: it starts when a ends (100), or once a's epilog and COMPLETING are over
        (0, {"a": [(0, ("n0",))], "b": [(100, ("n0",))], "o": [(160, ("a0",))]}),
        (2.5, {"a": [(0, ("n0",))], "b": [(102.5, ("n0",))], "o": [(162.5, ("a0",))]}),
    ],
)
def test_a_finished_jobs_gpus_come_free_after_the_release_delay(delay, expected):
    """b waits for a on n0; o (no preemption) waits for the borrower x on its own a0.  Each starts when
    the GPUs of the job before it are released: at its end, or ``delay`` later."""
    policy = NodePolicy("pool", grace=60, restart_overhead=0, release_delay=delay, preempt=False)
    nodes = [n("n0", 1), n("a0", 1, "a")]
    jobs = [j("a", None, 0, 100, 1), j("b", None, 10, 50, 1), j("x", None, 0, 160, 1), j("o", "a", 150, 10, 1)]
    r = simulate_nodes(nodes, jobs, policy, window=10_000)
    got = runs(r)
    assert {k: got[k] for k in expected} == expected
    assert r.useful_gpu_seconds == pytest.approx(100 + 50 + 160 + 10)  # completing time is not work


def test_a_victim_signalled_while_restarting_pays_only_the_restart_it_spent():
    jobs = [j("x", None, 0, 100, 1), j("o1", "a", 10, 10, 1), j("o2", "a", 60, 10, 1)]
    pol = NodePolicy("restart", grace=30, restart_overhead=20)
    r = simulate_nodes([n("a0", 1, "a")], jobs, pol, window=10_000)
    # x: 0..10 (signalled), back at 50 loading its checkpoint until 70, signalled at 60, back at 100
    assert runs(r)["x"] == [(0, ("a0",)), (50, ("a0",)), (100, ("a0",))]
    assert r.restart_gpu_seconds == pytest.approx(10 + 20)
    assert r.useful_gpu_seconds == pytest.approx(100 + 10 + 10) and r.lost_gpu_seconds == 0


def test_a_plain_policy_gets_backfill():
    jobs = [j("r", None, 0, 100, 3), j("big", None, 1, 100, 4), j("short", None, 2, 50, 1)]
    r = simulate_nodes([n("n0", 4)], jobs, Policy("plain", restart_overhead=0), window=1000)
    assert runs(r)["short"] == [(2, ("n0",))] and r.backfilled == 1


def test_a_time_limit_longer_than_the_work_closes_the_hole():
    jobs = [j("r", None, 0, 100, 3), j("big", None, 1, 100, 4), j("short", None, 2, 50, 1)]
    pol = NodePolicy("limit", restart_overhead=0, time_limit=200)
    r = simulate_nodes([n("n0", 4)], jobs, pol, window=1000)
    # short asks for 200 s: it would end at 202, after big's reserved start (200, from r's limit)
    assert runs(r)["short"] == [(200, ("n0",))]


BAD = [
    ([n("a", 2), n("a", 2)], [], "duplicate node name 'a'"),
    ([n("a", 0)], [], "node 'a' has gpus 0"),
    ([], [], "nodes: none given"),
    ([n("a", 2, "p")], [j("x", "q", 0, 1, 1)], "project 'q' owns no nodes"),
    ([n("a", 2, "p")], [j("x", "p", 0, 1, 3)], "job x: gpus 3 outside 1..2"),
    ([n("a", 2)], [j("x", None, 0, 0, 1)], "job x: work 0"),
    ([n("a", 2)], [j("x", None, 0, 1, 1), j("x", None, 5, 1, 1)], "job x: duplicate job id"),
]


@pytest.mark.parametrize("nodes,jobs,message", BAD)
def test_bad_input_is_named(nodes, jobs, message):
    with pytest.raises(ValueError, match=message):
        simulate_nodes(nodes, jobs, POOL, window=100)


def test_bad_policy_and_window_are_named():
    with pytest.raises(ValueError, match="window: 0"):
        simulate_nodes([n("a", 1)], [], POOL, window=0)
    with pytest.raises(ValueError, match="time_limit: -1"):
        simulate_nodes([n("a", 1)], [], NodePolicy("x", time_limit=-1), window=1)
    with pytest.raises(ValueError, match="bf_interval: -5"):
        simulate_nodes([n("a", 1)], [], NodePolicy("x", bf_interval=-5), window=1)


# -- invariants ------------------------------------------------------------------
def check_no_double_booking(nodes: list[Node], r: NodeResult) -> None:
    """Replay the schedule: no node ever holds more GPUs than it has."""
    size = {nd.name: nd.gpus for nd in nodes}
    deltas: dict[str, list[tuple[float, int]]] = defaultdict(list)
    for p in r.schedule:
        assert p.placed <= p.start <= p.end
        for name, c in p.nodes:
            deltas[name] += [(p.start, c), (p.end, -c)]
    for name, ds in deltas.items():
        held = 0
        for _, d in sorted(ds, key=lambda e: (e[0], e[1])):  # ends before starts at one instant
            held += d
            assert 0 <= held <= size[name], f"{name} holds {held} GPUs"


@st.composite
def workloads(draw, whole_node_owners: bool = False):  # type: ignore[no-untyped-def]
    size = draw(st.sampled_from([1, 2, 4]))
    owners = draw(st.lists(st.sampled_from(["a", "b", None]), min_size=1, max_size=5))
    sizes = [size if whole_node_owners else draw(st.sampled_from([1, 2, 4])) for _ in owners]
    nodes = [Node(f"n{i}", s, o) for i, (s, o) in enumerate(zip(sizes, owners, strict=True))]
    share = {o: sum(s for s, p in zip(sizes, owners, strict=True) if p == o) for o in set(owners) - {None}}
    total = sum(sizes)
    projects = sorted(share) + [None]
    jobs = []
    for i in range(draw(st.integers(1, 14))):
        p = draw(st.sampled_from(projects))
        if p is not None and whole_node_owners:
            g = size
        else:
            g = draw(st.integers(1, share[p] if p is not None else total))
        t = draw(st.sampled_from([0, 0, 10, 50, 100, 200]))  # bursts: several jobs at once
        jobs.append(Job(f"j{i}", p, t, draw(st.integers(1, 300)), g))
    return nodes, jobs


POLICIES = [
    POOL,
    FIFO,
    PERIODIC,
    NO_PREEMPT,
    DEDICATED,
    NodePolicy("overhead", grace=30, restart_overhead=20),
    NodePolicy("completing", grace=30, restart_overhead=0, release_delay=3),
    NodePolicy("bf-passes", grace=30, restart_overhead=0, bf_interval=7),
]


@settings(max_examples=300, deadline=None, derandomize=True)
@given(workloads(), st.sampled_from(POLICIES))
def test_invariants(w, policy):
    nodes, jobs = w
    r = simulate_nodes(nodes, jobs, policy, window=1e9)
    check_no_double_booking(nodes, r)
    by_id = {job.id: job for job in jobs}
    owner_of = {nd.name: nd.owner for nd in nodes}
    # work adds up: every run's GPU time until it ends or is signalled is useful, lost or restart
    ran = sum(((p.signalled if p.signalled is not None else p.end) - p.start) * by_id[p.job].gpus for p in r.schedule)
    assert r.useful_gpu_seconds + r.lost_gpu_seconds + r.restart_gpu_seconds == pytest.approx(ran)
    done = [p.job for p in r.schedule if p.outcome == "done"]
    assert len(done) == len(set(done))
    assert r.useful_gpu_seconds == pytest.approx(sum(by_id[i].work * by_id[i].gpus for i in done))
    assert len(r.owner_waits) == sum(job.project is not None for job in jobs) == len(r.owner_starts)
    if policy.pooled:
        assert r.borrower_jobs_done == sum(job.project is None for job in jobs)
    for p in r.schedule:
        job = by_id[p.job]
        if p.tier == "guaranteed":  # only on its own nodes, waiting at most one GraceTime
            assert {owner_of[name] for name, _ in p.nodes} == {job.project}
            assert p.start - p.placed <= policy.grace
        elif job.project is not None:  # borrowed by an owner: its share was full when placed
            held = sum(
                by_id[q.job].gpus
                for q in r.schedule
                if q.tier == "guaranteed" and by_id[q.job].project == job.project and q.placed <= p.placed < q.end
            )
            share = sum(nd.gpus for nd in nodes if nd.owner == job.project)
            assert held + job.gpus > share


@settings(max_examples=200, deadline=None, derandomize=True)
@given(workloads(whole_node_owners=True))
def test_owners_within_their_share_start_at_once(w):
    """Owner jobs of whole nodes: one that fits its share when it arrives is placed then (and runs a
    GraceTime later at most), however many borrowers or beyond-share owner jobs hold its nodes."""
    nodes, jobs = w
    r = simulate_nodes(nodes, jobs, POOL, window=1e9)
    by_id = {job.id: job for job in jobs}
    first = {}
    for p in sorted(r.schedule, key=lambda p: p.placed):
        first.setdefault(p.job, p)
    for job in jobs:
        if job.project is None:
            continue
        share = sum(nd.gpus for nd in nodes if nd.owner == job.project)
        held = sum(
            by_id[q.job].gpus
            for q in r.schedule
            if q.job != job.id
            and q.tier == "guaranteed"
            and by_id[q.job].project == job.project
            and q.placed <= job.arrival < q.end
        )
        if held + job.gpus <= share:
            assert first[job.id].placed == job.arrival and first[job.id].tier == "guaranteed"
            assert r.owner_waits  # reported


# -- slurm-pool simulate --nodes ---------------------------------------------------
def test_cli_nodes_places_on_the_spec_nodes():
    """proja owns two 2-GPU nodes: with a 1-GPU job on one, a 3-GPU job needs both whole nodes
    and waits 990 s, though 3 of proja's 4 GPUs are free (what the GPU-pool engine sees)."""
    import json
    from pathlib import Path

    from click.testing import CliRunner

    from slurm_pool.cli import cli

    spec = Path(__file__).resolve().parents[2] / "examples" / "pool.yaml"

    from tests.support.sacct import gpu_job

    sacct = json.dumps({"jobs": [gpu_job(1, "proja", 1000, 2000, 1), gpu_job(2, "proja", 1010, 1110, 3)]})
    out = {}
    for flag in ([], ["--nodes"]):
        res = CliRunner().invoke(cli, ["simulate", "--spec", str(spec), "--sacct", "-", "--json", *flag], input=sacct)
        assert res.exit_code == 0, res.output
        out[bool(flag)] = json.loads(res.output)
    assert out[False]["engine"] == "gpus" and out[True]["engine"] == "nodes"
    assert [r["owner_wait_p95_seconds"] for r in out[False]["results"]] == [0, 0, 0, 0]
    assert [r["owner_wait_p95_seconds"] for r in out[True]["results"]] == [990, 990, 990, 990]
    res = CliRunner().invoke(cli, ["simulate", "--spec", str(spec), "--sacct", "-", "--nodes"], input=sacct)
    assert res.exit_code == 0, res.output
    assert (
        "placed on 4 nodes (GPUs: a-gpu1 2, a-gpu2 2, b-gpu1 2, c-gpu1 1 + (3g.20gb, 2g.10gb, 2x1g.5gb))" in res.output
    )


@pytest.mark.parametrize(
    ("engine", "timeline"),
    [
        # x borrows both GPUs; o is placed at 10 (its GPUs count as guaranteed while x leaves), runs 15-25;
        # x, checkpointed at the signal, runs its last 90 s when its node is free (GPU engine: at 25) or its
        # requeue hold of 30 s is over (node engine: at 45).
        ("nodes", [(0, 0, 2), (10, 2, 0), (25, 0, 0), (45, 0, 2), (135, 0, 0)]),
        ("gpus", [(0, 0, 2), (10, 2, 0), (25, 0, 2), (115, 0, 0)]),
    ],
)
def test_busy_gpus_by_tier(engine, timeline):
    from slurm_pool.sim.engine import simulate

    jobs = [j("x", None, 0, 100, 2), j("o", "a", 10, 10, 2)]
    if engine == "nodes":
        policy = NodePolicy("pool", grace=5, restart_overhead=0, requeue_delay=30)
        r = simulate_nodes([n("a0", 2, "a")], jobs, policy, window=1000)
    else:
        r = simulate({"a": 2}, jobs, Policy("pool", grace=5, restart_overhead=0), window=1000)
    assert r.tier_timeline == timeline
