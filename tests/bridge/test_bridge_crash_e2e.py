"""Issue 10, check 3: the rebalancer killed with SIGKILL after any step, or run twice at once, converges.

Each case runs one rebalance in a child process (:mod:`tests.support.dying_rebalance`)
that kills itself after its k-th step, on the real Slurm cluster and control
plane.  Its Lease is short (5 s), so once it has expired the next, normal run
must finish the job: no leaked placeholder, no node open to Kubernetes unless a
running placeholder holds it and no other Slurm job runs there, and a further
run plans no steps.
"""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest

from slurm_pool.bridge import lease
from tests.support.patience import wait_for

pytestmark = pytest.mark.slurm

REPO = Path(__file__).resolve().parents[2]
NIGHT = datetime(2026, 1, 7, 2, 0, tzinfo=timezone.utc)
NOON = datetime(2026, 1, 7, 12, 0, tzinfo=timezone.utc)
NODES = ("a-gpu1", "a-gpu2", "b-gpu1", "c-gpu1")
LEASE_SECONDS = 5


def _start(bridge, tmp_path: Path, now: datetime, kill_after: int) -> subprocess.Popen:
    cfg = tmp_path / f"bridge-{kill_after}-{os.urandom(3).hex()}.json"
    cfg.write_text(bridge.config.model_copy(update={"lease_seconds": LEASE_SECONDS}).model_dump_json())
    env = {**os.environ, **bridge.cluster.env, "PYTHONPATH": str(REPO)}
    argv = [sys.executable, "-m", "tests.support.dying_rebalance", str(cfg), str(bridge.kubeconfig)]
    return subprocess.Popen(
        [*argv, now.isoformat(), str(kill_after)], env=env, cwd=REPO, stdout=subprocess.PIPE, text=True
    )


def _run(bridge, tmp_path: Path, now: datetime, kill_after: int) -> tuple[int, str]:
    proc = _start(bridge, tmp_path, now, kill_after)
    out, _ = proc.communicate(timeout=180)
    return proc.returncode, out


def _lease_free(bridge) -> None:
    ns, name = bridge.config.lease_namespace, bridge.config.lease_name
    wait_for(
        lambda: lease.holder_of(bridge.k8s.read_lease(ns, name), datetime.now(timezone.utc)) is None,
        LEASE_SECONDS + 30,
        "the killed run's Lease to expire",
    )


def _converged(bridge, now: datetime) -> dict[str, str]:
    """A normal run finishes the work, and the state is consistent; the run after it plans no steps."""
    _lease_free(bridge)
    report = bridge.reconcile(now)
    assert report.ok, report.text()
    again = bridge.reconcile(now)
    assert again.ok and again.plan.steps == [], again.text()
    held = {}
    for p in bridge.placeholders():
        assert p["state"] == "RUNNING" and p["node"] not in held, ("leaked placeholder", bridge.placeholders())
        held[p["node"]] = p["id"]
    busy = bridge.cluster.run(["squeue", "-h", "-t", "RUNNING", "-o", "%N|%P"]).stdout.split()
    others = {row.split("|")[0] for row in busy if not row.endswith("|k8s-lend")}
    for n in NODES:
        if bridge.lent(n):
            assert n in held and n not in others, (n, held, others)
        else:
            assert bridge.fenced(n) and n not in held, (n, held)
    return held


def _fence_all(bridge) -> None:
    report = bridge.reconcile(NIGHT)
    assert report.ok and all(bridge.fenced(n) for n in NODES), report.text()


# Lending one node from the fenced state: submit, wait-running, open (3 steps).
@pytest.mark.parametrize("kill_after", [1, 2, 3])
def test_a_lend_killed_after_any_step_converges(bridge, tmp_path, kill_after):
    _fence_all(bridge)
    bridge.create_isvc("llm", replicas=2)
    code, out = _run(bridge, tmp_path, NIGHT, kill_after)
    assert code == -9, out  # SIGKILL
    assert f"step {kill_after}:" in out and f"step {kill_after + 1}:" not in out, out
    held = _converged(bridge, NIGHT)
    assert list(held) == ["a-gpu1"] and bridge.lent("a-gpu1")


# Reclaiming the lent node when the window closes: fence, evict, wait-empty, cancel, release (5 steps).
@pytest.mark.parametrize("kill_after", [1, 2, 3, 4, 5])
def test_a_reclaim_killed_after_any_step_converges(bridge, tmp_path, kill_after):
    _fence_all(bridge)
    bridge.create_isvc("llm", replicas=2)
    assert bridge.reconcile(NIGHT).ok and bridge.lent("a-gpu1")
    bridge.wait_predictors(2, "a-gpu1")
    code, out = _run(bridge, tmp_path, NOON, kill_after)
    assert code == -9, out
    assert f"step {kill_after}:" in out and f"step {kill_after + 1}:" not in out, out
    held = _converged(bridge, NOON)
    assert held == {} and not bridge.lent("a-gpu1") and "a-gpu1" not in bridge.running_on().values()


def test_two_runs_at_once_converge(bridge, tmp_path):
    _fence_all(bridge)
    bridge.create_isvc("llm", replicas=2)
    procs = [_start(bridge, tmp_path, NIGHT, 0) for _ in range(2)]
    outs = [p.communicate(timeout=180)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert sum("skipped: another rebalance run" in o for o in outs) <= 1, outs
    held = _converged(bridge, NIGHT)
    assert list(held) == ["a-gpu1"]


def _gang_pending(bed) -> None:
    """Every node fenced; a vcjob of 2 pods, 2 GPUs each (a gang of two whole nodes), waits for nodes."""
    _fence_all(bed)
    bed.create_vcjob("train", pods=2, gpus=2)
    wait_for(lambda: len(bed.gang_pods("train")) == 2, 60, "the gang's 2 pods made")


def _one_group(bed, held: dict[str, str]) -> None:
    """No half-lent gang: the nodes marked for a group are exactly the lent ones, all of one group."""
    marked = {n: bed.group_of(n) for n in NODES if bed.group_of(n)}
    assert sorted(marked) == sorted(held) and len(set(marked.values())) <= 1, (marked, held)


# Lending a gang two nodes: submit x2, wait-running x2, open x2 (6 steps); killed after one or both submits' waits.
@pytest.mark.parametrize("kill_after", [2, 4])
def test_a_gang_lend_killed_midway_converges_on_the_next_run(gang_bridge, tmp_path, kill_after):
    bed = gang_bridge
    _gang_pending(bed)
    code, out = _run(bed, tmp_path, NIGHT, kill_after)
    assert code == -9, out
    assert f"step {kill_after}:" in out and f"step {kill_after + 1}:" not in out, out
    held = _converged(bed, NIGHT)
    assert len(held) == 2, held
    _one_group(bed, held)
    wait_for(lambda: sorted(bed.gang_nodes("train").values()) == sorted(held), 60, "the gang on its two nodes")


# Reclaiming the group when the window closes: fence x2, abort, wait-empty x2, cancel x2, release x2.
@pytest.mark.parametrize("kill_after", [1, 3, 6])
def test_a_gang_reclaim_killed_midway_converges_on_the_next_run(gang_bridge, tmp_path, kill_after):
    bed = gang_bridge
    _gang_pending(bed)
    assert bed.reconcile(NIGHT).ok
    wait_for(lambda: len(bed.gang_nodes("train")) == 2, 60, "the gang Running")
    code, out = _run(bed, tmp_path, NOON, kill_after)
    assert code == -9, out
    assert f"step {kill_after}:" in out and f"step {kill_after + 1}:" not in out, out
    held = _converged(bed, NOON)
    assert held == {}, held
    _one_group(bed, held)
    assert bed.bound_anywhere(NODES) == [] and bed.vcjob_phase("train") in ("Aborting", "Aborted")
