"""Inference demand as KServe shows it (slurm_pool.bridge.demand), table-driven."""

from __future__ import annotations

from typing import Any

import pytest

from slurm_pool.bridge.demand import allocatable_gpus, find_runtime, isvc_demand
from slurm_pool.bridge.model import build_snapshot
from slurm_pool.spec.bridge import Bridge

GPU = "nvidia.com/gpu"
MIG = "nvidia.com/mig-1g.10gb"


def _isvc(predictor: dict[str, Any], name: str = "llm", **more: Any) -> dict[str, Any]:
    meta = {"name": name, "namespace": "serve", **more.pop("meta", {})}
    return {"metadata": meta, "spec": {"predictor": predictor, **more}}


def _gpus(n: int, key: str = "limits", res: str = GPU) -> dict[str, Any]:
    return {"resources": {key: {res: str(n)}}}


def _runtime(name: str, gpus: int | None, kind: str = "ClusterServingRuntime", **spec: Any) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "kserve-container", "image": "rt"}
    if gpus is not None:
        container |= _gpus(gpus)
    meta = {"name": name} | ({"namespace": "serve"} if kind == "ServingRuntime" else {})
    body = {"supportedModelFormats": [{"name": "huggingface", "autoSelect": True}], "containers": [container]}
    return {"kind": kind, "metadata": meta, "spec": body | spec}


def _obj(name: str, **body: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "serve"}, **body}


def _pod(name: str, node: str | None, component: str = "predictor", isvc: str = "llm", **meta: Any) -> dict[str, Any]:
    labels = {"serving.kserve.io/inferenceservice": isvc, "component": component}
    return {
        "metadata": {"name": name, "namespace": "serve", "labels": labels, **meta},
        "spec": {"nodeName": node} if node else {},
        "status": {"phase": "Running" if node else "Pending"},
    }


HF = {"modelFormat": {"name": "huggingface"}}
CASES: list[tuple[str, dict[str, Any], dict[str, Any], dict[str, int]]] = [
    ("model resources x minReplicas", _isvc({"minReplicas": 2, "model": _gpus(1)}), {}, {GPU: 2}),
    ("requests when no limits", _isvc({"model": _gpus(3, "requests")}), {}, {GPU: 3}),
    ("default minReplicas 1", _isvc({"model": _gpus(2)}), {}, {GPU: 2}),
    ("cpu only", _isvc({"minReplicas": 4, "model": {}}), {}, {}),
    (
        "runtime GPUs by model format",
        _isvc({"minReplicas": 2, "model": HF}),
        {"cluster_runtimes": [_runtime("hf", 1)]},
        {GPU: 2},
    ),
    (
        "model overrides runtime",
        _isvc({"model": HF | _gpus(4)}),
        {"cluster_runtimes": [_runtime("hf", 1)]},
        {GPU: 4},
    ),
    (
        "named runtime, namespaced first",
        _isvc({"model": HF | {"runtime": "hf"}}),
        {"cluster_runtimes": [_runtime("hf", 1)], "runtimes": [_runtime("hf", 2, "ServingRuntime")]},
        {GPU: 2},
    ),
    (
        "runtime KServe recorded in status",
        _isvc({"model": HF}) | {"status": {"clusterServingRuntimeName": "big"}},
        {"cluster_runtimes": [_runtime("hf", 1), _runtime("big", 8)]},
        {GPU: 8},
    ),
    (
        "no auto-select runtime",
        _isvc({"model": HF}),
        {"cluster_runtimes": [_runtime("hf", 1, supportedModelFormats=[{"name": "huggingface"}])]},
        {},
    ),
    (
        "HPA desiredReplicas wins over Deployment",
        _isvc({"minReplicas": 1, "model": _gpus(1)}),
        {
            "hpas": [_obj("llm-predictor", status={"desiredReplicas": 3})],
            "deployments": [_obj("llm-predictor", spec={"replicas": 2})],
        },
        {GPU: 3},
    ),
    (
        "Deployment replicas without an HPA",
        _isvc({"minReplicas": 1, "model": _gpus(1)}),
        {"deployments": [_obj("llm-predictor", spec={"replicas": 2})]},
        {GPU: 2},
    ),
    (
        "never below minReplicas",
        _isvc({"minReplicas": 3, "model": _gpus(1)}),
        {
            "hpas": [_obj("llm-predictor", status={"desiredReplicas": 1})],
            "deployments": [_obj("llm-predictor", spec={"replicas": 1})],
        },
        {GPU: 3},
    ),
    (
        "another service's HPA does not count",
        _isvc({"model": _gpus(1)}),
        {"hpas": [_obj("other-predictor", status={"desiredReplicas": 5})]},
        {GPU: 1},
    ),
    (
        "pending pods within replicas: no double count",
        _isvc({"minReplicas": 2, "model": _gpus(1)}),
        {"pods": [_pod("a", "n1"), _pod("b", None)]},
        {GPU: 2},
    ),
    (
        "pending pods beyond replicas count",
        _isvc({"minReplicas": 2, "model": _gpus(1)}),
        {"pods": [_pod("a", "n1"), _pod("b", "n2"), _pod("c", None)]},
        {GPU: 3},
    ),
    (
        "terminating and other services' pods ignored",
        _isvc({"minReplicas": 1, "model": _gpus(1)}),
        {"pods": [_pod("a", None, deletionTimestamp="t"), _pod("b", None, isvc="other"), _pod("c", "n1")]},
        {GPU: 1},
    ),
    (
        "transformer",
        _isvc({"model": _gpus(1)}, transformer={"minReplicas": 2, "containers": [{"name": "t"} | _gpus(1)]}),
        {"deployments": [_obj("llm-transformer", spec={"replicas": 3})]},
        {GPU: 4},
    ),
    (
        "explainer and extra predictor containers",
        _isvc({"model": _gpus(1), "containers": [{"name": "side"} | _gpus(1)]}, explainer={"containers": [_gpus(1)]}),
        {},
        {GPU: 3},
    ),
    (
        "workerSpec from pipelineParallelSize",
        _isvc(
            {"minReplicas": 1, "model": _gpus(2), "workerSpec": {"pipelineParallelSize": 3, "tensorParallelSize": 2}}
        ),
        {},
        {GPU: 6},
    ),
    (
        "workerSpec worker Deployment and containers",
        _isvc(
            {
                "minReplicas": 2,
                "model": _gpus(1),
                "workerSpec": {"containers": [{"name": "worker-container"} | _gpus(4)]},
            }
        ),
        {"deployments": [_obj("llm-predictor-worker", spec={"replicas": 1})]},
        {GPU: 2 + 2 * 4},
    ),
    ("MIG slices", _isvc({"minReplicas": 2, "model": _gpus(1, res=MIG)}), {}, {MIG: 2}),
    ("deleted service", _isvc({"minReplicas": 2, "model": _gpus(1)}, meta={"deletionTimestamp": "t"}), {}, {}),
]


@pytest.mark.parametrize("isvc, observed, want", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_isvc_demand(isvc, observed, want):
    assert isvc_demand(isvc, GPU, **observed) == want


def test_find_runtime_prefers_the_namespaced_one():
    local, cluster = _runtime("hf", 2, "ServingRuntime"), _runtime("hf", 1)
    assert find_runtime(_isvc({"model": HF}), [local], [cluster]) is local
    assert find_runtime(_isvc({"model": HF}), [], [_runtime("off", 1, disabled=True)]) is None


def test_snapshot_demand_by_resource_and_node_resources():
    node = {"metadata": {"name": "n1"}, "status": {"allocatable": {GPU: "2", MIG: "7", "cpu": "8"}}}
    assert allocatable_gpus(node) == {GPU: 2, MIG: 7}
    isvcs = [
        _isvc({"minReplicas": 2, "model": _gpus(1)}),
        _isvc({"model": _gpus(3, res=MIG)}, name="mig"),
        _isvc({"minReplicas": 5, "model": _gpus(1)}, name="gone", meta={"deletionTimestamp": "t"}),
    ]
    hpa = _obj("llm-predictor", status={"desiredReplicas": 3})
    snap = build_snapshot(Bridge(), [], [], [node], [_pod("p", None)], isvcs, hpas=[hpa])
    assert snap.demand_gpus == 3
    assert snap.demand_by_resource == {GPU: 3, MIG: 3}
    assert snap.k8s_nodes["n1"].gpus == 2
    assert snap.k8s_nodes["n1"].gpu_resources == {GPU: 2, MIG: 7}
    assert snap.pods == ()  # the pending pod is demand, not a pod on a node


def test_inference_demand_reads_what_the_planner_reads():
    """The exporter's reader (``k8s.inference_demand``) on a fake API gives the snapshot's demand."""
    from slurm_pool.bridge.k8s import inference_demand
    from tests.support.k8s_fake import FakeK8s

    fake = FakeK8s(
        isvcs=[_isvc({"minReplicas": 2, "model": _gpus(1)}), _isvc({"model": _gpus(3, res=MIG)}, name="mig")],
        hpas=[_obj("llm-predictor", status={"desiredReplicas": 3})],
        pods=[_pod("p", None)],
    )
    assert inference_demand(fake, Bridge()) == {GPU: 3, MIG: 3}
    assert inference_demand(FakeK8s(), Bridge()) == {}
