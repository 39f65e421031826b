"""Issue 10, check 1 with kube-apiserver stopped during the reclaim: the owner's job never shares a GPU.

With the API server down, the preempted placeholder's fence cannot remove the
inference pods.  The lend job's epilog (root, before Slurm gives the node to the
next job) frees the GPUs through the NVML seam (:mod:`slurm_pool.node.gpufree`).
Here the seam is a replayed snapshot of a-gpu1 listing the pid of a real
process that stands in for the inference pod's: a poller at 0.2 s checks that
the owner's job is never RUNNING while that process lives.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slurm

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data" / "nvml"
NODE = "a-gpu1"


def _snapshot(pids: list[int]) -> dict:
    """A healthy 2-GPU snapshot (from the recorded A100 one) whose GPU 0 runs ``pids``."""
    snap = json.loads((DATA / "ecc_failure.json").read_text())
    snap["xid_events"] = []
    for g in snap["gpus"]:
        g["ecc"].update(volatile_uncorrected=0, aggregate_uncorrected=0)
        g["processes"] = pids if g["index"] == 0 else []
    return snap


@pytest.fixture
def gpu_seam(cluster):
    """slurm-pool-node.conf replaying ``<dir>/{node}.json``; restored afterwards."""
    work = Path("/tmp") / f"sp-apidown-{int(time.time())}-{random.randrange(10**6)}"
    work.mkdir(mode=0o755)
    conf = Path(cluster.env["SLURM_CONF"]).parent / "slurm-pool-node.conf"
    old = conf.read_bytes() if conf.exists() else None
    conf.write_text(
        f"state_dir = {work / 'state'}\ncheckpoint_base_dir = {work / 'ckpt'}\n"
        f"gpus = replay:{work}/{{node}}.json\nscontrol = {cluster.scontrol}\nlend_partition = k8s-lend\n"
    )
    conf.chmod(0o644)
    yield work
    if old is None:
        conf.unlink(missing_ok=True)
    else:
        conf.write_bytes(old)
    cluster.run(["scontrol", "update", f"NodeName={NODE}", "State=RESUME"])


def test_with_the_api_server_down_the_lend_epilog_frees_the_gpus_before_the_owner_runs(
    bridge, k8s_control_plane, gpu_seam
):
    from tests.bridge.test_bridge_e2e import NIGHT, OWNER_JOB, _lend_one

    _lend_one(bridge)
    stand_in = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    path = gpu_seam / f"{NODE}.json"
    path.write_text(json.dumps(_snapshot([stand_in.pid])))
    path.chmod(0o644)
    shared: list[str] = []
    stop = threading.Event()
    owner: list[int] = []

    def poll() -> None:
        while not stop.is_set():
            if owner and stand_in.poll() is None:
                state = bridge.cluster.job_field(owner[0], "%T")
                if state == "RUNNING":
                    shared.append(f"owner RUNNING at {time.monotonic():.1f} while pid {stand_in.pid} lives")
            time.sleep(0.2)

    watcher = threading.Thread(target=poll, daemon=True)
    watcher.start()
    try:
        with k8s_control_plane.apiserver_stopped():
            owner.append(
                bridge.cluster.sbatch(
                    "-p",
                    "a-owner",
                    "--qos=guaranteed",
                    "-A",
                    "proja",
                    "-w",
                    NODE,
                    "--gres=gpu:2",
                    "-o",
                    "/dev/null",
                    user="alice",
                    script=OWNER_JOB,
                )  # fmt: skip
            )
            grace = bridge.cluster.spec.tier("k8s-lend").grace_time
            bridge.cluster.wait_state(owner[0], ["RUNNING"], timeout=grace + 30)
            assert stand_in.wait(timeout=5) is not None  # the epilog ended it
        stop.set()
        watcher.join(timeout=5)
        assert shared == [], shared
        state, reason = _node_state(bridge)
        assert "drain" not in state.lower(), (state, reason)  # the GPUs came back clean
        # The API server is back: the next run closes the node to Kubernetes (its pods then leave once kwok,
        # which plays the kubelets, has its watches back: not waited for here).
        report = bridge.reconcile(NIGHT)
        assert not bridge.lent(NODE) and bridge.fenced(NODE), report.text()
    finally:
        stop.set()
        if stand_in.poll() is None:
            stand_in.kill()
        stand_in.wait()


def _node_state(bridge) -> tuple[str, str]:
    out = bridge.cluster.run(["sinfo", "-h", "-N", "-n", NODE, "-o", "%T|%E"]).stdout.strip().splitlines()
    state, _, reason = out[0].partition("|")
    return state, reason
