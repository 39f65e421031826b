"""Issue 11: a scavenger job may be preempted any number of times without being held.

From Slurm 24.05 slurmctld requeues a job that exits in its GraceTime, and
counts that requeue against MaxBatchRequeue (default 5) for the job's whole
life: on 26.05.3 the job was held (JobHeldAdmin, "launch failure limit
exceeded") on its 5th preemption.  The rendered slurm-pool.conf raises the
limit (``scheduler.max_batch_requeue``); this test preempts one job more
times than Slurm's default allows and checks it comes back every time.
"""

from __future__ import annotations

import pytest

from tests.support.slurm_cluster import self_requeue

pytestmark = pytest.mark.slurm

NODE = "a-gpu1"
ROUNDS = 7  # more than Slurm's default MaxBatchRequeue=5
VICTIM = """#!/bin/bash
trap '{requeue}exit 0' USR1
sleep 600 &
wait
"""


def test_job_preempted_more_often_than_slurms_default_limit_is_never_held(cluster):
    spec = cluster.spec
    grace = spec.tier("scavenger").grace_time
    if cluster.version.has("max_batch_requeue"):
        config = cluster.run(["scontrol", "show", "config"], check=True).stdout
        limit = next(ln.split("=", 1)[1].strip() for ln in config.splitlines() if ln.startswith("MaxBatchRequeue"))
        assert int(limit) == spec.scheduler.max_batch_requeue > ROUNDS, limit
    requeue = self_requeue(cluster.version)
    victim = cluster.sbatch(
        "-p", "scavenger", "--qos=scavenger", "-A", "proja", "-w", NODE, "--gres=gpu:2",
        "--requeue", "--signal=B:USR1@30", "-o", "/dev/null", "-D", "/tmp",
        user="alice", script=VICTIM.format(requeue=requeue),
    )  # fmt: skip
    for n in range(1, ROUNDS + 1):
        cluster.wait_state(victim, ["RUNNING"], timeout=120)
        owner = cluster.sbatch(
            "-p", "a-owner", "--qos=guaranteed", "-A", "proja", "-w", NODE, "--gres=gpu:2",
            "-o", "/dev/null", "-D", "/tmp", user="alice", script="#!/bin/bash\nsleep 1\n",
        )  # fmt: skip
        cluster.wait_state(owner, ["RUNNING", "COMPLETED"], timeout=grace + 60)
        cluster.wait_state(victim, ["PENDING", "REQUEUED"], timeout=60)
        cluster.wait_state(owner, ["COMPLETED"], timeout=60)
        # Requeued, not held: Slurm sets the hold in the same step as the requeue.
        show = cluster.run(["scontrol", "show", "job", str(victim)], check=True).stdout
        held = [w for w in ("JobHeldAdmin", "launch failure limit", " Priority=0 ") if w in show]
        assert not held, (n, held, show)
        assert f"Restarts={n} " in show, (n, show)
        cluster.release_begin_time(victim)
    cluster.wait_state(victim, ["RUNNING"], timeout=120)
