"""The node engine on MIG-partitioned GPUs: hand-worked schedules, GPU-equivalents, bad input, invariants."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurm_pool.sim import history
from slurm_pool.sim.engine import Job, Policy, simulate
from slurm_pool.sim.nodes import Node, NodePolicy, NodeResult, nodes_from_spec, simulate_nodes
from slurm_pool.spec import load_spec

POOL = NodePolicy("pool", grace=60, restart_overhead=0)
FIFO = NodePolicy("fifo", grace=60, restart_overhead=0, backfill=False)
NO_PREEMPT = NodePolicy("no-preempt", preempt=False, restart_overhead=0)
DEDICATED = NodePolicy("dedicated", pooled=False, restart_overhead=0)
SPEC = Path(__file__).resolve().parents[2] / "examples" / "pool.yaml"

C_GPU1 = ("3g.20gb", "2g.10gb", "1g.5gb", "1g.5gb")  # the example spec's c-gpu1, GPU 0


def n(name: str, gpus: int, owner: str | None = None, *mig: tuple[str, ...], slices: int = 7) -> Node:
    return Node(name, gpus, owner, tuple(mig), slices)


def j(i: str, project: str | None, t: float, work: float, gpus: int, profile: str | None = None) -> Job:
    return Job(i, project, t, work, gpus, profile)


def runs(r: NodeResult) -> dict[str, list[tuple[float, tuple[tuple[str, int], ...]]]]:
    """Each job's runs: (start, (node, GPUs or instances) held), in start order."""
    out: dict[str, list[tuple[float, tuple[tuple[str, int], ...]]]] = defaultdict(list)
    for p in sorted(r.schedule, key=lambda p: (p.start, p.job)):
        out[p.job].append((p.start, p.nodes))
    return dict(out)


# (id, nodes, jobs, policy, expected runs per job)
CASES = [
    (
        # b waits for a's 1g.5gb though the bigger 3g.20gb sits idle: a typed request gets nothing larger
        "slice-waits-for-its-own-profile",
        [n("m0", 1, None, ("3g.20gb", "1g.5gb"))],
        [j("a", None, 0, 100, 1, "1g.5gb"), j("b", None, 10, 50, 1, "1g.5gb")],
        POOL,
        {"a": [(0, (("m0", 1),))], "b": [(100, (("m0", 1),))]},
    ),
    (
        # two instances of one profile on one node: the job holds both
        "instances-of-one-profile-together",
        [n("m0", 1, None, C_GPU1)],
        [j("a", None, 0, 100, 2, "1g.5gb"), j("b", None, 0, 100, 1, "1g.5gb")],
        POOL,
        {"a": [(0, (("m0", 2),))], "b": [(100, (("m0", 1),))]},
    ),
    (
        # n0 has one whole GPU beside the partitioned one: w2 waits for it, the 7g.40gb stays idle
        "whole-gpus-never-on-a-partitioned-gpu",
        [n("n0", 2, None, ("7g.40gb",))],
        [j("w1", None, 0, 100, 1), j("w2", None, 10, 100, 1)],
        POOL,
        {"w1": [(0, (("n0", 1),))], "w2": [(100, (("n0", 1),))]},
    ),
    (
        # 3 whole GPUs: whole nodes, largest first -- n1's 2 and n0's 1 whole GPU (its MIG GPU left out)
        "whole-nodes-are-their-whole-gpus",
        [n("n0", 2, None, C_GPU1), n("n1", 2)],
        [j("s", None, 0, 100, 1, "3g.20gb"), j("w", None, 0, 100, 3)],
        POOL,
        {"s": [(0, (("n0", 1),))], "w": [(0, (("n0", 1), ("n1", 2)))]},
    ),
    (
        # best fit per profile: the node with fewest free 1g.5gb instances (m1, after a) takes b
        "best-fit-per-profile",
        [n("m0", 1, None, ("1g.5gb",) * 3), n("m1", 1, None, C_GPU1)],
        [j("a", None, 0, 100, 1, "1g.5gb"), j("b", None, 10, 100, 1, "1g.5gb"), j("c", None, 20, 100, 2, "1g.5gb")],
        POOL,
        {"a": [(0, (("m1", 1),))], "b": [(10, (("m1", 1),))], "c": [(20, (("m0", 2),))]},
    ),
    (
        # the owner's 3g.20gb job signals the borrower x on its c0 at 100 and starts a GraceTime later; x,
        # needing both instances, comes back when o ends (210)
        "owner-slice-preempts-a-borrowers-slice",
        [n("c0", 1, "c", ("3g.20gb", "3g.20gb")), n("u0", 1)],
        [j("x", None, 0, 1000, 2, "3g.20gb"), j("y", None, 0, 1000, 1), j("o", "c", 100, 50, 1, "3g.20gb")],
        POOL,
        {"x": [(0, (("c0", 2),)), (210, (("c0", 2),))], "y": [(0, (("u0", 1),))], "o": [(160, (("c0", 1),))]},
    ),
    (
        # the owner's share of 1g.5gb is free: its job starts at once beside the borrower's 3g.20gb
        "owner-slice-beside-a-borrowed-profile",
        [n("c0", 1, "c", C_GPU1)],
        [j("x", None, 0, 1000, 1, "3g.20gb"), j("o", "c", 100, 50, 2, "1g.5gb")],
        POOL,
        {"x": [(0, (("c0", 1),))], "o": [(100, (("c0", 2),))]},
    ),
    (
        # without preemption the owner waits for the borrower's instance
        "owner-slice-no-preemption-waits",
        [n("c0", 1, "c", ("3g.20gb", "3g.20gb"))],
        [j("x", None, 0, 300, 2, "3g.20gb"), j("o", "c", 10, 50, 1, "3g.20gb")],
        NO_PREEMPT,
        {"x": [(0, (("c0", 2),))], "o": [(300, (("c0", 1),))]},
    ),
    (
        # the hole before big's reserved start at 100, on 1g.5gb instances: short (ends 52) fits, long does not
        "backfill-on-slices",
        [n("m0", 1, None, ("1g.5gb",) * 4)],
        [
            j("r", None, 0, 100, 3, "1g.5gb"),
            j("big", None, 1, 100, 4, "1g.5gb"),
            j("short", None, 2, 50, 1, "1g.5gb"),
            j("long", None, 3, 500, 1, "1g.5gb"),
        ],
        POOL,
        {
            "r": [(0, (("m0", 3),))],
            "big": [(100, (("m0", 4),))],
            "short": [(2, (("m0", 1),))],
            "long": [(200, (("m0", 1),))],
        },
    ),
    (
        # a whole-GPU head reserved on n0's whole GPU: a long slice job backfills on n0's instances
        "backfill-slices-beside-a-whole-gpu-reservation",
        [n("n0", 2, None, ("3g.20gb", "3g.20gb"))],
        [j("r", None, 0, 100, 1), j("big", None, 1, 100, 1), j("s", None, 2, 500, 1, "3g.20gb")],
        POOL,
        {"r": [(0, (("n0", 1),))], "big": [(100, (("n0", 1),))], "s": [(2, (("n0", 1),))]},
    ),
    (
        # ... and without backfill it waits behind big, FIFO
        "no-backfill-slices-wait-fifo",
        [n("n0", 2, None, ("3g.20gb", "3g.20gb"))],
        [j("r", None, 0, 100, 1), j("big", None, 1, 100, 1), j("s", None, 2, 500, 1, "3g.20gb")],
        FIFO,
        {"r": [(0, (("n0", 1),))], "big": [(100, (("n0", 1),))], "s": [(100, (("n0", 1),))]},
    ),
    (
        # dedicated: the owner's second 3g.20gb job waits for its own instance; the borrower never runs
        "dedicated-slices",
        [n("c0", 1, "c", C_GPU1), n("u0", 1, None, C_GPU1)],
        [j("x", None, 0, 100, 1, "3g.20gb"), j("o1", "c", 0, 100, 1, "3g.20gb"), j("o2", "c", 10, 100, 1, "3g.20gb")],
        DEDICATED,
        {"o1": [(0, (("c0", 1),))], "o2": [(100, (("c0", 1),))]},
    ),
    (
        # beyond its share of 3g.20gb the owner borrows one elsewhere
        "beyond-the-slice-share-borrows",
        [n("c0", 1, "c", C_GPU1), n("u0", 1, None, C_GPU1)],
        [j("o1", "c", 0, 100, 1, "3g.20gb"), j("o2", "c", 10, 100, 1, "3g.20gb")],
        POOL,
        {"o1": [(0, (("c0", 1),))], "o2": [(10, (("u0", 1),))]},
    ),
]


@pytest.mark.parametrize("nodes,jobs,policy,expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_hand_worked_schedules(nodes, jobs, policy, expected):
    r = simulate_nodes(nodes, jobs, policy, window=10_000)
    assert runs(r) == expected
    by_id = {job.id: job for job in jobs}
    assert all(p.profile == by_id[p.job].profile for p in r.schedule)
    check_no_double_booking(nodes, r)


def test_tiers_of_the_preemption():
    r = simulate_nodes(*CASES[5][1:3], POOL, window=10_000)
    tiers = {(p.job, p.start): (p.tier, p.outcome) for p in r.schedule}
    assert tiers == {
        ("x", 0): ("borrowed", "preempted"),
        ("o", 160): ("guaranteed", "done"),
        ("x", 210): ("borrowed", "done"),
        ("y", 0): ("borrowed", "done"),
    }
    (victim,) = [p for p in r.schedule if p.outcome == "preempted"]
    assert (victim.signalled, victim.end) == (100, 160)
    # GraceTime: the preemptor's instance, 3/7 of a GPU, for 60 s
    assert r.grace_gpu_seconds == pytest.approx(60 * 3 / 7)


# -- GPU-equivalents -----------------------------------------------------------------
def test_one_instance_counts_its_share_of_the_gpu():
    r = simulate_nodes([n("m0", 1, None, C_GPU1)], [j("a", None, 0, 100, 1, "3g.20gb")], POOL, window=1000)
    assert r.capacity == 1
    assert r.useful_gpu_seconds == pytest.approx(3 / 7 * 100)
    assert r.utilization == pytest.approx(3 / 7 * 100 / 1000)
    assert r.tier_gpu_seconds == pytest.approx({"borrowed": 3 / 7 * 100})
    # idle: the other instances (2 + 1 + 1 of 7 slices) while a runs, then all of them (exact: 1/7ths kept whole)
    assert r.idle_timeline == [(0, 4 / 7), (100, 1)]
    assert r.tier_timeline == [(0, 0, 3 / 7), (100, 0, 0)]


def test_gpu_equivalents_on_seven_and_four_slice_gpus():
    """An A30 has 4 compute slices: its 2g.12gb is half a GPU; owners' work is weighted too."""
    nodes = [n("m0", 2, "c", C_GPU1), n("a30", 1, None, ("2g.12gb", "1g.6gb", "1g.6gb"), slices=4)]
    jobs = [j("a", "c", 0, 100, 1, "2g.10gb"), j("b", None, 0, 100, 1, "2g.12gb"), j("w", "c", 0, 50, 1)]
    r = simulate_nodes(nodes, jobs, POOL, window=1000)
    assert r.capacity == 3
    assert r.useful_gpu_seconds == pytest.approx(2 / 7 * 100 + 2 / 4 * 100 + 50)
    assert r.owner_gpu_seconds == pytest.approx(2 / 7 * 100 + 50)
    assert r.tier_timeline[0] == pytest.approx((0, 2 / 7 + 1, 2 / 4))
    assert r.idle_timeline[0] == pytest.approx((0, 5 / 7 + 2 / 4))


def test_whole_gpu_replays_keep_whole_numbers():
    r = simulate_nodes([n("a0", 2, "a")], [j("x", None, 0, 100, 2), j("o", "a", 10, 10, 1)], POOL, window=1000)
    assert all(isinstance(v, int) for _, v in r.idle_timeline)
    assert all(isinstance(g, int) and isinstance(b, int) for _, g, b in r.tier_timeline)


# -- bad input -------------------------------------------------------------------------
BAD = [
    ([n("m0", 1, None, C_GPU1)], [j("x", None, 0, 1, 1, "4g.20gb")], "job x: profile '4g.20gb': no node has"),
    ([n("m0", 1, None, C_GPU1)], [j("x", None, 0, 1, 3, "1g.5gb")], r"job x: gpus 3 outside 1..2 \(the most 1g.5gb"),
    # one job's instances on one node: two nodes of 2 do not make 3
    (
        [n("m0", 1, None, C_GPU1), n("m1", 1, None, C_GPU1)],
        [j("x", None, 0, 1, 3, "1g.5gb")],
        "job x: gpus 3 outside 1..2",
    ),
    ([n("m0", 1, None, ("7g.40gb",))], [j("x", None, 0, 1, 1)], r"job x: gpus 1 outside 1..0"),
    ([n("m0", 2, "p", ("7g.40gb",))], [j("x", "p", 0, 1, 2)], r"job x: gpus 2 outside 1..1"),
    ([n("m0", 1, None, ("7g.40gb",), ("7g.40gb",))], [], "node 'm0' has 2 MIG layouts"),
    ([n("m0", 1, None, ("big",))], [], r"node 'm0' has MIG layout \('big',\): not all MIG profile names"),
    ([n("m0", 1, None, ("7g.40gb", "1g.5gb"))], [], "node 'm0' has MIG layout .*more than its 7 compute slices"),
    ([n("m0", 1, None, ("2g.12gb", "2g.12gb", "1g.6gb"), slices=4)], [], "more than its 4 compute slices"),
    ([n("m0", 1, None, ("1g.5gb",), slices=0)], [], "node 'm0' has slices_per_gpu 0"),
]


@pytest.mark.parametrize("nodes,jobs,message", BAD)
def test_bad_input_is_named(nodes, jobs, message):
    with pytest.raises(ValueError, match=message):
        simulate_nodes(nodes, jobs, POOL, window=100)


def test_the_gpu_pool_engine_refuses_mig_jobs():
    with pytest.raises(ValueError, match=r"job x: asks MIG instances \('3g.20gb'\)"):
        simulate({"a": 2}, [j("x", "a", 0, 10, 1, "3g.20gb")], Policy("p"), window=100)
    with pytest.raises(ValueError, match="job b: asks MIG instances"):
        simulate({"a": 2}, [], Policy("p"), window=100, backlog=iter([j("b", None, 0, 10, 1, "1g.5gb")]))


def test_an_empty_mig_gpu_offers_nothing_but_counts():
    nodes = [n("m0", 2, None, ())]
    r = simulate_nodes(nodes, [j("w", None, 0, 100, 1)], POOL, window=1000)
    assert r.capacity == 2 and r.idle_timeline == [(0, 0), (100, 1)]


# -- invariants ------------------------------------------------------------------
def check_no_double_booking(nodes: list[Node], r: NodeResult) -> None:
    """Replay the schedule: no node ever holds more whole GPUs, or instances of a profile, than it has."""
    size: dict[tuple[str, str | None], int] = {}
    for nd in nodes:
        size[(nd.name, None)] = nd.gpus - len(nd.mig)
        for p, c in Counter(p for layout in nd.mig for p in layout).items():
            size[(nd.name, p)] = c
    deltas: dict[tuple[str, str | None], list[tuple[float, int]]] = defaultdict(list)
    for p in r.schedule:
        assert p.placed <= p.start <= p.end
        for name, c in p.nodes:
            deltas[(name, p.profile)] += [(p.start, c), (p.end, -c)]
    for key, ds in deltas.items():
        held = 0
        for _, d in sorted(ds):  # ends before starts at one instant
            held += d
            assert 0 <= held <= size.get(key, 0), f"{key} holds {held}"


LAYOUTS = [
    (),
    (C_GPU1,),
    (("1g.5gb",) * 7,),
    (("3g.20gb", "3g.20gb"),),
    (C_GPU1, ("3g.20gb", "3g.20gb")),
    ((), ("2g.10gb", "2g.10gb", "2g.10gb", "1g.5gb")),
]


@st.composite
def mig_workloads(draw):  # type: ignore[no-untyped-def]
    nodes = []
    for i in range(draw(st.integers(1, 4))):
        gpus = draw(st.sampled_from([1, 2, 4]))
        mig = draw(st.sampled_from([lay for lay in LAYOUTS if len(lay) <= gpus]))
        nodes.append(Node(f"n{i}", gpus, draw(st.sampled_from(["a", "b", None])), mig))
    whole = {o: sum(nd.gpus - len(nd.mig) for nd in nodes if nd.owner == o) for o in ("a", "b", None)}
    most: dict[str, int] = {}
    for nd in nodes:
        for p, c in Counter(p for layout in nd.mig for p in layout).items():
            most[p] = max(most.get(p, 0), c)
    kinds = ([None] if sum(whole.values()) else []) + sorted(most)
    if not kinds:
        return nodes, []
    projects = sorted({nd.owner for nd in nodes if nd.owner is not None}) + [None]
    jobs = []
    for i in range(draw(st.integers(1, 14))):
        kind = draw(st.sampled_from(kinds))
        p = draw(st.sampled_from(projects))
        if kind is None:
            if p is not None and not whole[p]:
                p = None
            top = whole[p] if p is not None else sum(whole.values())
        else:
            top = most[kind]
        t = draw(st.sampled_from([0, 0, 10, 50, 100, 200]))
        jobs.append(Job(f"j{i}", p, t, draw(st.integers(1, 300)), draw(st.integers(1, top)), kind))
    return nodes, jobs


POLICIES = [
    POOL,
    FIFO,
    NO_PREEMPT,
    DEDICATED,
    NodePolicy("periodic", grace=60, restart_overhead=0, checkpoint_on_signal=False, checkpoint_interval=30),
    NodePolicy("overhead", grace=30, restart_overhead=20),
    NodePolicy("completing", grace=30, restart_overhead=0, release_delay=3),
    NodePolicy("limit", restart_overhead=0, time_limit=250),
]


@settings(max_examples=300, deadline=None, derandomize=True)
@given(mig_workloads(), st.sampled_from(POLICIES))
def test_invariants(w, policy):
    nodes, jobs = w
    r = simulate_nodes(nodes, jobs, policy, window=1e9)
    check_no_double_booking(nodes, r)
    by_id = {job.id: job for job in jobs}
    spg = {nd.name: nd.slices_per_gpu for nd in nodes}
    owner_of = {nd.name: nd.owner for nd in nodes}

    def weight(p):  # GPU-equivalents of one GPU or instance the run holds
        return 1 if p.profile is None else int(p.profile.split("g.")[0]) / spg[p.nodes[0][0]]

    ran = sum(
        ((p.signalled if p.signalled is not None else p.end) - p.start) * by_id[p.job].gpus * weight(p)
        for p in r.schedule
    )
    assert r.useful_gpu_seconds + r.lost_gpu_seconds + r.restart_gpu_seconds == pytest.approx(ran)
    done = [p for p in r.schedule if p.outcome == "done"]
    assert len({p.job for p in done}) == len(done)
    assert r.useful_gpu_seconds == pytest.approx(sum(by_id[p.job].work * by_id[p.job].gpus * weight(p) for p in done))
    for p in r.schedule:
        job = by_id[p.job]
        assert p.profile == job.profile
        if job.profile is not None:
            assert len(p.nodes) == 1 and p.nodes[0][1] == job.gpus  # instances of one node
        if p.tier == "guaranteed":
            assert {owner_of[name] for name, _ in p.nodes} == {job.project}
            assert p.start - p.placed <= policy.grace
    if policy.pooled:
        assert r.borrower_jobs_done == sum(job.project is None for job in jobs)
        assert r.unfinished_owner_jobs == 0
    for _, idle in r.idle_timeline:
        assert -1e-9 <= idle <= r.capacity + 1e-9
    for _, g, b in r.tier_timeline:
        assert g >= -1e-9 and b >= -1e-9 and g + b <= r.capacity + 1e-9


# -- the spec, history and the CLI ---------------------------------------------------
def test_nodes_from_the_example_spec():
    nodes = {nd.name: nd for nd in nodes_from_spec(load_spec(SPEC))}
    assert nodes["c-gpu1"].mig == (C_GPU1,) and nodes["c-gpu1"].slices_per_gpu == 7
    assert nodes["c-gpu1"].gpus == 2 and nodes["c-gpu1"].owner == "projc"
    assert all(nodes[h].mig == () for h in ("a-gpu1", "a-gpu2", "b-gpu1"))


def _job(job_id, account, gres, submit=10, start=20, end=30):
    return {
        "job_id": job_id,
        "account": account,
        "time": {"submission": submit, "start": start, "end": end},
        "tres": {"allocated": [{"type": "gres", "name": n, "count": c} for n, c in gres]},
    }


def test_mig_nodes_of_the_example_spec():
    mig = history.mig_nodes(load_spec(SPEC))
    assert mig.models == ("A100-40GB",)
    assert mig.most == {"3g.20gb": 1, "2g.10gb": 1, "1g.5gb": 2}
    assert mig.whole == {"proja": 4, "projb": 2, "projc": 1} and mig.whole_total == 7


@pytest.mark.parametrize(
    "gres,skipped,job",
    [
        # Slurm 22.05 names instances by memory, 23.02.6+ by profile: here both read 3g.20gb
        ([("gpu", 1), ("gpu:nvidia_a100_3g.20gb", 1)], None, ("projc", 1, "3g.20gb")),
        ([("gpu:nvidia_a100_1g.5gb", 2)], None, ("projc", 2, "1g.5gb")),
        ([("gpu", 1)], None, ("projc", 1, None)),
        ([("gpu", 2)], "more GPUs than the project owns", None),  # projc has one whole GPU
        ([("gpu:nvidia_a100_1g.5gb", 3)], "more MIG instances than a node has", None),
        ([("gpu:nvidia_a100_3g.20gb", 1), ("gpu:nvidia_a100_1g.5gb", 1)], "more than one MIG profile", None),
        ([("gpu", 2), ("gpu:nvidia_a100_3g.20gb", 1)], "MIG instances and whole GPUs", None),
        ([("gpu:nvidia_a100_1g.10gb", 1)], "MIG profile no node has", None),
        ([("gpu:nvidia_b999_5g.50gb", 1)], "MIG type no spec model knows", None),
    ],
)
def test_history_reads_mig_jobs(gres, skipped, job):
    keep = _job(1, "proja", [("gpu", 1)])
    data = {"jobs": [keep, _job(2, "projc", gres)]}
    spec = load_spec(SPEC)
    hist = history.jobs_from_sacct(data, history.owned_gpus(spec), mig=history.mig_nodes(spec))
    if skipped:
        assert dict(hist.skipped) == {skipped: 1} and len(hist.jobs) == 1
    else:
        assert (hist.jobs[1].project, hist.jobs[1].gpus, hist.jobs[1].profile) == job


def test_history_without_mig_counts_instances_as_gpus():
    data = {"jobs": [_job(1, "projc", [("gpu:nvidia_a100_3g.20gb", 1), ("gpu:nvidia_a100_1g.5gb", 1)])]}
    hist = history.jobs_from_sacct(data, history.owned_gpus(load_spec(SPEC)))
    assert [(j.gpus, j.profile) for j in hist.jobs] == [(2, None)]


def test_cli_nodes_places_mig_jobs_on_instances():
    """projc's three 1g.5gb jobs: two fit c-gpu1's two instances at once, the third waits 100 s for one.  The
    GPU engine (instances as GPUs) has projc's 2 GPUs for them, which come to the same waits."""
    from click.testing import CliRunner

    from slurm_pool.cli import cli

    jobs = [_job(i, "projc", [("gpu:nvidia_a100_1g.5gb", 1)], 1000, 1000, 1100) for i in (1, 2, 3)]
    sacct = json.dumps({"jobs": jobs})
    out = {}
    for flag in ([], ["--nodes"]):
        res = CliRunner().invoke(cli, ["simulate", "--spec", str(SPEC), "--sacct", "-", "--json", *flag], input=sacct)
        assert res.exit_code == 0, res.output
        out[bool(flag)] = json.loads(res.output)
    assert out[False]["mig_jobs"] == 0 and out[True]["mig_jobs"] == 3
    dedicated = {k: v["results"][0] for k, v in out.items()}
    assert dedicated[True]["owner_wait_p95_seconds"] == 100 and dedicated[False]["owner_wait_p95_seconds"] == 100
    # the window is the 100 s the jobs ran: two 1g.5gb instances (1/7 of a GPU each) in it, of 8 GPUs
    assert dedicated[True]["utilization"] == pytest.approx(2 * 100 / 7 / (8 * 100), abs=1e-4)
    assert dedicated[False]["utilization"] == pytest.approx(2 * 100 / (8 * 100), abs=1e-4)
    res = CliRunner().invoke(cli, ["simulate", "--spec", str(SPEC), "--sacct", "-", "--nodes"], input=sacct)
    assert res.exit_code == 0, res.output
    assert "c-gpu1 1 + (3g.20gb, 2g.10gb, 2x1g.5gb)" in res.output
    assert "3 jobs on MIG instances" in res.output


# -- sizing ----------------------------------------------------------------------------
def test_sizing_keeps_mig_jobs_placeable():
    """Only u1 has 1g.5gb instances: no pool tried goes without it (nobody's servers may go otherwise)."""
    from slurm_pool.sim.sizing import floors, pool_sizes

    nodes = [n("a0", 2, "a", ("3g.20gb", "3g.20gb")), n("a1", 2, "a"), n("u0", 1), n("u1", 1, None, C_GPU1)]
    whole = [j("o", "a", 0, 10, 2)]
    # a's biggest job needs 2 whole GPUs: a0 has only 1 beside its partitioned GPU, so a keeps both
    assert floors(nodes, whole)["a"] == 2
    assert any("u1" not in {nd.name for nd in pool} for pool in pool_sizes(nodes, whole))
    sizes = pool_sizes(nodes, [*whole, j("s", None, 0, 10, 2, "1g.5gb")])
    assert sizes and all("u1" in {nd.name for nd in pool} for pool in sizes)
