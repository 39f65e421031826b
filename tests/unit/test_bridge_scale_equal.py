"""The planner's decisions on a seeded sample of sites equal the recorded ones (issue 32).

Each seed makes a site with :func:`bench.scale_bridge.world` (the generator of the scale bench,
at 5-60 nodes and up to 300 jobs): drains by people and by slurm-pool, busy nodes and hostlist
ranges, pending jobs with partitions, node lists, typed GPUs, node counts and constraints, spot
jobs, lent, fenced, reclaimed and cordoned Kubernetes nodes, pods of every kind, placeholders
running, queued, requeued, duplicated and orphaned, MIG demand, caps, leases, off-peak windows
and forecasts.  ``tests/golden/bridge-scale/plans.json`` holds the whole plan (``Plan.to_dict``)
the planner made of each before it was made near-linear; a faster planner must make the same.

Beside it, the parts made fast are checked against the readings they replace: the indexed
claims against every pending job tried on every node, and the one-pass reading of a plain pod
against the field-by-field one, for odd values of every field it reads.

Re-record only for a change of decisions that is meant:
``python -m tests.unit.test_bridge_scale_equal`` rewrites the file.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from bench.scale_bridge import Inputs, run_plan, world
from slurm_pool.bridge.claims import claims
from slurm_pool.bridge.k8sview import _NOT_PLAIN, _plain_pod, read_pod
from slurm_pool.bridge.model import build_snapshot
from slurm_pool.bridge.objects import Unreadable
from slurm_pool.spec.bridge import Bridge

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "bridge-scale" / "plans.json"
SEEDS = range(60)


def sample(seed: int) -> dict[str, Any]:
    """The plan of seed ``seed``'s site, as JSON data."""
    rng = random.Random(f"size-{seed}")
    nodes = rng.randrange(5, 61)
    docs = world(seed, nodes, rng.randrange(0, rng.choice([nodes // 2, 301]))).documents()
    return json.loads(json.dumps(run_plan(Inputs.of(docs)).to_dict()))


@pytest.fixture(scope="module")
def golden() -> dict[str, Any]:
    return json.loads(GOLDEN.read_text())


@pytest.mark.parametrize("seed", SEEDS)
def test_plan_equals_the_recorded_one(seed, golden):
    assert sample(seed) == golden[str(seed)]


def test_the_sample_meets_every_intent(golden):
    """The sample is worth comparing: every intent and step kind comes up."""
    intents = {n["intent"] for p in golden.values() for n in p["nodes"]}
    kinds = {s["kind"] for p in golden.values() for n in p["nodes"] for s in n["steps"]}
    assert intents == {"lend", "lent", "reclaim", "fence", "slurm"}
    assert kinds >= {"fence", "submit", "evict", "wait-running", "wait-empty", "cancel", "open", "release"}


if __name__ == "__main__":
    GOLDEN.write_text(json.dumps({str(s): sample(s) for s in SEEDS}, sort_keys=True, separators=(",", ":")) + "\n")


def _claims_by_scanning(snap, config):
    """The claims as the planner made them before it was indexed: every job against every node."""
    out: dict[str, list[int]] = {}
    waiting: list[int] = []

    def lent(name):
        k = snap.k8s_nodes.get(name)
        return bool(snap.placeholders_on(name)) or (k is not None and k.lent)

    def cost(name):
        rank = 1 if lent(name) else 2 if snap.busy.get(name) or not snap.slurm_nodes[name].idle else 0
        return rank, len(snap.workload_pods(name)), name

    for job in sorted(snap.pending, key=lambda j: j.job_id):
        if job.reason in config.ignore_pending_reasons:
            continue
        fit = [n for n, s in snap.slurm_nodes.items() if not s.unavailable and job.could_use(s)]
        want = max(job.node_count, 1)
        if not job.preempts_lend:
            allowed = [n for n in fit if not (lent(n) and snap.workload_pods(n))]
            if len(allowed) < min(want, len(fit)):
                waiting.append(job.job_id)
            fit = allowed
        for name in sorted(fit, key=cost)[:want]:
            out.setdefault(name, []).append(job.job_id)
    return out, waiting


@pytest.mark.parametrize("seed", range(100, 120))
def test_claims_equal_every_job_against_every_node(seed):
    """The indexed claims (partition, node shape, node lists) equal the scan of every node for every job."""
    docs = world(seed, 40, 400, pending_share=0.7).documents()
    inputs = Inputs.of(docs)
    config = Bridge.model_validate(docs["world.json"]["config"])
    snap = build_snapshot(
        config,
        inputs.nodes,
        inputs.jobs,
        docs["k8s-nodes.json"]["items"],
        docs["k8s-pods.json"]["items"],
        [],
        preemptors=frozenset({"normal"}),
    )
    assert claims(snap, config) == _claims_by_scanning(snap, config)


_POD = {
    "metadata": {
        "name": "llm-0",
        "namespace": "serve",
        "annotations": {"a": "b"},
        "ownerReferences": [{"kind": "DaemonSet", "name": "x"}],
        "deletionTimestamp": "2026-01-07T01:59:00Z",
    },
    "spec": {"nodeName": "a-gpu1"},
    "status": {"phase": "Running"},
}
_ODD = [None, "", "X y", "a-gpu1", 0, 1, True, [], [{}], ["x"], {}, {"kind": "DaemonSet"}, {"k": 1}, "Pending"]
_FIELDS = [
    ("metadata",),
    ("metadata", "name"),
    ("metadata", "namespace"),
    ("metadata", "annotations"),
    ("metadata", "ownerReferences"),
    ("metadata", "deletionTimestamp"),
    ("spec",),
    ("spec", "nodeName"),
    ("status",),
    ("status", "phase"),
]


def _with(path: tuple[str, ...], value: Any) -> Any:
    pod = json.loads(json.dumps(_POD))
    where = pod
    for key in path[:-1]:
        where = where[key]
    where[path[-1]] = value
    return pod


@pytest.mark.parametrize("path", _FIELDS, ids="/".join)
def test_a_plain_pod_is_read_as_field_by_field(path):
    """The one-pass reading of a plain pod gives what the careful reading does, for any value of any field."""
    for value in _ODD:
        pod = _with(path, value)
        plain = _plain_pod(pod)
        try:
            careful = read_pod(pod)
        except Unreadable:
            assert plain is _NOT_PLAIN
            continue
        assert plain is _NOT_PLAIN or plain == careful, value
    assert _plain_pod(_POD) == read_pod(_POD)
