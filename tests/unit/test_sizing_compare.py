"""Three designs sized on one history (``slurm_pool.sim.sizing_compare``, ``simulate --compare``)."""

from __future__ import annotations

import json
import random
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurm_pool.cli import cli
from slurm_pool.sim import sizing_compare as sc
from slurm_pool.sim.engine import Job, Policy, Result
from slurm_pool.sim.lendrule import LendStats
from slurm_pool.sim.nodes import Node, NodeResult
from slurm_pool.sim.sizing import Trial

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "examples" / "pool.yaml"
SACCT = ROOT / "tests" / "data" / "slurm" / "22.05" / "sacct-history.json"
POOL = Policy("pool-checkpoint-on-preempt", grace=10, checkpoint_interval=60, restart_overhead=0)


def fake_design(passes: list[list[bool]], gpus: list[int] | None = None) -> sc.Design:
    """A design whose sizes (``gpus``, largest first) pass or fail per draw as ``passes[draw][size]``."""
    gpus = gpus or [8 - k for k in range(len(passes[0]))]
    draws = tuple(
        tuple(
            Trial((Node(f"n{g}", g),), Result("p", 100, g), () if ok else (f"fails at {g}",))
            for g, ok in zip(gpus, row, strict=True)
        )
        for row in passes
    )
    return sc.Design("owned", 8, draws, "the floor")


@pytest.mark.parametrize(
    ("passes", "chosen_gpus", "per_draw", "ratio_range", "limit"),
    [
        pytest.param([[True, True, True]], 6, [6], (0.75, 0.75), "the floor", id="all-pass-floor-stops"),
        pytest.param(
            [[True, False, True, True]], 8, [5], (0.625, 0.625), "at 7 GPUs: fails at 7", id="pass-below-failure"
        ),
        pytest.param(
            [[True, True, False, True, False]], 7, [5], (0.625, 0.625), "at 6 GPUs: fails at 6", id="two-gaps"
        ),
        pytest.param([[False, True]], None, [7], (0.875, 0.875), "at 8 GPUs: fails at 8", id="full-pool-fails"),
        pytest.param(
            [[True, True, True], [True, False, True]],
            8,
            [6, 6],
            (0.75, 0.75),
            "at 7 GPUs (draw 1): fails at 7",
            id="one-draw-fails-the-size",
        ),
        pytest.param(
            [[True, True, True], [True, True, False]],
            7,
            [6, 7],
            (0.75, 0.875),
            "at 6 GPUs (draw 1): fails at 6",
            id="range-over-draws",
        ),
        pytest.param(
            [[True, True], [False, False]], None, [7, None], None, "at 8 GPUs (draw 1): fails at 8", id="none"
        ),
    ],
)
def test_monotone_choice_over_draws(passes, chosen_gpus, per_draw, ratio_range, limit):
    d = fake_design(passes)
    assert (d.gpus[d.chosen] if d.chosen is not None else None) == chosen_gpus
    assert d.per_draw == per_draw
    assert d.ratio_range == ratio_range
    assert d.limit == limit


def test_redraw_keeps_seed_zero_and_draws_from_the_given_runtimes():
    jobs = [Job(f"j{k}", "a", k, 5.0, 1) for k in range(50)]
    assert sc.redraw(jobs, 0, [1.0]) == jobs
    one, again, two = (
        sc.redraw(jobs, 1, [1.0, 2.0, 3.0]),
        sc.redraw(jobs, 1, [3.0, 1.0, 2.0]),
        sc.redraw(jobs, 2, [1, 2, 3]),
    )
    assert one == again  # the order of the runtimes given does not matter
    assert {j.work for j in one} == {1.0, 2.0, 3.0} and one != two
    assert [(j.id, j.arrival, j.gpus) for j in one] == [(j.id, j.arrival, j.gpus) for j in jobs]
    with pytest.raises(ValueError, match="runtimes: empty"):
        sc.redraw(jobs, 1, [])


@pytest.mark.parametrize(
    ("pool", "guarantees", "ratio"),
    [
        ([Node("f1", 2), Node("f2", 2)], (("a", 2), ("b", 4)), 1.5),
        ([Node("f1", 2)], (("a", 2), ("b", 2)), 2.0),
        ([Node("f1", 8)], (("a", 2), ("b", 4)), 0.75),
        ([Node("f1", 3, mig=(("3g.20gb", "3g.20gb"),))], (("a", 2), ("b", 3)), 5 / 3),
    ],
    ids=["sum-over-pool", "capped-at-pool", "under-one", "mig-gpus-count"],
)
def test_guarantees_capped_and_overcommit(pool, guarantees, ratio):
    paid = {"b": 4, "a": 2}
    assert sc.capped(paid, pool) == guarantees
    assert sc.overcommit(paid, pool) == ratio


@pytest.mark.parametrize(
    ("result", "busy"),
    [
        (Result("p", 100, 4, useful_gpu_seconds=100), 0.25),
        (NodeResult("p", 100, 4, useful_gpu_seconds=100), 0.25),
        (NodeResult("p", 100, 4, useful_gpu_seconds=100, lending=LendStats(lent_gpu_seconds=200)), 0.75),
    ],
    ids=["gpu-engine", "no-lending", "lent-gpu-time-counts"],
)
def test_busy_counts_slurm_jobs_and_lent_gpu_time(result, busy):
    assert sc.busy(result) == busy


def test_floating_sizes_largest_first_down_to_the_biggest_job():
    nodes = [Node("a1", 4, "a"), Node("a2", 2, "a"), Node("b1", 2, "b"), Node("n1", 1)]
    sizes = sc.floating_sizes(nodes, [Job("j", "a", 0, 10, 3)])
    # the 4-GPU server first; then of the 2-GPU ones a2 (a keeps the most servers), then b1 would leave 1 GPU
    assert [[n.name for n in p] for p in sizes] == [["a1", "a2", "b1", "n1"], ["a2", "b1", "n1"], ["b1", "n1"]]
    assert all(n.owner is None for p in sizes for n in p)


# Owners a and b each own two 1-GPU servers and run one 2-GPU job, a's at 0 and b's at 200 (100 s each):
# owned nodes cannot go below the four servers (each owner's biggest job needs both of its own), floating
# guarantees share two servers, one owner at a time, 2.0 overcommitted, and nobody waits.
TINY = [Node("a1", 1, "a"), Node("a2", 1, "a"), Node("b1", 1, "b"), Node("b2", 1, "b")]
TINY_JOBS = [Job("a-0", "a", 0, 100, 2), Job("b-0", "b", 200, 100, 2)]


def test_floating_needs_fewer_gpus_than_owned_nodes():
    c = sc.compare(TINY, TINY_JOBS, POOL, 400, draws=2)
    ded, owned, floating = c.designs
    assert [d.name for d in c.designs] == ["dedicated", "owned", "floating"]
    assert ded.gpus == [4] and ded.chosen == 0
    assert owned.gpus == [4] and owned.gpus[owned.chosen] == 4 and owned.limit.startswith("floors:")
    assert floating.gpus == [4, 3, 2] and floating.gpus[floating.chosen] == 2
    assert floating.overcommit(floating.chosen) == 2.0 and floating.overcommit(0) == 1.0
    assert floating.ratio_range == (0.5, 0.5) and floating.limit.startswith("floor:")
    out = sc.summary(c)
    got = {d["design"]: d for d in out["designs"]}
    assert got["floating"]["gpus_needed"] == 2 and got["floating"]["ratio_to_dedicated"] == 0.5
    assert got["floating"]["at_size"]["overcommit"] == 2.0 and got["owned"]["at_size"]["overcommit"] is None
    assert out["draws"] == 2 and out["dedicated_gpus"] == 4
    # 400 GPU-seconds of owners' jobs in a 400 s window: a quarter of 4 GPUs, half of 2
    assert ded.offered_load(0) == owned.offered_load(0) == 0.25 and floating.offered_load(floating.chosen) == 0.5
    assert got["floating"]["at_size"]["offered_load"] == 0.5
    assert c.tolerance == 0.01 and out["borrower_tolerance"] == 0.01 and c.sizing(1).tolerance == 0.01


@pytest.mark.parametrize(
    ("jobs", "window", "gpu_seconds"),
    [
        ([Job("a", "a", 0, 100, 2)], 400, 200),
        ([Job("a", "a", 350, 100, 2)], 400, 100),  # cut at the window's end
        ([Job("a", "a", 500, 100, 2)], 400, 0),  # arrives after it
        ([Job("m", "a", 0, 70, 2, "3g.20gb")], 400, 60),  # 2 instances of 3 of 7 slices
        ([Job("a", "a", 0, 100, 1), Job("x", None, 0, 100, 3)], 400, 400),  # borrowers count too
    ],
    ids=["whole-gpus", "cut-at-window", "after-window", "mig-slices", "owners-and-borrowers"],
)
def test_offered_gpu_seconds(jobs, window, gpu_seconds):
    assert sc.offered_gpu_seconds(jobs, window) == pytest.approx(gpu_seconds)


def test_offered_load_is_unknown_without_offered_time():
    assert fake_design([[True]]).offered_load(0) is None and fake_design([[True]]).figures(0)["offered_load"] is None


# A borrower job that all four servers finish at 100 s and that two servers finish only at 200 s (after the
# 150 s window): a bar of one job, which no tolerance up to a fifth lowers.
BORROWING = [Job("a-0", "a", 0, 100, 1), Job("b-0", "b", 0, 100, 1), Job("x-0", None, 0, 100, 2)]


@pytest.mark.parametrize("tol", [0.0, 0.2])
def test_compare_judges_borrowers_with_the_tolerance(tol):
    c = sc.compare(TINY, BORROWING, POOL, 150, tol=tol)
    assert c.tolerance == tol and c.needs == (1,) and c.sizing(0).tolerance == tol
    floating = c.design("floating")
    assert f"(tolerance {tol * 100:g} %: at least 1)" in floating.limit


@pytest.mark.parametrize(
    ("nodes", "policy", "draws", "message"),
    [
        ([Node("n1", 1)], POOL, 1, "no server has an owner"),
        (TINY, Policy("dedicated", pooled=False), 1, "'dedicated' is not pooled"),
        (TINY, POOL, 0, "draws: 0 is less than 1"),
    ],
)
def test_compare_rejects(nodes, policy, draws, message):
    with pytest.raises(ValueError, match=message):
        sc.compare(nodes, TINY_JOBS, policy, 400, draws=draws)


@pytest.mark.parametrize("tol", [-0.5, 0.25, float("nan")])
def test_compare_rejects_a_bad_tolerance(tol):
    with pytest.raises(ValueError, match="borrower_tolerance: .* is not a number from 0 to 0.2"):
        sc.compare(TINY, TINY_JOBS, POOL, 400, tol=tol)


def run(*args: str):
    return CliRunner().invoke(cli, ["simulate", "--spec", str(SPEC), "--sacct", str(SACCT), *args])


#: The bar before issue 48: the dedicated p95 with no slack, on every draw.
OLD_BAR = ("--owner-slack", "0", "--confidence", "1")


def test_cli_compare_text_json_and_plot(tmp_path):
    res = run("--nodes", "--compare", "--draws", "2", *OLD_BAR)
    assert res.exit_code == 0, res.output
    assert "designs compared over 2 runtime draws" in res.output
    table = res.output[res.output.index("designs compared") :]
    assert [ln.split()[0] for ln in table.splitlines()[2:4]] == ["dedicated", "GPUs"]
    rows = {ln[:28].strip(): ln[28:].split() for ln in table.splitlines()[3:]}
    # a 2x2, b 2 and c 2 GPUs: floating needs 4 GPUs and guarantees 4 + 2 + 2 on them; owned nodes keep
    # a server per owner
    assert rows["GPUs needed"] == ["8", "6", "4"] and rows["ratio to dedicated"] == ["1.00", "0.75", "0.50"]
    assert rows["overcommit"] == ["-", "-", "2.00"] and "busy: + lent inference" not in rows
    assert len(rows["offered load"]) == 3 and "less 1 %" in table
    assert "floating: what stops a smaller pool: at 2 GPUs (draw 0): owner wait p95" in table
    out = tmp_path / "report"
    res = run("--nodes", "--compare", "--draws", "2", "--json", "--report", str(out), *OLD_BAR)
    assert res.exit_code == 0, res.output
    got = json.loads(res.output)["compare"]
    assert [d["design"] for d in got["designs"]] == ["dedicated", "owned", "floating"]
    assert got["draws"] == 2 and got["dedicated_gpus"] == 8
    assert got["designs"][0]["gpus_needed"] == 8 and got["designs"][0]["ratio_to_dedicated"] == 1.0
    assert json.loads(res.output)["sizing"]["gpus_needed"] == got["designs"][1]["gpus_needed"]
    assert (out / "sizing.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    page = (out / "report.md").read_text()
    assert "## Designs compared" in page and "| floating | 4 | 0.50 | 0.50 | 2.00 |" in page
    bound = got["lower_bound_gpus"]
    assert f"| {bound} | {4 / bound:.2f} | 100% |" in page and "| projb | 0 | 0 | 0 |" in page
    assert "Bar: owners' p95 wait <= dedicated servers' p95 + 0 s." in page


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--compare"], "give --nodes too"),
        (["--nodes", "--compare", "--draws", "0"], "0 is not in the range"),
        (["--nodes", "--compare", "--draws", "two"], "'two' is not a valid integer"),
        (["--nodes", "--draws", "2"], "only --compare replays several draws"),
        (["--nodes", "--compare", "--borrower-tolerance", "0.5"], "'--borrower-tolerance': 0.5 is not in the range"),
        (["--nodes", "--compare", "--borrower-tolerance", "inf"], "'--borrower-tolerance': inf is not in the range"),
    ],
)
def test_cli_compare_bad_input_exits_2(args, message):
    res = run(*args)
    assert res.exit_code == 2, res.output
    assert message in res.output and "Traceback" not in res.output


def test_cli_compare_bad_history_exits_2(tmp_path):
    bad = tmp_path / "sacct.json"
    bad.write_text('{"jobs": [1]}')
    res = CliRunner().invoke(cli, ["simulate", "--spec", str(SPEC), "--sacct", str(bad), "--nodes", "--compare"])
    assert res.exit_code == 2, res.output
    assert "jobs[0] is int, not an object" in res.output


# --- the owners' bar: slack or an absolute p95, judged per draw, at a confidence (issue 48) ---


@pytest.mark.parametrize(
    ("draws", "confidence", "needed"),
    [(10, 0.9, 9), (3, 0.9, 3), (3, 0.5, 2), (10, 1.0, 10), (1, 0.01, 1), (7, 0.7, 5)],
)
def test_draws_needed(draws, confidence, needed):
    assert sc.draws_needed(draws, confidence) == needed


@pytest.mark.parametrize(
    ("confidence", "chosen_gpus", "share_at_7"),
    [(1.0, 8, 2 / 3), (0.6, 6, 2 / 3), (0.9, 8, 2 / 3)],
)
def test_a_size_passes_on_enough_draws(confidence, chosen_gpus, share_at_7):
    passes = [[True, True, True], [True, False, True], [True, True, True]]
    d = replace(fake_design(passes), confidence=confidence)
    assert d.gpus[d.chosen] == chosen_gpus and d.passing_share(1) == pytest.approx(share_at_7)
    assert d.figures(1)["draws_passing_share"] == round(share_at_7, 3)


# a's two 1-GPU jobs arrive together; dedicated, a runs them side by side; on one GPU the second waits 100 s
CROWD = [Job("a-0", "a", 0, 100, 1), Job("a-1", "a", 0, 100, 1), Job("b-0", "b", 300, 100, 1)]


@pytest.mark.parametrize(
    ("bar", "floating_gpus", "bound", "targets"),
    [
        pytest.param({}, 2, 2, (0.0,), id="no-slack"),
        pytest.param({"slack": 100}, 1, 1, (100.0,), id="slack-of-the-wait"),
        pytest.param({"slack": 99}, 2, 2, (99.0,), id="slack-short-of-it"),
        pytest.param({"owner_p95": 150}, 1, 1, (150.0,), id="absolute"),
    ],
)
def test_compare_bar_and_bound(bar, floating_gpus, bound, targets):
    c = sc.compare(TINY, CROWD, POOL, 600, **bar)
    floating = c.design("floating")
    assert c.targets == targets and floating.gpus[floating.chosen] == floating_gpus
    assert c.bounds == (bound,) and c.bound == bound
    got = {d["design"]: d for d in sc.summary(c)["designs"]}
    assert got["floating"]["lower_bound_gpus"] == bound
    assert got["floating"]["ratio_to_bound"] == floating_gpus / bound
    assert set(got["floating"]["at_size"]["owner_wait_p95_seconds_per_project"]) == {"a", "b"}


def test_an_absolute_bar_can_fail_the_dedicated_servers():
    c = sc.compare(TINY, [Job("a-0", "a", 0, 100, 2), Job("a-1", "a", 0, 100, 2)], POOL, 600, owner_p95=10)
    assert c.design("dedicated").chosen is None and "owner wait p95 100 s > 10 s" in c.design("dedicated").limit


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"slack": 1, "owner_p95": 1}, "give one bar, not both"),
        ({"slack": -1}, "owner_slack: -1 is not a number of seconds"),
        ({"owner_p95": float("inf")}, "owner_p95: inf is not a number of seconds"),
        ({"confidence": 0}, "confidence: 0 is not a share above 0"),
        ({"confidence": 1.5}, "confidence: 1.5 is not a share above 0"),
    ],
)
def test_compare_rejects_a_bad_bar(kwargs, message):
    with pytest.raises(ValueError, match=message):
        sc.compare(TINY, TINY_JOBS, POOL, 400, **kwargs)


def random_history(seed: int) -> list[Job]:
    """Owners a and b (two 1-GPU servers each) and a borrower, 6 to 9 jobs of 1 or 2 GPUs."""
    rng = random.Random(seed)
    return [
        Job(
            f"j{i}",
            rng.choice(["a", "b", None]),
            float(rng.randint(0, 400)),
            float(rng.randint(20, 300)),
            rng.randint(1, 2),
        )
        for i in range(rng.randint(6, 9))
    ]


@pytest.mark.parametrize("seed", range(8))
def test_the_bound_is_at_most_every_answer_on_every_draw(seed):
    jobs = random_history(seed)
    c = sc.compare(TINY, jobs, POOL, 800, draws=3, slack=rng_slack(seed))
    for d in c.designs:
        for k, smallest in enumerate(d.per_draw):
            assert smallest is None or c.bounds[k] <= smallest, (d.name, k)
        if d.chosen is not None:
            assert c.bound is not None and c.bound <= d.gpus[d.chosen]


def rng_slack(seed: int) -> float:
    return float(random.Random(seed).choice([0, 30, 120]))


def test_cli_compare_bar_default_is_one_gracetime():
    res = run("--nodes", "--compare", "--draws", "2", "--json")
    assert res.exit_code == 0, res.output
    got = json.loads(res.output)
    bar = got["compare"]["owner_bar"]
    assert bar["slack_seconds"] == got["grace_seconds"] and bar["confidence"] == 0.9 and bar["draws_needed"] == 2
    designs = got["compare"]["designs"]
    assert all(d["lower_bound_gpus"] == got["compare"]["lower_bound_gpus"] for d in designs)
    res = run("--nodes", "--compare", "--draws", "2")
    table = res.output[res.output.index("designs compared") :]
    rows = {ln[:28].strip(): ln[28:].split() for ln in table.splitlines()[3:]}
    assert rows["lower bound (any schedule)"] == [str(got["compare"]["lower_bound_gpus"])] * 3
    assert rows["draws passing"] == ["100%"] * 3 and "p95 proja" in rows
    assert "a size passes on at least 2 of the 2 draws (confidence 0.9)" in table


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--nodes", "--compare", "--owner-slack", "-5"], "'--owner-slack': -5.0 is not in the range"),
        (["--nodes", "--compare", "--owner-p95", "nan"], "'--owner-p95'"),
        (["--nodes", "--compare", "--confidence", "0"], "'--confidence': 0.0 is not in the range"),
        (["--nodes", "--compare", "--confidence", "1.1"], "'--confidence': 1.1 is not in the range"),
        (["--nodes", "--compare", "--owner-slack", "5", "--owner-p95", "60"], "for --owner-p95: 60: give either"),
        (["--nodes", "--owner-slack", "5"], "for --owner-slack: 5: only --compare"),
        (["--nodes", "--confidence", "0.5"], "for --confidence: 0.5: only --compare"),
    ],
)
def test_cli_compare_bad_bar_exits_2(args, message):
    res = run(*args)
    assert res.exit_code == 2, res.output
    assert message in res.output and "Traceback" not in res.output


def test_cli_compare_plot_written_whole(tmp_path):
    out = tmp_path / "plots" / "bound.png"
    res = run("--nodes", "--compare", "--draws", "2", "--plot", str(out))
    assert res.exit_code == 0, res.output
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    blocker = tmp_path / "file"
    blocker.write_text("x")
    res = run("--nodes", "--compare", "--draws", "2", "--plot", str(blocker / "bound.png"))
    assert res.exit_code == 2 and "--plot" in res.output and "Traceback" not in res.output
    assert blocker.read_text() == "x"
    res = run("--nodes", "--plot", str(out))
    assert res.exit_code == 2 and "only --compare plots the designs" in res.output
