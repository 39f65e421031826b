"""The node engine run forward from a live state: seeds, pending order, per-job limits, the stop rule."""

from __future__ import annotations

from dataclasses import replace

import pytest

from slurm_pool.sim.engine import BORROWED, GUARANTEED, Job
from slurm_pool.sim.nodes import Node, NodePolicy, NodeResult, Placement, Seed, forward_nodes, simulate_nodes

POOL = NodePolicy("pool", grace=60, restart_overhead=0)


def j(i: str, project: str | None, work: float, gpus: int, t: float = 0, limit: float | None = None) -> Job:
    return Job(i, project, t, work, gpus, limit=limit)


def seed(
    i: str,
    project: str | None,
    work: float,
    where: dict[str, int],
    tier: str | None = None,
    free_at: float | None = None,
    limit: float | None = None,
    profile: str | None = None,
) -> Seed:
    """A seed holding ``where`` (node -> GPUs), in its project's tier unless ``tier`` is given."""
    job = Job(i, project, 0, work, sum(where.values()), profile, limit)
    return Seed(job, tier or (BORROWED if project is None else GUARANTEED), tuple(where.items()), free_at)


def starts(r: NodeResult) -> dict[str, list[tuple[float, str]]]:
    """Each job's runs as (start, outcome), in start order."""
    out: dict[str, list[tuple[float, str]]] = {}
    for p in sorted(r.schedule, key=lambda p: (p.start, p.job)):
        out.setdefault(p.job, []).append((p.start, p.outcome))
    return out


def first(r: NodeResult, job: str) -> Placement:
    return min((p for p in r.schedule if p.job == job), key=lambda p: p.start)


def test_an_empty_pool_starts_pending_jobs_as_a_replay_of_them_does():
    nodes = [Node("a0", 4, "a"), Node("u0", 4), Node("u1", 2)]
    jobs = [
        j("a1", "a", 100, 3),
        j("b1", None, 50, 4, t=0),
        j("b2", None, 30, 2, t=5),
        j("a2", "a", 40, 4, t=10),
        j("b3", None, 20, 4, t=12),
        j("b4", None, 10, 1, t=12),
        j("a3", "a", 10, 1, t=20),
    ]
    pending = sorted(jobs, key=lambda x: (x.arrival, x.id))
    fwd = forward_nodes(nodes, [], pending, POOL, 10_000)
    replay = simulate_nodes(nodes, jobs, POOL, 10_000)

    def firsts(r: NodeResult) -> dict[str, tuple[str, float, float, tuple[tuple[str, int], ...]]]:
        return {x.id: (p.tier, p.placed, p.start, p.nodes) for x in jobs for p in [first(r, x.id)]}

    assert firsts(fwd) == firsts(replay)
    # a2, beyond a's share, borrows u0 when b1 ends; a3 preempts b4, backfilled on a0 at 12, and waits one grace
    assert (firsts(fwd)["a2"][:3], firsts(fwd)["a3"][:3]) == ((BORROWED, 50, 50), (GUARANTEED, 20, 80))
    assert max(p.start for p in fwd.schedule) < max(p.end for p in replay.schedule)  # it stopped early


# (id, nodes, seeds, pending, expected runs per job as (start, outcome))
CASES = [
    (
        # b needs 3 GPUs: s1 ending at 30 frees only 2, s2 ending at 50 the rest
        "borrower-waits-for-the-seed-that-frees-enough",
        [Node("u0", 4)],
        [seed("s1", None, 30, {"u0": 2}), seed("s2", None, 50, {"u0": 2})],
        [j("b", None, 10, 3)],
        {"s1": [(0, "done")], "s2": [(0, "done")], "b": [(50, "running")]},
    ),
    (
        # z is given first (higher priority): it starts when the seed ends at 5, a (whose id sorts first) after it
        "pending-order-is-the-callers",
        [Node("u0", 1)],
        [seed("s", None, 5, {"u0": 1})],
        [j("z", None, 10, 1), j("a", None, 10, 1)],
        {"s": [(0, "done")], "z": [(5, "done")], "a": [(15, "running")]},
    ),
    (
        # the owner's job preempts the borrowed seed on its node at 0 and starts one grace (60) later
        "owner-preempts-a-borrowed-seed",
        [Node("a0", 2, "a")],
        [seed("b", None, 1000, {"a0": 2})],
        [j("a1", "a", 100, 2)],
        {"b": [(0, "preempted")], "a1": [(60, "running")]},
    ),
    (
        # x was signalled before 0 and leaves at 5: requeued at the front, it runs again before y
        "a-signalled-seed-is-requeued-at-the-front",
        [Node("u0", 2)],
        [seed("x", None, 20, {"u0": 2}, free_at=5)],
        [j("y", None, 10, 2)],
        {"x": [(0, "preempted"), (5, "done")], "y": [(25, "running")]},
    ),
    (
        # ... and the run goes on until it has run again, though nothing else is pending
        "a-signalled-seed-is-waited-for-until-it-runs-again",
        [Node("u0", 2)],
        [seed("x", None, 20, {"u0": 2}, free_at=5)],
        [],
        {"x": [(0, "preempted"), (5, "running")]},
    ),
    (
        # the guaranteed seed fills a's share: a2 runs beyond it, borrowed on u0, at once
        "a-guaranteed-seed-counts-in-its-projects-share",
        [Node("a0", 2, "a"), Node("u0", 2)],
        [seed("g", "a", 50, {"a0": 2})],
        [j("a2", "a", 10, 2)],
        {"g": [(0, "running")], "a2": [(0, "running")]},
    ),
    (
        # b arrives (is eligible) only at 20; c, given with an arrival before 0, is eligible at once
        "an-arrival-delays-eligibility",
        [Node("u0", 1)],
        [],
        [j("b", None, 10, 1, t=20), j("c", None, 50, 1, t=-100)],
        {"c": [(0, "done")], "b": [(50, "running")]},
    ),
    (
        # the MIG seed holds both 3g.20gb instances of m0 until 40; the whole-GPU job takes the whole GPU at 0
        "a-mig-seed-holds-its-instances",
        [Node("m0", 2, mig=(("3g.20gb", "3g.20gb"),))],
        [seed("m", None, 40, {"m0": 2}, profile="3g.20gb")],
        [j("p", None, 10, 1), replace(j("q", None, 10, 1), profile="3g.20gb")],
        {"m": [(0, "done")], "p": [(0, "done")], "q": [(40, "running")]},
    ),
]


@pytest.mark.parametrize("nodes,seeds,pending,expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_hand_worked_forward_runs(nodes, seeds, pending, expected):
    assert starts(forward_nodes(nodes, seeds, pending, POOL, 10_000)) == expected


def test_tiers_and_signals_of_seeds_and_preemptors():
    r = forward_nodes([Node("a0", 2, "a")], [seed("b", None, 1000, {"a0": 2})], [j("a1", "a", 100, 2)], POOL, 10_000)
    assert (first(r, "a1").tier, first(r, "a1").placed) == (GUARANTEED, 0)
    assert (first(r, "b").tier, first(r, "b").signalled) == (BORROWED, 0)
    r = forward_nodes([Node("u0", 2)], [seed("x", None, 20, {"u0": 2}, free_at=5)], [], POOL, 10_000)
    assert first(r, "x").signalled == 5 - POOL.grace  # signalled one grace before it leaves


# (id, the seed's remaining limit, c's work and limit, c's start): the head h (4 GPUs) waits for the seed
# (2 of u0's 4 GPUs, really ending at 200); c (2 GPUs) may backfill beside it only if its limit ends before
# h's reservation, which the seed's limit (else its real end) sets
LIMITS = [
    ("limit-ends-before-the-reservation", 100, 30, 50, 0),
    ("limit-too-long-though-work-is-short", 100, 30, 150, 210),
    ("the-seed-without-a-limit-reserves-at-its-real-end", None, 30, 150, 0),
    ("no-limit-backfill-reads-the-work", 100, 30, None, 0),
    ("work-longer-than-the-reservation", 100, 120, None, 210),
]


@pytest.mark.parametrize("seed_limit,work,limit,expected", [c[1:] for c in LIMITS], ids=[c[0] for c in LIMITS])
def test_backfill_reads_the_jobs_own_limits(seed_limit, work, limit, expected):
    seeds = [seed("s", None, 200, {"u0": 2}, limit=seed_limit)]
    r = forward_nodes([Node("u0", 4)], seeds, [j("h", None, 10, 4), j("c", None, work, 2, limit=limit)], POOL, 10_000)
    assert (first(r, "h").start, first(r, "c").start) == (200, expected)


def test_a_policy_limit_gives_way_to_the_jobs_own():
    policy = replace(POOL, time_limit=1000)  # the seed's own 100 wins: c's own 50 ends before it
    seeds = [seed("s", None, 200, {"u0": 2}, limit=100)]
    pending = [j("h", None, 10, 4), j("c", None, 30, 2, limit=50)]
    assert first(forward_nodes([Node("u0", 4)], seeds, pending, policy, 10_000), "c").start == 0
    pending = [j("h", None, 10, 4), j("c", None, 30, 2)]  # c's limit is the policy's 1000
    assert first(forward_nodes([Node("u0", 4)], seeds, pending, policy, 10_000), "c").start == 210


@pytest.mark.parametrize(
    ("horizon", "expected"),
    [
        (50, {"s": [(0, "running")]}),
        (99, {"s": [(0, "running")]}),
        (100, {"s": [(0, "done")], "p": [(100, "running")]}),
    ],
)
def test_the_run_stops_at_the_horizon(horizon, expected):
    r = forward_nodes([Node("u0", 1)], [seed("s", None, 100, {"u0": 1})], [j("p", None, 10, 1)], POOL, horizon)
    assert starts(r) == expected
    assert max(p.end for p in r.schedule) == min(horizon, 100)  # the run stops at the horizon or at p's start


def test_nothing_pending_stops_at_once():
    r = forward_nodes([Node("u0", 2)], [seed("s", None, 100, {"u0": 1})], [], POOL, 10_000)
    assert [(p.job, p.start, p.end, p.outcome) for p in r.schedule] == [("s", 0, 0, "running")]


U = [Node("u0", 2), Node("a0", 2, "a")]
BAD = [
    ([seed("s", None, 10, {"zz": 1})], [], "running job 's': nodes: unknown node 'zz'"),
    ([seed("s", None, 10, {"u0": 3})], [], "running job 's': nodes: 3 on node 'u0', outside 1..2"),
    ([seed("s", None, 10, {"u0": 2}), seed("t", None, 10, {"u0": 1})], [], "running job 't': nodes: 1 on node 'u0'"),
    ([seed("s", None, 10, {"u0": 0, "a0": 1})], [], "running job 's': nodes: 0 on node 'u0', outside 1..2"),
    ([seed("s", None, 10, {"u0": 1}, profile="1g.5gb")], [], "job s: profile '1g.5gb': no node has MIG"),
    ([seed("s", None, 10, {"u0": 1}), seed("s", None, 10, {"a0": 1})], [], "job s: duplicate job id"),
    ([seed("s", None, 10, {"u0": 1})], [j("s", None, 10, 1)], "job s: duplicate job id"),
    ([], [j("p", None, 10, 1), j("p", None, 10, 1)], "job p: duplicate job id"),
    ([seed("s", None, 10, {"u0": 1}, tier=GUARANTEED)], [], "running job 's': tier 'guaranteed': project None owns"),
    ([seed("s", "zz", 10, {"u0": 1}, tier=BORROWED)], [], "job s: project 'zz' owns no nodes"),
    ([seed("s", None, 10, {"u0": 1}, tier="spot")], [], "running job 's': tier 'spot' is not"),
    ([seed("s", None, 10, {"u0": 1}, free_at=-1)], [], "running job 's': free_at -1"),
    ([seed("s", None, 10, {"u0": 1}, limit=-5)], [], "job s: limit -5"),
    ([], [j("p", None, 10, 1, limit=0)], "job p: limit 0"),
    ([], [j("p", None, 0, 1)], "job p: work 0"),
    ([Seed(j("s", None, 10, 2), BORROWED, (("u0", 1),))], [], "running job 's': nodes: 1 held in all, not its gpus 2"),
    (
        [Seed(j("s", None, 10, 2), BORROWED, (("u0", 1), ("u0", 1)))],
        [],
        "running job 's': nodes: node 'u0' given twice",
    ),
]


@pytest.mark.parametrize("seeds,pending,message", BAD)
def test_bad_seeds_and_pending_jobs_are_named(seeds, pending, message):
    with pytest.raises(ValueError, match="^" + message.replace("(", r"\(").replace(".", r"\.")):
        forward_nodes(U, seeds, pending, POOL, 100)


@pytest.mark.parametrize("horizon", [0, -1, float("inf"), float("nan")])
def test_a_bad_horizon_is_named(horizon):
    with pytest.raises(ValueError, match="horizon"):
        forward_nodes(U, [], [j("p", None, 10, 1)], POOL, horizon)


def test_a_seed_past_its_limit_is_expected_to_end_at_any_moment():
    # limit 0: backfill expects s's GPUs now, so h's reservation is now and c (ending at 30) may not go first
    seeds = [seed("s", None, 200, {"u0": 2}, limit=0)]
    r = forward_nodes([Node("u0", 4)], seeds, [j("h", None, 10, 4), j("c", None, 30, 2)], POOL, 10_000)
    assert (first(r, "h").start, first(r, "c").start) == (200, 210)


def test_a_mig_seed_names_a_node_without_its_instances():
    nodes = [Node("m0", 2, mig=(("3g.20gb",),)), Node("u0", 2)]
    with pytest.raises(ValueError, match="^running job 's': nodes: no 3g.20gb instances on node 'u0'"):
        forward_nodes(nodes, [seed("s", None, 10, {"u0": 1}, profile="3g.20gb")], [], POOL, 100)


def test_a_seed_ending_before_its_limit_moves_the_reservation_earlier():
    # At 0, h's reservation is u0 at 100 (u1 waits for s1a's limit, 300) and d backfills on u2.  s1a ends at
    # 20, before its limit: u1 now frees at 50 (s1b's limit), earlier, so c (ending at 100) stays off u1 and
    # starts on u2 when d ends at 30; with the reservation left at 100 it would start on u1 at 20.
    nodes = [Node("u0", 2), Node("u1", 2), Node("u2", 1)]
    seeds = [
        seed("s0", None, 100, {"u0": 2}, limit=100),
        seed("s1a", None, 20, {"u1": 1}, limit=300),
        seed("s1b", None, 300, {"u1": 1}, limit=50),
    ]
    r = forward_nodes(nodes, seeds, [j("h", None, 10, 2), j("d", None, 30, 1), j("c", None, 80, 1)], POOL, 10_000)
    assert [(x, first(r, x).start, first(r, x).nodes) for x in "hdc"] == [
        ("h", 100, (("u0", 2),)),
        ("d", 0, (("u2", 1),)),
        ("c", 30, (("u2", 1),)),
    ]
