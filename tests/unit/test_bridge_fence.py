"""The placeholder's fence: the node leaves Kubernetes before the preempting job may start."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slurm_pool.bridge.fence import fence_node
from slurm_pool.bridge.k8s import K8sError
from slurm_pool.bridge.slurm_side import PLACEHOLDER_SCRIPT, placeholder_script
from slurm_pool.spec import load_spec
from slurm_pool.spec.bridge import Bridge, check_bridge
from tests.support.k8s_fake import Clock, FakeK8s, pod_manifest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "pool.yaml"


def _fence(k8s: FakeK8s, seconds: float = 10):
    clock = Clock()
    return fence_node(k8s, "a-gpu1", seconds, clock=clock, sleep=clock.sleep, poll=0.5), clock


def test_fence_cordons_deletes_every_workload_pod_and_waits_until_none_is_bound() -> None:
    k8s = FakeK8s(linger=3)
    k8s.pods = [
        pod_manifest("llm-0", "a-gpu1"),
        pod_manifest("llm-1", "a-gpu1"),
        pod_manifest("other", "a-gpu2"),
        pod_manifest("ds", "a-gpu1", ownerReferences=[{"kind": "DaemonSet", "name": "gpu-plugin"}]),
    ]
    k8s.guarded = {"serve/llm-0"}  # a PodDisruptionBudget: the fence deletes, it does not evict
    res, clock = _fence(k8s)
    assert res.ok, res.detail
    assert k8s.fenced("a-gpu1")
    assert sorted(k8s.deletions) == ["serve/llm-0", "serve/llm-1"] and k8s.evictions == []
    assert k8s.graces == [None, None]  # with the pods' own grace: gone from the API only once stopped
    assert clock.t > 0  # it waited for the terminating pods to go
    assert {p["metadata"]["name"] for p in k8s.pods} == {"other", "ds"}


def test_fence_reports_pods_still_bound_at_its_deadline() -> None:
    k8s = FakeK8s(linger=1000)
    k8s.pods = [pod_manifest("llm-0", "a-gpu1")]
    res, clock = _fence(k8s, seconds=3)
    assert not res.ok and "1 pod(s) still bound: serve/llm-0" in res.detail
    assert 3 <= clock.t <= 3.5
    assert k8s.deletions == ["serve/llm-0"]  # deleted once, not again on every poll


def test_fence_goes_on_deleting_when_the_cordon_fails() -> None:
    class NoPatch(FakeK8s):
        def patch_node(self, name: str, patch: dict) -> None:
            raise K8sError(403, "forbidden")

    k8s = NoPatch()
    k8s.pods = [pod_manifest("llm-0", "a-gpu1")]
    res, _ = _fence(k8s)
    assert res.ok and "cordon failed" in res.detail and k8s.deletions == ["serve/llm-0"]


def test_placeholder_without_fence_config_is_the_plain_one() -> None:
    assert placeholder_script(Bridge(), "a-gpu1") == PLACEHOLDER_SCRIPT


def _wait_caught(pid: int, sig: int, timeout: float = 10) -> None:
    """Until process ``pid`` has a handler for ``sig`` (its SigCgt mask in /proc)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("SigCgt:") and int(line.split()[1], 16) & (1 << (sig - 1)):
                return
        time.sleep(0.02)
    raise AssertionError(f"process {pid} never caught signal {sig}")


def test_fenced_placeholder_exits_only_after_its_fence_ran(tmp_path: Path) -> None:
    """The real script under /bin/sh: SIGTERM runs the fence for its node, then exits 0."""
    log = tmp_path / "fence.log"
    fake = tmp_path / "slurm-pool"
    fake.write_text(f'#!/bin/sh\nsleep 0.5\necho "$@" > {log}\n')
    fake.chmod(0o755)
    config = Bridge(fence_kubeconfig="/etc/slurm-pool/node.kubeconfig", fence_command=str(fake), fence_seconds=7)
    script = tmp_path / "placeholder.sh"
    script.write_text(placeholder_script(config, "a-gpu1"))
    proc = subprocess.Popen(["/bin/sh", str(script)], env={**os.environ, "SLURM_RESTART_COUNT": "0"})
    _wait_caught(proc.pid, signal.SIGTERM)  # a TERM before the trap is set would kill it unfenced
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=10) == 0
    assert log.read_text().split() == [
        "fence-node",
        "a-gpu1",
        "--kubeconfig",
        "/etc/slurm-pool/node.kubeconfig",
        "--seconds",
        "7",
    ]


@pytest.mark.parametrize(("grace", "seconds", "ok"), [(10, 5, True), (10, 6, False), (60, 30, True)])
def test_the_lend_tiers_grace_time_must_cover_the_fence(grace: int, seconds: int, ok: bool) -> None:
    spec = load_spec(str(EXAMPLE))
    spec = spec.model_copy(
        update={
            "tiers": [t.model_copy(update={"grace_time": grace}) if t.name == "k8s-lend" else t for t in spec.tiers]
        }
    )
    config = Bridge(fence_kubeconfig="/etc/k.conf", fence_seconds=seconds)
    problems = [p for p in check_bridge(spec, config) if p.startswith("bridge.fence_seconds")]
    assert (problems == []) is ok, problems


@pytest.mark.parametrize("bad", ["relative/path", "/etc/k\nx"])
def test_fence_kubeconfig_must_be_an_absolute_path(bad: str) -> None:
    with pytest.raises(ValueError, match="fence_kubeconfig"):
        Bridge(fence_kubeconfig=bad)


def test_fence_node_cli_refuses_a_missing_kubeconfig(tmp_path: Path) -> None:
    res = subprocess.run(
        [sys.executable, "-m", "slurm_pool", "fence-node", "a-gpu1", "--kubeconfig", str(tmp_path / "none")],
        capture_output=True,
        text=True,
    )
    assert res.returncode == 2 and "Traceback" not in res.stderr and "--kubeconfig" in res.stderr, res.stderr
