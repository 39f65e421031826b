"""Spot pricing (issue 14): GPU-hours used and charged per tier, in ``status`` and in the simulator."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurm_pool.adapters.records import JobRecord, State, parse_jobs
from slurm_pool.adapters.runner import RecordingRunner
from slurm_pool.adapters.slurm import SlurmClient
from slurm_pool.cli import cli
from slurm_pool.metrics import status as st
from slurm_pool.metrics.charges import held_seconds, usage_by_tier
from slurm_pool.metrics.status_cli import tier_usage
from slurm_pool.sim.engine import BORROWED, GUARANTEED, Job, Policy, simulate
from slurm_pool.spec import load_spec

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "pool.yaml"
HOUR = 3600.0
T0 = 1.7e9  # Slurm's times are epoch seconds


def _run(qos: str, gpus: int, start: float | None, end: float | None, job_id: int = 1) -> JobRecord:
    """A run from ``start`` to ``end`` seconds after T0 (None: not started / still running)."""
    return JobRecord(
        job_id=job_id,
        qos=qos,
        gpus=gpus,
        start_time=None if start is None else T0 + start,
        end_time=None if end is None else T0 + end,
        state=State("COMPLETED"),
    )


# (case, run, window start, window end, GPU-seconds held)
HELD = [
    ("inside", _run("g", 2, 100, 400), 0, 1000, 600),
    ("running: until the window's end", _run("g", 1, 900, None), 0, 1000, 100),
    ("began before the window", _run("g", 1, -500, 200), 0, 1000, 200),
    ("ended before the window", _run("g", 4, -500, -100), 0, 1000, 0),
    ("never started", _run("g", 1, None, None), 0, 1000, 0),
    ("no GPU", _run("g", 0, 0, 500), 0, 1000, 0),
]


@pytest.mark.parametrize("case,run,start,end,want", HELD, ids=[c[0] for c in HELD])
def test_gpu_seconds_held_inside_the_window(case, run, start, end, want) -> None:
    assert held_seconds(run, T0 + start, T0 + end) == want


def test_each_tier_pays_its_usage_factor() -> None:
    runs = [_run("guaranteed", 2, 0, HOUR), _run("scavenger", 4, 0, HOUR, 2), _run("scavenger", 1, 0, HOUR, 3),
            _run("other", 1, 0, HOUR, 4)]  # fmt: skip
    got = usage_by_tier(runs, {"guaranteed": 1.0, "scavenger": 0.3}, T0, T0 + HOUR)
    assert got == {
        "guaranteed": {"usage_factor": 1.0, "runs": 1, "gpu_hours": 2.0, "charged_gpu_hours": 2.0},
        "other": {"usage_factor": 1.0, "runs": 1, "gpu_hours": 1.0, "charged_gpu_hours": 1.0},  # Slurm's default
        "scavenger": {"usage_factor": 0.3, "runs": 2, "gpu_hours": 5.0, "charged_gpu_hours": 1.5},
    }


def test_the_example_spot_tier_is_priced_at_30_percent() -> None:
    spec = load_spec(EXAMPLE)
    assert spec.tier("scavenger").usage_factor == 0.3
    assert spec.tier("guaranteed").usage_factor == 1.0


@pytest.mark.parametrize("version", ["22.05", "26.05"])
def test_status_reads_every_run_from_sacct_and_the_factors_from_slurmdbd(version: str) -> None:
    """Recorded sacct of a preempted scavenger job (22.05: REQUEUED, 26.05: PREEMPTED) and running owners."""
    text = (ROOT / "tests" / "data" / "slurm" / version / "sacct.json").read_text()
    runs = parse_jobs(text)
    now = max(r.start_time or 0 for r in runs) + 100
    r = RecordingRunner()
    r.on(["sacct", "--json", "--allusers", "--allocations", "--duplicates"], text)
    r.on(["sacctmgr", "-n", "-P", "show", "qos"], "guaranteed|1.000000\nscavenger|0.300000\n")
    usage = tier_usage(SlurmClient(r), 24, now=now)
    assert usage["hours"] == 24
    tiers = usage["tiers"]
    # 22.05's preempted run held its 2 GPUs for 2 s; 26.05's was recorded with the same start and end.
    scav = [x for x in runs if x.qos == "scavenger" and held_seconds(x, now - 24 * HOUR, now) > 0]
    assert set(tiers) == {"guaranteed"} | ({"scavenger"} if scav else set())
    assert len(scav) == {"22.05": 1, "26.05": 0}[version]
    if scav:
        held = sum(held_seconds(x, now - 24 * HOUR, now) for x in scav)
        assert tiers["scavenger"]["usage_factor"] == 0.3 and tiers["scavenger"]["runs"] == len(scav)
        assert tiers["scavenger"]["charged_gpu_hours"] == pytest.approx(0.3 * held / HOUR, abs=1e-4)
    owners = [x for x in runs if x.qos == "guaranteed"]
    assert tiers["guaranteed"]["runs"] == len(owners)
    assert tiers["guaranteed"]["gpu_hours"] == tiers["guaranteed"]["charged_gpu_hours"] > 0
    argv = list(next(c for c in r.calls if c[0] == "sacct"))
    assert argv[:6] == ["sacct", "--json", "--allusers", "--allocations", "--duplicates", "--starttime"]
    assert argv[-2:] == ["--endtime", "now"]


def test_status_reports_a_failed_sacct_and_goes_on() -> None:
    r = RecordingRunner()
    r.fail(["sacct"], stderr="slurmdbd is down")
    usage = tier_usage(SlurmClient(r), 2, now=1e9)
    assert usage["hours"] == 2 and "slurmdbd is down" in usage["error"]
    data = st.build([], [], usage=usage, now=0)
    assert data["usage"] == usage
    from rich.console import Console

    console = Console(width=200, record=True)
    for part in st.tables(data):
        console.print(part)
    text = console.export_text()
    assert "sacct failed" in text and "GPU-hours by tier, last 2 h" in text


def test_status_without_usage_has_no_usage_key() -> None:
    assert "usage" not in st.build([], [], now=0)


def test_the_simulator_counts_gpu_time_per_tier() -> None:
    """Project a's 2 GPUs: its own 1-GPU job runs guaranteed; a borrower's 1-GPU job runs borrowed in the pool."""
    jobs = [Job("own", "proja", 0.0, 100.0, 1), Job("loan", None, 0.0, 50.0, 1)]
    pool = simulate({"proja": 2}, jobs, Policy("pool"), 1000.0)
    assert pool.tier_gpu_seconds == {GUARANTEED: 100.0, BORROWED: 50.0}
    assert pool.charges({GUARANTEED: 1.0, BORROWED: 0.3}) == {
        BORROWED: {"usage_factor": 0.3, "gpu_hours": round(50 / HOUR, 4), "charged_gpu_hours": round(15 / HOUR, 4)},
        GUARANTEED: {"usage_factor": 1.0, "gpu_hours": round(100 / HOUR, 4), "charged_gpu_hours": round(100 / HOUR, 4)},
    }
    dedicated = simulate({"proja": 2}, jobs, Policy("dedicated", pooled=False), 1000.0)
    assert dedicated.tier_gpu_seconds == {GUARANTEED: 100.0}


SACCT = ROOT / "tests" / "data" / "slurm" / "22.05" / "sacct-history.json"


@pytest.mark.parametrize("engine", [[], ["--nodes"]])
def test_simulate_reports_gpu_hours_used_and_charged(engine) -> None:
    res = CliRunner().invoke(cli, ["simulate", "--spec", str(EXAMPLE), "--sacct", str(SACCT), "--json", *engine])
    assert res.exit_code == 0, res.output
    for result in json.loads(res.output)["results"]:
        rows = result["gpu_hours_by_tier"]
        assert set(rows) <= {"guaranteed", "scavenger"} and "guaranteed" in rows, rows
        for tier, row in rows.items():
            assert row["usage_factor"] == {"guaranteed": 1.0, "scavenger": 0.3}[tier]
            assert row["charged_gpu_hours"] == pytest.approx(row["gpu_hours"] * row["usage_factor"], abs=1e-4)
    res = CliRunner().invoke(cli, ["simulate", "--spec", str(EXAMPLE), "--sacct", str(SACCT), *engine])
    assert res.exit_code == 0 and "GPU-hours used / charged (UsageFactor): guaranteed x1, scavenger x0.3" in res.output


def test_simulate_names_a_spot_tier_it_does_not_know() -> None:
    args = ["simulate", "--spec", str(EXAMPLE), "--sacct", str(SACCT), "--spot-tier", "nope"]
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 2 and "--spot-tier" in res.output and "'nope' is not a tier" in res.output
