"""``slurm-pool why`` against the real local cluster: each cause it names, and an alternative it suggests.

The example pool: a-gpu[1-2] are proja's (alice), b-gpu1 projb's (bob), c-gpu1 has one whole GPU and one
MIG GPU; scavenger and shared borrow anywhere with a 20 s GraceTime.  Borrowers stay off c-gpu1 with
``--exclude`` (an untyped GPU request may land on a MIG instance there), so the pool they see is the
model's whole-GPU pool.
"""

from __future__ import annotations

import calendar
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.support.patience import wait_for

pytestmark = pytest.mark.slurm

REPO = Path(__file__).resolve().parents[2]
COMMON = ["-o", "/dev/null", "-D", "/tmp"]
SLEEP = "#!/bin/bash\nsleep 300\n"
# The answer's options: the users' own history, as a site's why reads it (with --history-days 0 a 26.05 run
# predicted no start at all for the borrower; the test reads until the answer is what it checks).
NO_HISTORY: tuple[str, ...] = ()
# A victim as the pool's contract wants it: on SIGTERM it checkpoints (here, 10 s) and exits inside GraceTime.
CHECKPOINTS = "#!/bin/bash\ntrap 'sleep 10; exit 0' TERM\ntrap '' USR1\nsleep 300 &\nwait $!\n"


def why(cluster, job_id: int | str, *args: str, spec: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, **cluster.env, "PYTHONPATH": str(REPO)}
    argv = [
        sys.executable,
        "-m",
        "slurm_pool.cli",
        "why",
        str(job_id),
        "--spec",
        str(spec or cluster.cluster.spec_path),
    ]
    return subprocess.run([*argv, *args], env=env, capture_output=True, text=True, timeout=120, check=False)


def why_json(cluster, job_id: int, *args: str, spec: Path | None = None) -> dict:
    res = why(cluster, job_id, "--json", *args, spec=spec)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def owners_everywhere(cluster) -> list[int]:
    """alice's jobs on both of her nodes and bob's on his: no whole GPU left for a 2-GPU borrower."""
    jobs = [
        cluster.sbatch(
            "-p",
            "a-owner",
            "--qos=guaranteed",
            "-A",
            "proja",
            "-w",
            node,
            "--gres=gpu:2",
            *COMMON,
            user="alice",
            script=SLEEP,
        )  # fmt: skip
        for node in ("a-gpu1", "a-gpu2")
    ]
    jobs.append(cluster.sbatch("-p", "b-owner", "--qos=guaranteed", "-A", "projb", "-w", "b-gpu1", "--gres=gpu:2",
                               *COMMON, user="bob", script=SLEEP))  # fmt: skip
    for j in jobs:
        cluster.wait_state(j, ["RUNNING"], timeout=60)
    return jobs


def scavenger(cluster, gpus: int = 2, *extra: str) -> int:
    return cluster.sbatch("-p", "scavenger", "--qos=scavenger", "-A", "projc", "--signal=B:USR1@30", f"--gres=gpu:{gpus}", "-t", "10",
                          "--exclude=c-gpu1", *extra, *COMMON, user="carol", script=SLEEP)  # fmt: skip


def test_a_borrower_behind_owners_and_the_alternative_it_suggests(cluster):
    owners_everywhere(cluster)
    job = scavenger(cluster)
    cluster.wait_state(job, ["PENDING"])
    # Without history the owners' jobs run to the default runtime, far off: an earlier module's short runs of
    # alice's would otherwise put their expected end within a second of now, and no alternative beats that.
    # The answer is read until the queue shows what the test set up: on a loaded machine a node may answer
    # slurmctld's ping late for a moment, and the model starts nothing on a node that is not responding.
    last: list[dict] = []

    def predicted() -> tuple[dict, dict] | None:
        got = why_json(cluster, job, *NO_HISTORY)
        last[:] = [got]
        one = next((a for a in got["alternatives"] if a["what"] == "1 GPU instead of 2"), None)
        sooner = got["predicted_start"] is not None and one is not None and one["predicted_start"] is not None
        return (got, one) if sooner and one["predicted_start"] < got["predicted_start"] else None

    try:
        got, one = wait_for(predicted, 60, "a predicted start, and a sooner one with 1 GPU")
    except TimeoutError:
        raise AssertionError(json.dumps(last, indent=1)) from None
    assert got["job_id"] == job
    low, high = got["range"]
    assert low <= got["predicted_start"] <= high
    kinds = {c["kind"] for c in got["causes"]}
    assert kinds & {"owner"}, got["causes"]
    owner = next(c for c in got["causes"] if c["kind"] == "owner")
    assert {"proja", "projb"} & set(owner["text"].replace(",", " ").replace(")", " ").replace("(", " ").split())
    # The text says the same of the same queue (read before the alternative takes c-gpu1's free GPU).
    seen: list[str] = []

    def said() -> str | None:
        res = why(cluster, job, *NO_HISTORY)
        seen[:] = [res.stdout + res.stderr]
        return res.stdout if res.returncode == 0 and "It would start sooner with:" in res.stdout else None

    try:
        text = wait_for(said, 60, "the text answer with its sooner alternative")
    except TimeoutError:
        raise AssertionError(seen) from None
    assert f"Job {job} (carol, partition scavenger, 2 GPUs) is pending" in text and "It waits for:" in text, text
    # Submitted as suggested (one GPU: c-gpu1's whole GPU is free), it starts, and no later than predicted.
    submitted = time.time()
    alt = cluster.sbatch("-p", "scavenger", "--qos=scavenger", "-A", "projc", "--signal=B:USR1@30", "--gres=gpu:1", "-t", "10",
                         *COMMON, user="carol", script=SLEEP)  # fmt: skip
    cluster.wait_state(alt, ["RUNNING"], timeout=60)
    started = _epoch(cluster, alt)
    assert started <= max(one["predicted_start"], submitted) + 15, (started, one)


def _epoch(cluster, job_id: int) -> float:
    res = cluster.run(["squeue", "--json", "-j", str(job_id)], check=True)
    from slurm_pool.adapters.records import parse_jobs

    (rec,) = [j for j in parse_jobs(res.stdout) if j.job_id == job_id]
    assert rec.start_time is not None
    return rec.start_time


def test_an_owner_waits_one_gracetime(cluster):
    victims = [
        cluster.sbatch(
            "-p",
            "scavenger",
            "--qos=scavenger",
            "-A",
            "projc",
            "-w",
            node,
            "--gres=gpu:2",
            "-t",
            "10",
            "--requeue",
            "--signal=B:USR1@30",
            *COMMON,
            user="carol",
            script=CHECKPOINTS,
        )  # fmt: skip
        for node in ("a-gpu1", "a-gpu2")
    ]
    for v in victims:
        cluster.wait_state(v, ["RUNNING"], timeout=60)
    submitted = time.time()
    owner = cluster.sbatch("-p", "a-owner", "--qos=guaranteed", "-A", "proja", "--gres=gpu:2", *COMMON,
                           user="alice", script=SLEEP)  # fmt: skip
    got = why_json(cluster, owner, "--no-alternatives")
    assert got["causes"] and got["causes"][0]["kind"] == "preempts", got
    assert set(got["causes"][0]["jobs"]) <= set(victims) and got["causes"][0]["jobs"]
    assert submitted <= got["predicted_start"] <= submitted + 20 + 10  # one GraceTime, and the read's own time
    cluster.wait_state(owner, ["RUNNING"], timeout=90)
    # No later than the stated range (the late end: a victim killed only after GraceTime and KillWait).
    assert _epoch(cluster, owner) <= got["range"][1] + 10


def test_a_spot_job_waits_for_a_lent_node(cluster, tmp_path):
    """The bridge gives lent nodes back when its off-peak window ends: here, in two minutes."""
    end = time.gmtime(time.time() + 180)
    spec = yaml.safe_load(cluster.cluster.spec_path.read_text())
    spec["bridge"]["timezone"] = "UTC"
    spec["bridge"]["off_peak"] = [{"start": time.strftime("%H:%M", time.gmtime(time.time() - 3600)),
                                   "end": time.strftime("%H:%M", end)}]  # fmt: skip
    changed = tmp_path / "pool.yaml"
    changed.write_text(yaml.safe_dump(spec))
    for node in ("a-gpu1", "a-gpu2"):
        cluster.sbatch("-p", "a-owner", "--qos=guaranteed", "-A", "proja", "-w", node, "--gres=gpu:2", *COMMON,
                       user="alice", script=SLEEP)  # fmt: skip
    lend = cluster.sbatch("-p", "k8s-lend", "--qos=k8s-lend", "-A", "k8s-bridge", "-w", "b-gpu1", "--gres=gpu:2",
                          *COMMON, user="slurmpool", script=SLEEP)  # fmt: skip
    cluster.wait_state(lend, ["RUNNING"], timeout=60)
    job = scavenger(cluster)
    cluster.wait_state(job, ["PENDING"])
    # Without history the owners' jobs are expected to run an hour: the lent node comes back first.
    got = why_json(cluster, job, "--history-days", "0", "--no-alternatives", spec=changed)
    assert got["causes"][0]["kind"] == "lent" and got["causes"][0]["nodes"] == ["b-gpu1"], got
    assert got["causes"][0]["jobs"] == [lend]
    assert got["predicted_start"] <= calendar.timegm(end) + 60


def test_a_job_that_is_not_waiting_is_a_clear_error(cluster):
    res = why(cluster, 99_999_999)
    assert res.returncode == 2 and "there is no job 99999999" in res.stderr, res.stderr
    done = cluster.sbatch("-p", "scavenger", "--qos=scavenger", "-A", "projc", "--signal=B:USR1@30", "--gres=gpu:1", *COMMON,
                          user="carol", script="#!/bin/bash\ntrue\n")  # fmt: skip
    running = cluster.sbatch("-p", "scavenger", "--qos=scavenger", "-A", "projc", "--signal=B:USR1@30", "--gres=gpu:1", *COMMON,
                             user="carol", script=SLEEP)  # fmt: skip
    cluster.wait_state(done, ["COMPLETED"], timeout=60)
    wait_for(lambda: cluster.sacct_state(done) == "COMPLETED", 30, "sacct has the job")
    cluster.wait_state(running, ["RUNNING"], timeout=60)
    for job, want in ((done, f"job {done} has ended (COMPLETED)"), (running, f"job {running} is running, not waiting")):
        res = why(cluster, job)
        assert res.returncode == 2, (res.stdout, res.stderr)
        assert want in res.stderr and "Traceback" not in res.stderr


def _all_pending(cluster, ref: str) -> bool:
    states = cluster.run(["squeue", "-h", "-j", ref, "-o", "%T"]).stdout.split()
    return bool(states) and set(states) == {"PENDING"}


def test_why_answers_for_array_tasks_and_het_jobs_in_slurms_notation(cluster):
    """``why N_2`` (a task still in its array's one record), ``why H+1`` and ``why H`` (every component of a het
    job: Slurm starts them together) answer; what is not Slurm's notation exits 2 naming the value."""
    owners_everywhere(cluster)
    array = scavenger(cluster, 2, "--array=1-3")
    het = cluster.sbatch(
        "-p", "scavenger", "--qos=scavenger", "-A", "projc", "--signal=B:USR1@30", "--gres=gpu:2", "-t", "10",
        "--exclude=c-gpu1", *COMMON, ":",
        "-p", "scavenger", "--qos=scavenger", "-A", "projc", "--signal=B:USR1@30", "--gres=gpu:1", "-t", "10",
        "--exclude=c-gpu1", *COMMON, user="carol", script=SLEEP,
    )  # fmt: skip
    wait_for(lambda: _all_pending(cluster, str(array)) and _all_pending(cluster, str(het)), 60, "both to wait")

    task = why_json(cluster, f"{array}_2", "--no-alternatives")
    assert task["job_id"] == array and task["name"] == f"{array}_[1-3]" and "parts" not in task, task
    comp = why_json(cluster, f"{het}+1", "--no-alternatives")
    assert comp["name"] == f"{het}+1" and comp["job_id"] != het, comp
    # read until both components are predicted (a node answering slurmctld's ping late starts nothing meanwhile)
    whole = wait_for(
        lambda: (
            (w := why_json(cluster, het, "--no-alternatives"))
            and all(p["predicted_start"] is not None for p in w["parts"])
            and w
        ),
        60,
        "both components' predicted starts",
    )
    assert [p["name"] for p in whole["parts"]] == [f"{het}+0", f"{het}+1"], whole
    assert whole["parts"][1]["job_id"] == comp["job_id"]
    starts = [p["predicted_start"] for p in whole["parts"]]
    assert whole["het_start"] == max(starts)

    text = why(cluster, het, "--no-alternatives")
    assert text.returncode == 0 and "Traceback" not in text.stderr, text.stderr
    assert text.stdout.startswith(f"Heterogeneous job {het}: Slurm starts its 2 waiting components together")
    assert f"Job {het}+0 (job id {het})" in text.stdout and f"Job {het}+1 (job id {comp['job_id']})" in text.stdout

    for bad, said in ((f"{array}__2", "at most one array task"), (f"+{array}", "has a sign"),
                      (f"0{array}", "leading zero"), (f"{array}_9", f"there is no job {array}_9")):  # fmt: skip
        res = why(cluster, bad)
        assert res.returncode == 2 and said in res.stderr and bad in res.stderr, (bad, res.stderr)
        assert "Traceback" not in res.stderr
