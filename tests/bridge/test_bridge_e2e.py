"""The bridge end to end: the real Slurm cluster and the real Kubernetes control plane.

Every reconcile here is one ``slurm-pool rebalance`` run (the library call the
command makes, plus one run through the command itself).  Slurm does its own
preempting; the bridge only observes and reacts.
"""

from __future__ import annotations

import json
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.bridge.conftest import PLACEHOLDER_ENDED
from tests.support.kserve import is_ready, wait_for
from tests.support.patience import patience

pytestmark = [pytest.mark.slurm, pytest.mark.k8s]

EXAMPLE_SPEC = Path(__file__).resolve().parents[2] / "examples" / "pool.yaml"
#: Inside the off-peak window (19:00-07:00 UTC) and outside it.
NIGHT = datetime(2026, 1, 7, 2, 0, tzinfo=timezone.utc)
NOON = datetime(2026, 1, 7, 12, 0, tzinfo=timezone.utc)

NODES = ("a-gpu1", "a-gpu2", "b-gpu1", "c-gpu1")
OWNER_JOB = "#!/bin/bash\nsleep 300\n"


def _exported_demand(bridge, tmp_path: Path) -> float | None:
    """``slurm-pool exporter --once`` given the bridge (the example spec, on the test's namespace):
    its ``slurm_pool_inference_demand_gpus``."""
    import os
    import subprocess
    import sys

    import yaml

    data = yaml.safe_load(EXAMPLE_SPEC.read_text())
    data["bridge"]["kserve_namespace"] = bridge.namespace
    spec = tmp_path / "pool.yaml"
    spec.write_text(yaml.safe_dump(data))
    env = {**os.environ, **bridge.cluster.env, "PYTHONPATH": str(EXAMPLE_SPEC.parents[1])}
    argv = [sys.executable, "-m", "slurm_pool.metrics.cli", "--once", "--state-dir", "", "--reclaim-window", "0"]
    res = subprocess.run(
        [*argv, "--spec", str(spec), "--kubeconfig", str(bridge.kubeconfig)],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    for line in res.stdout.splitlines():
        if line.startswith("slurm_pool_inference_demand_gpus "):
            return float(line.split()[1])
    return None


def _fence_all(bridge) -> None:
    """No inference demand yet: every node is Slurm's and closed to Kubernetes."""
    report = bridge.reconcile(NIGHT)
    assert report.ok, report.text()
    assert all(bridge.fenced(n) for n in NODES), report.text()


def _lend_one(bridge, node: str = "a-gpu1"):
    """Fence everything, then ask for 2 GPUs of inference: ``node`` is lent and serves both pods."""
    _fence_all(bridge)
    bridge.create_isvc("llm", replicas=2)
    wait_for(lambda: len(bridge.predictors()) == 2, timeout=30, what="2 predictor pods created")
    assert bridge.running_on() == {}, "fenced nodes take no predictor pods"
    report = bridge.reconcile(NIGHT)
    assert report.ok, report.text()
    assert report.plan.node(node).intent == "lend", report.text()
    bridge.wait_predictors(2, node)
    return report


def test_idle_node_is_lent_and_second_run_is_a_no_op(bridge, monkeypatch):
    report = _lend_one(bridge)
    events = bridge.core.list_namespaced_event(
        "default", field_selector="involvedObject.name=a-gpu1,reason=SlurmPoolLent"
    ).items
    assert events and events[-1].involved_object.kind == "Node", events
    ph = bridge.placeholders()
    assert len(ph) == 1, ph
    assert ph[0] | {"id": "*"} == {
        "id": "*",
        "state": "RUNNING",
        "partition": "k8s-lend",
        "qos": "k8s-lend",
        "account": "k8s-bridge",
        "user": "slurmpool",
        "node": "a-gpu1",
        "comment": "slurm-pool:lend node=a-gpu1",
    }
    assert bridge.lent("a-gpu1")
    assert all(bridge.fenced(n) for n in NODES if n != "a-gpu1")
    assert [r.kind for r in report.results] == ["submit", "wait-running", "open"]

    again = bridge.reconcile(NIGHT)
    assert again.ok and again.plan.steps == [] and again.results == [], again.text()
    assert again.plan.node("a-gpu1").intent == "lent"

    # The cron command itself, on the example spec: also a no-op, exit 0.
    from slurm_pool.cli import cli

    for key, value in bridge.cluster.env.items():
        monkeypatch.setenv(key, value)
    result = CliRunner().invoke(
        cli,
        [
            "rebalance",
            "--spec",
            str(EXAMPLE_SPEC),
            "--kubeconfig",
            str(bridge.kubeconfig),
            "--now",
            "2026-01-07T02:00",
            "--json",
        ],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert out["results"] == [] and out["ok"] and out["window_open"]
    assert {n["node"]: n["intent"] for n in out["nodes"]}["a-gpu1"] == "lent"
    assert [p["id"] for p in bridge.placeholders()] == [ph[0]["id"]]
    dry = CliRunner().invoke(
        cli,
        [
            "rebalance",
            "--spec",
            str(EXAMPLE_SPEC),
            "--kubeconfig",
            str(bridge.kubeconfig),
            "--now",
            "2026-01-07T12:00",
            "--dry-run",
        ],
        catch_exceptions=False,
    )
    assert dry.exit_code == 0, dry.output
    assert "off-peak window closed" in dry.output and "[dry run]" in dry.output
    assert "a-gpu1       reclaim  outside the off-peak windows" in dry.output, dry.output
    assert bridge.lent("a-gpu1") and bridge.placeholders()[0]["state"] == "RUNNING", "a dry run changes nothing"


class Overlap(threading.Thread):
    """Polls every 0.2 s: is a job RUNNING on ``node`` while a pod is bound there or the node is open?"""

    def __init__(self, bridge, job: int, node: str):
        super().__init__(daemon=True)
        self.bridge, self.job, self.node = bridge, job, node
        self.samples: list[tuple[float, str, int, bool]] = []
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            state = self.bridge.cluster.job_field(self.job, "%T")
            pods = self.bridge.core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={self.node}").items
            bound = sum(
                1
                for p in pods
                if not (p.metadata.owner_references or []) or p.metadata.owner_references[0].kind != "DaemonSet"
            )
            schedulable = not self.bridge.node(self.node).spec.unschedulable
            self.samples.append((time.monotonic(), state, bound, schedulable))
            self.done.wait(0.2)

    def both_sides(self) -> list[tuple[float, str, int, bool]]:
        return [s for s in self.samples if s[1] == "RUNNING" and (s[2] or s[3])]


def _preempt_by_owner(bridge, node: str = "a-gpu1") -> int:
    """An owner's job on the lent ``node``; returns once it runs, checked to share nothing with a pod.

    Slurm itself preempts the placeholder, which fences its node before it exits: from the
    owner's start on, no pod is bound to the node and the node is closed, without waiting
    for the next rebalance run.
    """
    owner = bridge.cluster.sbatch(
        "-p", "a-owner", "--qos=guaranteed", "-A", "proja", "-w", node, "--gres=gpu:2",
        "-o", "/dev/null", "-D", "/tmp", user="alice", script=OWNER_JOB,
    )  # fmt: skip
    poller = Overlap(bridge, owner, node)
    poller.start()
    try:
        bridge.cluster.wait_state(owner, ["RUNNING"], timeout=30)
        wait_for(lambda: sum(s[1] == "RUNNING" for s in poller.samples) >= 10, timeout=30, what="10 samples")
    finally:
        poller.done.set()
        poller.join()
    assert poller.both_sides() == [], poller.samples
    assert bridge.fenced(node)
    return owner


def _slurm_time(bridge, job: int, field: str) -> float:
    """A time squeue prints for ``job`` (``%V`` its submission, ``%S`` its start), in seconds."""
    text = bridge.cluster.job_field(job, field)
    return time.mktime(time.strptime(text, "%Y-%m-%dT%H:%M:%S"))


def _pdb_all(bridge, name: str = "llm") -> None:
    """A PodDisruptionBudget of minAvailable = all 2 predictors, once the API server applies it."""
    selector = {"matchLabels": {"serving.kserve.io/inferenceservice": name}}
    bridge.policy.create_namespaced_pod_disruption_budget(
        bridge.namespace,
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": name},
            "spec": {"minAvailable": 2, "selector": selector},
        },
    )

    def budget_settled() -> bool:
        pdb = bridge.policy.read_namespaced_pod_disruption_budget(name, bridge.namespace)
        st = pdb.status
        return bool(
            st
            and st.observed_generation == pdb.metadata.generation
            and st.current_healthy == 2
            and st.disruptions_allowed == 0
        )

    wait_for(budget_settled, timeout=60, what="PDB observed with no disruption allowed")


def test_kserve_min_replicas_drive_lending_and_giving_back(bridge, tmp_path):
    """Real KServe: the service becomes Ready on a lent node; more minReplicas lends another node, fewer
    gives one back.  The exporter, given the bridge, exports the same demand the planner sees."""
    _lend_one(bridge)
    wait_for(lambda: is_ready(bridge.isvc()), timeout=90, what="llm Ready through KServe")
    assert sorted(bridge.running_on().values()) == ["a-gpu1", "a-gpu1"]

    bridge.set_min_replicas(4)
    wait_for(lambda: bridge.hpa_desired() == 4, timeout=60, what="KServe's HPA asking for 4 replicas")
    wait_for(lambda: len(bridge.predictors()) == 4, timeout=60, what="4 predictor pods created")
    assert _exported_demand(bridge, tmp_path) == 4
    report = bridge.reconcile(NIGHT)
    assert report.ok, report.text()
    assert report.plan.demand_gpus == 4, report.text()
    grown = [n for n in NODES if n != "a-gpu1" and report.plan.node(n).intent == "lend"]
    assert len(grown) == 1, report.text()
    wait_for(
        lambda: sorted(bridge.running_on().values()) == sorted(["a-gpu1", "a-gpu1", grown[0], grown[0]]),
        timeout=90,
        what=f"4 predictors Running on a-gpu1 and {grown[0]}",
    )
    assert bridge.lent("a-gpu1") and bridge.lent(grown[0])

    bridge.set_min_replicas(1)
    wait_for(lambda: len(bridge.running_on()) == 1 and len(bridge.predictors()) == 1, timeout=90, what="1 predictor")
    assert _exported_demand(bridge, tmp_path) == 1
    report = bridge.reconcile(NIGHT)
    assert report.ok, report.text()
    assert report.plan.demand_gpus == 1, report.text()
    kept = [n for n in ("a-gpu1", grown[0]) if report.plan.node(n).intent in ("lend", "lent")]
    assert len(kept) == 1 and list(bridge.running_on().values()) == kept, report.text()
    returned = next(n for n in ("a-gpu1", grown[0]) if n not in kept)
    assert report.plan.node(returned).intent == "reclaim", report.text()
    assert bridge.fenced(returned) and not bridge.lent(returned)
    assert [p["node"] for p in bridge.placeholders()] == kept
    assert is_ready(bridge.isvc())


def test_a_pdb_of_min_available_all_cannot_hold_a_preempted_node(bridge):
    _lend_one(bridge)
    _pdb_all(bridge)
    _preempt_by_owner(bridge)  # Slurm has decided: the fence deletes the pods, it does not ask
    assert "a-gpu1" not in bridge.running_on().values()


def test_owner_job_preempts_placeholder_and_reclaim_is_fast(bridge):
    _lend_one(bridge)
    placeholder = bridge.placeholders()[0]["id"]
    owner = _preempt_by_owner(bridge)
    # The owner's wait as slurmctld recorded it (its submit to its start), not this test's polling: one lend
    # tier GraceTime (10 s) on a quiet machine, stretched like every wait here for a loaded one
    # (tests/support/patience.py).  bench/reclaim_latency.py measures the latency itself.
    owner_wait = _slurm_time(bridge, owner, "%S") - _slurm_time(bridge, owner, "%V")
    assert owner_wait < patience(10), f"owner waited {owner_wait:.1f}s"
    ended = PLACEHOLDER_ENDED
    bridge.cluster.wait_sacct(int(placeholder), "State", lambda v: v.startswith(ended))
    assert not bridge.placeholders(), "a preempted placeholder does not come back"

    began = time.monotonic()
    report = bridge.reconcile(NIGHT)
    took = time.monotonic() - began
    assert report.ok, report.text()
    node = report.plan.node("a-gpu1")
    assert node.intent == "reclaim" and any("placeholder" in r for r in node.reasons), report.text()
    # One run gives the node back completely: fenced, unlabelled, no inference pods left.
    assert bridge.fenced("a-gpu1") and not bridge.lent("a-gpu1")
    assert "slurm-pool/lent" not in (bridge.node("a-gpu1").metadata.labels or {})
    assert "a-gpu1" not in bridge.running_on().values()
    assert took < patience(45), f"reclaim took {took:.1f}s"
    # The same run lent the next idle node, so inference moves there.
    assert report.plan.node("a-gpu2").intent == "lend"
    bridge.wait_predictors(2, "a-gpu2")
    assert bridge.cluster.job_field(owner, "%T") == "RUNNING"
    assert bridge.reconcile(NIGHT).plan.steps == []


def test_human_drained_node_is_never_lent_and_its_drain_is_untouched(bridge):
    reason = "disk swap, ask alice"
    bridge.cluster.run(["scontrol", "update", "NodeName=a-gpu1", "State=DRAIN", f"Reason={reason}"], check=True)
    try:
        _lend_one(bridge, node="a-gpu2")
        for now in (NIGHT, NOON, NIGHT):
            report = bridge.reconcile(now)
            assert report.ok, report.text()
            a1 = report.plan.node("a-gpu1")
            assert a1.intent == "slurm" and any("by a person" in r and reason in r for r in a1.reasons), report.text()
        # (a-gpu2 went back at noon and may still be completing its placeholder: another node serves.)
        assert not bridge.lent("a-gpu1") and bridge.fenced("a-gpu1")
        assert [n for n in NODES if bridge.lent(n)] in (["a-gpu2"], ["b-gpu1"]), report.text()
        assert all(p["node"] != "a-gpu1" for p in bridge.placeholders())
        node = bridge.cluster.slurm.node("a-gpu1")
        assert node.drained and node.reason == reason
    finally:
        bridge.cluster.run(["scontrol", "update", "NodeName=a-gpu1", "State=RESUME"])


def test_pdb_blocked_eviction_is_reported_and_retried_not_forced(bridge):
    _lend_one(bridge)
    _pdb_all(bridge)
    pods = sorted(bridge.running_on())
    placeholder = bridge.placeholders()[0]["id"]

    for attempt in (1, 2):  # off-peak is over: reclaim, refused both times
        report = bridge.reconcile(NOON)
        assert report.exit_code == 1, report.text()
        evict = [r for r in report.results if r.node == "a-gpu1" and r.kind == "evict"]
        assert len(evict) == 1 and evict[0].blocked and not evict[0].ok, report.text()
        assert len(evict[0].errors) == 2 and all("429" in e for e in evict[0].errors), evict[0].errors
        assert [r.kind for r in report.results if r.node == "a-gpu1"] == (
            ["fence", "evict"] if attempt == 1 else ["evict"]
        )
        # Not forced: the pods still run there, the placeholder still holds the node.
        assert sorted(bridge.running_on()) == pods and set(bridge.running_on().values()) == {"a-gpu1"}
        assert [p["id"] for p in bridge.placeholders()] == [placeholder]
        assert bridge.fenced("a-gpu1")
        assert "slurm-pool/reclaim-since" in bridge.node("a-gpu1").metadata.annotations

    bridge.policy.delete_namespaced_pod_disruption_budget("llm", bridge.namespace)
    wait_for(
        lambda: not bridge.policy.list_namespaced_pod_disruption_budget(bridge.namespace).items,
        timeout=30,
        what="PDB gone",
    )
    report = bridge.reconcile(NOON)
    assert report.ok, report.text()
    assert not bridge.placeholders() and not bridge.lent("a-gpu1") and bridge.fenced("a-gpu1")
    assert "a-gpu1" not in bridge.running_on().values()
    assert "slurm-pool/reclaim-since" not in (bridge.node("a-gpu1").metadata.annotations or {})


def test_a_pending_job_that_fits_no_lendable_node_leaves_lending_alone(bridge):
    """A shared-tier job for H100s pends while the one H100 node runs its owner's job: it claims
    b-gpu1 only, so the A100 node is still lent (a partition-only veto would lend nothing)."""
    _fence_all(bridge)
    owner = bridge.cluster.sbatch(
        "-p", "b-owner", "--qos=guaranteed", "-A", "projb", "-w", "b-gpu1", "--gres=gpu:2",
        "-o", "/dev/null", "-D", "/tmp", user="bob", script=OWNER_JOB,
    )  # fmt: skip
    bridge.cluster.wait_state(owner, ["RUNNING"], timeout=30)
    waiting = bridge.cluster.sbatch(
        "-p", "shared", "--qos=shared", "-A", "proja", "--gres=gpu:nvidia_h100_80gb_hbm3:2", "--time=10",
        "-o", "/dev/null", "-D", "/tmp", user="alice", script=OWNER_JOB,
    )  # fmt: skip
    wait_for(
        lambda: bridge.cluster.job_field(waiting, "%T|%r") in ("PENDING|Resources", "PENDING|Priority"),
        timeout=30,
        what="the H100 job pending for resources",
    )
    bridge.create_isvc("llm", replicas=2)
    wait_for(lambda: len(bridge.predictors()) == 2, timeout=30, what="2 predictor pods created")
    report = bridge.reconcile(NIGHT)
    assert report.ok, report.text()
    assert report.plan.node("a-gpu1").intent == "lend", report.text()
    assert any(f"pending job(s) {waiting}" in r for r in report.plan.node("b-gpu1").reasons), report.text()
    bridge.wait_predictors(2, "a-gpu1")
    assert bridge.cluster.job_field(waiting, "%T") == "PENDING"  # it never wanted the A100 node


def test_a_placeholder_whose_node_is_no_longer_selected_is_cancelled(bridge):
    from slurm_pool.bridge.k8s import KubernetesAPI
    from slurm_pool.bridge.reconcile import reconcile
    from slurm_pool.bridge.slurm_side import SlurmSide

    _lend_one(bridge)
    placeholder = int(bridge.placeholders()[0]["id"])
    label = "slurm-pool-test/selected"
    for n in NODES:
        if n != "a-gpu1":
            bridge.core.patch_node(n, {"metadata": {"labels": {label: "yes"}}})
    try:
        config = bridge.config.model_copy(update={"node_selector": f"{label}=yes"})
        k8s = KubernetesAPI(bridge.api, config)
        report = reconcile(SlurmSide(bridge.cluster.slurm, config), k8s, config, now=NIGHT)
        assert report.ok, report.text()
        assert "orphaned placeholder" in report.plan.node("a-gpu1").reasons[0], report.text()
        ended = PLACEHOLDER_ENDED
        bridge.cluster.wait_sacct(placeholder, "State", lambda v: v.startswith(ended))
        assert not [p for p in bridge.placeholders() if p["node"] == "a-gpu1"]
    finally:
        for n in NODES:
            bridge.core.patch_node(n, {"metadata": {"labels": {label: None}}})


def test_a_dry_run_sees_every_node(bridge, monkeypatch):
    """`rebalance --dry-run` plans for every Slurm node of the lend partition (issue 9: on 23.02+ the
    node records come from scontrol show nodes --json; reading sinfo --json there found none)."""
    from slurm_pool.cli import cli

    for key, value in bridge.cluster.env.items():
        monkeypatch.setenv(key, value)
    result = CliRunner().invoke(
        cli,
        [
            "rebalance",
            "--spec",
            str(EXAMPLE_SPEC),
            "--kubeconfig",
            str(bridge.kubeconfig),
            "--now",
            "2026-01-07T02:00",
            "--dry-run",
            "--json",
        ],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert sorted(n["node"] for n in out["nodes"]) == sorted(NODES), out["nodes"]
    assert bridge.placeholders() == [], "a dry run submits nothing"


def test_a_run_finding_another_runs_lease_changes_nothing_and_exits_0(bridge, monkeypatch):
    """Issue 10, safe reconcile: the lock is built in (a Kubernetes Lease), and a run that cannot
    take it exits 0 without touching Slurm or Kubernetes."""
    from slurm_pool.bridge import lease
    from slurm_pool.cli import cli

    for key, value in bridge.cluster.env.items():
        monkeypatch.setenv(key, value)
    ns, name = bridge.config.lease_namespace, bridge.config.lease_name
    held = lease.claim(bridge.k8s.read_lease(ns, name), name, "another-run", datetime.now(timezone.utc), 300)
    bridge.k8s.write_lease(ns, held)
    try:
        result = CliRunner().invoke(
            cli,
            ["rebalance", "--spec", str(EXAMPLE_SPEC), "--kubeconfig", str(bridge.kubeconfig),
             "--now", "2026-01-07T02:00"],
            catch_exceptions=False,
        )  # fmt: skip
        assert result.exit_code == 0, result.output
        assert "skipped: another rebalance run (another-run) holds Lease" in result.output, result.output
        assert bridge.placeholders() == [] and not any(bridge.fenced(n) for n in NODES), "nothing changed"
    finally:
        current = bridge.k8s.read_lease(ns, name)
        freed = lease.released(current, "another-run") if current else None
        if freed:
            bridge.k8s.write_lease(ns, freed)
    assert bridge.reconcile(NIGHT).ok, "the next run takes the freed Lease"


def _job_info(bridge, job: int) -> dict[str, str]:
    out = bridge.cluster.run(["scontrol", "show", "job", "-o", str(job)], check=True).stdout
    return dict(f.split("=", 1) for f in out.split() if "=" in f)


def test_a_spot_job_waits_for_a_lent_node_that_serves_no_pod(bridge):
    """The example's scavenger tier does not preempt k8s-lend: a spot job that fits only the lent node
    leaves its predictors alone through several scheduling passes (Slurm preempts nothing, the bridge
    reclaims nothing and says why).  Once inference no longer needs the node, it goes back and the job runs."""
    _lend_one(bridge)
    placeholder = int(bridge.placeholders()[0]["id"])
    spot = bridge.cluster.sbatch(
        "-p", "scavenger", "--qos=scavenger", "-A", "proja", "-w", "a-gpu1", "--gres=gpu:1",
        "--signal=B:USR1@30", "-o", "/dev/null", "-D", "/tmp", user="alice", script=OWNER_JOB,
    )  # fmt: skip
    submitted = datetime.fromisoformat(_job_info(bridge, spot)["SubmitTime"])
    passes = 2 * bridge.cluster.spec.scheduler.bf_interval + 2

    def evaluated() -> bool:
        """It left PENDING (Slurm preempted for it), or the scheduler looked at it ``passes``s after its submit."""
        info = _job_info(bridge, spot)
        last = datetime.fromisoformat(info["LastSchedEval"])
        return info["JobState"] != "PENDING" or (last - submitted).total_seconds() >= passes

    wait_for(evaluated, timeout=120, what=f"the scheduler (main and backfill) evaluating the spot job for {passes}s")
    assert bridge.cluster.job_field(spot, "%T") == "PENDING"
    assert _job_info(bridge, placeholder)["PreemptTime"] in ("None", "Unknown"), "Slurm preempted for a spot job"
    report = bridge.reconcile(NIGHT)
    assert report.ok, report.text()
    assert report.plan.node("a-gpu1").intent == "lent", report.text()
    assert any(f"pending job(s) {spot} of tiers that do not preempt k8s-lend wait" in n for n in report.plan.notes)
    assert sorted(bridge.running_on().values()) == ["a-gpu1", "a-gpu1"] and bridge.lent("a-gpu1")

    from tests.support.kserve import GROUP, PLURAL, VERSION

    bridge.custom.delete_namespaced_custom_object(GROUP, VERSION, bridge.namespace, PLURAL, "llm")
    wait_for(lambda: not bridge.predictors(), timeout=90, what="llm's predictors gone")
    report = bridge.reconcile(NIGHT)
    assert report.ok, report.text()
    assert report.plan.node("a-gpu1").intent == "reclaim", report.text()
    bridge.cluster.wait_state(spot, ["RUNNING"], timeout=60)
    assert bridge.fenced("a-gpu1") and not bridge.placeholders()


def test_a_mig_node_is_lent_for_a_service_on_a_mig_slice(bridge):
    """Real KServe: a predictor asking for one nvidia.com/mig-3g.20gb makes the bridge lend c-gpu1 (the
    example's MIG node, which the device plugin shows as 1 GPU + 1 slice), and only c-gpu1; the service
    becomes Ready there.  Deleted, its node goes back to Slurm."""
    from tests.support.k8s import MIG_SLICE
    from tests.support.kserve import GROUP, PLURAL, VERSION

    _fence_all(bridge)
    bridge.create_isvc("small", replicas=1, resource=MIG_SLICE)
    wait_for(lambda: len(bridge.predictors("small")) == 1, timeout=30, what="1 predictor pod created")
    report = bridge.reconcile(NIGHT)
    assert report.ok, report.text()
    assert report.plan.demand_by_resource == {MIG_SLICE: 1}, report.text()
    assert [n for n in NODES if report.plan.node(n).intent == "lend"] == ["c-gpu1"], report.text()
    assert f"MIG slices: {MIG_SLICE} 1 wanted, 1 lent" in report.text()
    bridge.wait_predictors(1, "c-gpu1", name="small")
    wait_for(lambda: is_ready(bridge.isvc("small")), timeout=90, what="small Ready through KServe")
    assert [p["node"] for p in bridge.placeholders()] == ["c-gpu1"]
    assert bridge.reconcile(NIGHT).plan.steps == []

    bridge.custom.delete_namespaced_custom_object(GROUP, VERSION, bridge.namespace, PLURAL, "small")
    wait_for(lambda: not bridge.predictors("small"), timeout=90, what="small's predictor gone")
    report = bridge.reconcile(NIGHT)
    assert report.ok and report.plan.node("c-gpu1").intent == "reclaim", report.text()
    assert bridge.fenced("c-gpu1") and not bridge.placeholders()
