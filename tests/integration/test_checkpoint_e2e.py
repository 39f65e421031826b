"""Issue 5 on the real local cluster: checkpoint-on-preempt end to end.

A shared-tier training job (``examples/train_sim.py`` under ``python3 -m
slurm_pool.checkpoint``, the click-free ``slurm-pool run``) holds both GPUs of
a-gpu1 and is preempted three times by the owner's guaranteed-tier jobs.  The
prolog prepares its checkpoint directory (``<base>/alice/<job id>``), the
wrapper and the job find it through ``slurm-pool-node.conf`` beside
slurm.conf, and the epilog records each run in ``outcomes.jsonl``.

Checked: every interruption is classified as a preemption (not a timeout),
the job is requeued and resumes from its newest checkpoint, the final state
equals an uninterrupted run, no more than one checkpoint interval of work is
lost per preemption, and the epilog saw a checkpoint taken at each preemption.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.ckptjob import TRAIN_SCRIPT, expected_result, job_python, steps_lost, train_lines, workdir
from tests.support.patience import wait_for

pytestmark = pytest.mark.slurm

REPO = Path(__file__).resolve().parents[2]
NODE = "a-gpu1"
STEPS, EVERY, STEP_TIME = 600, 50, 0.1
PREEMPTIONS = 3


def _count(log: Path, event: str) -> int:
    return len(train_lines(log, event)) if log.exists() else 0


def test_preempted_three_times_resumes_to_the_same_result(cluster, node_conf):
    work = workdir("ckpt")
    state, base = work / "state", work / "ckpt"
    node_conf(state_dir=str(state), checkpoint_base_dir=str(base), gpus="none", warn_seconds="30")
    py = job_python()
    log = work / "train.out"
    units = 2  # a-gpu1: 2 x A100-80GB in the example spec
    victim = cluster.sbatch(
        "-p",
        "shared",
        "--qos=shared",
        "-A",
        "proja",
        "-w",
        NODE,
        f"--gres=gpu:{units}",
        "--time=30",
        "--requeue",
        "--signal=B:USR1@30",
        "--open-mode=append",
        "-o",
        str(log),
        "-D",
        str(work),
        user="alice",
        script=TRAIN_SCRIPT.format(
            repo=work / "lib", py=py, train=work / "train_sim.py", steps=STEPS, every=EVERY, dt=STEP_TIME
        ),
    )
    rng = random.Random(5)
    for round_ in range(PREEMPTIONS):
        cluster.wait_state(victim, ["RUNNING"], timeout=120)
        wait_for(lambda n=round_: _count(log, "start") >= n + 1, 60, f"run {round_} to start")
        time.sleep(rng.uniform(3.0, 3.0 + EVERY * STEP_TIME))  # land between two periodic checkpoints
        owner = cluster.sbatch(
            "-p",
            "a-owner",
            "--qos=guaranteed",
            "-A",
            "proja",
            "-w",
            NODE,
            f"--gres=gpu:{units}",
            "-o",
            "/dev/null",
            user="alice",
            script="#!/bin/bash\nsleep 2\n",
        )
        cluster.wait_state(victim, ["PENDING", "REQUEUED"], timeout=60)
        cluster.wait_state(owner, ["COMPLETED"], timeout=90)
        cluster.release_begin_time(victim)
    cluster.wait_state(victim, ["COMPLETED"], timeout=STEPS * STEP_TIME + 300)

    starts = train_lines(log, "start")
    assert [s["restart"] for s in starts] == [str(i) for i in range(PREEMPTIONS + 1)], log.read_text()
    signals = train_lines(log, "signal")
    assert len(signals) == PREEMPTIONS and all(s["reason"] == "preempt" for s in signals), signals
    done = train_lines(log, "done")
    assert len(done) == 1 and done[0]["final"] == expected_result(STEPS)
    for lost, before, after in steps_lost(log):
        assert 0 <= lost <= EVERY, (lost, before[-3:], after[:1])

    ck = base / "alice" / str(victim)
    assert ck.is_dir() and ck.stat().st_uid != 0  # the prolog made it for alice
    rec = [json.loads(x) for x in (state / NODE / "outcomes.jsonl").read_text().splitlines()]
    mine = [r for r in rec if r["job_id"] == str(victim)]
    preempted = [r for r in mine if r["preempted"]]
    assert len(preempted) == PREEMPTIONS, mine
    for r in preempted:
        assert r["checkpointed"] and r["checkpoint_age_s"] is not None and r["checkpoint_age_s"] <= EVERY * STEP_TIME
        assert r["reason"] == "preempt" and "wrapper" in r["sources"]
    assert any(not r["preempted"] and r["exit_code"] == 0 for r in mine)  # the last, completed run


def test_time_limit_self_requeue_is_counted_in_the_comment(cluster, node_conf):
    """A 2-minute job with warn_seconds 60 requeues itself at ~60 s and resumes."""
    work = workdir("tlim")
    node_conf(
        state_dir=str(work / "state"),
        checkpoint_base_dir=str(work / "ckpt"),
        gpus="none",
        warn_seconds="60",
        max_self_requeues="1",
    )
    py = job_python()
    log = work / "train.out"
    steps = 1500  # 150 s of work: needs two runs of < 60 s useful time each ... and then the budget is spent
    job = cluster.sbatch(
        "-p",
        "shared",
        "--qos=shared",
        "-A",
        "proja",
        "-w",
        NODE,
        "--gres=gpu:1",
        "--time=2",
        "--requeue",
        "--open-mode=append",
        "-o",
        str(log),
        "-D",
        str(work),
        user="alice",
        script=TRAIN_SCRIPT.format(
            repo=work / "lib", py=py, train=work / "train_sim.py", steps=steps, every=EVERY, dt=STEP_TIME
        ),
    )
    wait_for(lambda: _count(log, "stop") >= 1, 150, "the first self-requeue")
    # The log's "stop" comes before the wrapper counts the requeue in the comment: wait for the count.
    wait_for(
        lambda: "slurm-pool:self-requeues=1" in cluster.run(["squeue", "-h", "-j", str(job), "-o", "%k"]).stdout,
        60,
        "slurm-pool:self-requeues=1 in the job's comment",
    )
    cluster.wait_state(job, ["PENDING", "REQUEUED", "RUNNING"], timeout=60)
    assert train_lines(log, "signal")[0]["reason"] == "timeout"
    cluster.release_begin_time(job)
    # Second run: the budget (1) is spent, so at the next warning it checkpoints and gives up (exit 86).
    cluster.wait_state(job, ["FAILED", "COMPLETED", "TIMEOUT"], timeout=240)
    final = ("FAILED", "COMPLETED", "TIMEOUT", "CANCELLED")
    assert cluster.wait_sacct(job, "State", lambda v: v.startswith(final)) == "FAILED"
    exit_code = cluster.sacct_field(job, "ExitCode")
    assert exit_code.startswith("86:"), exit_code
    assert _count(log, "start") == 2


def test_prune_keeps_queued_jobs_and_removes_gone_ones(cluster, node_conf):
    """``slurm-pool checkpoints prune`` against the real squeue: the running job's
    directory survives even when old; a gone job's old directory is removed."""
    work = workdir("prune")
    base = work / "ckpt"
    node_conf(state_dir=str(work / "state"), checkpoint_base_dir=str(base), gpus="none")
    job = cluster.sbatch(
        "-p",
        "shared",
        "--qos=shared",
        "-A",
        "proja",
        "-w",
        NODE,
        "--gres=gpu:1",
        "--time=30",
        "--requeue",
        "--signal=B:USR1@30",
        "-o",
        "/dev/null",
        user="alice",
        script="#!/bin/bash\nsleep 300\n",
    )
    cluster.wait_state(job, ["RUNNING"], timeout=60)
    live = base / "alice" / str(job)
    wait_for(live.is_dir, 30, "the prolog to create the job's checkpoint dir")
    gone = base / "alice" / "999999"
    gone.mkdir()
    (gone / "ckpt-000000000001").mkdir()
    old = time.time() - 30 * 86400
    for p in (live, gone / "ckpt-000000000001", gone):
        os.utime(p, (old, old))
    res = subprocess.run(
        [sys.executable, "-m", "slurm_pool", "checkpoints", "prune", "--keep-days", "7"],
        env={**os.environ, **cluster.env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0, res.stderr
    assert not gone.exists() and live.is_dir(), res.stdout
    assert "1 removed, 1 kept, 0 failed" in res.stdout
