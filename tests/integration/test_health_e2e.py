"""Issue 5 on the real local cluster: GPU health in the prolog and the health check.

The local cluster has no GPUs, so node a-gpu2 gets replayed snapshots
(``gpus = replay:<dir>/{node}.json`` in ``slurm-pool-node.conf`` beside
slurm.conf; nodes without a file skip the checks).  Checked: a failing GPU
drains the node with ``slurm-pool: <check>: <detail>`` and requeues the job;
the health check clears its own drain once the node is healthy, never a
human's; a critical XID stays until acknowledged; hostile job names and
comments reach no shell.
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

from tests.support.patience import wait_for

pytestmark = pytest.mark.slurm

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data" / "nvml"
NODE = "a-gpu2"


def _two_gpu(name: str, **gpu1: object) -> dict:
    """A 2-GPU snapshot from the recorded A100 one, GPU 1 patched."""
    snap = json.loads((DATA / "ecc_failure.json").read_text())
    snap["xid_events"] = []
    for g in snap["gpus"]:
        g["ecc"].update(volatile_uncorrected=0, aggregate_uncorrected=0)
    snap["gpus"][1]["ecc"].update(gpu1.pop("ecc", {}))
    snap["_note"] = name
    return snap


class Health:
    """Snapshots and node.conf for the session cluster, restored afterwards."""

    def __init__(self, cluster, work: Path):
        self.cluster = cluster
        self.work = work
        self.conf = Path(cluster.env["SLURM_CONF"]).parent / "slurm-pool-node.conf"
        self.old = self.conf.read_bytes() if self.conf.exists() else None
        self.conf.write_text(
            f"state_dir = {work / 'state'}\ncheckpoint_base_dir = {work / 'ckpt'}\n"
            f"gpus = replay:{work / 'snap'}/{{node}}.json\nscontrol = {cluster.scontrol}\n"
        )
        self.conf.chmod(0o644)
        (work / "snap").mkdir()

    def restore(self) -> None:
        if self.old is None:
            self.conf.unlink(missing_ok=True)
        else:
            self.conf.write_bytes(self.old)
        self.cluster.run(["scontrol", "update", f"NodeName={NODE}", "State=RESUME"])

    def snapshot(self, snap: dict) -> None:
        p = self.work / "snap" / f"{NODE}.json"
        tmp = p.with_suffix(".tmp")
        tmp.write_text(json.dumps(snap))
        tmp.chmod(0o644)
        os.replace(tmp, p)

    def node(self) -> tuple[str, str]:
        """(state, reason) as sinfo shows them."""
        out = self.cluster.run(["sinfo", "-h", "-N", "-n", NODE, "-o", "%T|%E"]).stdout.strip().splitlines()
        state, _, reason = out[0].partition("|")
        return state, reason

    def healthcheck(self, *extra: str) -> int:
        """What slurmd's HealthCheckProgram runs, on demand (the interval is minutes)."""
        env = dict(os.environ, **self.cluster.env, SLURMD_NODENAME=NODE)
        argv = [sys.executable, "-I", "-m", "slurm_pool.node", "healthcheck", "--config", str(self.conf), *extra]
        return subprocess.run(argv, env=env, capture_output=True, timeout=60).returncode


@pytest.fixture
def health(cluster):
    work = Path("/tmp") / f"sp-health-{int(time.time())}-{random.randrange(10**6)}"
    work.mkdir(mode=0o755)
    h = Health(cluster, work)
    yield h
    h.restore()


def test_failing_gpu_drains_the_node_and_requeues_the_job(cluster, health):
    health.snapshot(_two_gpu("ecc", ecc={"volatile_uncorrected": 3}))
    sentinel = Path("/tmp") / f"sp-pwned-{random.randrange(10**9)}"
    job = cluster.sbatch(
        "-p",
        "a-owner",
        "--qos=guaranteed",
        "-A",
        "proja",
        "-w",
        NODE,
        "--gres=gpu:1",
        "-J",
        f"$(touch {sentinel})",
        f"--comment=; touch {sentinel}",
        "-o",
        "/dev/null",
        user="alice",
        script="#!/bin/bash\nsleep 1\n",
    )
    state, reason = wait_for(lambda: s if "drain" in (s := health.node())[0] else None, 60, "the drain")
    assert reason.startswith("slurm-pool: ecc: GPU 1 (00000000:4B:00.0) has 3 uncorrected volatile ECC errors"), reason
    st = cluster.wait_state(job, ["PENDING", "REQUEUED"], timeout=60)  # held unless nohold_on_prolog_fail
    assert st in ("PENDING", "REQUEUED")
    restarts = cluster.run(["scontrol", "show", "job", str(job)]).stdout
    assert "Restarts=1" in restarts or "launch failed requeued" in restarts.lower(), restarts
    assert not sentinel.exists()
    cluster.run(["scancel", str(job)])


def test_own_drain_cleared_human_drain_kept(cluster, health):
    health.snapshot(_two_gpu("ecc", ecc={"volatile_uncorrected": 1}))
    assert health.healthcheck() == 1
    assert health.node()[1].startswith("slurm-pool: ecc:")
    health.snapshot(_two_gpu("healthy"))
    assert health.healthcheck() == 0
    wait_for(lambda: "drain" not in health.node()[0], 30, "our drain to clear")
    cluster.run(["scontrol", "update", f"NodeName={NODE}", "State=DRAIN", "Reason=bios update (test)"])
    assert health.healthcheck() == 0
    state, reason = health.node()
    assert "drain" in state and reason == "bios update (test)"


def test_critical_xid_is_sticky_until_acknowledged(cluster, health):
    snap = _two_gpu("xid")
    snap["xid_events"] = [
        {
            "seq": 10,
            "time_us": 1,
            "pci": "0000:4b:00",
            "gpu_index": 1,
            "xid": 79,
            "text": "NVRM: Xid (PCI:0000:4b:00): 79, GPU has fallen off the bus.",
        }
    ]
    health.snapshot(snap)
    assert health.healthcheck() == 1
    assert health.node()[1] == "slurm-pool: xid: GPU 1 reported critical XID 79"
    health.snapshot(_two_gpu("healthy"))
    assert health.healthcheck() == 1 and "drain" in health.node()[0]
    assert health.healthcheck("--ack-xids") == 0
    wait_for(lambda: "drain" not in health.node()[0], 30, "the drain to clear after the ack")


def test_app_xids_do_not_drain(cluster, health):
    snap = _two_gpu("app xids")
    snap["xid_events"] = [
        {
            "seq": s,
            "time_us": s,
            "pci": "0000:4b:00",
            "gpu_index": 1,
            "xid": x,
            "text": f"NVRM: Xid (PCI:0000:4b:00): {x}, app fault",
        }
        for s, x in ((1, 13), (2, 31), (3, 43), (4, 45), (5, 68), (6, 109))
    ]
    health.snapshot(snap)
    assert health.healthcheck() == 0
    assert "drain" not in health.node()[0]
