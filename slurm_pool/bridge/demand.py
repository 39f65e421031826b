"""Inference demand as a real KServe (Standard deployment mode) shows it.  Pure: no I/O.

For each InferenceService that is not being deleted, and each of its components
(``predictor``, and ``transformer``/``explainer`` when present):

* **GPUs per pod**, per GPU-like resource (``nvidia.com/gpu`` and the MIG slices
  ``nvidia.com/mig-*``): summed over the pod's containers.  The predictor's
  ``model`` container is merged with its runtime's ``kserve-container`` the way
  KServe merges them: the model's value for a resource overrides the runtime's
  (per resource; limits, else requests).  The runtime is the one KServe recorded
  in ``status`` (``servingRuntimeName``/``clusterServingRuntimeName``), else the
  one ``model.runtime`` names (a ServingRuntime in the service's namespace before
  a ClusterServingRuntime), else the first auto-selectable runtime that supports
  ``model.modelFormat.name`` (namespaced first, then by name).  The runtime's
  other containers and the component's ``containers`` add their own requests.
* **Replicas**: what the autoscaler asks: the HPA's ``status.desiredReplicas``
  when KServe made an HPA (named after the component, ``NAME-predictor``), else
  the Deployment's ``spec.replicas``, else (nothing created yet) ``minReplicas``;
  never below ``minReplicas`` (default 1).
* **Pending pods**: a component's live pods (not terminating) that no node holds
  are demand too, but they already belong to the replicas counted above, so the
  pod count is ``max(replicas, bound + pending pods of the component)``: a
  pending pod adds demand only when it is beyond the replicas (a rollout's surge
  pod, or the HPA's new pod before the bridge saw the HPA), never twice.
* **Multi-node** (``predictor.workerSpec``): each replica also runs worker pods:
  the worker Deployment's ``spec.replicas`` (``NAME-predictor-worker``) when it
  exists, else ``pipelineParallelSize - 1``; each worker pod asks for its
  containers' GPUs (merged with the runtime's ``workerSpec``), or
  ``tensorParallelSize`` GPUs when they name none.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

COMPONENTS = ("predictor", "transformer", "explainer")
ISVC_LABEL = "serving.kserve.io/inferenceservice"
COMPONENT_LABEL = "component"
MODEL_CONTAINER = "kserve-container"
WORKER_CONTAINER = "worker-container"
MIG_PREFIX = "nvidia.com/mig-"
Obj = Mapping[str, Any]


def gpu_like(resource: str, gpu_resource: str = "nvidia.com/gpu") -> bool:
    """A resource the bridge counts: the configured GPU resource, ``nvidia.com/gpu`` or a MIG slice."""
    return resource in (gpu_resource, "nvidia.com/gpu") or resource.startswith(MIG_PREFIX)


def _int(value: Any) -> int:
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return 0


def container_gpus(container: Obj, gpu_resource: str = "nvidia.com/gpu") -> dict[str, int]:
    """GPU-like resources one container asks for (limits, else requests)."""
    res = container.get("resources") or {}
    limits, requests = res.get("limits") or {}, res.get("requests") or {}
    out: dict[str, int] = {}
    for name in {*limits, *requests}:
        if gpu_like(name, gpu_resource):
            amount = _int(limits[name] if name in limits else requests[name])
            if amount:
                out[name] = amount
    return out


def _add(total: dict[str, int], more: Mapping[str, int], times: int = 1) -> None:
    for name, amount in more.items():
        total[name] = total.get(name, 0) + amount * times


def _pod_gpus(
    main: Obj | None, runtime_containers: Iterable[Obj], extra: Iterable[Obj], main_name: str, gpu_resource: str
) -> dict[str, int]:
    """One pod: ``main`` merged over the runtime container named ``main_name``, plus the rest."""
    total: dict[str, int] = {}
    merged = False
    for rc in runtime_containers:
        if main is not None and rc.get("name") == main_name:
            _add(total, container_gpus(rc, gpu_resource) | container_gpus(main, gpu_resource))
            merged = True
        else:
            _add(total, container_gpus(rc, gpu_resource))
    if main is not None and not merged:
        _add(total, container_gpus(main, gpu_resource))
    for c in extra:
        _add(total, container_gpus(c, gpu_resource))
    return total


def _meta(obj: Obj) -> Obj:
    return obj.get("metadata") or {}


def find_runtime(isvc: Obj, runtimes: Iterable[Obj], cluster_runtimes: Iterable[Obj]) -> Obj | None:
    """The (Cluster)ServingRuntime KServe uses for ``isvc``'s predictor, under the module docstring's rule."""
    ns = _meta(isvc).get("namespace", "")
    local = [r for r in runtimes if _meta(r).get("namespace", ns) == ns]
    cluster = sorted(cluster_runtimes, key=lambda r: _meta(r).get("name", ""))
    status = isvc.get("status") or {}
    model = ((isvc.get("spec") or {}).get("predictor") or {}).get("model") or {}

    def named(name: str, pool: list[Obj]) -> Obj | None:
        return next((r for r in pool if _meta(r).get("name") == name), None)

    if status.get("servingRuntimeName"):
        return named(status["servingRuntimeName"], local)
    if status.get("clusterServingRuntimeName"):
        return named(status["clusterServingRuntimeName"], cluster)
    if model.get("runtime"):
        return named(model["runtime"], local) or named(model["runtime"], cluster)
    fmt = (model.get("modelFormat") or {}).get("name")
    if not fmt:
        return None
    for r in [*local, *cluster]:
        spec = r.get("spec") or {}
        if spec.get("disabled"):
            continue
        if any(f.get("name") == fmt and f.get("autoSelect", False) for f in spec.get("supportedModelFormats") or []):
            return r
    return None


def _replicas(name: str, ns: str, component: Obj, deployments: Mapping[tuple[str, str], Obj], hpas) -> int:
    low = _int(component.get("minReplicas", 1)) if component.get("minReplicas") is not None else 1
    hpa = hpas.get((ns, name))
    dep = deployments.get((ns, name))
    if hpa is not None and isinstance((hpa.get("status") or {}).get("desiredReplicas"), int):
        want = hpa["status"]["desiredReplicas"]
    elif dep is not None and (dep.get("spec") or {}).get("replicas") is not None:
        want = _int(dep["spec"]["replicas"])
    else:
        want = low
    return max(want, low)


def _index(objs: Iterable[Obj]) -> dict[tuple[str, str], Obj]:
    return {(_meta(o).get("namespace", ""), _meta(o).get("name", "")): o for o in objs}


def isvc_demand(
    isvc: Obj,
    gpu_resource: str = "nvidia.com/gpu",
    deployments: Iterable[Obj] = (),
    hpas: Iterable[Obj] = (),
    runtimes: Iterable[Obj] = (),
    cluster_runtimes: Iterable[Obj] = (),
    pods: Iterable[Obj] = (),
) -> dict[str, int]:
    """GPU-like resource -> amount one InferenceService wants (the module docstring's rule)."""
    meta = _meta(isvc)
    if meta.get("deletionTimestamp"):
        return {}
    name, ns = meta.get("name", ""), meta.get("namespace", "")
    deps, autoscalers = _index(deployments), _index(hpas)
    pods = list(pods)
    spec = isvc.get("spec") or {}
    total: dict[str, int] = {}
    for comp in COMPONENTS:
        component = spec.get(comp)
        if not component:
            continue
        runtime = find_runtime(isvc, runtimes, cluster_runtimes) if comp == "predictor" else None
        rspec = (runtime or {}).get("spec") or {}
        model = component.get("model") if comp == "predictor" else None
        per_pod = _pod_gpus(
            model if model is not None else None,
            rspec.get("containers") or [] if model is not None else [],
            component.get("containers") or [],
            MODEL_CONTAINER,
            gpu_resource,
        )
        replicas = _replicas(f"{name}-{comp}", ns, component, deps, autoscalers)
        live = [
            p
            for p in pods
            if _meta(p).get("namespace") == ns
            and (_meta(p).get("labels") or {}).get(ISVC_LABEL) == name
            and (_meta(p).get("labels") or {}).get(COMPONENT_LABEL) == comp
            and not _meta(p).get("deletionTimestamp")
            and (p.get("status") or {}).get("phase", "Pending") in ("Pending", "Running")
        ]
        pending = sum(1 for p in live if not (p.get("spec") or {}).get("nodeName"))
        if pending:
            replicas = max(replicas, len(live))
        _add(total, per_pod, replicas)
        worker = component.get("workerSpec") if comp == "predictor" else None
        if worker is not None:
            _add(total, _worker_demand(name, ns, worker, rspec.get("workerSpec") or {}, deps, gpu_resource), replicas)
    return {k: v for k, v in total.items() if v}


def _worker_demand(name: str, ns: str, worker: Obj, runtime_worker: Obj, deps, gpu_resource: str) -> dict[str, int]:
    """GPU-like resources of one replica's worker pods."""
    dep = deps.get((ns, f"{name}-predictor-worker"))
    if dep is not None and (dep.get("spec") or {}).get("replicas") is not None:
        count = _int(dep["spec"]["replicas"])
    else:
        pps = worker.get("pipelineParallelSize", runtime_worker.get("pipelineParallelSize", 1))
        count = max(_int(pps) - 1, 0)
    containers = worker.get("containers") or []
    main = next((c for c in containers if c.get("name") == WORKER_CONTAINER), None)
    rest = [c for c in containers if c is not main]
    per_pod = _pod_gpus(main or {}, runtime_worker.get("containers") or [], rest, WORKER_CONTAINER, gpu_resource)
    if not per_pod:
        tps = worker.get("tensorParallelSize", runtime_worker.get("tensorParallelSize"))
        if tps is not None:
            per_pod = {gpu_resource: _int(tps)}
    return {k: v * count for k, v in per_pod.items()}


def total_demand(
    isvcs: Iterable[Obj],
    gpu_resource: str = "nvidia.com/gpu",
    deployments: Iterable[Obj] = (),
    hpas: Iterable[Obj] = (),
    runtimes: Iterable[Obj] = (),
    cluster_runtimes: Iterable[Obj] = (),
    pods: Iterable[Obj] = (),
) -> dict[str, int]:
    """:func:`isvc_demand` summed over ``isvcs``."""
    deployments, hpas, runtimes = list(deployments), list(hpas), list(runtimes)
    cluster_runtimes, pods = list(cluster_runtimes), list(pods)
    total: dict[str, int] = {}
    for i in isvcs:
        _add(total, isvc_demand(i, gpu_resource, deployments, hpas, runtimes, cluster_runtimes, pods))
    return total


def allocatable_gpus(node: Obj, gpu_resource: str = "nvidia.com/gpu") -> dict[str, int]:
    """A Node's allocatable GPU-like resources."""
    alloc = (node.get("status") or {}).get("allocatable") or {}
    return {k: _int(v) for k, v in alloc.items() if gpu_like(k, gpu_resource) and _int(v)}
