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
        ("x", NO_JOBS, "'x' is not a Slurm job id"),
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


# -- Slurm's notation: array tasks and het components ------------------------------------------------
# Recorded on 22.05: jobs 1-3 run on the owners' nodes; array 4 (``--array=1-3``, no task started: one record,
# 4_[1-3]) and het job 5 (5+0 is job 5, 5+1 is job 6) wait.


def array_het(split: bool = False) -> str:
    """The recorded queue; ``split``: task 2 of array 4 is a record of its own (job 8), 4_[1,3] the rest."""
    data = json.loads(recorded("squeue-array-het.json"))
    if split:
        rest = next(j for j in data["jobs"] if j["job_id"] == 4)
        task = {**rest, "job_id": 8, "array_task_id": 2, "array_task_string": ""}
        rest["array_task_string"] = "1,3"
        data["jobs"].append(task)
    return json.dumps(data)


@pytest.mark.parametrize(
    ("ref", "split", "answers"),
    [
        ("4_2", False, ["Job 4_[1-3] (job id 4)"]),  # task 2 waits in the array's one record
        ("4_2", True, ["Job 4_2 (job id 8)"]),
        ("8", True, ["Job 4_2 (job id 8)"]),
        ("4", True, ["Job 4_[1,3] (job id 4)", "Job 4_2 (job id 8)"]),  # the whole array
        ("5+1", False, ["Job 5+1 (job id 6)"]),
        ("6", False, ["Job 5+1 (job id 6)"]),
        ("5+0", False, ["Job 5+0 (job id 5)"]),
        ("5", False, ["Job 5+0 (job id 5)", "Job 5+1 (job id 6)"]),  # the het job: every component
    ],
)
def test_why_answers_for_array_tasks_and_het_components(slurm, ref, split, answers):
    slurm(squeue=array_het(split))
    res = why(ref)
    assert res.exit_code == 0, res.output
    said = [line.split(" (carol")[0] for line in res.output.splitlines() if line.startswith("Job ")]
    assert [s for s in said if " names " not in s] == answers, res.output
    assert "Traceback" not in res.output


def test_why_for_a_het_job_says_its_components_start_together(slurm):
    slurm(squeue=array_het())
    res = why("5")
    assert res.exit_code == 0, res.output
    assert res.output.startswith("Heterogeneous job 5: Slurm starts its 2 waiting components together")
    got = json.loads(why("5", "--json").output)
    parts = got["parts"]
    assert [p["name"] for p in parts] == ["5+0", "5+1"] and [p["job_id"] for p in parts] == [5, 6]
    starts = [p["predicted_start"] for p in parts]
    assert None not in starts and got["het_start"] == max(starts)
    one = json.loads(why("5+1", "--json").output)
    assert one["job_id"] == 6 and one["name"] == "5+1" and "parts" not in one


@pytest.mark.parametrize(
    ("ref", "message"),
    [
        ("4_9", "there is no job 4_9 in the queue you can see"),  # no such task
        ("5+2", "there is no job 5+2 in the queue you can see"),
        ("1+0", "there is no job 1+0 in the queue you can see"),  # job 1 is no het job
        ("4_2+1", "at most one array task or het component"),
        ("4__2", "at most one array task or het component"),
        ("+3", "has a sign"),
        ("03", "leading zero"),
        ("3.0", "not a whole number"),
        (" 3", "blanks"),
        ("\u0663", "other than ASCII"),
        ("4294967293", "a job id is 1 to 4294967292 in Slurm"),
        ("4_4000001", "an array task id is 0 to 4000000"),
        ("4_[1-3]", "a range of array tasks is not taken here"),
    ],
)
def test_why_refuses_what_is_not_a_job_in_slurms_notation(slurm, ref, message):
    slurm(squeue=array_het())
    res = why(ref)
    assert res.exit_code == 2, res.output
    assert message in res.output and "Traceback" not in res.output
    if "in the queue" not in message:
        assert "Invalid value for 'JOB_ID'" in res.output
