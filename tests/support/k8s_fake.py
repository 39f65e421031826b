"""A fake Kubernetes API (nodes, pods, InferenceServices, Leases as dicts) for the bridge's unit tests.

It keeps whatever a test puts in, hostile shapes included (a pod whose
metadata is a string, a Node that is a list): the fake's own bookkeeping reads
them with :func:`_get`, so only the code under test meets them.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from slurm_pool.bridge.k8s import EvictionBlocked, K8sError, NotFound
from slurm_pool.bridge.model import LENT_LABEL, RECLAIM_TAINT

NODES = ("a-gpu1", "a-gpu2", "b-gpu1", "c-gpu1")


def node_manifest(name: str, gpus: int = 2, slices: dict[str, int] | None = None) -> dict[str, Any]:
    """A Node; ``slices``: MIG resources as the device plugin's mixed strategy names them."""
    alloc = {"nvidia.com/gpu": str(gpus)} | {k: str(v) for k, v in (slices or {}).items()}
    return {
        "metadata": {"name": name, "labels": {}, "annotations": {}, "resourceVersion": "1"},
        "spec": {},
        "status": {"allocatable": alloc},
    }


def pod_manifest(name: str, node: str, ns: str = "serve", **meta: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": ns, **meta},
        "spec": {"nodeName": node},
        "status": {"phase": "Running"},
    }


def isvc(name: str, replicas: int, gpus: int = 1, resource: str = "nvidia.com/gpu") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "serve"},
        "spec": {"predictor": {"minReplicas": replicas, "model": {"resources": {"limits": {resource: gpus}}}}},
    }


def _get(obj: Any, *path: str) -> Any:
    """``obj[path[0]][path[1]]...``, or None where a step is not a map."""
    for key in path:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj


def merge(target: dict[str, Any], patch: dict[str, Any]) -> None:
    """RFC 7386 JSON merge patch, in place."""
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict):
            sub = target.get(key)
            if not isinstance(sub, dict):
                sub = target[key] = {}
            merge(sub, value)
        else:
            target[key] = copy.deepcopy(value)


class Clock:
    """A monotonic clock for waits under test: ``sleep`` moves it on at once."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += s


@dataclass
class FakeK8s:
    """Nodes, pods and InferenceServices as dicts; evictions remove pods at once."""

    nodes: dict[str, dict[str, Any]] = field(default_factory=lambda: {n: node_manifest(n) for n in NODES})
    pods: list[dict[str, Any]] = field(default_factory=list)
    isvcs: list[dict[str, Any]] = field(default_factory=list)
    deployments: list[dict[str, Any]] = field(default_factory=list)
    hpas: list[dict[str, Any]] = field(default_factory=list)
    runtimes: list[dict[str, Any]] = field(default_factory=list)
    cluster_runtimes: list[dict[str, Any]] = field(default_factory=list)
    #: pod refs whose eviction a PodDisruptionBudget refuses
    guarded: set[str] = field(default_factory=set)
    #: pod refs whose eviction fails with this error
    broken: dict[str, K8sError] = field(default_factory=dict)
    patches: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    evictions: list[str] = field(default_factory=list)
    deletions: list[str] = field(default_factory=list)
    graces: list[int | None] = field(default_factory=list)
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    #: evicted pods linger this many list_pods() calls before they are gone
    linger: int = 0
    #: Volcano: PodGroups, vcjobs, PriorityClasses, and the bus Commands created (namespace, body)
    podgroups: list[dict[str, Any]] = field(default_factory=list)
    vcjobs: list[dict[str, Any]] = field(default_factory=list)
    priority_classes: list[dict[str, Any]] = field(default_factory=list)
    commands: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    #: Leases by (namespace, name), with the API server's create/replace conflict rules
    leases: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)

    def list_nodes(self) -> list[dict[str, Any]]:
        return copy.deepcopy(list(self.nodes.values()))

    def read_node(self, name: str) -> dict[str, Any]:
        if name not in self.nodes:
            raise NotFound(404, f'nodes "{name}" not found')
        return copy.deepcopy(self.nodes[name])

    def patch_node(self, name: str, patch: dict[str, Any]) -> None:
        node = self.nodes[name]
        rv = patch.get("metadata", {}).get("resourceVersion")
        if rv and rv != node["metadata"]["resourceVersion"]:
            raise K8sError(409, "conflict")
        self.patches.append((name, copy.deepcopy(patch)))
        merge(node, patch)
        node["metadata"]["resourceVersion"] = str(int(rv or node["metadata"]["resourceVersion"]) + 1)

    def list_pods(self, node: str | None = None) -> list[dict[str, Any]]:
        for p in self.pods:
            if _get(p, "metadata", "deletionTimestamp"):
                p["linger"] = p.get("linger", 0) - 1
        self.pods = [p for p in self.pods if not isinstance(p, dict) or p.get("linger", 0) >= 0]
        return copy.deepcopy([p for p in self.pods if node is None or _get(p, "spec", "nodeName") == node])

    def list_inference_services(self) -> list[dict[str, Any]]:
        return copy.deepcopy(self.isvcs)

    def list_deployments(self) -> list[dict[str, Any]]:
        return copy.deepcopy(self.deployments)

    def list_hpas(self) -> list[dict[str, Any]]:
        return copy.deepcopy(self.hpas)

    def list_serving_runtimes(self) -> list[dict[str, Any]]:
        return copy.deepcopy(self.runtimes)

    def list_cluster_serving_runtimes(self) -> list[dict[str, Any]]:
        return copy.deepcopy(self.cluster_runtimes)

    def list_podgroups(self, namespaces: list[str]) -> list[dict[str, Any]]:
        return copy.deepcopy(
            [o for o in self.podgroups if not namespaces or _get(o, "metadata", "namespace") in namespaces]
        )

    def list_vcjobs(self, namespaces: list[str]) -> list[dict[str, Any]]:
        return copy.deepcopy(
            [o for o in self.vcjobs if not namespaces or _get(o, "metadata", "namespace") in namespaces]
        )

    def list_priority_classes(self) -> list[dict[str, Any]]:
        return copy.deepcopy(self.priority_classes)

    def read_vcjob(self, namespace: str, name: str) -> dict[str, Any]:
        for o in self.vcjobs:
            if _get(o, "metadata", "namespace") == namespace and _get(o, "metadata", "name") == name:
                return copy.deepcopy(o)
        raise NotFound(404, f'jobs.batch.volcano.sh "{name}" not found')

    def create_command(self, namespace: str, body: dict[str, Any]) -> None:
        name = _get(body, "metadata", "name")
        if any(ns == namespace and _get(b, "metadata", "name") == name for ns, b in self.commands):
            raise K8sError(409, f'commands.bus.volcano.sh "{name}" already exists')
        self.commands.append((namespace, copy.deepcopy(body)))

    def _remove(self, ref: str) -> None:
        for p in self.pods:
            if f"{_get(p, 'metadata', 'namespace')}/{_get(p, 'metadata', 'name')}" == ref:
                p["metadata"]["deletionTimestamp"] = "now"
                p["linger"] = self.linger

    def evict(self, namespace: str, name: str) -> None:
        ref = f"{namespace}/{name}"
        self.evictions.append(ref)
        if ref in self.broken:
            raise self.broken[ref]
        if ref in self.guarded:
            raise EvictionBlocked(429, "Cannot evict pod as it would violate the pod's disruption budget.")
        self._remove(ref)

    def delete_pod(self, namespace: str, name: str, grace: int | None = 0) -> None:
        self.deletions.append(f"{namespace}/{name}")
        self.graces.append(grace)
        self._remove(f"{namespace}/{name}")

    def create_event(self, namespace: str, body: dict[str, Any]) -> None:
        self.events.append((namespace, copy.deepcopy(body)))

    def read_lease(self, namespace: str, name: str) -> dict[str, Any] | None:
        found = self.leases.get((namespace, name))
        return copy.deepcopy(found) if found else None

    def write_lease(self, namespace: str, body: dict[str, Any]) -> None:
        key = (namespace, body["metadata"]["name"])
        rv = body["metadata"].get("resourceVersion")
        have = self.leases.get(key)
        if (have is None) != (rv is None) or (have and have["metadata"]["resourceVersion"] != rv):
            raise K8sError(409, "the object has been modified" if have else "already exists")
        new = copy.deepcopy(body)
        new["metadata"]["resourceVersion"] = str(int(rv or 0) + 1)
        self.leases[key] = new

    def node(self, name: str) -> dict[str, Any]:
        return self.nodes[name]

    def lent(self, name: str) -> bool:
        n = self.nodes[name]
        labels = _get(n, "metadata", "labels")
        return (
            isinstance(labels, dict)
            and labels.get(LENT_LABEL) == "true"
            and not _get(n, "spec", "unschedulable")
            and not any(_get(t, "key") == RECLAIM_TAINT for t in _get(n, "spec", "taints") or [])
        )

    def fenced(self, name: str) -> bool:
        n = self.nodes[name]
        taints = _get(n, "spec", "taints")
        return bool(_get(n, "spec", "unschedulable")) and any(_get(t, "key") == RECLAIM_TAINT for t in taints or [])
