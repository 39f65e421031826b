"""Issue 2, check 2: tiered preemption on the real cluster.

A scavenger job holds every GPU of the pool; a guaranteed-tier job of the
owner preempts the one on its node.  The preempted job gets its signal when
GraceTime starts (``--signal=B:USR1`` with send_user_signal), is requeued,
and later completes.  The owner's job starts within GraceTime + 5 s.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from slurm_pool.render.context import gpu_units
from slurm_pool.spec.hosts import expand
from tests.support.patience import wait_for
from tests.support.slurm_cluster import self_requeue

pytestmark = pytest.mark.slurm

SCAVENGER = """#!/bin/bash
log={log}
ckpt={log}.step
step=$(cat "$ckpt" 2>/dev/null || echo 0)
trap 'echo "signal USR1 step=$step at $(date +%s.%N)" >> "$log"; echo $step > "$ckpt"; {requeue}exit 0' USR1
echo "start restart=${{SLURM_RESTART_COUNT:-0}} step=$step at $(date +%s.%N)" >> "$log"
# Slow until preempted, so no holder finishes first on a loaded machine; the resumed run is quick.
while [ $step -lt {steps} ]; do [ "${{SLURM_RESTART_COUNT:-0}}" = 0 ] && sleep 0.2; step=$((step+1)); done
echo "done step=$step at $(date +%s.%N)" >> "$log"
"""


STEPS = 3000  # 600 s at 0.2 s a step before the preemption


def _float_after(line: str) -> float:
    return float(line.rsplit(" at ", 1)[1])


def test_guaranteed_job_preempts_scavenger(cluster, tmp_path):
    spec = cluster.spec
    workdir = Path("/tmp") / f"sp-preempt-{int(time.time())}"
    workdir.mkdir(mode=0o777)
    workdir.chmod(0o777)
    grace = spec.tier("scavenger").grace_time
    # One scavenger job per node holding all of that node's GPUs (and MIG instances).
    holders = {}
    for group in spec.node_groups:
        units = len(gpu_units(group))
        for node in expand(group.hosts):
            log = workdir / f"{node}.log"
            holders[node] = (
                cluster.sbatch(
                    "-p",
                    "scavenger",
                    "--qos=scavenger",
                    "-A",
                    "proja",
                    "-w",
                    node,
                    f"--gres=gpu:{units}",
                    "--signal=B:USR1@30",
                    "-o",
                    str(workdir / f"{node}.out"),
                    "-D",
                    str(workdir),
                    user="alice",
                    script=SCAVENGER.format(log=log, steps=STEPS, requeue=self_requeue(cluster.version)),
                ),
                log,
            )
    for job, log in holders.values():
        cluster.wait_state(job, ["RUNNING"], timeout=60)
        # RUNNING comes before the script runs: a USR1 before its trap would kill it unlogged.
        wait_for(lambda log=log: log.is_file() and "start" in log.read_text(), 60, f"{log.name}: script started")
    free = cluster.run(["sinfo", "-h", "-N", "-o", "%N %t"]).stdout
    assert "idle" not in free, free

    victim, victim_log = holders["a-gpu1"]
    submitted = time.time()
    owner = cluster.sbatch(
        "-p",
        "a-owner",
        "--qos=guaranteed",
        "-A",
        "proja",
        "-w",
        "a-gpu1",
        "--gres=gpu:2",
        "-o",
        "/dev/null",
        user="alice",
        script="#!/bin/bash\nsleep 2\n",
    )
    cluster.wait_state(owner, ["RUNNING", "COMPLETED"], timeout=grace + 30)
    started = cluster.wait_sacct(owner, "Start", lambda v: v[:1].isdigit())
    start_epoch = time.mktime(time.strptime(started, "%Y-%m-%dT%H:%M:%S"))
    assert start_epoch - submitted <= grace + 5, (start_epoch - submitted, grace)

    lines = victim_log.read_text().splitlines()
    sig = [ln for ln in lines if ln.startswith("signal USR1")]
    assert sig, lines
    # The signal came at the start of GraceTime, not at its end.
    assert _float_after(sig[0]) - submitted < grace / 2, (_float_after(sig[0]) - submitted, grace)

    # Requeued, then (Slurm delays requeued jobs 120 s; release it) completes, resuming its step.
    state = cluster.wait_state(victim, ["PENDING", "REQUEUED"], timeout=30)
    assert state in ("PENDING", "REQUEUED")
    cluster.wait_state(owner, ["COMPLETED"], timeout=30)
    cluster.release_begin_time(victim)
    cluster.wait_state(victim, ["COMPLETED"], timeout=120)
    lines = victim_log.read_text().splitlines()
    starts = [ln for ln in lines if ln.startswith("start")]
    assert len(starts) == 2 and "restart=1" in starts[1], lines
    saved = sig[0].split()[2]  # step=N when the signal came
    assert starts[1].startswith(f"start restart=1 {saved} "), lines  # resumed from that step
    assert lines[-1].startswith(f"done step={STEPS} "), lines
    for node, (_job, log) in holders.items():  # nobody else was touched
        if node != "a-gpu1":
            assert "signal" not in log.read_text(), (node, log.read_text())
