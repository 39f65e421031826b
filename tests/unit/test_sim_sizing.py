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
    assert sz.trials[2].failures == ("1 fewer borrower jobs done inside the window than the 1 on all servers",)
    assert sz.target_p95 == 0 and sz.borrowers_needed == 1 and sz.dedicated_gpus == 4
    assert sz.best is sz.trials[1] and sz.ratio == 0.75
    assert sz.baseline.policy == "dedicated" and sz.baseline.borrower_jobs_done == 0
    out = sizing.summary(sz)
    assert out["gpus_needed"] == 3 and out["ratio_to_dedicated"] == 0.75
    assert [t["passes"] for t in out["trials"]] == [True, True, False]


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


def test_cli_size_text():
    res = CliRunner().invoke(cli, ["simulate", "--spec", str(SPEC), "--sacct", str(SACCT), "--size"])
    assert res.exit_code == 0, res.output
    assert "pool size: 6 GPUs are enough, 0.75 of the 8 dedicated GPUs" in res.output
