"""Freeing a node's GPUs without Kubernetes' API (the lend partition's epilog), and the prolog's GPU check.

Real child processes stand in for an inference pod's; the NVML seam is a
replayed snapshot listing their pids (``processes`` per GPU).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from slurm_pool.adapters.nvml import gpu_processes
from slurm_pool.node import gpufree
from tests.unit.test_node_hooks import DATA, Node

IGNORES_TERM = (
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('up', flush=True); time.sleep(600)"
)


def _child(code: str = "import time; print('up', flush=True); time.sleep(600)") -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "up"  # its handlers are in place
    return proc


def _reaped(proc: subprocess.Popen) -> bool:
    """Gone: our own child is reaped here, so it is not left a zombie that looks alive."""
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        return False
    return True


class Gpus:
    """GPU 0 held by ``pids`` until they die (what NVML would list)."""

    def __init__(self, *procs: subprocess.Popen):
        self.procs = procs

    def __call__(self) -> dict[int, list[int]]:
        return {0: [p.pid for p in self.procs if p.poll() is None], 1: []}


def test_processes_on_the_gpus_are_terminated_and_listed_again():
    child = _child()
    res = gpufree.free_gpus(Gpus(child), is_alive=lambda pid: child.poll() is None)
    assert res.ok and res.found == [child.pid] and res.killed == [child.pid] and res.left == []
    assert _reaped(child) and child.returncode == -signal.SIGTERM
    assert res.detail == f"SIGTERM {child.pid}"


def test_a_process_ignoring_sigterm_is_killed_after_the_wait():
    child = _child(IGNORES_TERM)
    res = gpufree.free_gpus(Gpus(child), term_wait=0.5, is_alive=lambda pid: child.poll() is None)
    assert res.ok and _reaped(child) and child.returncode == -signal.SIGKILL
    assert f"SIGKILL {child.pid}" in res.detail


def test_the_stop_command_runs_first_and_our_own_processes_are_never_touched():
    child = _child()
    order = []

    def run(cmd):
        order.append(("run", cmd, child.poll() is None))
        return 0

    def read():
        return {0: [os.getpid(), os.getppid(), *([child.pid] if child.poll() is None else [])]}

    res = gpufree.free_gpus(read, command="systemctl stop kubelet", run=run, is_alive=lambda p: child.poll() is None)
    assert order == [("run", "systemctl stop kubelet", True)]  # while the process still ran
    assert res.ok and res.killed == [child.pid] and _reaped(child)
    assert os.getpid() in gpufree.ancestors() and os.getppid() in gpufree.ancestors()


@pytest.mark.parametrize(
    "found, ok, detail",
    [(None, False, "NVML cannot list the GPUs' processes"), ({0: [], 1: []}, True, "no process on the GPUs")],
)
def test_nothing_to_do_or_nothing_known(found, ok, detail):
    res = gpufree.free_gpus(lambda: found, kill=lambda *_: pytest.fail("nothing may be signalled"))
    assert (res.ok, res.detail) == (ok, detail)


def test_a_process_that_stays_is_reported_and_one_nvml_still_lists_once_ended_is_not():
    res = gpufree.free_gpus(lambda: {0: [999999]}, kill=lambda *_: None, is_alive=lambda p: True, term_wait=0.1)
    assert not res.ok and res.left == [999999] and "still on the GPUs: 999999" in res.detail
    gone = gpufree.free_gpus(lambda: {0: [999999]}, kill=lambda *_: None, is_alive=lambda p: False)
    assert gone.ok and gone.left == []


def test_gpu_processes_need_every_gpu_to_say():
    assert gpu_processes({"gpus": [{"index": 0, "processes": [5]}, {"index": 1, "processes": []}]}) == {0: [5], 1: []}
    assert gpu_processes({"gpus": [{"index": 0, "processes": [5]}, {"index": 1}]}) is None
    assert gpu_processes({"gpus": []}) == {}


# -- the hooks -----------------------------------------------------------------------------------


def _with_processes(node: Node, pids_by_gpu: dict[int, list[int]]) -> None:
    snap = json.loads((DATA / "h100x8_healthy.json").read_text())
    for g in snap["gpus"]:
        g["processes"] = pids_by_gpu.get(g["index"], [])
    node.snapfile.write_text(json.dumps(snap))
    node.snapfile.chmod(0o644)


def test_a_lend_jobs_epilog_frees_the_gpus_and_other_epilogs_do_not(tmp_path):
    n = Node(tmp_path, "h100x8_healthy.json", epilog_query="no")
    child = _child()
    _with_processes(n, {0: [child.pid]})
    assert n.hooks(SLURM_JOB_PARTITION="a-owner").epilog() == 0
    assert child.poll() is None, "not a lend job: nothing is touched"
    assert n.hooks(SLURM_JOB_PARTITION="k8s-lend").epilog() == 0
    assert _reaped(child) and child.returncode == -signal.SIGTERM


def test_a_prolog_finding_another_process_on_its_gpu_waits_then_drains_and_fails(tmp_path):
    n = Node(tmp_path, "h100x8_healthy.json", gpu_busy_wait="1")
    n.slurm_says(flags=("IDLE",), gres="gpu:h100:8")
    blocker = _child()
    _with_processes(n, {1: [blocker.pid]})
    began = time.monotonic()
    assert n.hooks(SLURM_JOB_GPUS="0,1", SLURM_JOB_PARTITION="a-owner").prolog() == 1
    assert time.monotonic() - began >= 1.0  # it waited for the process to leave
    (update,) = n.updates()
    assert update[3] == "State=DRAIN" and update[4].startswith("Reason=slurm-pool: gpu-busy: GPU 1 ")
    assert f"held by pid(s) {blocker.pid}" in update[4]
    # The same process on a GPU that is not the job's, or a shard job, or the lend job itself: no failure.
    for k, env in enumerate(
        ({"SLURM_JOB_GPUS": "2,3"}, {"SLURM_SHARDS_ON_NODE": "2"}, {"SLURM_JOB_PARTITION": "k8s-lend"})
    ):
        (tmp_path / str(k)).mkdir()
        m = Node(tmp_path / str(k), "h100x8_healthy.json", gpu_busy_wait="0")
        _with_processes(m, {1: [blocker.pid]})
        assert m.hooks(**{"SLURM_JOB_GPUS": "0,1", **env}).prolog() == 0, env
    # Once the process has ended, NVML still listing it does not fail the job.
    blocker.kill()
    assert _reaped(blocker) and n.hooks(SLURM_JOB_GPUS="0,1").prolog() == 0


SHARD_JOB = {"job_id": 42, "job_state": "RUNNING", "tres_alloc_str": "cpu=1,mem=1G,node=1,billing=1,gres/shard=1"}
WHOLE_JOB = {"job_id": 42, "job_state": "RUNNING", "tres_alloc_str": "cpu=1,mem=1G,node=1,billing=1,gres/gpu=1"}


@pytest.mark.parametrize(
    "answer,rc",
    [(SHARD_JOB, 0), (WHOLE_JOB, 1), (None, 1)],
    ids=["a shard job shares its GPU", "a whole-GPU job does not", "Slurm unreachable: the GPU is the job's"],
)
def test_a_shard_jobs_prolog_asks_slurm_before_failing_for_a_busy_gpu(tmp_path, answer, rc):
    # Slurm gives a shard job's prolog the same CUDA_VISIBLE_DEVICES/SLURM_JOB_GPUS as a whole GPU's
    # (gres_common_prep_set_env) and no SLURM_SHARDS_ON_NODE, so the prolog asks slurmctld.
    n = Node(tmp_path, "h100x8_healthy.json", gpu_busy_wait="0", epilog_query="no")
    n.slurm_says(flags=("IDLE",), gres="gpu:h100:8")
    if answer is None:
        n.runner.on(["squeue", "--json"], "", returncode=1)
        n.runner.on(["scontrol"], "", returncode=1)
    else:
        n.runner.on(["squeue", "--json", "--jobs", "42"], json.dumps({"jobs": [answer]}))
    other = _child()
    try:
        _with_processes(n, {0: [other.pid]})
        assert n.hooks(SLURM_JOB_GPUS="0", CUDA_VISIBLE_DEVICES="0", SLURM_JOB_PARTITION="dev").prolog() == rc
        asked = [c for c in n.runner.calls if c[:2] == ("squeue", "--json")]
        assert asked, "slurmctld was not asked"
    finally:
        other.kill()
        other.wait()


@pytest.mark.parametrize("job_id", ["42\n", "42,43", "--help", "٤٢", "-1", "42 --json"])
def test_a_busy_gpu_asks_slurm_only_about_a_real_job_id(tmp_path, job_id):
    # Before: SLURM_JOB_ID went to `squeue --jobs` as it came, even when job_identity refused it.
    n = Node(tmp_path, "h100x8_healthy.json", gpu_busy_wait="0", epilog_query="no")
    n.slurm_says(flags=("IDLE",), gres="gpu:h100:8")
    n.runner.on(["squeue", "--json"], json.dumps({"jobs": [SHARD_JOB]}))
    other = _child()
    try:
        _with_processes(n, {0: [other.pid]})
        assert n.hooks(SLURM_JOB_ID=job_id, SLURM_JOB_GPUS="0", SLURM_JOB_PARTITION="dev").prolog() == 1
        assert not [c for c in n.runner.calls if c[:1] in (("squeue",), ("scontrol",)) and "job" in " ".join(c)]
    finally:
        other.kill()
        other.wait()
