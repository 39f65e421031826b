"""The node engine lending whole idle nodes to the inference tier: hand-worked replays, bad input, invariants."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from slurm_pool.cli import cli
from slurm_pool.sim.engine import GUARANTEED, Job
from slurm_pool.sim.nodelend import CLASSES, OVERFLOW, LendRule
from slurm_pool.sim.nodes import Node, NodePolicy, NodeResult, simulate_nodes
from tests.support.sacct import gpu_job

PERIOD = 100.0
OWNERS_ONLY = frozenset({GUARANTEED})
NOT_BORROWERS = frozenset({GUARANTEED, OVERFLOW})


def pol(**lend: object) -> NodePolicy:
    rule = LendRule(**{"period": PERIOD, "grace": 10.0, **lend})  # type: ignore[arg-type]
    return NodePolicy("lend", grace=60, restart_overhead=0, lend=rule)


def starts(r: NodeResult) -> dict[str, tuple[float, tuple[str, ...]]]:
    return {p.job: (p.start, tuple(name for name, _ in p.nodes)) for p in r.schedule}


def leases(r: NodeResult) -> list[tuple[str, float, float, str]]:
    assert r.lending is not None
    return sorted(r.lending.leases)


TWO = [Node("a0", 2, "A"), Node("x0", 2)]

# (id, nodes, jobs, lend rule, window, job starts, leases)
CASES = [
    (
        # nothing to do: both nodes lent at the first tick, for the whole window
        "idle-nodes-are-lent",
        TWO,
        [],
        {},
        1000.0,
        {},
        [("a0", 0, 1000, "lent"), ("x0", 0, 1000, "lent")],
    ),
    (
        # the owner's job preempts the placeholder on its own node and starts after its grace; the
        # node is lent again at the first tick that finds it idle
        "an-owner-reclaims-its-node",
        TWO,
        [Job("o", "A", 50, 100, 1)],
        {},
        400.0,
        {"o": (60, ("a0",))},
        [("a0", 0, 50, "reclaimed"), ("a0", 200, 400, "lent"), ("x0", 0, 400, "lent")],
    ),
    (
        # a spot job (its tier does not preempt k8s-lend) waits for the window to close
        "a-spot-job-waits-for-the-rebalancer",
        TWO,
        [Job("s", None, 50, 100, 1)],
        {"preemptors": OWNERS_ONLY, "window": lambda t: t < 300},
        600.0,
        {"s": (300, ("a0",))},
        [("a0", 0, 300, "given back"), ("x0", 0, 300, "given back")],
    ),
    (
        # a borrower whose tier preempts placeholders takes the best-fitting lent node
        "a-borrower-reclaims-when-its-tier-may",
        [Node("a0", 4, "A"), Node("x0", 2)],
        [Job("b", None, 50, 100, 2)],
        {},
        300.0,
        {"b": (60, ("x0",))},
        [("a0", 0, 300, "lent"), ("x0", 0, 50, "reclaimed"), ("x0", 200, 300, "lent")],
    ),
    (
        # demand for 2 GPUs: one node lent, nobody's first; demand 0 from 200: given back
        "lending-follows-demand",
        TWO,
        [],
        {"demand": lambda t: 2.0 if t < 200 else 0.0},
        400.0,
        {},
        [("x0", 0, 200, "given back")],
    ),
    (
        # a job bigger than a node takes lent whole nodes
        "a-multi-node-job-reclaims-whole-nodes",
        TWO,
        [Job("m", None, 50, 100, 4)],
        {"max_nodes": 2},
        300.0,
        {"m": (60, ("a0", "x0"))},
        [("a0", 0, 50, "reclaimed"), ("a0", 200, 300, "lent"), ("x0", 0, 50, "reclaimed"), ("x0", 200, 300, "lent")],
    ),
    (
        # the owner's second job takes the lent node, not the borrower's GPUs: placeholders go first
        "placeholders-before-borrowers",
        [Node("a0", 2, "A"), Node("a1", 2, "A")],
        [Job("b", None, 0, 250, 2), Job("o", "A", 50, 100, 2)],
        {"max_nodes": 1},
        300.0,
        {"b": (0, ("a0",)), "o": (60, ("a1",))},
        [("a1", 0, 50, "reclaimed"), ("a1", 200, 300, "lent")],
    ),
    (
        # m needs x0 too, busy until 100: its backfill reservation counts the lent x1 as free now (m may
        # preempt the placeholder), so the long q may not take x2 before m; m starts at 100 + grace
        "a-reservation-counts-lent-nodes-its-head-may-reclaim",
        [Node("x0", 2), Node("x1", 2), Node("x2", 2)],
        [Job("r", None, 0, 100, 2), Job("m", None, 10, 50, 6), Job("q", None, 20, 500, 2)],
        {"max_nodes": 1},
        300.0,
        {"r": (0, ("x0",)), "m": (110, ("x0", "x1", "x2")), "q": (160, ("x0",))},
        [("x1", 0, 100, "reclaimed"), ("x1", 200, 660, "lent")],
    ),
    (
        # a MIG node is lent whole (its whole GPU and its instances); the owner's slice job takes it back,
        # and x0 stays lent: a whole-GPU unit is not a 3g.20gb instance
        "a-slice-job-reclaims-a-mig-node",
        [Node("c0", 2, "C", (("3g.20gb", "2g.10gb", "1g.5gb", "1g.5gb"),)), Node("x0", 2)],
        [Job("s", "C", 50, 100, 1, "3g.20gb")],
        {},
        300.0,
        {"s": (60, ("c0",))},
        [("c0", 0, 50, "reclaimed"), ("c0", 200, 300, "lent"), ("x0", 0, 300, "lent")],
    ),
    (
        # at most max_nodes
        "max-nodes",
        TWO,
        [],
        {"max_nodes": 1},
        200.0,
        {},
        [("x0", 0, 200, "lent")],
    ),
]


@pytest.mark.parametrize(
    ("nodes", "jobs", "rule", "window", "expected", "expected_leases"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_lending_schedules(nodes, jobs, rule, window, expected, expected_leases):
    r = simulate_nodes(nodes, jobs, pol(**rule), window)
    assert starts(r) == expected
    assert leases(r) == [(n, float(a), float(b), how) for n, a, b, how in expected_leases]
    assert r.preemptions == 0  # a placeholder is not a job of Slurm's users


def test_lent_and_reclaim_counts():
    r = simulate_nodes(TWO, [Job("o", "A", 50, 100, 1)], pol(), 400.0)
    assert r.lending is not None
    assert (r.lending.lends, r.lending.reclaims, r.lending.given_back) == (3, 1, 0)
    assert r.lending.lent_gpu_seconds == 2 * 50 + 2 * 200 + 2 * 400
    assert r.lending.served_gpu_seconds == r.lending.lent_gpu_seconds  # no demand given: all of it is wanted


def test_served_is_demand_met():
    r = simulate_nodes(TWO, [], pol(demand=lambda t: 3.0), 100.0)
    assert r.lending is not None
    assert r.lending.lent_gpu_seconds == 400  # two 2-GPU nodes cover 3 GPUs
    assert (r.lending.served_gpu_seconds, r.lending.demand_gpu_seconds) == (300, 300)


def test_lent_gpus_are_not_busy_gpus():
    r = simulate_nodes(TWO, [], pol(), 100.0)
    assert r.utilization == 0
    assert all(busy == 0 and g == 0 for _, g, busy in r.tier_timeline)


def test_no_lending_without_a_rule():
    r = simulate_nodes(TWO, [Job("o", "A", 50, 100, 1)], NodePolicy("plain", grace=60), 400.0)
    assert r.lending is None


@pytest.mark.parametrize(
    ("rule", "message"),
    [
        ({"period": 0}, "lend.period: 0 is not positive"),
        ({"grace": -1}, "lend.grace: -1 is negative"),
        ({"max_nodes": -1}, "lend.max_nodes: -1 is negative"),
        ({"preemptors": frozenset({"spot"})}, "lend.preemptors: ['spot'] are not job classes"),
    ],
)
def test_bad_rules(rule, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        LendRule(**rule)


jobs_st = st.lists(
    st.tuples(
        st.sampled_from(["A", "B", None]),
        st.integers(0, 2000),
        st.integers(1, 400),
        st.integers(1, 8),
    ),
    max_size=30,
)


@settings(max_examples=150, deadline=None)
@given(
    jobs_st,
    st.sampled_from([CLASSES, NOT_BORROWERS, OWNERS_ONLY, frozenset()]),
    st.integers(0, 6),
    st.booleans(),
)
def test_no_gpu_is_used_by_both_sides(raw, preemptors, demand, windowed):
    """A lent node runs no job while lent, every lease is disjoint, and owners all finish when they may
    take lent nodes back or the window closes."""
    nodes = [
        Node("a0", 4, "A"),
        Node("a1", 2, "A"),
        Node("b0", 4, "B", (("3g.20gb", "3g.20gb"),)),
        Node("x0", 4),
        Node("x1", 2),
    ]
    jobs = []
    for i, (p, t, w, g) in enumerate(raw):
        if p == "B" and g % 3 == 0:  # a slice job on b0's MIG GPU
            jobs.append(Job(f"j{i}", p, float(t), float(w), 1 + g % 2, "3g.20gb"))
            continue
        limit = {"A": 6, "B": 3, None: 16}[p]
        jobs.append(Job(f"j{i}", p, float(t), float(w), min(g, limit)))
    window = (lambda t: (t // 500) % 2 == 0) if windowed else None
    rule = LendRule(period=70.0, grace=10.0, preemptors=preemptors, demand=lambda t: float(demand), window=window)
    r = simulate_nodes(nodes, jobs, NodePolicy("p", grace=30, restart_overhead=0, lend=rule), 2500.0)
    assert r.lending is not None
    if windowed or {GUARANTEED, OVERFLOW} <= preemptors:  # else an owner may wait on a lent node for good
        assert r.unfinished_owner_jobs == 0
    by_node: dict[str, list[tuple[float, float, str]]] = {}
    for name, a, b, _ in r.lending.leases:
        by_node.setdefault(name, []).append((a, b, "lease"))
    for p in r.schedule:
        for name, _ in p.nodes:
            by_node.setdefault(name, []).append((p.placed, p.end, p.job))
    for name, spans in by_node.items():
        leased = sorted((a, b) for a, b, who in spans if who == "lease")
        for (_, b1), (a2, _) in zip(leased, leased[1:], strict=False):
            assert b1 <= a2, f"{name}: leases overlap"
        for a, b, who in spans:
            if who != "lease":
                for la, lb in leased:
                    assert b <= la or a >= lb, f"{name}: job {who} [{a}, {b}) inside lease [{la}, {lb})"
    assert r.lending.reclaims == sum(1 for *_, how in r.lending.leases if how == "reclaimed")


# -- slurm-pool simulate --nodes --lend ------------------------------------------------
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "pool.yaml"
MONDAY_8PM_UTC = 1767643200  # 2026-01-05 20:00 UTC, inside the example's 19:00-07:00 window
MONDAY_10AM_UTC = MONDAY_8PM_UTC - 10 * 3600


def _spec_in_utc(tmp_path: Path) -> Path:
    text = EXAMPLE.read_text().replace("  max_lent_nodes: 3\n", "  max_lent_nodes: 3\n  timezone: UTC\n")
    assert "timezone: UTC" in text
    out = tmp_path / "pool.yaml"
    out.write_text(text)
    return out


def _sacct(t0: int) -> str:
    return json.dumps({"jobs": [gpu_job(1, "proja", t0, t0 + 1000, 1), gpu_job(2, "proja", t0 + 100, t0 + 200, 2)]})


@pytest.mark.parametrize(
    ("t0", "waits", "reclaims", "lends"),
    [
        # off-peak: a-gpu2, b-gpu1 and c-gpu1 are lent at once (max_lent_nodes 3); proja's 2-GPU job
        # takes a-gpu2 back and starts after k8s-lend's GraceTime of 10 s
        (MONDAY_8PM_UTC, [10, 10, 10, 10], 1, 3),
        # daytime: nothing is lent, nothing waits
        (MONDAY_10AM_UTC, [0, 0, 0, 0], 0, 0),
    ],
)
def test_cli_lend(tmp_path, t0, waits, reclaims, lends):
    spec = _spec_in_utc(tmp_path)
    args = ["simulate", "--spec", str(spec), "--sacct", "-", "--nodes", "--lend", "--lend-period", "60"]
    res = CliRunner().invoke(cli, [*args, "--json"], input=_sacct(t0))
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert [r["owner_wait_p95_seconds"] for r in out["results"]] == waits
    assert {r["lending"]["reclaims"] for r in out["results"]} == {reclaims}
    assert all(r["lending"]["lends"] >= lends for r in out["results"])
    res = CliRunner().invoke(cli, args, input=_sacct(t0))
    assert res.exit_code == 0, res.output
    assert "lent to the inference tier" in res.output
    assert f"{reclaims} taken back by Slurm's jobs" in res.output


def test_cli_lend_needs_nodes():
    res = CliRunner().invoke(cli, ["simulate", "--spec", str(EXAMPLE), "--sacct", "-", "--lend"], input="{}")
    assert res.exit_code == 2
    assert "--lend" in res.output and "--nodes" in res.output
    assert "Traceback" not in res.output


def test_the_example_lets_owners_alone_take_lent_nodes_back():
    """scavenger (the borrowed tier's price) does not preempt k8s-lend in the example; guaranteed, and
    shared (where owners overflow), do."""
    from slurm_pool.sim.cli import lend_rule, tier_prices
    from slurm_pool.spec import load_spec

    spec = load_spec(str(EXAMPLE))
    rule = lend_rule(spec, MONDAY_8PM_UTC, 300.0, tier_prices(spec, None))
    assert rule.preemptors == NOT_BORROWERS
    assert (rule.grace, rule.max_nodes, rule.period) == (10.0, 3, 300.0)
    assert rule.window is not None
    shared = lend_rule(spec, MONDAY_8PM_UTC, 300.0, tier_prices(spec, "shared"))
    assert shared.preemptors == CLASSES
