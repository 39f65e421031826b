"""What the bridge reads of Kubernetes Nodes and pods, as plain immutable values (pure).

Kubernetes objects are read field by field (:mod:`slurm_pool.bridge.objects`).
A Node or pod that cannot be named, or a pod whose node cannot be told, stops
the run before it acts (:class:`~slurm_pool.bridge.objects.Unreadable`).  Any
other field of the wrong shape is read at its cautious value and named in the
view's ``problem`` (see :mod:`slurm_pool.bridge.model`).

A pod of the plain shape the API server sends (every field the bridge reads
present with its type, names valid) is read in one pass (:func:`_plain_pod`):
a cluster has tens of thousands of them, and the field-by-field reading, with
its messages, is needed only for the others.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, cast

from slurm_pool.bridge.demand import allocatable_gpus
from slurm_pool.bridge.gangs import GANG_LABEL, GROUP_NAME_ANNOTATION
from slurm_pool.bridge.objects import (
    Problems,
    Unreadable,
    ident,
    identity,
    mapping,
    objects,
    show,
    string,
    strings,
)
from slurm_pool.text import RULES, matches, shown

#: Kubernetes names the bridge owns (all under the ``slurm-pool`` prefix).
LENT_LABEL = "slurm-pool/lent"
RECLAIM_TAINT = "slurm-pool/reclaimed"
RECLAIM_SINCE = "slurm-pool/reclaim-since"


@dataclass(frozen=True)
class Taint:
    key: str
    value: str = ""
    effect: str = "NoSchedule"

    def as_dict(self) -> dict[str, str]:
        out = {"key": self.key, "effect": self.effect}
        if self.value:
            out["value"] = self.value
        return out


@dataclass(frozen=True)
class K8sNodeView:
    """A Kubernetes node: schedulability and the marks the bridge owns."""

    name: str
    gpus: int = 0
    unschedulable: bool = False
    taints: tuple[Taint, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    #: Allocatable per GPU-like resource (``nvidia.com/gpu``, ``nvidia.com/mig-*``); ``gpus`` is the configured one.
    gpu_resources: Mapping[str, int] = field(default_factory=dict)
    #: What of the Node could not be read ("": all of it could); such a node is never lent.
    problem: str = ""

    @property
    def ours_tainted(self) -> bool:
        return any(t.key == RECLAIM_TAINT for t in self.taints)

    @property
    def lent(self) -> bool:
        return self.labels.get(LENT_LABEL) == "true"

    @property
    def gang(self) -> str:
        """The group id of the gang it is lent for (``slurm-pool/gang`` label; "": none)."""
        return self.labels.get(GANG_LABEL, "")

    def resources(self, gpu_resource: str) -> Mapping[str, int]:
        """Allocatable per GPU-like resource (a view built without them: ``gpus`` of ``gpu_resource``)."""
        return self.gpu_resources or {gpu_resource: self.gpus}

    @property
    def fenced(self) -> bool:
        """Closed to new pods by the bridge (cordon plus our taint)."""
        return self.unschedulable and self.ours_tainted

    @property
    def cordoned_by_someone_else(self) -> bool:
        return self.unschedulable and not self.ours_tainted

    @property
    def open(self) -> bool:
        """Lent and open: uncordoned, untainted, labelled, no reclaim mark."""
        return not self.unschedulable and not self.ours_tainted and self.lent and RECLAIM_SINCE not in self.annotations

    @property
    def reclaim_since(self) -> str | None:
        return self.annotations.get(RECLAIM_SINCE)


def sum_resources(views: Iterable[K8sNodeView], gpu_resource: str) -> dict[str, int]:
    """The GPU-like resources of ``views`` added up."""
    out: dict[str, int] = {}
    for v in views:
        for r, c in v.resources(gpu_resource).items():
            out[r] = out.get(r, 0) + c
    return out


@dataclass(frozen=True)
class PodView:
    """A pod bound to a node."""

    namespace: str
    name: str
    node: str
    phase: str = "Running"
    terminating: bool = False
    daemonset: bool = False
    mirror: bool = False
    #: What of the pod could not be read ("": all of it could); such a pod holds its node.
    problem: str = ""
    #: Its namespace and name could be read, so it can be evicted by them.
    named: bool = True
    #: The PodGroup (same namespace) it belongs to: Volcano's ``scheduling.k8s.io/group-name`` ("": none).
    group: str = ""

    @property
    def workload(self) -> bool:
        """A pod that has to leave before the node goes back to Slurm (like ``kubectl drain``)."""
        if self.problem:
            return True
        return not (self.daemonset or self.mirror) and self.phase not in ("Succeeded", "Failed")

    @property
    def ref(self) -> str:
        """``namespace/name``, terminal-safe."""
        return f"{shown(self.namespace)}/{shown(self.name)}"


def _taint(t: Mapping[str, Any], i: int) -> Taint:
    at = f"spec.taints[{i}]"
    return Taint(string(t, "key", f"{at}.key"), string(t, "value", f"{at}.value"), string(t, "effect", f"{at}.effect"))


def k8s_node_view(obj: Any, gpu_resource: str) -> K8sNodeView:
    """What the bridge reads of a Node.

    Raises :class:`Unreadable` when its name cannot be read.  A field of the wrong shape leaves
    the view at its cautious value -- cordoned by someone else, no marks, no GPUs -- and is named
    in ``problem`` (the planner never lends such a node).
    """
    _, name = identity(obj, "Node", namespaced=False)
    bad = Problems()
    meta = obj["metadata"]
    spec: Mapping[str, Any] | None = bad.read(lambda: mapping(obj, "spec", "spec"), None)
    status: Mapping[str, Any] = bad.read(lambda: mapping(obj, "status", "status"), {})
    unschedulable, taints = True, tuple[Taint, ...]()  # cordoned by someone else, until its spec is read
    if spec is not None:
        unschedulable = bad.read(lambda: _flag(spec), True)
        taints = bad.read(lambda: tuple(_taint(t, i) for i, t in enumerate(objects(spec, "taints", "spec.taints"))), ())
    gpu_resources: dict[str, int] = bad.read(lambda: allocatable_gpus({"status": status}, gpu_resource), {})
    return K8sNodeView(
        name=name,
        gpus=gpu_resources.get(gpu_resource, 0),
        unschedulable=unschedulable,
        taints=taints,
        labels=bad.read(lambda: strings(meta, "labels", "metadata.labels"), {}),
        annotations=bad.read(lambda: strings(meta, "annotations", "metadata.annotations"), {}),
        gpu_resources=gpu_resources,
        problem=f"{ident('Node', obj)}: " + "; ".join(bad) if bad else "",
    )


def _flag(spec: Mapping[str, Any]) -> bool:
    value = spec.get("unschedulable")
    if value is not None and not isinstance(value, bool):
        raise Unreadable(f"spec.unschedulable: {show(value)} is not true or false")
    return bool(value)


def pod_view(obj: Any, node: str | None = None) -> PodView | None:
    """A bound pod, or None for one no node holds.

    ``node``: the node the pods were listed for; a pod there whose ``spec.nodeName`` cannot be read
    is taken to hold it.  Without ``node`` such a pod raises :class:`Unreadable`: nobody can tell
    which node it holds.  Any other field of the wrong shape leaves the pod holding its node (a
    workload, not terminating) and is named in ``problem``.
    """
    plain = _plain_pod(obj)
    return read_pod(obj, node) if plain is _NOT_PLAIN else cast("PodView | None", plain)


def read_pod(obj: Any, node: str | None = None) -> PodView | None:
    """:func:`pod_view`, field by field, each problem named."""
    where = ident("Pod", obj)
    try:
        if not isinstance(obj, Mapping):
            raise Unreadable(f"{show(obj)} is not an object")
        bound = string(mapping(obj, "spec", "spec"), "nodeName", "spec.nodeName")
        if bound and not matches("k8s-name", bound):
            raise Unreadable(f"spec.nodeName: {show(bound)} is not a Kubernetes node name")
    except Unreadable as exc:
        if node is None:
            raise Unreadable(f"{where}: {exc}: which node the pod holds cannot be told") from None
        return PodView("", "", node, problem=f"{where}: {exc}", named=False)
    if not bound:
        return None
    bad = Problems()
    namespace, name = bad.read(lambda: identity(obj, "Pod"), ("", ""))
    named = not bad
    meta: Mapping[str, Any] = bad.read(lambda: mapping(obj, "metadata", "metadata"), {})
    owners: list[Mapping[str, Any]] = bad.read(lambda: objects(meta, "ownerReferences", "metadata.ownerReferences"), [])
    notes: dict[str, str] = bad.read(lambda: strings(meta, "annotations", "metadata.annotations"), {})
    gone = meta.get("deletionTimestamp")
    if gone is not None and not isinstance(gone, str):
        bad.append(f"metadata.deletionTimestamp: {show(gone)} is not a time")
    group = notes.get(GROUP_NAME_ANNOTATION, "")  # a value no PodGroup can be named: in none
    return PodView(
        namespace=namespace,
        name=name,
        node=bound,
        phase=bad.read(lambda: string(mapping(obj, "status", "status"), "phase", "status.phase", "Pending"), "Running"),
        terminating=isinstance(gone, str) and bool(gone),
        daemonset=any(o.get("kind") == "DaemonSet" for o in owners),
        mirror="kubernetes.io/config.mirror" in notes,
        problem=f"{where}: " + "; ".join(p.removeprefix(f"{where}: ") for p in bad) if bad else "",
        named=named,
        group=group if matches("k8s-name", group) else "",
    )


#: What :func:`_plain_pod` answers for a pod it leaves to the field-by-field reading.
_NOT_PLAIN = object()
_NAME, _LABEL = RULES["k8s-name"], RULES["k8s-label"]


def _words(value: Any) -> bool:
    """A map of strings to strings (or nothing)."""
    return value is None or (type(value) is dict and all(type(k) is str and type(v) is str for k, v in value.items()))


def _plain_pod(obj: Any) -> PodView | None | object:
    """:func:`pod_view` of a pod whose every field it reads has its plain shape, else :data:`_NOT_PLAIN`.

    The same checks as the field-by-field reading, made on exact types in one pass; anything
    else (a subclass, a field of the wrong shape, an invalid name) is left to that reading.
    """
    spec = obj.get("spec") if type(obj) is dict else _NOT_PLAIN
    if spec is None:
        return None
    if type(spec) is not dict:
        return _NOT_PLAIN
    bound = spec.get("nodeName")
    if bound is None or bound == "":
        return None
    meta, status = obj.get("metadata"), obj.get("status")
    if type(bound) is not str or not _NAME.fullmatch(bound) or type(meta) is not dict:
        return _NOT_PLAIN
    name, ns, gone = meta.get("name"), meta.get("namespace"), meta.get("deletionTimestamp")
    owners, notes = meta.get("ownerReferences"), meta.get("annotations")
    phase = status.get("phase") if type(status) is dict else None
    plain = (
        type(name) is str
        and _NAME.fullmatch(name) is not None
        and (ns is None or (type(ns) is str and _LABEL.fullmatch(ns) is not None))
        and (owners is None or (type(owners) is list and all(type(o) is dict for o in owners)))
        and _words(notes)
        and (gone is None or type(gone) is str)
        and (status is None or type(status) is dict)
        and (phase is None or type(phase) is str)
    )
    if not plain:
        return _NOT_PLAIN
    group = notes.get(GROUP_NAME_ANNOTATION, "") if notes else ""
    return PodView(
        namespace=ns or "",
        name=cast(str, name),
        node=bound,
        phase="Pending" if phase is None else phase,
        terminating=bool(gone),
        daemonset=any(o.get("kind") == "DaemonSet" for o in owners or ()),
        mirror="kubernetes.io/config.mirror" in (notes or {}),
        group=group if not group or _NAME.fullmatch(group) else "",
    )
