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

Every field is read through :mod:`slurm_pool.bridge.objects`: a quantity or a
count of the wrong shape (negative, a boolean, ``1_0``, non-ASCII digits, NaN)
makes its InferenceService unreadable, never a smaller demand.
:func:`total_demand` raises :class:`~slurm_pool.bridge.objects.Unreadable` for
the first, or with ``problems`` lists each and leaves that service out (the
planner then lends no more and gives nothing back for demand).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from slurm_pool.bridge.objects import (
    Obj,
    Unreadable,
    count,
    devices,
    flag,
    ident,
    identity,
    mapping,
    objects,
    show,
    string,
    strings,
)

COMPONENTS = ("predictor", "transformer", "explainer")
ISVC_LABEL = "serving.kserve.io/inferenceservice"
COMPONENT_LABEL = "component"
MODEL_CONTAINER = "kserve-container"
WORKER_CONTAINER = "worker-container"
MIG_PREFIX = "nvidia.com/mig-"
#: A MIG slice's resource name as the device plugin writes it (``nvidia.com/mig-3g.20gb``).
_MIG = re.compile(r"nvidia\.com/mig-[A-Za-z0-9._+-]{1,60}")


def gpu_like(resource: object, gpu_resource: str = "nvidia.com/gpu") -> bool:
    """A resource the bridge counts: the configured GPU resource, ``nvidia.com/gpu`` or a MIG slice."""
    if not isinstance(resource, str):
        return False
    return resource in (gpu_resource, "nvidia.com/gpu") or resource.startswith(MIG_PREFIX)


def _gpu_like(resource: object, gpu_resource: str, path: str) -> bool:
    """:func:`gpu_like`; :class:`Unreadable` for a MIG-like name that is no resource name (it may be one)."""
    mig = isinstance(resource, str) and resource.startswith(MIG_PREFIX) and resource != gpu_resource
    if mig and not _MIG.fullmatch(str(resource)):
        raise Unreadable(f"{path}: {show(resource)} is not a MIG resource name")
    return gpu_like(resource, gpu_resource)


def container_gpus(container: Obj, gpu_resource: str = "nvidia.com/gpu", path: str = "container") -> dict[str, int]:
    """GPU-like resources one container asks for (limits, else requests); :class:`Unreadable` on a bad one."""
    res = mapping(container, "resources", f"{path}.resources")
    limits = mapping(res, "limits", f"{path}.resources.limits")
    requests = mapping(res, "requests", f"{path}.resources.requests")
    out: dict[str, int] = {}
    for name in sorted({*limits, *requests}, key=str):
        if _gpu_like(name, gpu_resource, f"{path}.resources"):
            key, values = ("limits", limits) if name in limits else ("requests", requests)
            amount = devices(values[name], f"{path}.resources.{key}[{name}]")
            if amount:
                out[name] = amount
    return out


def _add(total: dict[str, int], more: Mapping[str, int], times: int = 1) -> None:
    for name, amount in more.items():
        total[name] = total.get(name, 0) + amount * times


def _pod_gpus(
    main: Obj | None,
    runtime_containers: list[Obj],
    extra: list[Obj],
    main_name: str,
    gpu_resource: str,
    paths: tuple[str, str, str],
) -> dict[str, int]:
    """One pod: ``main`` merged over the runtime container named ``main_name``, plus the rest.

    ``paths``: where ``main``, the runtime's containers and ``extra`` are, for messages.
    """
    main_at, runtime_at, extra_at = paths
    total: dict[str, int] = {}
    merged = False
    for i, rc in enumerate(runtime_containers):
        here = container_gpus(rc, gpu_resource, f"{runtime_at}[{i}]")
        if main is not None and rc.get("name") == main_name:
            _add(total, here | container_gpus(main, gpu_resource, main_at))
            merged = True
        else:
            _add(total, here)
    if main is not None and not merged:
        _add(total, container_gpus(main, gpu_resource, main_at))
    for i, c in enumerate(extra):
        _add(total, container_gpus(c, gpu_resource, f"{extra_at}[{i}]"))
    return total


def _namespace(obj: Obj) -> str:
    meta = obj.get("metadata")
    ns = meta.get("namespace") if isinstance(meta, Mapping) else None
    return ns if isinstance(ns, str) else ""


def _name(obj: Obj) -> str:
    meta = obj.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    return name if isinstance(name, str) else ""


def find_runtime(isvc: Obj, runtimes: Iterable[Obj], cluster_runtimes: Iterable[Obj]) -> Obj | None:
    """The (Cluster)ServingRuntime KServe uses for ``isvc``'s predictor, under the module docstring's rule."""
    ns = _namespace(isvc)
    local = [r for r in runtimes if _namespace(r) in (ns, "")]
    cluster = sorted(cluster_runtimes, key=_name)
    status = mapping(isvc, "status", "status")
    predictor = mapping(mapping(isvc, "spec", "spec"), "predictor", "spec.predictor")
    model = mapping(predictor, "model", "spec.predictor.model")

    def named(name: str, pool: list[Obj]) -> Obj | None:
        return next((r for r in pool if _name(r) == name), None)

    recorded = string(status, "servingRuntimeName", "status.servingRuntimeName")
    if recorded:
        return named(recorded, local)
    recorded = string(status, "clusterServingRuntimeName", "status.clusterServingRuntimeName")
    if recorded:
        return named(recorded, cluster)
    wanted = string(model, "runtime", "spec.predictor.model.runtime")
    if wanted:
        return named(wanted, local) or named(wanted, cluster)
    fmt = string(mapping(model, "modelFormat", "spec.predictor.model.modelFormat"), "name", "modelFormat.name")
    if not fmt:
        return None
    for r in [*local, *cluster]:
        where = ident(str(r.get("kind") or "ServingRuntime"), r)
        spec = mapping(r, "spec", f"{where}: spec")
        if flag(spec, "disabled", f"{where}: spec.disabled"):
            continue
        formats = objects(spec, "supportedModelFormats", f"{where}: spec.supportedModelFormats")
        if any(f.get("name") == fmt and flag(f, "autoSelect", f"{where}: autoSelect") for f in formats):
            return r
    return None


@dataclass
class _Observed:
    """The objects beside the InferenceServices, indexed once; ``problems`` collects what could not be read."""

    deployments: dict[tuple[str, str], Obj] = field(default_factory=dict)
    hpas: dict[tuple[str, str], Obj] = field(default_factory=dict)
    runtimes: list[Obj] = field(default_factory=list)
    cluster_runtimes: list[Obj] = field(default_factory=list)
    #: (namespace, service, component, bound) of each live pod of a service
    pods: list[tuple[str, str, str, bool]] = field(default_factory=list)
    _bound: dict[tuple[str, str, str], list[bool]] | None = None

    def bound(self, ns: str, service: str, component: str) -> list[bool]:
        """Whether each live pod of ``service``'s ``component`` is bound (pods indexed on the first call)."""
        if self._bound is None:
            self._bound = {}
            for p_ns, svc, comp, bound in self.pods:
                self._bound.setdefault((p_ns, svc, comp), []).append(bound)
        return self._bound.get((ns, service, component), [])


def _keep(problems: list[str] | None, exc: Unreadable) -> None:
    if problems is None:
        raise exc
    problems.append(str(exc))


def _observed(
    deployments: Iterable[Obj],
    hpas: Iterable[Obj],
    runtimes: Iterable[Obj],
    cluster_runtimes: Iterable[Obj],
    pods: Iterable[Obj],
    problems: list[str] | None,
) -> _Observed:
    out = _Observed()
    for kind, objs, into in (("Deployment", deployments, out.deployments), ("HorizontalPodAutoscaler", hpas, out.hpas)):
        for o in objs:
            try:
                into[identity(o, kind)] = o
            except Unreadable as exc:
                _keep(problems, exc)
    for kind, objs, namespaced, pool in (
        ("ServingRuntime", runtimes, True, out.runtimes),
        ("ClusterServingRuntime", cluster_runtimes, False, out.cluster_runtimes),
    ):
        for o in objs:
            try:
                identity(o, kind, namespaced)
                pool.append(o)
            except Unreadable as exc:
                _keep(problems, exc)
    for p in pods:
        try:
            fact = _pod_fact(p)
        except Unreadable as exc:
            _keep(problems, Unreadable(f"{ident('Pod', p)}: {exc}"))
            continue
        if fact is not None:
            out.pods.append(fact)
    return out


def _pod_fact(pod: Any) -> tuple[str, str, str, bool] | None:
    """(namespace, service, component, bound) of a live pod of an InferenceService; None for any other pod."""
    if not isinstance(pod, Mapping):
        raise Unreadable(f"{show(pod)} is not an object")
    meta = mapping(pod, "metadata", "metadata")
    labels = strings(meta, "labels", "metadata.labels")
    service = labels.get(ISVC_LABEL)
    if service is None:
        return None
    ns = string(meta, "namespace", "metadata.namespace")
    component = labels.get(COMPONENT_LABEL, "")
    gone = meta.get("deletionTimestamp") is not None
    phase = string(mapping(pod, "status", "status"), "phase", "status.phase", "Pending")
    bound = bool(string(mapping(pod, "spec", "spec"), "nodeName", "spec.nodeName"))
    if gone or phase not in ("Pending", "Running"):
        return None
    return ns, service, component, bound


def _replicas(name: str, ns: str, component: Obj, seen: _Observed, path: str) -> int:
    low = 1 if component.get("minReplicas") is None else count(component["minReplicas"], f"{path}.minReplicas")
    hpa, dep = seen.hpas.get((ns, name)), seen.deployments.get((ns, name))
    want = None
    if hpa is not None:
        where = ident("HorizontalPodAutoscaler", hpa)
        desired = mapping(hpa, "status", f"{where}: status").get("desiredReplicas")
        if desired is not None:
            want = count(desired, f"{where}: status.desiredReplicas")
    if want is None:
        want = _deployment_replicas(dep)
    return max(low if want is None else want, low)


def _deployment_replicas(dep: Obj | None) -> int | None:
    """A Deployment's ``spec.replicas`` (None: no Deployment, or none said)."""
    if dep is None:
        return None
    where = ident("Deployment", dep)
    replicas = mapping(dep, "spec", f"{where}: spec").get("replicas")
    return None if replicas is None else count(replicas, f"{where}: spec.replicas")


def isvc_demand(
    isvc: Obj,
    gpu_resource: str = "nvidia.com/gpu",
    deployments: Iterable[Obj] = (),
    hpas: Iterable[Obj] = (),
    runtimes: Iterable[Obj] = (),
    cluster_runtimes: Iterable[Obj] = (),
    pods: Iterable[Obj] = (),
) -> dict[str, int]:
    """GPU-like resource -> amount one InferenceService wants (the module docstring's rule).

    Raises :class:`~slurm_pool.bridge.objects.Unreadable` when it, or an object it depends on, cannot be read.
    """
    seen = _observed(deployments, hpas, runtimes, cluster_runtimes, pods, None)
    return _demand(isvc, gpu_resource, seen)


def _demand(isvc: Obj, gpu_resource: str, seen: _Observed) -> dict[str, int]:
    where = ident("InferenceService", isvc)
    ns, name = identity(isvc, "InferenceService")
    try:
        return _components(isvc, ns, name, gpu_resource, seen)
    except Unreadable as exc:
        raise Unreadable(f"{where}: {exc}") from None


def _components(isvc: Obj, ns: str, name: str, gpu_resource: str, seen: _Observed) -> dict[str, int]:
    if mapping(isvc, "metadata", "metadata").get("deletionTimestamp") is not None:
        return {}
    spec = mapping(isvc, "spec", "spec")
    total: dict[str, int] = {}
    for comp in COMPONENTS:
        at = f"spec.{comp}"
        component = mapping(spec, comp, at)
        if not component:
            continue
        runtime = find_runtime(isvc, seen.runtimes, seen.cluster_runtimes) if comp == "predictor" else None
        r_at = ident(str((runtime or {}).get("kind") or "ServingRuntime"), runtime or {})
        rspec = mapping(runtime or {}, "spec", f"{r_at}: spec")
        model = None
        if comp == "predictor" and component.get("model") is not None:
            model = mapping(component, "model", f"{at}.model")
        per_pod = _pod_gpus(
            model,
            objects(rspec, "containers", f"{r_at}: spec.containers") if model is not None else [],
            objects(component, "containers", f"{at}.containers"),
            MODEL_CONTAINER,
            gpu_resource,
            (f"{at}.model", f"{r_at}: spec.containers", f"{at}.containers"),
        )
        replicas = _replicas(f"{name}-{comp}", ns, component, seen, at)
        live = seen.bound(ns, name, comp)
        if any(not bound for bound in live):
            replicas = max(replicas, len(live))
        _add(total, per_pod, replicas)
        if comp == "predictor" and component.get("workerSpec") is not None:
            worker = mapping(component, "workerSpec", f"{at}.workerSpec")
            runtime_worker = mapping(rspec, "workerSpec", f"{r_at}: spec.workerSpec")
            _add(total, _worker_demand(name, ns, worker, runtime_worker, seen, gpu_resource, r_at), replicas)
    return {k: v for k, v in total.items() if v}


def _worker_demand(
    name: str, ns: str, worker: Obj, runtime_worker: Obj, seen: _Observed, gpu_resource: str, r_at: str
) -> dict[str, int]:
    """GPU-like resources of one replica's worker pods."""
    at = "spec.predictor.workerSpec"
    dep = seen.deployments.get((ns, f"{name}-predictor-worker"))
    replicas = _deployment_replicas(dep)
    if replicas is not None:
        workers = replicas
    else:
        pps = worker.get("pipelineParallelSize", runtime_worker.get("pipelineParallelSize"))
        workers = max(count(1 if pps is None else pps, f"{at}.pipelineParallelSize") - 1, 0)
    containers = objects(worker, "containers", f"{at}.containers")
    main_i = next((i for i, c in enumerate(containers) if c.get("name") == WORKER_CONTAINER), None)
    main = containers[main_i] if main_i is not None else {}
    rest = [c for i, c in enumerate(containers) if i != main_i]
    paths = (f"{at}.containers[{main_i}]", f"{r_at}: spec.workerSpec.containers", f"{at}.containers (others)")
    runtime_containers = objects(runtime_worker, "containers", f"{r_at}: spec.workerSpec.containers")
    per_pod = _pod_gpus(main, runtime_containers, rest, WORKER_CONTAINER, gpu_resource, paths)
    if not per_pod:
        tps = worker.get("tensorParallelSize", runtime_worker.get("tensorParallelSize"))
        if tps is not None:
            per_pod = {gpu_resource: count(tps, f"{at}.tensorParallelSize")}
    return {k: v * workers for k, v in per_pod.items()}


def total_demand(
    isvcs: Iterable[Obj],
    gpu_resource: str = "nvidia.com/gpu",
    deployments: Iterable[Obj] = (),
    hpas: Iterable[Obj] = (),
    runtimes: Iterable[Obj] = (),
    cluster_runtimes: Iterable[Obj] = (),
    pods: Iterable[Obj] = (),
    problems: list[str] | None = None,
) -> dict[str, int]:
    """:func:`isvc_demand` summed over ``isvcs``.

    An object that cannot be read raises :class:`~slurm_pool.bridge.objects.Unreadable`, or, given
    ``problems``, is listed there and left out (a service left out adds nothing: the caller must not
    act on the total as if it were whole).
    """
    seen = _observed(deployments, hpas, runtimes, cluster_runtimes, pods, problems)
    total: dict[str, int] = {}
    for i in isvcs:
        try:
            _add(total, _demand(i, gpu_resource, seen))
        except Unreadable as exc:
            _keep(problems, exc)
    return total


def allocatable_gpus(node: Obj, gpu_resource: str = "nvidia.com/gpu") -> dict[str, int]:
    """A Node's allocatable GPU-like resources; :class:`Unreadable` when one is not a device count."""
    alloc = mapping(mapping(node, "status", "status"), "allocatable", "status.allocatable")
    out = {}
    for k, v in alloc.items():
        if _gpu_like(k, gpu_resource, "status.allocatable"):
            n = _count_text(v) if type(v) is str else None
            n = devices(v, f"status.allocatable[{k}]") if n is None else n
            if n:
                out[k] = n
    return out


def _count_text(value: str) -> int | None:
    """A device count written as plain ASCII digits (what the API server sends), else None (read it in full)."""
    return int(value) if value.isascii() and value.isdigit() and len(value) <= 18 else None
