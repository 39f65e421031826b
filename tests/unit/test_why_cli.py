"""``slurm-pool why`` on recorded Slurm output: the answer, its JSON, and the jobs that are not waiting."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurm_pool.cli import cli
from slurm_pool.text import control_chars
from tests.unit.test_metrics import recorded, replay

pytestmark = pytest.mark.usefixtures("narrow_from_json")

SPEC = str(Path(__file__).resolve().parents[2] / "examples" / "pool.yaml")
NO_JOBS = json.dumps({"jobs": []})


@pytest.fixture
def slurm(monkeypatch):
    def use(version: str = "22.05", sacct: str = NO_JOBS, squeue: str | None = None):
        r = replay("busy", version)
        r.on(["sacct", "--json"], sacct)
        if squeue is not None:
            r.on(["squeue", "--json"], squeue)
        monkeypatch.setattr("slurm_pool.adapters.runner.SubprocessRunner", lambda **kw: r)
        return r

    return use


def why(*args: str):
    return CliRunner().invoke(cli, ["why", *args, "--spec", SPEC])


@pytest.mark.parametrize("version", ["22.05", "26.05"])
def test_a_job_waiting_for_its_dependency(slurm, version):
    slurm(version)
    res = why("4")
    assert res.exit_code == 0, res.output
    assert (
        "Job 4 (alice, partition a-owner, 1 GPU) is pending: Dependency: it waits for the jobs it depends on."
        in res.output
    )
    assert "Its runtime: 60 min, from default." in res.output
    assert "it waits for the jobs it depends on (afterok)" in res.output
    got = json.loads(why("4", "--json").output)
    assert got["job_id"] == 4 and got["reason"] == "Dependency" and got["predicted_start"] is not None
    assert got["causes"][0]["kind"] == "dependency" and got["runtime_basis"] == "default"


def test_a_held_job_has_no_start_and_says_why(slurm):
    slurm()
    got = json.loads(why("2", "--json").output)
    assert got["predicted_start"] is None and got["note"].startswith("held")
    assert got["alternatives"] == []
    assert "Predicted start: none (held" in why("2").output


@pytest.mark.parametrize(
    ("job", "sacct", "message"),
    [
        ("1", NO_JOBS, "error: job 1 is running, not waiting"),
        ("99", NO_JOBS, "error: job_id: there is no job 99 in the queue you can see"),
        ("7", None, "error: job 7 has ended (COMPLETED): it is not waiting"),
        ("x", NO_JOBS, "'x' is not a whole number"),
        ("0", NO_JOBS, "0"),
    ],
)
def test_a_job_that_is_not_waiting_exits_2(slurm, job, sacct, message):
    if sacct is None:
        done = json.loads(recorded("sacct.json"))["jobs"][0]
        done.update(job_id=7, state={"current": "COMPLETED", "reason": "None"})
        sacct = json.dumps({"jobs": [done]})
    slurm(sacct=sacct)
    res = why(job)
    assert res.exit_code == 2, res.output
    assert message in res.output and "Traceback" not in res.output


def test_slurms_words_never_reach_the_terminal_raw(slurm):
    data = json.loads(recorded("squeue-busy.json"))
    for j in data["jobs"]:
        if j["job_id"] == 4:
            j["state_reason"] = "Odd\x1b]0;pwned\x07"
            j["partition"] = "a-owner"
    slurm(squeue=json.dumps(data))
    res = why("4")
    assert res.exit_code == 0, res.output
    assert control_chars(res.output.replace("\n", "")) == []
    assert "Slurm's reason: Odd" in res.output
