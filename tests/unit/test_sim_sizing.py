"""Pool sizing (``slurm_pool.sim.sizing`` and ``slurm-pool simulate --size``): hand-worked cases."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurm_pool.cli import cli
from slurm_pool.sim import sizing
from slurm_pool.sim.engine import Job, Policy, Result
from slurm_pool.sim.nodes import Node

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "examples" / "pool.yaml"
SACCT = ROOT / "tests" / "data" / "slurm" / "22.05" / "sacct-history.json"
POOL = Policy("pool-checkpoint-on-preempt", grace=10, checkpoint_interval=60, restart_overhead=0)


def names(nodes) -> list[str]:
    return [n.name for n in nodes]


@pytest.mark.parametrize(
    ("nodes", "jobs", "floors", "order"),
    [
        pytest.param(
            [Node("a1", 2, "a"), Node("a2", 2, "a"), Node("a3", 2, "a"), Node("b1", 2, "b")]
            + [Node("n1", 2), Node("n2", 2)],
            [Job("a-big", "a", 0, 10, 4)],
            {"a": 2, "b": 1, None: 0},
            # all keep 100 %: the owner with most servers first (a), then nobody's, down to the floors
            ["a3", "n2", "n1"],
            id="biggest-job-floor-and-nobodys-servers",
        ),
        pytest.param(
            [Node("a1", 1, "a"), Node("a2", 1, "a"), Node("b1", 1, "b"), Node("b2", 1, "b")],
            [],
            {"a": 1, "b": 1},
            ["b2", "a2"],  # a tie of share and count: the later name first, then the one left with most
            id="tie-by-name",
        ),
        pytest.param(
            [Node("a1", 1, "a"), Node("a2", 1, "a"), Node("a3", 1, "a"), Node("a4", 1, "a"), Node("b1", 1, "b")]
            + [Node("b2", 1, "b")],
            [],
            {"a": 1, "b": 1},
            ["a4", "b2", "a3", "a2"],  # a 4/4; then b 2/2 against a 3/4; then a, down to its floor
            id="largest-share-kept-goes-first",
        ),
        pytest.param(
            [Node("a1", 8, "a"), Node("a2", 8, "a")],
            [Job("a-huge", "a", 0, 10, 12)],
            {"a": 2},
            [],
            id="biggest-job-needs-every-server",
        ),
    ],
)
def test_floors_and_removal_order(nodes, jobs, floors, order):
    assert sizing.floors(nodes, jobs) == floors
    assert names(sizing.removal_order(nodes, sizing.floors(nodes, jobs))) == order


def test_pool_sizes_are_nested_and_spread_when_there_are_many():
    nodes = [Node(f"a{i:02}", 1, "a") for i in range(10)]
    every = sizing.pool_sizes(nodes, [])
    assert [len(p) for p in every] == list(range(10, 0, -1))
    assert all(set(small) <= set(big) for big, small in zip(every, every[1:], strict=False))
    assert [len(p) for p in sizing.pool_sizes(nodes, [], max_sizes=4)] == [10, 7, 4, 1]
    assert [len(p) for p in sizing.pool_sizes(nodes, [], max_sizes=2)] == [10, 1]
    with pytest.raises(ValueError, match="max_sizes: 1"):
        sizing.pool_sizes(nodes, [], max_sizes=1)


# Two owners with two 1-GPU servers each, one job each at 0 for 100 s, and a borrower job at 0 for 100 s,
# in a 150 s window.  Servers go in the order b2, a2.  With 3 GPUs all three run at once; with 2 the
# borrower waits for an owner job and ends at 200 s, after the window.
FOUR = [Node("a1", 1, "a"), Node("a2", 1, "a"), Node("b1", 1, "b"), Node("b2", 1, "b")]
JOBS = [Job("a-0", "a", 0, 100, 1), Job("b-0", "b", 0, 100, 1), Job("x-0", None, 0, 100, 1)]


@pytest.mark.parametrize("engine", [sizing.gpu_replay, sizing.node_replay], ids=["gpus", "nodes"])
def test_smallest_pool_that_keeps_borrowers_work(engine):
    sz = sizing.size_pool(FOUR, JOBS, POOL, 150, engine(JOBS, 150))
    assert [t.gpus for t in sz.trials] == [4, 3, 2]
    assert [names(t.nodes) for t in sz.trials][1] == ["a1", "a2", "b1"]
    assert [t.passes for t in sz.trials] == [True, True, False]
    assert sz.trials[2].failures == (
        "1 fewer borrower jobs done inside the window than the 1 on all servers (tolerance 1 %: at least 1)",
    )
    assert sz.target_p95 == 0 and sz.borrowers_needed == 1 and sz.dedicated_gpus == 4
    assert sz.tolerance == sizing.BORROWER_TOLERANCE == 0.01 and sz.borrowers_floor == 1
    assert sz.best is sz.trials[1] and sz.ratio == 0.75
    assert sz.baseline.policy == "dedicated" and sz.baseline.borrower_jobs_done == 0
    out = sizing.summary(sz)
    assert out["gpus_needed"] == 3 and out["ratio_to_dedicated"] == 0.75
    assert [t["passes"] for t in out["trials"]] == [True, True, False]
    assert out["borrower_tolerance"] == 0.01 and out["borrower_jobs_floor"] == 1


def with_borrowers(done: int, late: int = 0) -> Result:
    """A replay of a 100 s window whose borrowers finished ``done`` jobs inside it and ``late`` after it."""
    r = Result("pool", window=100, capacity=1)
    r.borrower_ends = [50.0] * done + [101.0] * late
    return r


@pytest.mark.parametrize(
    ("done", "tol", "failures"),
    [
        pytest.param(100, 0.0, (), id="the-bar-exactly"),
        pytest.param(99, 0.01, (), id="one-short-of-100-passes-at-1-percent"),
        pytest.param(
            99,
            0.0,
            ("1 fewer borrower jobs done inside the window than the 100 on all servers (tolerance 0 %: at least 100)",),
            id="one-short-of-100-fails-at-0",
        ),
        pytest.param(
            98,
            0.01,
            ("2 fewer borrower jobs done inside the window than the 100 on all servers (tolerance 1 %: at least 99)",),
            id="two-short-fail-at-1-percent",
        ),
        pytest.param(80, 0.2, (), id="a-fifth-short-at-the-largest-tolerance"),
        pytest.param(101, 0.0, (), id="more-than-the-bar"),
    ],
)
def test_borrower_tolerance(done, tol, failures):
    """The borrower bar of 100 jobs, less ``tol`` of it; jobs ending after the window do not count."""
    assert sizing.judge(with_borrowers(done, late=5), 0.0, 100, tol) == failures


@pytest.mark.parametrize(
    ("need", "tol", "floor"),
    [(100, 0.01, 99), (559, 0.01, 554), (1, 0.01, 1), (0, 0.01, 0), (553, 0.0, 553), (10, 0.2, 8), (3, 0.1, 3)],
)
def test_borrower_floor_rounds_the_bar_less_the_tolerance_up(need, tol, floor):
    assert sizing.borrower_floor(need, tol) == floor


@pytest.mark.parametrize("tol", [-0.01, 0.21, 1.0, float("nan"), float("inf"), True])
def test_size_pool_rejects_a_bad_tolerance(tol):
    with pytest.raises(ValueError, match="borrower_tolerance: .* is not a number from 0 to 0.2"):
        sizing.size_pool(FOUR, [], POOL, 100, sizing.gpu_replay([], 100), tol=tol)


def test_tolerance_lets_a_size_one_borrower_job_short_pass():
    """FOUR and JOBS: at 2 GPUs the one borrower job ends after the window; a tolerance of 0.2 of a bar of
    one job is still one job, so it fails as at 0; the fake bar below shows a size passing by the tolerance."""
    strict = sizing.size_pool(FOUR, JOBS, POOL, 150, sizing.gpu_replay(JOBS, 150), tol=0.0)
    loose = sizing.size_pool(FOUR, JOBS, POOL, 150, sizing.gpu_replay(JOBS, 150), tol=0.2)
    assert [t.passes for t in strict.trials] == [t.passes for t in loose.trials] == [True, True, False]
    assert "(tolerance 0 %: at least 1)" in strict.trials[2].failures[0]
    assert "(tolerance 20 %: at least 1)" in loose.trials[2].failures[0]

    def replay(nodes, policy):  # all servers: 100 borrower jobs done; each server less: one fewer
        r = with_borrowers(100 - (4 - len(nodes)))
        r.policy = policy.name
        return r

    assert [t.passes for t in sizing.size_pool(FOUR, [], POOL, 100, replay, tol=0.0).trials] == [True, False, False]
    got = sizing.size_pool(FOUR, [], POOL, 100, replay, tol=0.01)
    assert [t.passes for t in got.trials] == [True, True, False] and got.best is got.trials[1]


def test_owner_wait_beyond_dedicated_fails_a_size():
    """Owner a has two jobs at once.  On their own servers nobody waits.  On one server each, a's
    second job borrows b's server, and b's job waits one GraceTime (10 s) to take it back."""
    jobs = [Job("a-0", "a", 0, 100, 1), Job("a-1", "a", 0, 100, 1), Job("b-0", "b", 0, 100, 1)]
    sz = sizing.size_pool(FOUR, jobs, POOL, 150, sizing.gpu_replay(jobs, 150))
    assert [(t.gpus, t.passes) for t in sz.trials] == [(4, True), (3, True), (2, False)]
    assert sz.trials[2].failures == ("owner wait p95 10 s > 0 s on dedicated servers",)


def test_no_size_passes_when_a_fake_replay_says_so():
    """The pass rules on results from a recording fake: every pool is worse for owners than dedicated."""
    seen: list[tuple[int, str]] = []

    def replay(nodes, policy):
        seen.append((len(nodes), policy.name))
        r = Result(policy.name, window=100, capacity=sum(n.gpus for n in nodes))
        r.owner_waits = [0.0] if policy.name == "dedicated" else [50.0]
        return r

    sz = sizing.size_pool(FOUR, [], POOL, 100, replay)
    assert seen == [(4, "dedicated"), (4, POOL.name), (3, POOL.name), (2, POOL.name)]
    assert sz.best is None and sz.ratio is None and sizing.summary(sz)["gpus_needed"] is None


@pytest.mark.parametrize(
    ("nodes", "policy", "message"),
    [
        ([Node("n1", 1)], POOL, "no server has an owner"),
        (FOUR, replace(POOL, name="dedicated", pooled=False), "'dedicated' is not pooled"),
    ],
)
def test_size_pool_rejects(nodes, policy, message):
    with pytest.raises(ValueError, match=message):
        sizing.size_pool(nodes, [], policy, 100, sizing.gpu_replay([], 100))


@pytest.mark.parametrize("engine", [[], ["--nodes"]], ids=["gpus", "nodes"])
def test_cli_size_on_the_recorded_export(engine, tmp_path):
    """The example spec (a 2x2, b 2, c 2 GPUs) and the three recorded owner jobs: a keeps one server."""
    out = tmp_path / "report"
    args = ["simulate", "--spec", str(SPEC), "--sacct", str(SACCT), "--size", "--json", "--report", str(out), *engine]
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 0, res.output
    got = json.loads(res.output)["sizing"]
    assert got["dedicated_gpus"] == 8 and got["gpus_needed"] == 6 and got["ratio_to_dedicated"] == 0.75
    assert [t["gpus"] for t in got["trials"]] == [8, 6]
    assert (out / "sizing.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    page = (out / "report.md").read_text()
    assert "## Pool size" in page and "| **6** | 3 |" in page and "0.75 of the 8 dedicated GPUs" in page
    assert "less a 1 % tolerance (at least 0)" in page


def test_cli_size_text():
    res = CliRunner().invoke(cli, ["simulate", "--spec", str(SPEC), "--sacct", str(SACCT), "--size"])
    assert res.exit_code == 0, res.output
    assert "pool size: 6 GPUs are enough, 0.75 of the 8 dedicated GPUs" in res.output
    assert "borrower jobs done inside the window (0 on all servers pooled, less 1 %)" in res.output


def test_cli_size_takes_the_borrower_tolerance():
    args = ["simulate", "--spec", str(SPEC), "--sacct", str(SACCT), "--size", "--json"]
    res = CliRunner().invoke(cli, [*args, "--borrower-tolerance", "0.2"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["sizing"]["borrower_tolerance"] == 0.2


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--size", "--borrower-tolerance", "0.3"], "0.3 is not in the range 0<=x<=0.2"),
        (["--size", "--borrower-tolerance", "-0.01"], "-0.01 is not in the range 0<=x<=0.2"),
        (["--size", "--borrower-tolerance", "nan"], "'nan' is not a finite number"),
        (["--size", "--borrower-tolerance", "1%"], "'1%' is not a valid finite float"),
        (["--borrower-tolerance", "0.05"], "only --size or --compare judges borrowers"),
    ],
)
def test_cli_bad_borrower_tolerance_exits_2(args, message):
    res = CliRunner().invoke(cli, ["simulate", "--spec", str(SPEC), "--sacct", str(SACCT), *args])
    assert res.exit_code == 2, res.output
    assert "--borrower-tolerance" in res.output and message in res.output and "Traceback" not in res.output
