"""The bridge's pure planner (table-driven) and its executor against fakes.

Slurm is a small in-memory model answering the real commands through
RecordingRunner (``sinfo/squeue --json``, ``sbatch``, ``squeue -j``,
``scancel``); Kubernetes is a dict-backed :class:`FakeK8s` with fault
injection (PDB 429s, API errors).
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from slurm_pool.adapters.runner import RecordingRunner, Result
from slurm_pool.adapters.slurm import SlurmClient
from slurm_pool.bridge.execute import Executor
from slurm_pool.bridge.k8s import K8sError, fence_patch, open_patch, release_patch
from slurm_pool.bridge.model import LENT_LABEL, RECLAIM_SINCE, RECLAIM_TAINT, build_snapshot, isvc_gpus
from slurm_pool.bridge.plan import plan
from slurm_pool.bridge.reconcile import observe, reconcile
from slurm_pool.bridge.slurm_side import SlurmSide
from slurm_pool.bridge.windows import in_window, off_peak
from slurm_pool.spec.bridge import Bridge, OffPeakWindow, check_bridge
from slurm_pool.versions import SlurmVersion
from tests.support.k8s_fake import NODES, FakeK8s, isvc, merge, node_manifest, pod_manifest
from tests.support.narrow_text import as_json_calls

pytestmark = pytest.mark.usefixtures("narrow_from_json")


EXAMPLE_SPEC = str(Path(__file__).resolve().parents[2] / "examples" / "pool.yaml")
OWNER = {"a-gpu1": "a-owner", "a-gpu2": "a-owner", "b-gpu1": "b-owner", "c-gpu1": "c-owner"}
GRES = {
    "a-gpu1": "gpu:nvidia_a100-sxm4-80gb:2",
    "a-gpu2": "gpu:nvidia_a100-sxm4-80gb:2",
    "b-gpu1": "gpu:nvidia_h100_80gb_hbm3:2",
    "c-gpu1": "gpu:nvidia_a100_3g.20gb:1,gpu:nvidia_a100-sxm4-40gb:1",
}
NIGHT = datetime(2026, 1, 7, 2, 0, tzinfo=timezone.utc)  # a Wednesday, 02:00
NOON = datetime(2026, 1, 7, 12, 0, tzinfo=timezone.utc)
CONFIG = Bridge(timezone="UTC", reclaim_wait=5, placeholder_start_timeout=5)


# -- fakes -------------------------------------------------------------------------


@dataclass
class FakeSlurm:
    """Slurm as its commands show it; jobs start at once on a free node."""

    drains: dict[str, str] = field(default_factory=dict)
    jobs: list[dict[str, Any]] = field(default_factory=list)
    next_id: int = 100

    def install(self, runner: RecordingRunner) -> RecordingRunner:
        runner.on(["sinfo", "--version"], "slurm 22.05.8\n")  # node records in 22.05's sinfo --json shape
        runner.respond(["sinfo", "--json"], lambda a, i: self._ok(a, json.dumps({"nodes": self._nodes()})))
        runner.respond(["squeue", "--json"], lambda a, i: self._ok(a, json.dumps({"jobs": self.jobs})))
        runner.respond(["squeue", "-h", "-j"], self._state)
        runner.respond(["sbatch"], self._sbatch)
        runner.respond(["scancel"], self._scancel)
        return runner

    @staticmethod
    def _ok(argv: tuple[str, ...], out: str) -> Result:
        return Result(argv, 0, out, "")

    def _on(self, node: str) -> list[dict[str, Any]]:
        return [j for j in self.jobs if j["nodes"] == node and j["job_state"] == "RUNNING"]

    def _nodes(self) -> list[dict[str, Any]]:
        out = []
        for n in NODES:
            flags = ["DRAIN"] if n in self.drains else []
            out.append(
                {
                    "name": n,
                    "state": "allocated" if self._on(n) else "idle",
                    "state_flags": flags,
                    "reason": self.drains.get(n, ""),
                    "partitions": [OWNER[n], "shared", "scavenger", "k8s-lend"],
                    "gres": GRES[n],
                    "features": [OWNER[n].split("-")[0] + "-node"],
                }
            )
        return out

    def add(self, state: str, partition: str, node: str = "", comment: str = "", **raw: Any) -> int:
        self.next_id += 1
        self.jobs.append(
            {
                "job_id": self.next_id,
                "job_state": state,
                "partition": partition,
                "nodes": node if state != "PENDING" else "",
                "comment": comment,
                "restart_cnt": 0,
                "required_nodes": "",
                "excluded_nodes": "",
                "state_reason": "None",
                "name": "job",
                **raw,
            }
        )
        return self.next_id

    def _sbatch(self, argv: tuple[str, ...], script: str | None) -> Result:
        opts = dict(a[2:].split("=", 1) for a in argv if a.startswith("--") and "=" in a)
        node = opts["nodelist"]
        state = "PENDING" if self._on(node) or node in self.drains else "RUNNING"
        job = self.add(state, opts["partition"], node, opts["comment"])
        self.jobs[-1]["nodes"] = node
        return Result(argv, 0, f"{job}\n", "")

    def _state(self, argv: tuple[str, ...], _in: str | None) -> Result:
        job = next((j for j in self.jobs if str(j["job_id"]) == argv[3]), None)
        return Result(argv, 0, f"{job['job_state']}|{job['state_reason']}\n" if job else "", "")

    def _scancel(self, argv: tuple[str, ...], _in: str | None) -> Result:
        for j in self.jobs:
            if str(j["job_id"]) in argv[1:]:
                j["job_state"] = "CANCELLED"
        return Result(argv, 0, "", "")

    def preempt(self, job_id: int, requeue: bool = False) -> None:
        j = next(j for j in self.jobs if j["job_id"] == job_id)
        j["job_state"] = "PENDING" if requeue else "COMPLETED"
        j["restart_cnt"] += int(requeue)


class World:
    """A fake Slurm and a fake Kubernetes wired to the bridge."""

    def __init__(self, config: Bridge = CONFIG):
        self.config = config
        self.slurm = FakeSlurm()
        self.runner = self.slurm.install(RecordingRunner())
        self.k8s = FakeK8s()
        self.side = SlurmSide(SlurmClient(self.runner), config, submit_as="slurmpool")
        self.clock = 0.0

    def _sleep(self, s: float) -> None:
        self.clock += s

    def run(self, now: datetime = NIGHT, **kw: Any):
        ex = Executor(self.side, self.k8s, self.config, clock=lambda: self.clock, sleep=self._sleep, poll=0.5)
        return reconcile(self.side, self.k8s, kw.pop("config", self.config), now=now, executor=ex, **kw)

    def plan(self, now: datetime = NIGHT, **kw: Any):
        return plan(observe(self.side, self.k8s, self.config), self.config, now, **kw)

    def placeholders(self, state: str = "RUNNING") -> dict[str, int]:
        return {
            j["nodes"]: j["job_id"]
            for j in self.slurm.jobs
            if j["comment"].startswith("slurm-pool:lend") and j["job_state"] == state
        }

    def settle(self) -> None:
        """Fence everything (no demand) so scenarios start from the steady state."""
        assert self.run(now=NOON).ok


def world(demand_gpus: int = 0, **config: Any) -> World:
    w = World(CONFIG.model_copy(update=config) if config else CONFIG)
    w.settle()
    if demand_gpus:
        w.k8s.isvcs.append(isvc("llm", demand_gpus))
    return w


# -- spec ------------------------------------------------------------------------------


def test_bridge_defaults_match_the_example_pool():
    from slurm_pool.spec import load_spec

    spec = load_spec(EXAMPLE_SPEC)
    assert check_bridge(spec) == []
    assert check_bridge(spec, Bridge(account="proja")) == [
        "bridge.account: project 'proja' may not use tier 'k8s-lend'",
        "bridge.user: 'slurmpool' is not a user of project 'proja'",
    ]
    with pytest.raises(ValueError, match="time of day"):
        OffPeakWindow(start="25:00", end="07:00")
    with pytest.raises(ValueError, match="time zone"):
        Bridge(timezone="Mars/Olympus")


@pytest.mark.parametrize(
    "window, when, inside",
    [
        (("19:00", "07:00", None), datetime(2026, 1, 7, 23, 30), True),
        (("19:00", "07:00", None), datetime(2026, 1, 7, 6, 59), True),
        (("19:00", "07:00", None), datetime(2026, 1, 7, 7, 0), False),
        (("19:00", "07:00", None), datetime(2026, 1, 7, 12, 0), False),
        # Friday's night window runs into Saturday morning, and no further.
        (("19:00", "07:00", ["fri"]), datetime(2026, 1, 10, 3, 0), True),  # Sat 03:00
        (("19:00", "07:00", ["fri"]), datetime(2026, 1, 11, 3, 0), False),  # Sun 03:00
        (("19:00", "07:00", ["fri"]), datetime(2026, 1, 9, 3, 0), False),  # Fri 03:00
        (("00:00", "24:00", ["sat", "sun"]), datetime(2026, 1, 11, 15, 0), True),
        (("00:00", "24:00", ["sat", "sun"]), datetime(2026, 1, 12, 15, 0), False),
        (("09:00", "17:00", None), datetime(2026, 1, 7, 9, 0), True),
    ],
)
def test_off_peak_windows(window, when, inside):
    start, end, days = window
    w = OffPeakWindow(start=start, end=end, **({"days": days} if days else {}))
    assert in_window(w, when) is inside


def test_off_peak_uses_the_configured_time_zone():
    cfg = Bridge(timezone="Asia/Tokyo", off_peak=[OffPeakWindow(start="19:00", end="07:00")])
    assert off_peak(cfg, datetime(2026, 1, 7, 13, 0, tzinfo=timezone.utc))  # 22:00 in Tokyo
    assert not off_peak(cfg, datetime(2026, 1, 7, 2, 0, tzinfo=timezone.utc))  # 11:00 in Tokyo


def test_isvc_gpu_demand():
    assert isvc_gpus(isvc("a", 3, gpus=2), "nvidia.com/gpu") == 6
    status = {**isvc("b", 1), "status": {"desiredReplicas": 4}}  # no such field in KServe: ignored
    assert isvc_gpus(status, "nvidia.com/gpu") == 1
    meta = {"metadata": {"name": "c", "namespace": "serve"}}  # every service has a name: no name, no demand read
    cpu_only = meta | {"spec": {"predictor": {"minReplicas": 2, "maxReplicas": 5}}}
    assert isvc_gpus(cpu_only, "nvidia.com/gpu") == 0
    ranged = meta | {
        "spec": {
            "predictor": {
                "minReplicas": 1,
                "maxReplicas": 3,
                "containers": [{"resources": {"requests": {"nvidia.com/gpu": "1"}}}],
            }
        }
    }
    assert isvc_gpus(ranged, "nvidia.com/gpu") == 1  # maxReplicas is no demand until the HPA asks


# -- planner, table-driven -----------------------------------------------------------------


def _lent_world(node: str = "a-gpu1", demand: int = 2, **config: Any) -> tuple[World, int]:
    """A world where ``node`` is lent (placeholder running, node open) and holds predictor pods."""
    w = world(demand, **config)
    assert w.run().ok
    assert w.k8s.lent(node)
    w.k8s.pods += [pod_manifest("llm-0", node), pod_manifest("llm-1", node)]
    return w, w.placeholders()[node]


def intents(p) -> dict[str, str]:
    return {n.node: n.intent for n in p.nodes}


def kinds(p, node: str) -> list[str]:
    return [s.kind for s in p.node(node).steps]


CASES = {
    # name: (demand GPUs, world changes, now, config, expected intents, reason fragment per node)
    "demand lends the first idle node": (
        2,
        None,
        NIGHT,
        {},
        {"a-gpu1": "lend", "a-gpu2": "slurm", "b-gpu1": "slurm", "c-gpu1": "slurm"},
        {},
    ),
    "no demand lends nothing": (0, None, NIGHT, {}, {"a-gpu1": "slurm"}, {"a-gpu1": "demand is met"}),
    "three GPUs need two nodes": (3, None, NIGHT, {}, {"a-gpu1": "lend", "a-gpu2": "lend", "b-gpu1": "slurm"}, {}),
    "cap on lent nodes": (8, None, NIGHT, {"max_lent_nodes": 1}, {"a-gpu1": "lend", "a-gpu2": "slurm"}, {}),
    "human drain is never lent": (
        2,
        lambda w: w.slurm.drains.update({"a-gpu1": "disk swap, ask bob"}),
        NIGHT,
        {},
        {"a-gpu1": "slurm", "a-gpu2": "lend"},
        {"a-gpu1": "by a person (disk swap, ask bob)"},
    ),
    "slurm-pool's own drain is not lent either": (
        2,
        lambda w: w.slurm.drains.update({"a-gpu1": "slurm-pool: mig repartition"}),
        NIGHT,
        {},
        {"a-gpu1": "slurm", "a-gpu2": "lend"},
        {"a-gpu1": "slurm: DRAIN (slurm-pool: mig"},
    ),
    "busy node is not lent": (
        2,
        lambda w: w.slurm.add("RUNNING", "shared", "a-gpu1"),
        NIGHT,
        {},
        {"a-gpu1": "slurm", "a-gpu2": "lend"},
        {"a-gpu1": "on the node"},
    ),
    "pending job pinned to a node keeps it": (
        2,
        lambda w: w.slurm.add("PENDING", "a-owner", required_nodes="a-gpu1", state_reason="Resources"),
        NIGHT,
        {},
        {"a-gpu1": "slurm", "a-gpu2": "lend"},
        {"a-gpu1": "could run here"},
    ),
    "a one-node pending job in a partition of all nodes keeps one of them": (
        2,
        lambda w: w.slurm.add("PENDING", "shared", state_reason="Priority", tres_req_str="gres/gpu=1"),
        NIGHT,
        {},
        {"a-gpu1": "slurm", "a-gpu2": "lend", "b-gpu1": "slurm", "c-gpu1": "slurm"},
        {"a-gpu1": "could run here"},
    ),
    "a two-node pending job keeps two": (
        2,
        lambda w: w.slurm.add("PENDING", "shared", state_reason="Priority", node_count=2),
        NIGHT,
        {},
        {"a-gpu1": "slurm", "a-gpu2": "slurm", "b-gpu1": "lend"},
        {"a-gpu2": "could run here"},
    ),
    "a pending job asking more GPUs than a node has fits nowhere": (
        2,
        lambda w: w.slurm.add("PENDING", "shared", state_reason="Resources", tres_req_str="gres/gpu=8"),
        NIGHT,
        {},
        {"a-gpu1": "lend"},
        {},
    ),
    "a pending job asking a GPU type no node has fits nowhere": (
        2,
        lambda w: w.slurm.add(
            "PENDING", "shared", state_reason="Resources", tres_req_str="gres/gpu=1,gres/gpu:nvidia_h200=1"
        ),
        NIGHT,
        {},
        {"a-gpu1": "lend"},
        {},
    ),
    "a pending job asking a feature no node has fits nowhere": (
        2,
        lambda w: w.slurm.add("PENDING", "shared", state_reason="Resources", features="bigmem"),
        NIGHT,
        {},
        {"a-gpu1": "lend"},
        {},
    ),
    "a pending job of a type only one node has keeps that one": (
        2,
        lambda w: w.slurm.add(
            "PENDING", "shared", state_reason="Resources", tres_req_str="gres/gpu=2,gres/gpu:nvidia_h100_80gb_hbm3=2"
        ),
        NIGHT,
        {},
        {"a-gpu1": "lend", "b-gpu1": "slurm"},
        {"b-gpu1": "could run here"},
    ),
    "a pending job with a feature only the a nodes have keeps one of them": (
        2,
        lambda w: w.slurm.add("PENDING", "shared", state_reason="Resources", features="a-node"),
        NIGHT,
        {},
        {"a-gpu1": "slurm", "a-gpu2": "lend"},
        {"a-gpu1": "could run here"},
    ),
    "held pending job does not count": (
        2,
        lambda w: w.slurm.add("PENDING", "shared", state_reason="JobHeldUser"),
        NIGHT,
        {},
        {"a-gpu1": "lend"},
        {},
    ),
    "pending job excluding the node does not count": (
        2,
        lambda w: w.slurm.add("PENDING", "a-owner", excluded_nodes="a-gpu1", state_reason="Resources"),
        NIGHT,
        {},
        {"a-gpu1": "lend", "a-gpu2": "slurm"},
        {},
    ),
    "outside off-peak nothing is lent": (
        2,
        None,
        NOON,
        {},
        {"a-gpu1": "slurm"},
        {"a-gpu1": "outside the off-peak windows"},
    ),
    "demand may lend outside off-peak when configured": (
        2,
        None,
        NOON,
        {"lend_outside_off_peak": True},
        {"a-gpu1": "lend"},
        {},
    ),
    "disabled bridge lends nothing": (2, None, NIGHT, {"enabled": False}, {"a-gpu1": "slurm"}, {"a-gpu1": "disabled"}),
    "kubernetes cordon by someone else is respected": (
        2,
        lambda w: w.k8s.nodes["a-gpu1"]["spec"].update(unschedulable=True, taints=[]),
        NIGHT,
        {},
        {"a-gpu1": "slurm", "a-gpu2": "lend"},
        {"a-gpu1": "cordoned by someone else"},
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_planner_table(name):
    demand, change, now, config, want, reasons = CASES[name]
    w = world(demand, **config)
    if change:
        change(w)
    p = w.plan(now)
    got = intents(p)
    assert {n: got[n] for n in want} == want, p.to_dict()
    for node, fragment in reasons.items():
        assert any(fragment in r for r in p.node(node).reasons), p.node(node).reasons
    lent = [n for n, i in got.items() if i == "lend"]
    for n in lent:
        assert kinds(p, n) == ["submit", "wait-running", "open"]


RECLAIMS = {
    # name: (change to a world with a-gpu1 lent, now, config, reason fragment)
    "owner job preempted the placeholder": (
        lambda w, job: (w.slurm.preempt(job), w.slurm.add("RUNNING", "a-owner", "a-gpu1")),
        NIGHT,
        {},
        "placeholder not running",
    ),
    "requeued placeholder": (lambda w, job: w.slurm.preempt(job, requeue=True), NIGHT, {}, "preempted and requeued"),
    "pending owner job": (
        lambda w, job: w.slurm.add("PENDING", "a-owner", required_nodes="a-gpu1", state_reason="Resources"),
        NIGHT,
        {},
        "could run here",
    ),
    "off-peak is over": (lambda w, job: None, NOON, {}, "outside the off-peak windows"),
    "inference demand dropped": (lambda w, job: w.k8s.isvcs.clear(), NIGHT, {}, "demand dropped"),
    "a person drained the lent node": (
        lambda w, job: w.slurm.drains.update({"a-gpu1": "bad fan"}),
        NIGHT,
        {},
        "by a person (bad fan)",
    ),
    "placeholder cancelled by an admin": (
        lambda w, job: w.slurm._scancel(("scancel", str(job)), None),
        NIGHT,
        {},
        "placeholder not running",
    ),
}


def test_a_node_registered_with_our_taint_is_fenced_and_still_lendable():
    """A kubelet started with --register-with-taints=slurm-pool/reclaimed=true:NoSchedule is closed from its
    first registration; the bridge adds the cordon and may lend it later, as any fenced node."""
    w = World()
    w.k8s.nodes["a-gpu1"]["spec"]["taints"] = [{"key": RECLAIM_TAINT, "value": "true", "effect": "NoSchedule"}]
    p = w.plan(NOON)
    assert intents(p)["a-gpu1"] == "fence" and kinds(p, "a-gpu1") == ["fence"]
    assert w.run(NOON).ok and w.k8s.fenced("a-gpu1")
    assert [t["key"] for t in w.k8s.nodes["a-gpu1"]["spec"]["taints"]] == [RECLAIM_TAINT]  # not twice
    w.k8s.isvcs.append(isvc("llm", 2))
    assert intents(w.plan())["a-gpu1"] == "lend"


def test_lend_and_reclaim_are_recorded_as_node_events():
    w, _ = _lent_world()
    assert [(ns, e["reason"], e["involvedObject"]["name"]) for ns, e in w.k8s.events] == [
        ("default", "SlurmPoolLent", "a-gpu1")
    ]
    w.k8s.isvcs.clear()
    assert w.run().ok
    assert [e["reason"] for _, e in w.k8s.events] == ["SlurmPoolLent", "SlurmPoolReclaimed"]


def test_an_event_that_cannot_be_recorded_fails_no_step():
    class NoEvents(FakeK8s):
        def create_event(self, namespace: str, body: dict) -> None:
            raise K8sError(403, "events is forbidden")

    w = World()
    w.k8s = NoEvents()
    w.k8s.isvcs.append(isvc("llm", 2))
    report = w.run()
    assert report.ok, report.text()
    assert any("event SlurmPoolLent not recorded" in r.detail for r in report.results), report.text()


@pytest.mark.parametrize(
    ("how", "fence", "cancelled"),
    [
        ("deleted", None, True),
        ("unselected", "/etc/k.conf", True),
        ("unselected", None, False),  # its pods would stay on a node given back to Slurm
    ],
)
def test_an_orphaned_placeholder_is_cancelled(how: str, fence: str | None, cancelled: bool):
    w, job = _lent_world(fence_kubeconfig=fence)
    gone = w.k8s.nodes.pop("a-gpu1")
    if how == "unselected":  # the API server still has it; the selected list does not

        def read_node(name: str, real=w.k8s.read_node) -> dict:
            return gone if name == "a-gpu1" else real(name)

        w.k8s.read_node = read_node  # type: ignore[method-assign]
    p = w.plan()
    node = p.node("a-gpu1")
    assert "orphaned placeholder" in node.reasons[0], p.to_dict()
    assert [(s.kind, s.job_ids) for s in node.steps] == ([("cancel", (job,))] if cancelled else [])
    assert w.run().ok
    assert ("a-gpu1" not in w.placeholders()) is cancelled and w.plan().steps == []


def test_a_pending_one_gpu_scavenger_job_takes_back_at_most_one_node():
    w = world(6)
    assert w.run().ok and w.k8s.lent("a-gpu1") and w.k8s.lent("a-gpu2") and w.k8s.lent("b-gpu1")
    w.k8s.pods += [pod_manifest("llm-0", "a-gpu1"), pod_manifest("llm-1", "b-gpu1")]
    w.slurm.add("RUNNING", "c-owner", "c-gpu1")  # the one node Slurm kept is busy
    w.slurm.add("PENDING", "scavenger", state_reason="Priority", tres_req_str="gres/gpu=1")
    p = w.plan()
    assert sorted(n for n, i in intents(p).items() if i == "reclaim") == ["a-gpu2"], p.to_dict()  # the emptiest
    assert any("could run here" in r for r in p.node("a-gpu2").reasons)


@pytest.mark.parametrize(
    "qos, preemptors, pods_on, reclaimed",
    [
        # A spot tier that does not preempt k8s-lend never takes a node that serves pods ...
        ("scavenger", {"guaranteed", "shared"}, ["a-gpu1", "a-gpu2", "b-gpu1"], []),
        # ... but takes an empty lent node (no cold start), the one job at most one node.
        ("scavenger", {"guaranteed", "shared"}, ["a-gpu1", "b-gpu1"], ["a-gpu2"]),
        # A tier that preempts the placeholders claims as before: the emptiest lent node.
        ("shared", {"guaranteed", "shared"}, ["a-gpu1", "a-gpu2", "b-gpu1"], ["a-gpu1"]),
        # Without the spec's preemption graph (None) every job counts as preempting.
        ("scavenger", None, ["a-gpu1", "a-gpu2", "b-gpu1"], ["a-gpu1"]),
    ],
)
def test_a_spot_job_never_costs_inference_a_cold_start(qos, preemptors, pods_on, reclaimed):
    w = world(6)
    assert w.run().ok and all(w.k8s.lent(n) for n in ("a-gpu1", "a-gpu2", "b-gpu1"))
    w.k8s.pods += [pod_manifest(f"llm-{i}", n) for i, n in enumerate(pods_on)]
    w.slurm.drains["c-gpu1"] = "maintenance"  # the one node Slurm kept cannot take it
    job = w.slurm.add("PENDING", qos, state_reason="Priority", tres_req_str="gres/gpu=1", qos=qos)
    snap = observe(w.side, w.k8s, w.config, None if preemptors is None else frozenset(preemptors))
    p = plan(snap, w.config, NIGHT)
    assert sorted(n for n, i in intents(p).items() if i == "reclaim") == reclaimed, p.to_dict()
    waits = any(f"pending job(s) {job} of tiers that do not preempt k8s-lend wait" in n for n in p.notes)
    assert waits is (not reclaimed), p.notes


def test_the_example_spec_lets_no_spot_job_preempt_inference():
    from slurm_pool.spec import load_spec
    from slurm_pool.spec.bridge import lend_preemptors

    assert lend_preemptors(load_spec(EXAMPLE_SPEC)) == {"guaranteed", "shared"}


@pytest.mark.parametrize("name", list(RECLAIMS))
def test_reclaim_table(name):
    change, now, config, fragment = RECLAIMS[name]
    w, job = _lent_world(**config)
    change(w, job)
    p = w.plan(now)
    node = p.node("a-gpu1")
    assert node.intent == "reclaim", p.to_dict()
    assert any(fragment in r for r in node.reasons), node.reasons
    steps = kinds(p, "a-gpu1")
    assert steps[:3] == ["fence", "evict", "wait-empty"]
    assert steps[-1] == "release"
    assert ("cancel" in steps) == bool(
        w.slurm.jobs and any(j["job_id"] == job and j["job_state"] in ("RUNNING", "PENDING") for j in w.slurm.jobs)
    )
    # Carried out, the node is back with Slurm: fenced, empty, unlabelled, no placeholder.
    report = w.run(now)
    assert report.ok, report.text()
    assert w.k8s.fenced("a-gpu1") and not w.k8s.lent("a-gpu1")
    assert RECLAIM_SINCE not in w.k8s.node("a-gpu1")["metadata"]["annotations"]
    assert not [p for p in w.k8s.pods if p["spec"]["nodeName"] == "a-gpu1"]
    assert "a-gpu1" not in w.placeholders() and "a-gpu1" not in w.placeholders("PENDING")
    assert not w.runner.commands("scontrol"), "the bridge never touches drains"
    assert w.plan(now).node("a-gpu1").steps == ()


def test_surplus_reclaim_prefers_the_emptier_node():
    w = world(4)
    assert w.run().ok and w.k8s.lent("a-gpu1") and w.k8s.lent("a-gpu2")
    w.k8s.pods += [pod_manifest("llm-0", "a-gpu2"), pod_manifest("llm-1", "a-gpu2")]
    w.k8s.isvcs[:] = [isvc("llm", 2)]
    p = w.plan()
    assert intents(p)["a-gpu1"] == "reclaim" and intents(p)["a-gpu2"] == "lent"


@pytest.mark.parametrize(
    "demand, change, now",
    [
        (2, None, NIGHT),
        (5, None, NIGHT),
        (2, lambda w: w.slurm.drains.update({"a-gpu1": "maintenance"}), NIGHT),
        (2, lambda w: w.k8s.pods.append(pod_manifest("stray", "b-gpu1")), NIGHT),
        (0, None, NOON),
    ],
)
def test_idempotent(demand, change, now):
    """Carrying the plan out and planning again yields no steps; a second run changes nothing."""
    w = World()
    w.k8s.isvcs.append(isvc("llm", demand)) if demand else None
    if change:
        change(w)
    first = w.run(now)
    assert first.ok, first.text()
    assert w.plan(now).steps == []
    calls, patches = len(w.runner.calls), len(w.k8s.patches)
    second = w.run(now)
    assert second.results == [] and second.ok
    assert [c[0] for c in as_json_calls(w.runner.calls[calls:])] == ["sinfo", "squeue"], "a no-op run only reads"
    assert len(w.k8s.patches) == patches


def test_human_drain_is_untouched_and_node_never_lent():
    w = World()
    w.slurm.drains["a-gpu1"] = "maintenance: psu"
    w.k8s.isvcs.append(isvc("llm", 8))
    for now in (NIGHT, NOON, NIGHT):
        assert w.run(now).ok
    assert "a-gpu1" not in w.placeholders()
    assert not w.k8s.lent("a-gpu1")
    assert w.slurm.drains["a-gpu1"] == "maintenance: psu"
    assert not w.runner.commands("scontrol")
    submitted = [c for c in w.runner.commands("sbatch")]
    assert submitted and all("--nodelist=a-gpu1" not in c for c in submitted)


def test_lend_then_owner_preempts_then_reclaim_moves_inference():
    w, job = _lent_world()
    w.slurm.preempt(job)
    w.slurm.add("RUNNING", "a-owner", "a-gpu1")
    report = w.run()
    assert report.ok, report.text()
    assert w.k8s.fenced("a-gpu1") and w.k8s.lent("a-gpu2")
    assert sorted(w.k8s.evictions) == ["serve/llm-0", "serve/llm-1"]
    # Evictions of a-gpu1 ran before a-gpu2's placeholder wait: phases interleave nodes.
    order = [(r.node, r.kind) for r in report.results]
    assert order.index(("a-gpu1", "evict")) < order.index(("a-gpu2", "wait-running"))


def test_placeholder_command_line():
    w = World()
    argv = w.side.placeholder_argv("b-gpu1")
    assert argv[:3] == ["sbatch", "--parsable", "--uid=slurmpool"]
    for opt in (
        "--partition=k8s-lend",
        "--qos=k8s-lend",
        "--account=k8s-bridge",
        "--nodelist=b-gpu1",
        "--exclusive",
        "--mem=0",
        "--comment=slurm-pool:lend node=b-gpu1",
        "--signal=B:TERM@60",
    ):
        assert opt in argv
    assert "--no-requeue" not in argv  # 22.05: it would make Slurm wait out GraceTime


def test_placeholder_does_not_come_back_on_24_05_and_later():
    """26.05.3 requeues a requeueable job that exits after its grace signal; --no-requeue ends it PREEMPTED."""
    side = SlurmSide(SlurmClient(RecordingRunner(), version=SlurmVersion(26, 5, 3)), CONFIG, submit_as="slurmpool")
    assert "--no-requeue" in side.placeholder_argv("b-gpu1")


# -- executor fault injection ---------------------------------------------------------------


def test_pdb_blocked_eviction_is_reported_retried_and_not_forced():
    w, job = _lent_world()
    w.k8s.guarded.add("serve/llm-0")
    first = w.run(NOON)
    assert not first.ok and first.exit_code == 1
    evict = next(r for r in first.results if r.kind == "evict")
    assert evict.blocked and "serve/llm-0" in evict.errors[0] and "429" in evict.errors[0]
    assert evict.detail.startswith("evicted 1 of 2")
    # The node stays fenced and marked, the placeholder keeps it in Slurm: nothing forced.
    assert w.k8s.fenced("a-gpu1") and w.placeholders()["a-gpu1"] == job
    assert RECLAIM_SINCE in w.k8s.node("a-gpu1")["metadata"]["annotations"]
    assert [r.kind for r in first.results if r.node == "a-gpu1"] == ["fence", "evict"]
    assert w.k8s.deletions == []
    # Next run retries the eviction (and only it), still without force.
    second = w.run(NOON)
    assert not second.ok
    assert [r.kind for r in second.results if r.node == "a-gpu1"] == ["evict"]
    assert w.k8s.evictions.count("serve/llm-0") == 2 and w.k8s.deletions == []
    # The budget allows it now: the reclaim completes.
    w.k8s.guarded.clear()
    third = w.run(NOON)
    assert third.ok, third.text()
    assert "a-gpu1" not in w.placeholders() and not w.k8s.lent("a-gpu1")


def test_force_after_deletes_pods_stuck_past_the_deadline():
    w, job = _lent_world()
    w.k8s.guarded.add("serve/llm-0")
    assert not w.run(NOON, force_after=600).ok  # reclaim begins, 429
    since = w.k8s.node("a-gpu1")["metadata"]["annotations"][RECLAIM_SINCE]
    assert datetime.fromisoformat(since) == NOON
    soon = NOON.replace(minute=5)
    assert not w.run(soon, force_after=600).ok and w.k8s.deletions == []  # 5 min < 10 min
    late = NOON.replace(minute=11)
    p = w.plan(late, force_after=600)
    assert p.node("a-gpu1").steps[0].kind == "evict" and p.node("a-gpu1").steps[0].force
    report = w.run(late, force_after=600)
    assert report.ok, report.text()
    assert w.k8s.deletions == ["serve/llm-0"]


def test_one_failing_eviction_does_not_stop_the_others():
    w = world(4)
    assert w.run().ok
    for node in ("a-gpu1", "a-gpu2"):
        w.k8s.pods += [pod_manifest(f"{node}-p0", node), pod_manifest(f"{node}-p1", node)]
    w.k8s.broken["serve/a-gpu1-p0"] = K8sError(500, "etcdserver: request timed out")
    report = w.run(NOON)
    assert report.exit_code == 1
    assert sorted(w.k8s.evictions) == ["serve/a-gpu1-p0", "serve/a-gpu1-p1", "serve/a-gpu2-p0", "serve/a-gpu2-p1"]
    errors = report.to_dict()["errors"]
    assert errors == ["serve/a-gpu1-p0: 500: etcdserver: request timed out"]
    # a-gpu2 was given back completely; a-gpu1 keeps its placeholder until it is empty.
    assert "a-gpu2" not in w.placeholders() and not w.k8s.lent("a-gpu2")
    assert "a-gpu1" in w.placeholders()
    assert "FAILED" in report.text() and "etcdserver" in report.text()


def test_slurm_failure_for_one_node_does_not_stop_another():
    w = world(4)
    w.runner.respond(
        ["sbatch"],
        lambda a, i: (
            Result(a, 1, "", "sbatch: error: Batch job submission failed") if "--nodelist=a-gpu1" in a else None
        ),
    )
    report = w.run()
    assert report.exit_code == 1
    failed = [(r.node, r.kind) for r in report.failed]
    assert failed == [("a-gpu1", "submit")]
    assert "submission failed" in report.failed[0].errors[0]
    assert not w.k8s.lent("a-gpu1") and w.k8s.lent("a-gpu2")


def test_placeholder_that_does_not_start_is_reported_and_left_for_the_next_run():
    w = world(2)
    w.runner.respond(
        ["sbatch"],
        lambda a, i: (w.slurm._sbatch(a, i), w.slurm.jobs[-1].update(job_state="PENDING", state_reason="Priority"))[0],
    )
    report = w.run()
    wait = next(r for r in report.results if r.kind == "wait-running")
    assert not wait.ok and "PENDING (Priority)" in wait.detail
    assert not w.k8s.lent("a-gpu1")
    # Next run waits for the same job instead of submitting another.
    p = w.plan()
    assert kinds(p, "a-gpu1") == ["wait-running", "open"]


def test_placeholder_preempted_after_its_wait_keeps_the_node_closed():
    """Issue 10, race 2: the placeholder is preempted between wait-running and open."""
    w = world(1)
    seen: list[int] = []

    def state(argv, script):
        res = w.slurm._state(argv, script)
        job = next(j for j in w.slurm.jobs if str(j["job_id"]) == argv[3])
        seen.append(job["job_id"])
        if len(seen) == 1:  # wait-running saw it RUNNING; then Slurm preempts and requeues it
            job.update(job_state="PENDING", state_reason="BeginTime", nodes="")
        return res

    w.runner.respond(["squeue", "-h", "-j"], state)
    report = w.run()
    opened = next(r for r in report.results if r.kind == "open")
    assert not opened.ok and "is PENDING (BeginTime): not opening the node" in opened.detail, opened
    assert not w.k8s.lent("a-gpu1")
    assert len(seen) == 2, "open re-read the placeholder after the wait"


def test_open_retried_after_a_conflict_checks_the_placeholder_again():
    """The fence of a placeholder preempted during open changes the Node: open's retry must not undo it."""
    w = world(1)
    real = w.k8s.patch_node
    tries: list[dict] = []

    def patch(name: str, body: dict) -> None:
        if body.get("metadata", {}).get("labels", {}).get(LENT_LABEL) == "true" and not tries:
            tries.append(body)
            job = next(j for j in w.slurm.jobs if j["comment"].startswith("slurm-pool:lend"))
            job.update(job_state="COMPLETED")  # preempted; its fence closed the node meanwhile
            raise K8sError(409, "the object has been modified")
        real(name, body)

    w.k8s.patch_node = patch  # type: ignore[method-assign]
    report = w.run()
    opened = next(r for r in report.results if r.kind == "open")
    assert not opened.ok and "is COMPLETED" in opened.detail, opened
    assert tries and not w.k8s.lent("a-gpu1")


def test_wait_for_pods_times_out_without_giving_the_node_back():
    w, job = _lent_world()
    w.k8s.linger = 1000
    report = w.run(NOON)
    wait = next(r for r in report.results if r.kind == "wait-empty")
    assert not wait.ok and "2 pod(s) still there" in wait.detail
    assert w.placeholders()["a-gpu1"] == job, "placeholder kept while pods remain"
    assert w.clock >= CONFIG.reclaim_wait


def test_node_patch_conflict_is_retried():
    w = world(2)
    real = w.k8s.read_node
    stale = {"n": 1}

    def read(name):
        node = real(name)
        if stale["n"]:
            stale["n"] -= 1
            node["metadata"]["resourceVersion"] = "0"
        return node

    w.k8s.read_node = read
    assert w.run().ok and w.k8s.lent("a-gpu1")


def test_dry_run_changes_nothing():
    w = World()
    w.k8s.isvcs.append(isvc("llm", 2))
    report = w.run(dry_run=True)
    assert report.ok and report.results == []
    assert report.plan.steps
    assert not w.runner.commands("sbatch") and not w.runner.commands("scancel") and not w.k8s.patches
    text = report.text()
    assert "[dry run]" in text and "plan    submit" in text


def test_patch_bodies_keep_foreign_taints():
    node = node_manifest("x")
    node["spec"]["taints"] = [{"key": "gpu-vendor", "value": "nv", "effect": "NoSchedule"}]
    fenced = copy.deepcopy(node)
    merge(fenced, fence_patch(node, "2026-01-07T02:00:00+00:00"))
    assert [t["key"] for t in fenced["spec"]["taints"]] == ["gpu-vendor", RECLAIM_TAINT]
    assert fenced["spec"]["unschedulable"] is True
    opened = copy.deepcopy(fenced)
    merge(opened, open_patch(fenced))
    assert [t["key"] for t in opened["spec"]["taints"]] == ["gpu-vendor"]
    assert "unschedulable" not in opened["spec"] and RECLAIM_SINCE not in opened["metadata"]["annotations"]
    assert opened["metadata"]["labels"] == {LENT_LABEL: "true"}
    merge(opened, release_patch(opened))
    assert opened["metadata"]["labels"] == {}


def test_snapshot_reads_slurm_json():
    """The snapshot builder on squeue/sinfo JSON shaped like slurm 22.05's."""
    w = World()
    w.slurm.add("RUNNING", "shared", "b-gpu1")
    w.slurm.add("PENDING", "a-owner,shared", required_nodes="a-gpu[1-2]", state_reason="Resources")
    snap = build_snapshot(CONFIG, w.side.nodes(), w.side.jobs(), w.k8s.list_nodes(), [], [])
    assert snap.busy == {"b-gpu1": (101,)}
    assert snap.pending[0].partitions == ("a-owner", "shared")
    assert snap.pending[0].required == frozenset({"a-gpu1", "a-gpu2"})
    assert snap.managed == list(NODES)


# -- command line ------------------------------------------------------------------------------


def test_now_option_is_wall_clock_in_the_bridge_time_zone():
    from slurm_pool.bridge.cli import parse_now

    tokyo = parse_now("2026-01-07T22:00", Bridge(timezone="Asia/Tokyo"))
    assert tokyo.utcoffset().total_seconds() == 9 * 3600
    assert off_peak(Bridge(timezone="Asia/Tokyo"), tokyo)
    assert parse_now("2026-01-07T02:00:00Z", Bridge()) == NIGHT


@pytest.mark.parametrize(
    "args, code, message",
    [
        (["--now", "yesterday"], 2, "not an ISO 8601 time"),
        (["--kubeconfig", "/nonexistent/kubeconfig"], 1, "cannot reach Kubernetes"),
        (["--force-after", "-5"], 2, "--force-after"),
    ],
)
def test_rebalance_command_rejects_bad_input(args, code, message):
    from click.testing import CliRunner

    from slurm_pool.cli import cli

    result = CliRunner().invoke(cli, ["rebalance", "--spec", EXAMPLE_SPEC, *args])
    assert result.exit_code == code, result.output
    assert message in result.output


# -- one run at a time: the Lease (issue 10, overlapping runs) ----------------------------


def _lease(w: World) -> dict[str, Any] | None:
    return w.k8s.leases.get((w.config.lease_namespace, w.config.lease_name))


def test_a_run_holds_the_lease_and_gives_it_back():
    w = world(2)
    held: list[str | None] = []
    real_open = w.k8s.patch_node

    def patch(name: str, patch: dict[str, Any]) -> None:  # what the Lease says while steps run
        held.append(((_lease(w) or {}).get("spec") or {}).get("holderIdentity"))
        real_open(name, patch)

    w.k8s.patch_node = patch  # type: ignore[method-assign]
    report = w.run(holder="run-1")
    assert report.ok and report.results, report.text()
    assert held and set(held) == {"run-1"}
    spec = _lease(w)["spec"]
    assert spec["holderIdentity"] is None and spec["leaseDurationSeconds"] == w.config.lease_seconds


@pytest.mark.parametrize(
    "holder,renewed_ago,runs",
    [
        ("other-run", 10, False),  # live: refused, nothing changes
        ("other-run", 301, True),  # expired (a crashed run): taken over
        (None, 10, True),  # given back
    ],
)
def test_a_run_waits_for_nobody_but_never_overlaps(holder, renewed_ago, runs):
    from datetime import timedelta

    from slurm_pool.bridge.lease import LeaseHeld

    w = world(2)
    before = (len(w.k8s.patches), len(w.slurm.jobs))
    when = datetime.now(timezone.utc) - timedelta(seconds=renewed_ago)
    stamp = when.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    w.k8s.leases[(w.config.lease_namespace, w.config.lease_name)] = {
        "metadata": {"name": w.config.lease_name, "resourceVersion": "7"},
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": 300, "renewTime": stamp, "acquireTime": stamp},
    }
    if runs:
        assert w.run(holder="run-2").ok
        assert len(w.k8s.patches) > before[0] and _lease(w)["spec"]["holderIdentity"] is None
    else:
        with pytest.raises(LeaseHeld, match=r"another rebalance run \(other-run\) holds Lease slurm-pool-rebalance"):
            w.run(holder="run-2")
        assert (len(w.k8s.patches), len(w.slurm.jobs)) == before
        assert _lease(w)["spec"]["holderIdentity"] == "other-run"


def test_two_runs_racing_for_a_free_lease_one_wins():
    """The second writer's resourceVersion is stale: 409, and it does not run."""
    from slurm_pool.bridge.lease import LeaseHeld
    from slurm_pool.bridge.reconcile import take_lease

    w = world(2)
    before = (len(w.k8s.patches), len(w.slurm.jobs))
    read = w.k8s.read_lease(w.config.lease_namespace, w.config.lease_name)
    take_lease(w.k8s, w.config, "fast", datetime.now(timezone.utc))
    w.k8s.read_lease = lambda ns, name: read  # type: ignore[method-assign]  # the slow run read before
    with pytest.raises(LeaseHeld, match="took Lease slurm-pool-rebalance first"):
        w.run(holder="slow")
    assert (len(w.k8s.patches), len(w.slurm.jobs)) == before


def test_a_dry_run_takes_no_lease():
    w = world(2)
    w.k8s.leases.clear()
    w.run(dry_run=True)
    assert _lease(w) is None


def test_lease_shorter_than_a_run_is_a_spec_error():
    from slurm_pool.spec import load_spec

    spec = load_spec(EXAMPLE_SPEC)
    config = Bridge(lease_seconds=100, placeholder_start_timeout=30, reclaim_wait=45)
    assert check_bridge(spec, config) == [
        "bridge.lease_seconds: 100 is shorter than a run can take (placeholder_start_timeout + reclaim_wait "
        "+ 60 = 135): a slow run would lose its Lease to the next one"
    ]


# -- MIG nodes -----------------------------------------------------------------------------

SLICE = "nvidia.com/mig-3g.20gb"
GPU_RES = "nvidia.com/gpu"


def mig_world(*isvcs: dict) -> World:
    """c-gpu1 as the NVIDIA device plugin (mixed strategy) shows the example's node: one whole GPU, one 3g.20gb."""
    w = World()
    w.k8s.nodes["c-gpu1"] = node_manifest("c-gpu1", 1, {SLICE: 1})
    w.settle()
    w.k8s.isvcs.extend(isvcs)
    return w


@pytest.mark.parametrize(
    "isvcs, lent_nodes, note",
    [
        # Only c-gpu1 offers the slice: it is lent, though a-gpu1 comes first by name.
        ([isvc("small", 1, resource=SLICE)], ["c-gpu1"], None),
        # Whole GPUs and a slice: the slice's node plus the whole GPUs still missing.
        ([isvc("llm", 2), isvc("small", 1, resource=SLICE)], ["a-gpu1", "c-gpu1"], None),
        ([isvc("llm", 1), isvc("small", 1, resource=SLICE)], ["c-gpu1"], None),  # c-gpu1's whole GPU serves llm
        # A slice no node has is reported, and lends nothing.
        (
            [isvc("tiny", 2, resource="nvidia.com/mig-1g.10gb")],
            [],
            "2 nvidia.com/mig-1g.10gb slice(s) of inference demand cannot be met by lending",
        ),
    ],
)
def test_mig_nodes_are_lent_for_their_slices(isvcs, lent_nodes, note):
    w = mig_world(*isvcs)
    p = w.plan()
    assert sorted(n for n, i in intents(p).items() if i == "lend") == lent_nodes, p.to_dict()
    assert (note in p.notes) if note else not p.notes, p.notes
    assert w.run().ok and sorted(w.placeholders()) == lent_nodes
    assert w.plan().steps == []


def test_a_mig_node_goes_back_when_its_slices_are_no_longer_wanted():
    w = mig_world(isvc("llm", 2), isvc("small", 1, resource=SLICE))
    assert w.run().ok and sorted(w.placeholders()) == ["a-gpu1", "c-gpu1"]
    w.k8s.isvcs[:] = [isvc("llm", 2)]
    p = w.plan()
    assert intents(p)["c-gpu1"] == "reclaim" and intents(p)["a-gpu1"] == "lent", p.to_dict()
    assert "inference demand dropped: 2 GPU(s) wanted, 2 GPU(s) without this node" in p.node("c-gpu1").reasons
    assert p.lent_by_resource == {GPU_RES: 2} and p.demand_by_resource == {GPU_RES: 2}


def test_a_node_with_only_mig_slices_may_be_lent():
    w = World()
    w.k8s.nodes["c-gpu1"] = node_manifest("c-gpu1", 0, {SLICE: 2})
    w.settle()
    w.k8s.isvcs.append(isvc("small", 2, resource=SLICE))
    p = w.plan()
    assert intents(p)["c-gpu1"] == "lend", p.to_dict()
    assert p.lent_by_resource == {SLICE: 2}
    from slurm_pool.bridge.reconcile import Report

    assert f"MIG slices: {SLICE} 2 wanted, 2 lent" in Report(p, dry_run=True).text()
