#!/usr/bin/env python3
"""Scale cases of ``rebalance --dry-run`` planning (issue 32), and the seeded inputs they plan on.

The inputs are the documents a run reads, scaled up from the records recorded from the real
26.05 daemons (``tests/data/slurm/26.05``: every node and job keeps the recorded shape, with its
own name, state, partitions, GRES, node lists and request): ``scontrol show nodes --json``,
``squeue --json``, and the Kubernetes lists (Nodes, Pods, InferenceServices), beside a small
``world.json`` with the bridge settings, the time and the forecast.  A case reads Slurm as
``rebalance`` does (:class:`~slurm_pool.bridge.slurm_side.SlurmSide` over
:class:`~slurm_pool.adapters.slurm.SlurmClient`: the narrow ``sinfo``/``squeue`` reads, answered
from text recorded by ``--generate`` (:class:`BridgeRunner`), and ``squeue --json`` streamed from
the file for the jobs text cannot say), then times what the run does after reading: records to
snapshot to finished plan (after a ``gc.collect()``, so that the collector's debt from reading is
not charged to planning; ``gc_seconds`` is what the collector took of the time; ``read_seconds``
the read before it).  The peak memory is the whole run's, reading included.  ``--baseline``
times ``json.loads`` of the same documents.

    python3 bench/scale_bridge.py --list
    python3 bench/scale_bridge.py --generate DIR [--seed N]
    python3 bench/scale_bridge.py --case rebalance-1000n-10000j --inputs DIR [--baseline]

:func:`world` is also what ``tests/unit/test_bridge_scale_equal.py`` plans on (small seeds).
"""

from __future__ import annotations

import argparse
import gc
import io
import json
import random
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import IO, Any, Iterator, Sequence

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.scale_slurm import DocRunner, narrow_stamp  # noqa: E402
from slurm_pool.adapters.records import job_records, node_record  # noqa: E402
from slurm_pool.adapters.slurm import SlurmClient  # noqa: E402
from slurm_pool.bridge.forecast import Forecast, Profile  # noqa: E402
from slurm_pool.bridge.model import build_snapshot  # noqa: E402
from slurm_pool.bridge.plan import Plan, plan  # noqa: E402
from slurm_pool.bridge.slurm_side import SlurmSide  # noqa: E402
from slurm_pool.spec.bridge import Bridge  # noqa: E402
from slurm_pool.spec.hosts import expand  # noqa: E402

FIXTURES = ROOT / "tests" / "data" / "slurm" / "26.05"
#: name -> (nodes, jobs, share of the jobs pending), as the issue's table sizes them.
CASES = {
    "rebalance-1000n-3000j": (1000, 3000, 563 / 3000),
    "rebalance-1000n-10000j": (1000, 10000, 7563 / 10000),
    "rebalance-10000n-24000j": (10000, 24000, 10 / 24000),
    "rebalance-10000n-200000j": (10000, 200000, 0.5),
}
LEND = "k8s-lend"
#: GPU models: GRES type, GPUs per node, prefix of the node names.
MODELS = [("nvidia_a100-sxm4-80gb", 8, "a"), ("nvidia_h100_80gb_hbm3", 8, "h"), ("nvidia_l40s", 4, "l")]
FEATURES = ["ib", "nvlink", "hbm", "ssd"]
MIG = "nvidia.com/mig-3g.40gb"
IGNORED_REASON = "Dependency"
REASONS = ["Resources", "Priority", "Resources", "Priority", IGNORED_REASON, "JobHeldUser", "ReqNodeNotAvail"]
QOS = ["normal", "guaranteed", "spot"]
#: What every Kubernetes node runs (its pods never hold the node back).
DAEMONSETS = ["kube-proxy", "calico-node", "nvidia-device-plugin", "dcgm-exporter", "node-exporter"]
PREEMPTORS = frozenset({"normal", "guaranteed"})


@dataclass
class World:
    """One planning input: the documents a run reads, and what it plans with."""

    nodes_doc: dict[str, Any]
    jobs_doc: dict[str, Any]
    k8s_nodes: list[dict[str, Any]]
    pods: list[dict[str, Any]]
    isvcs: list[dict[str, Any]]
    settings: dict[str, Any]

    def documents(self) -> dict[str, Any]:
        """File name -> document, as :func:`generate` writes them."""
        return {
            "nodes.json": self.nodes_doc,
            "squeue.json": self.jobs_doc,
            "k8s-nodes.json": {"apiVersion": "v1", "kind": "NodeList", "items": self.k8s_nodes},
            "k8s-pods.json": {"apiVersion": "v1", "kind": "PodList", "items": self.pods},
            "k8s-isvcs.json": {"kind": "InferenceServiceList", "items": self.isvcs},
            "world.json": self.settings,
        }


def _templates() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """A recorded node, a recorded job and the recorded ``squeue --json`` envelope."""
    node = json.loads((FIXTURES / "nodes-busy.json").read_text())["nodes"][0]
    jobs = json.loads((FIXTURES / "squeue-busy.json").read_text())
    return node, jobs["jobs"][0], {k: v for k, v in jobs.items() if k != "jobs"}


def _number(n: int) -> dict[str, Any]:
    return {"infinite": False, "number": n, "set": True}


def _hostlist(rng: random.Random, names: list[str], k: int) -> str:
    """``k`` of ``names``: a range (``a[0003-0005]``) when they are consecutive, else a comma list."""
    k = max(1, min(k, len(names)))
    if rng.random() < 0.5:
        i = rng.randrange(len(names) - k + 1)
        pick = names[i : i + k]
        prefix = pick[0].split("-")[0]
        nums = [p.split("-")[1] for p in pick]
        if k > 1 and all(p.split("-")[0] == prefix for p in pick) and int(nums[-1]) - int(nums[0]) == k - 1:
            return f"{prefix}-[{nums[0]}-{nums[-1]}]"
        return ",".join(pick)
    return ",".join(sorted(rng.sample(names, k)))


def world(seed: int, n_nodes: int, n_jobs: int, pending_share: float | None = None) -> World:
    """A seeded site of ``n_nodes`` Slurm nodes and ``n_jobs`` jobs, with every situation the planner meets."""
    rng = random.Random(seed)
    node_t, job_t, envelope = _templates()
    pending_share = rng.random() if pending_share is None else pending_share
    owners = [f"p{i}" for i in range(max(2, n_nodes // 40))]
    names, slurm_nodes, shapes = [], [], {}
    for i in range(n_nodes):
        gres_type, gpus, prefix = MODELS[i * len(MODELS) // n_nodes]
        name = f"{prefix}-{i:05d}"
        names.append(name)
        shapes[name] = (gres_type, gpus)
        parts = [owners[i * len(owners) // n_nodes], "shared"] + (["scavenger"] if rng.random() < 0.5 else [])
        if rng.random() < 0.8:
            parts.append(LEND)
        feats = sorted(rng.sample(FEATURES, rng.randrange(len(FEATURES) + 1)))
        state, reason = _node_state(rng)
        slurm_nodes.append(
            node_t
            | {
                "name": name,
                "hostname": name,
                "address": name,
                "state": state,
                "reason": reason,
                "partitions": parts,
                "gres": f"gpu:{gres_type}:{gpus}",
                "features": feats,
                "active_features": feats,
            }
        )
    jobs, busy = _jobs(rng, job_t, names, shapes, owners, n_jobs, pending_share)
    for node in slurm_nodes:  # a node running a job is allocated in Slurm too
        if node["name"] in busy and node["state"] == ["IDLE"]:
            node["state"] = ["ALLOCATED"]
    lend_nodes = [n["name"] for n in slurm_nodes if LEND in n["partitions"]]
    k8s_nodes, pods, lent = _kubernetes(rng, lend_nodes, shapes)
    jobs += _placeholders(rng, job_t, lent, names, len(jobs))
    isvcs = [
        _isvc(i, rng.randrange(1, 6), rng.choice([1, 2, 4, 8])) for i in range(rng.randrange(0, 2 + n_nodes // 20))
    ]
    pods += _predictor_pods(rng, isvcs)
    if pods and rng.random() < 0.1:  # a pod whose status cannot be read: the run holds still
        pods[rng.randrange(len(pods))]["status"] = "garbled"
    return World(
        {"nodes": slurm_nodes},
        envelope | {"jobs": jobs},
        k8s_nodes,
        pods,
        isvcs,
        _settings(rng, names, shapes),
    )


def _node_state(rng: random.Random) -> tuple[list[str], str]:
    roll = rng.random()
    if roll < 0.04:
        return ["IDLE", "DRAIN"], "disk swap, ask bob"
    if roll < 0.06:
        return ["IDLE", "DRAIN"], "slurm-pool: mig repartition"
    if roll < 0.08:
        return ["DOWN", "NOT_RESPONDING"], "Not responding"
    if roll < 0.10:
        return ["IDLE", "COMPLETING"], ""
    return ["IDLE"], ""


def _jobs(
    rng: random.Random,
    job_t: dict[str, Any],
    names: list[str],
    shapes: dict[str, tuple[str, int]],
    owners: list[str],
    n_jobs: int,
    pending_share: float,
) -> tuple[list[dict[str, Any]], set[str]]:
    """Running jobs (on a node, some on ranges) and pending ones of every kind the planner reads."""
    jobs, busy = [], set()
    hosts = sorted(rng.sample(names, max(1, int(len(names) * rng.uniform(0.3, 0.9)))))  # the rest stays idle
    for i in range(n_jobs):
        job_id = 1000 + i
        base = {"job_id": job_id, "name": f"job{i}", "comment": "", "restart_cnt": 0, "account": "proja"}
        if rng.random() >= pending_share:
            k = 1 if rng.random() < 0.8 else rng.randrange(2, 5)
            nodes = _hostlist(rng, hosts, k)
            busy.update(expand(nodes))
            jobs.append(
                job_t
                | base
                | {
                    "job_state": ["RUNNING"],
                    "partition": rng.choice([*owners, "shared"]),
                    "nodes": nodes,
                    "required_nodes": "",
                    "excluded_nodes": "",
                    "qos": rng.choice(QOS),
                    "state_reason": "None",
                    "node_count": _number(k),
                }
            )
            continue
        jobs.append(job_t | base | _pending(rng, names, shapes, owners))
    return jobs, busy


def _pending(
    rng: random.Random, names: list[str], shapes: dict[str, tuple[str, int]], owners: list[str]
) -> dict[str, Any]:
    """The fields of one pending job: partitions, node lists, GPUs (typed or not), node count, constraint."""
    parts = rng.sample([*owners, "shared", "scavenger"], rng.choice([1, 1, 1, 2]))
    if rng.random() < 0.05:
        parts.append(LEND)
    count = 1 if rng.random() < 0.75 else rng.randrange(2, 5)
    gres_type, gpus = shapes[rng.choice(names)]
    per_node = rng.choice([0, 1, 2, 4, gpus, gpus * 2])
    tres = "cpu=4,mem=16G,node=1,billing=4"
    if per_node:
        typed = rng.random() < 0.4
        gres = f"gres/gpu={per_node * count}" + (f",gres/gpu:{gres_type}={per_node * count}" if typed else "")
        tres += "," + gres
    roll = rng.random()
    features = ""
    if roll < 0.15:
        features = "&".join(rng.sample(FEATURES, rng.randrange(1, 3)))
    elif roll < 0.2:
        features = "|".join(rng.sample(FEATURES, 2))
    return {
        "job_state": ["PENDING"] + (["REQUEUED"] if rng.random() < 0.02 else []),
        "partition": ",".join(parts),
        "nodes": "",
        "required_nodes": _hostlist(rng, names, rng.randrange(1, 4)) if rng.random() < 0.05 else "",
        "excluded_nodes": _hostlist(rng, names, rng.randrange(1, 6)) if rng.random() < 0.1 else "",
        "qos": rng.choice(QOS),
        "state_reason": rng.choice(REASONS),
        "tres_req_str": tres,
        "tres_alloc_str": "",
        "node_count": _number(count),
        "features": features,
    }


def _k8s_node(name: str, gpus: int, labels: dict[str, str], annotations: dict[str, str], **spec: Any) -> dict[str, Any]:
    alloc = {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": str(gpus)}
    if name.startswith("a-") and name.endswith("7"):
        alloc[MIG] = "2"
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels, "annotations": annotations, "resourceVersion": "1"},
        "spec": spec,
        "status": {"allocatable": alloc},
    }


def _pod(name: str, node: str, ns: str = "serve", **extra: Any) -> dict[str, Any]:
    meta = {"name": name, "namespace": ns, **extra.pop("meta", {})}
    return {"metadata": meta, "spec": {"nodeName": node}, "status": {"phase": extra.pop("phase", "Running")}}


def _kubernetes(
    rng: random.Random, lend_nodes: list[str], shapes: dict[str, tuple[str, int]]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[str]]:
    """Nodes of the lend partition (lent, fenced, being reclaimed, cordoned by a person), base nodes, pods."""
    fence = {"unschedulable": True, "taints": [{"key": "slurm-pool/reclaimed", "effect": "NoSchedule"}]}
    nodes, pods, lent = [], [], []
    for name in lend_nodes:
        if rng.random() < 0.03:
            continue  # not (yet) in Kubernetes
        gpus = shapes[name][1]
        roll = rng.random()
        if roll < 0.15:
            lent.append(name)
            nodes.append(_k8s_node(name, gpus, {"slurm-pool/lent": "true"}, {}))
            for k in range(rng.randrange(0, 4)):
                pods.append(_pod(f"llm-{name}-{k}", name, meta={"labels": {"app": "llm"}}))
        elif roll < 0.18:
            lent.append(name)
            since = {"slurm-pool/reclaim-since": "2026-01-07T01:50:00+00:00"}
            nodes.append(_k8s_node(name, gpus, {"slurm-pool/lent": "true"}, since, **fence))
            pods.append(_pod(f"old-{name}", name, meta={"deletionTimestamp": "2026-01-07T01:59:00Z"}))
            if rng.random() < 0.5:
                pods.append(_pod(f"guarded-{name}", name))  # a PodDisruptionBudget keeps refusing
        elif roll < 0.2:
            nodes.append(_k8s_node(name, gpus, {}, {}, unschedulable=True))  # cordoned by a person
        elif roll < 0.9:
            nodes.append(_k8s_node(name, gpus, {}, {}, **fence))
        else:
            nodes.append(_k8s_node(name, gpus, {}, {}))
        for ds in DAEMONSETS:
            owner = {"ownerReferences": [{"kind": "DaemonSet", "name": ds}]}
            pods.append(_pod(f"{ds}-{name}", name, ns="kube-system", meta=owner))
        if rng.random() < 0.05:
            pods.append(_pod(f"done-{name}", name, phase="Succeeded"))
    for i in range(max(1, len(lend_nodes) // 50)):
        nodes.append(_k8s_node(f"k8s-base-{i:03d}", 4, {}, {}))
    return nodes, pods, lent


def _placeholders(
    rng: random.Random, job_t: dict[str, Any], lent: list[str], names: list[str], first: int
) -> list[dict[str, Any]]:
    """Placeholders on the lent nodes (running, pending, requeued, duplicated), and some orphans."""
    out = []
    where = list(lent) + rng.sample(names, min(len(names), 1 + len(names) // 100))
    for i, node in enumerate(where):
        roll = rng.random()
        state, restarts = (["RUNNING"], 0)
        if roll < 0.05:
            state = ["PENDING"]
        elif roll < 0.08:
            state, restarts = ["PENDING", "REQUEUED"], 1
        elif roll < 0.1:
            state = ["COMPLETED"]
        for dup in range(2 if rng.random() < 0.06 else 1):
            out.append(
                job_t
                | {
                    "job_id": 900000 + first + 2 * i + dup,
                    "name": "slurm-pool-lend",
                    "job_state": state,
                    "partition": LEND,
                    "account": "k8s-bridge",
                    "qos": LEND,
                    "nodes": node if state == ["RUNNING"] else "",
                    "required_nodes": node,
                    "excluded_nodes": "",
                    "comment": f"slurm-pool:lend node={node}",
                    "restart_cnt": restarts,
                    "start_time": _number(1767747600 - rng.randrange(0, 20000) if state == ["RUNNING"] else 0),
                    "state_reason": "None",
                    "node_count": _number(1),
                }
            )
    return out


def _isvc(i: int, replicas: int, gpus: int) -> dict[str, Any]:
    resource = MIG if i % 7 == 3 else "nvidia.com/gpu"
    return {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {"name": f"llm{i}", "namespace": "serve"},
        "spec": {"predictor": {"minReplicas": replicas, "model": {"resources": {"limits": {resource: gpus}}}}},
    }


def _predictor_pods(rng: random.Random, isvcs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Unbound predictor pods (demand beyond ``minReplicas``) of some services."""
    out = []
    for s in isvcs:
        if rng.random() < 0.2:
            name = s["metadata"]["name"]
            labels = {"serving.kserve.io/inferenceservice": name, "component": "predictor"}
            for k in range(s["spec"]["predictor"]["minReplicas"] + 1):
                out.append({"metadata": {"name": f"{name}-{k}", "namespace": "serve", "labels": labels}, "spec": {}})
    return out


def _settings(rng: random.Random, names: list[str], shapes: dict[str, tuple[str, int]]) -> dict[str, Any]:
    """Bridge settings, the time, the QOS that preempt placeholders and the forecast (as data)."""
    now = datetime(2026, 1, 7, 2, 0, tzinfo=timezone.utc) + timedelta(minutes=rng.choice([0, 0, 280, 295, 600]))
    config: dict[str, Any] = {"timezone": "UTC", "reclaim_wait": 5, "placeholder_start_timeout": 5}
    if rng.random() < 0.3:
        config["max_lent_nodes"] = rng.randrange(0, 1 + len(names) // 5)
    if rng.random() < 0.3:
        config["min_lease_seconds"] = rng.choice([600, 3600, 30000])
    if rng.random() < 0.3:
        config["hysteresis_gpus"] = rng.choice([1, 4])
    if rng.random() < 0.2:
        config["lend_outside_off_peak"] = True
    if rng.random() < 0.3:
        config["force_after"] = 300
    if rng.random() < 0.2:
        config["off_peak"] = [{"start": "19:00", "end": "07:00"}, {"start": "12:00", "end": "13:00"}]
    forecast = None
    if rng.random() < 0.5:
        groups = {n: n.split("-")[0] + str(i * 3 // len(names)) for i, n in enumerate(names)}
        capacity: dict[str, int] = {}
        for n, g in groups.items():
            capacity[g] = capacity.get(g, 0) + shapes[n][1]
        slurm = {g: [round(rng.random() * c, 1) for _ in range(168)] for g, c in capacity.items() if rng.random() < 0.7}
        inference = [round(rng.random() * 40, 1) for _ in range(168)] if rng.random() < 0.5 else None
        forecast = {"group_of": groups, "capacity": capacity, "slurm": slurm, "inference": inference}
    return {
        "config": config,
        "now": now.isoformat(),
        "preemptors": sorted(PREEMPTORS) if rng.random() < 0.7 else None,
        "forecast": forecast,
    }


# -- planning on a world --------------------------------------------------------------


def _profile(values: list[float]) -> Profile:
    return Profile(tuple(values), (1,) * len(values), timezone.utc)


def forecast_of(data: dict[str, Any] | None) -> Forecast | None:
    """The :class:`Forecast` a world's settings describe (None: none)."""
    if data is None:
        return None
    inference = _profile(data["inference"]) if data["inference"] else None
    slurm = {g: _profile(v) for g, v in data["slurm"].items()}
    return Forecast(data["group_of"], data["capacity"], inference, slurm)


@dataclass
class Inputs:
    """What planning starts from once a run has read: records, Kubernetes objects, settings."""

    nodes: list[Any]
    jobs: list[Any]
    docs: dict[str, Any]

    @classmethod
    def of(cls, docs: dict[str, Any]) -> Inputs:
        """Records from the parsed JSON documents (the JSON readers)."""
        nodes = [node_record(n) for n in docs["nodes.json"]["nodes"]]
        return cls(nodes, job_records(docs["squeue.json"]["jobs"]), docs)

    @classmethod
    def read(cls, runner: BridgeRunner, where: Path) -> Inputs:
        """Records as ``rebalance`` reads them (through ``runner``), and the other documents parsed."""
        docs = {p.name: json.loads(p.read_text()) for p in sorted(where.glob("*.json")) if p.name in OTHER_DOCS}
        config = Bridge.model_validate(docs["world.json"]["config"])
        side = SlurmSide(SlurmClient(runner), config, submit_as="")
        return cls(side.nodes(), side.jobs(), docs)


#: The documents a case parses whole: Kubernetes' lists and the settings (Slurm's are read as rebalance reads them).
OTHER_DOCS = ("k8s-nodes.json", "k8s-pods.json", "k8s-isvcs.json", "world.json")
ANSWERS = "narrow-answers.json"


class BridgeRunner(DocRunner):
    """:class:`DocRunner` on a case's documents: ``squeue --json`` streamed from the file, as from a pipe.

    ``docs``: the parsed (nodes, jobs) documents to answer from while recording (default: parsed when needed).
    """

    def __init__(
        self, where: Path, answers: list[tuple[list[str], str]] | None = None, docs: tuple[Any, Any] | None = None
    ):
        super().__init__(where / "nodes.json", where / "squeue.json", answers)
        self.given = docs

    def docs(self) -> tuple[Any, Any]:
        return self.given if self.given is not None else super().docs()

    def answer(self, argv: list[str]) -> str | None:
        picked = [a.split("=", 1)[1] for a in argv if a.startswith("--jobs=")]
        if self.given is None or argv[:2] != ["squeue", "--json"] or not picked:
            text = super().answer(argv)
            if not self.record:  # each recorded answer serves one read: not kept beside the copy it gave
                self.answers = [(k, t) for k, t in self.answers if _read_of(k) != _read_of(argv)]
            return text
        ids = {int(i) for i in picked[0].split(",")}  # the JSON of some jobs, from the documents at hand
        jobs = self.given[1]
        text = json.dumps({**jobs, "jobs": [j for j in jobs["jobs"] if j["job_id"] in ids]}, indent=1)
        self.json_reads.append(f"squeue --json --jobs=({len(ids)} ids)")
        if self.record:
            self.recorded.append((list(argv), text))
        return text

    @contextmanager
    def stream(self, argv: Sequence[str], *, timeout: float | None = None) -> Iterator[IO[bytes]]:
        if list(argv) == ["squeue", "--json"]:
            self.json_reads.append("squeue --json (streamed)")
            with self.jobs.open("rb") as f:  # type: ignore[union-attr]
                yield f
            return
        yield io.BytesIO(self.run(list(argv)).stdout.encode())


def _read_of(argv: Sequence[str]) -> tuple[str, ...]:
    """What a read is apart from its tokens: the command and the name of its last option."""
    return (*argv[:3], argv[-1].split("=", 1)[0] if argv else "")


def record_answers(where: Path, docs: tuple[Any, Any]) -> None:
    """Read once with the narrow answers made from ``docs``, and keep them for the measured runs."""
    runner = BridgeRunner(where, docs=docs)
    runner.record = True
    Inputs.read(runner, where)
    (where / ANSWERS).write_text(json.dumps({"stamp": narrow_stamp(), "answers": runner.recorded}))


def load_answers(where: Path) -> list[tuple[list[str], str]]:
    p = where / ANSWERS
    data = json.loads(p.read_text()) if p.exists() else {}
    return [(a, t) for a, t in data["answers"]] if data.get("stamp") == narrow_stamp() else []


def run_plan(inputs: Inputs) -> Plan:
    """Records and objects -> snapshot -> plan, as ``rebalance --dry-run`` does after reading."""
    docs = inputs.docs
    settings = docs["world.json"]
    config = Bridge.model_validate(settings["config"])
    pre = settings["preemptors"]
    snap = build_snapshot(
        config,
        inputs.nodes,
        inputs.jobs,
        docs["k8s-nodes.json"]["items"],
        docs["k8s-pods.json"]["items"],
        docs["k8s-isvcs.json"]["items"],
        preemptors=None if pre is None else frozenset(pre),
    )
    return plan(snap, config, datetime.fromisoformat(settings["now"]), forecast=forecast_of(settings["forecast"]))


# -- the bench interface -----------------------------------------------------------------


def _case_dir(root: Path, name: str, seed: int) -> Path:
    return root / f"{name}-seed{seed}"


def write_document(path: Path, doc: dict[str, Any]) -> None:
    """One document, the ``jobs``/``items`` list streamed record by record (a large one never held as text)."""
    tmp = path.with_suffix(".tmp")
    with tmp.open("w") as f:
        key = next((k for k in ("jobs", "items", "nodes") if isinstance(doc.get(k), list)), None)
        if key is None:
            json.dump(doc, f)
        else:
            head = {k: v for k, v in doc.items() if k != key}
            f.write(json.dumps(head)[:-1] + (", " if head else "") + json.dumps(key) + ": [")
            for i, rec in enumerate(doc[key]):
                f.write((",\n" if i else "") + json.dumps(rec))
            f.write("]}")
    tmp.rename(path)


def generate(root: Path, seed: int) -> Iterator[Path]:
    for name, (n, j, share) in CASES.items():
        where = _case_dir(root, name, seed)
        if (where / "world.json").exists():
            if not load_answers(where):  # the readers changed since: record again
                slurm_docs = [json.loads((where / name).read_text()) for name in ("nodes.json", "squeue.json")]
                record_answers(where, (slurm_docs[0], slurm_docs[1]))
            continue
        where.mkdir(parents=True, exist_ok=True)
        docs = world(seed, n, j, share).documents()
        for file, doc in docs.items():
            write_document(where / file, doc)
        record_answers(where, (docs["nodes.json"], docs["squeue.json"]))
        yield where


def _read(where: Path) -> dict[str, Any]:
    return {p.name: json.loads(p.read_text()) for p in sorted(where.glob("*.json"))}


@contextmanager
def _gc_time() -> Iterator[list[float]]:
    """Seconds the garbage collector runs inside the block (the list's one item, filled at its end)."""
    spent, began = [0.0], [0.0]

    def note(phase: str, _info: dict[str, Any]) -> None:
        if phase == "start":
            began[0] = time.perf_counter()
        else:
            spent[0] += time.perf_counter() - began[0]

    gc.callbacks.append(note)
    try:
        yield spent
    finally:
        gc.callbacks.remove(note)


def run_case(name: str, root: Path, seed: int, baseline: bool) -> dict[str, Any]:
    where = _case_dir(root, name, seed)
    if baseline:
        texts = {p.name: p.read_text() for p in sorted(where.glob("*.json"))}
        gc.collect()
        start = time.perf_counter()
        docs = {k: json.loads(v) for k, v in texts.items()}
        seconds = time.perf_counter() - start
        decisions = None
    else:
        runner = BridgeRunner(where, load_answers(where))
        start = time.perf_counter()
        inputs = Inputs.read(runner, where)
        read_seconds = time.perf_counter() - start
        gc.collect()  # the collector's debt from reading is the reading's, not the planning's
        with _gc_time() as spent:
            start = time.perf_counter()
            p = run_plan(inputs)
            seconds = time.perf_counter() - start
        decisions = len(p.steps)
    n, j, _ = CASES[name]
    if baseline:
        jobs = docs["squeue.json"]["jobs"]
        waiting = sum(1 for job in jobs if "PENDING" in job["job_state"] and job["partition"] != LEND)
    else:
        waiting = sum(1 for job in inputs.jobs if "PENDING" in job.state and job.partition != LEND)
    out = {
        "case": name,
        "path": "rebalance --dry-run planning",
        "size": f"{n:,} nodes, {j:,} jobs ({waiting:,} pending)",
        "seconds": round(seconds, 3),
        "baseline": baseline,
    }
    if decisions is not None:
        out["decisions"] = decisions
        out["gc_seconds"] = round(spent[0], 3)  # of ``seconds``: the collector walking the documents read
        out["read_seconds"] = round(read_seconds, 3)
        notes = [f"read {round(read_seconds, 1)} s before planning (in the peak memory, not the time)"]
        if runner.parsed_late:
            notes.append("a narrow read had no recorded answer: the JSON was parsed in the measured run")
        if runner.json_reads:
            notes.append(f"read as JSON too: {', '.join(sorted(set(runner.json_reads)))}")
        out["note"] = "; ".join(notes)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--list", action="store_true", help="print the case names")
    ap.add_argument("--generate", metavar="DIR", help="write every case's inputs under DIR")
    ap.add_argument("--case", help="run one case")
    ap.add_argument("--inputs", metavar="DIR", help="where --generate wrote the inputs")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--baseline", action="store_true", help="time json.loads of the same documents instead")
    args = ap.parse_args(argv)
    if args.list:
        print("\n".join(CASES))
        return 0
    if args.generate:
        for where in generate(Path(args.generate), args.seed):
            print(f"wrote {where}", file=sys.stderr)
        return 0
    if args.case:
        if args.case not in CASES or not args.inputs:
            ap.error(f"--case takes one of {', '.join(CASES)}, with --inputs")
        print(json.dumps(run_case(args.case, Path(args.inputs), args.seed, args.baseline)))
        return 0
    ap.error("give --list, --generate DIR or --case NAME --inputs DIR")
    return 2


if __name__ == "__main__":
    sys.exit(main())
