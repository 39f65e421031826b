"""What the bridge observes of Slurm and Kubernetes, as plain immutable values.

:func:`build_snapshot` turns the adapters' raw data (node and job records from
:mod:`slurm_pool.adapters.records`, Kubernetes objects as the JSON dicts the API
server sends) into a :class:`Snapshot`.  Pure: no I/O, no clock.

Kubernetes objects are read field by field (:mod:`slurm_pool.bridge.objects`).
A Node or pod that cannot be named, or a pod whose node cannot be told, stops
the run before it acts (:class:`~slurm_pool.bridge.objects.Unreadable`): no
safe decision can be made without knowing which node is which.  Any other
field of the wrong shape is read at its cautious value (a node cordoned by
someone else with no GPUs, a pod still holding its node) and named in
:attr:`Snapshot.unreadable`, which keeps the planner from lending more or
giving back for demand.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, TypeVar

from slurm_pool.adapters.gres import gpu_counts
from slurm_pool.adapters.records import JobRecord, NodeRecord, State
from slurm_pool.adapters.slurmjson import REASON_PREFIX
from slurm_pool.bridge.demand import allocatable_gpus, isvc_demand, total_demand
from slurm_pool.bridge.objects import (
    Unreadable,
    ident,
    identity,
    mapping,
    objects,
    show,
    string,
    strings,
)
from slurm_pool.spec.bridge import Bridge
from slurm_pool.spec.hosts import HostlistError, expand
from slurm_pool.text import matches, shown

T = TypeVar("T")
#: Comment of every placeholder job; the node follows as ``node=NAME``.
LEND_COMMENT = f"{REASON_PREFIX}lend"
#: Kubernetes names the bridge owns (all under the ``slurm-pool`` prefix).
LENT_LABEL = "slurm-pool/lent"
RECLAIM_TAINT = "slurm-pool/reclaimed"
RECLAIM_SINCE = "slurm-pool/reclaim-since"
#: Job name of placeholder jobs (for squeue readers; the comment is what counts).
PLACEHOLDER_NAME = "slurm-pool-lend"

#: Slurm node states that rule out lending (and reclaim a lent node).
UNAVAILABLE_STATES = frozenset(
    {
        "DOWN",
        "DRAIN",
        "DRAINED",
        "DRAINING",
        "FAIL",
        "FAILING",
        "NOT_RESPONDING",
        "NO_RESPOND",
        "MAINT",
        "RESERVED",
        "POWER_DOWN",
        "POWERED_DOWN",
        "POWERING_DOWN",
        "POWERING_UP",
        "REBOOT_REQUESTED",
        "REBOOT_ISSUED",
        "UNKNOWN",
        "FUTURE",
        "INVALID_REG",
        "PLANNED",
    }
)
#: Placeholder states that still count as "the lend is in force or on its way".
PLACEHOLDER_ACTIVE = frozenset(
    {"PENDING", "RUNNING", "CONFIGURING", "SUSPENDED", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED"}
)
PLACEHOLDER_RUNNING = frozenset({"RUNNING", "CONFIGURING"})
_NODE_IN_COMMENT = re.compile(r"(?:^|\s)node=(\S+)")


@dataclass(frozen=True)
class SlurmNodeView:
    """A Slurm node as far as lending is concerned."""

    name: str
    state: State
    reason: str = ""
    partitions: tuple[str, ...] = ()
    #: Its configured GPUs per GRES type (``""``: untyped) and active features.
    gpus: tuple[tuple[str, int], ...] = ()
    features: tuple[str, ...] = ()

    @property
    def unavailable(self) -> tuple[str, ...]:
        """State flags that rule lending out (empty: available)."""
        return tuple(s for s in self.state if s in UNAVAILABLE_STATES)

    @property
    def human_drain(self) -> bool:
        """Drained (or down) with a reason that is not slurm-pool's."""
        return bool(self.unavailable) and bool(self.reason) and not self.reason.startswith(REASON_PREFIX)

    @property
    def idle(self) -> bool:
        return "IDLE" in self.state and "COMPLETING" not in self.state


@dataclass(frozen=True)
class Placeholder:
    """A lend placeholder job (comment ``slurm-pool:lend node=NODE``)."""

    job_id: int
    node: str
    state: State
    restart_count: int = 0
    #: When it started (Unix seconds; None while it has not): the lend's start, for the minimum lease.
    start_time: float | None = None

    @property
    def active(self) -> bool:
        """Queued or running: not ended, and not on its way out (COMPLETING)."""
        return self.state.base in PLACEHOLDER_ACTIVE and "COMPLETING" not in self.state

    @property
    def running(self) -> bool:
        return self.state.any(PLACEHOLDER_RUNNING) and self.active

    @property
    def requeued(self) -> bool:
        """Preempted and put back in the queue: it must not come back."""
        return self.active and not self.running and (self.restart_count > 0 or "REQUEUED" in self.state)


#: A ``--constraint`` this simple is checked; anything else (``|``, counts, brackets) is assumed to fit.
_SIMPLE_CONSTRAINT = re.compile(r"[A-Za-z0-9_.+-]+(?:[&,][A-Za-z0-9_.+-]+)*")


@dataclass(frozen=True)
class PendingJob:
    """A pending Slurm job outside the lend partition: where it may run, and what it needs there."""

    job_id: int
    partitions: tuple[str, ...]
    required: frozenset[str] = frozenset()
    excluded: frozenset[str] = frozenset()
    reason: str = ""
    gpus: int = 0
    gpu_types: tuple[tuple[str, int], ...] = ()
    node_count: int = 1
    features: str = ""
    #: Its tier preempts the placeholders (``spec.bridge.lend_preemptors``): Slurm itself may take
    #: a lent node back for it.  A job that cannot gets only lent nodes that serve no pod.
    preempts_lend: bool = True

    def could_use(self, node: SlurmNodeView) -> bool:
        """Its partitions and node lists allow ``node``, and one node's share of its request fits there."""
        if self.required and node.name not in self.required:
            return False
        if node.name in self.excluded:
            return False
        if not set(self.partitions) & set(node.partitions):
            return False
        return self.fits(node)

    def fits(self, node: SlurmNodeView) -> bool:
        per_node = max(self.node_count, 1)
        have = dict(node.gpus)
        for typ, count in self.gpu_types:
            if typ and have.get(typ, 0) < -(-count // per_node):
                return False
        if sum(have.values()) < -(-self.gpus // per_node):
            return False
        if self.features and _SIMPLE_CONSTRAINT.fullmatch(self.features):
            return set(re.split(r"[&,]", self.features)) <= set(node.features)
        return True


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


@dataclass(frozen=True)
class Snapshot:
    """Both systems at one moment."""

    slurm_nodes: Mapping[str, SlurmNodeView]
    placeholders: tuple[Placeholder, ...]
    pending: tuple[PendingJob, ...]
    #: node -> ids of jobs other than placeholders holding it
    busy: Mapping[str, tuple[int, ...]]
    k8s_nodes: Mapping[str, K8sNodeView]
    pods: tuple[PodView, ...]
    #: GPUs (``bridge.gpu_resource``) the InferenceServices want (:mod:`slurm_pool.bridge.demand`)
    demand_gpus: int
    lend_partition: str
    #: Nodes holding a placeholder that Kubernetes has but ``bridge.node_selector`` no longer selects.
    unselected: frozenset[str] = frozenset()
    #: The same demand per GPU-like resource, MIG slices (``nvidia.com/mig-*``) included
    demand_by_resource: Mapping[str, int] = field(default_factory=dict)
    #: Kubernetes objects (or fields) that could not be read, each naming kind, namespace/name and why:
    #: while there are any, the demand and the nodes' capacity are not known whole.
    unreadable: tuple[str, ...] = ()

    @property
    def managed(self) -> list[str]:
        """Nodes the bridge may lend: in the lend partition and in Kubernetes, plus any it marked.

        A node whose marks cannot be read but that holds a placeholder counts as marked.
        """
        names = {n for n, v in self.slurm_nodes.items() if self.lend_partition in v.partitions}
        names &= set(self.k8s_nodes)
        names |= {n for n, v in self.k8s_nodes.items() if v.lent or v.reclaim_since}
        names |= {n for n, v in self.k8s_nodes.items() if v.problem and self.placeholders_on(n)}
        return sorted(names)

    @property
    def base_gpus(self) -> int:
        """GPUs of schedulable Kubernetes nodes that are not Slurm's (always there for inference)."""
        managed = set(self.managed)
        return sum(v.gpus for n, v in self.k8s_nodes.items() if n not in managed and not v.unschedulable)

    def base_resources(self, gpu_resource: str) -> dict[str, int]:
        """:attr:`base_gpus` per GPU-like resource, MIG slices included."""
        managed = set(self.managed)
        return sum_resources(
            (v for n, v in self.k8s_nodes.items() if n not in managed and not v.unschedulable), gpu_resource
        )

    def placeholders_on(self, node: str) -> list[Placeholder]:
        return [p for p in self.placeholders if p.node == node and p.active]

    def workload_pods(self, node: str) -> list[PodView]:
        return [p for p in self.pods if p.node == node and p.workload]


# -- building a snapshot ------------------------------------------------------


def _nodes_of(hostlist: str) -> frozenset[str]:
    if not hostlist or hostlist in ("(null)", "None"):
        return frozenset()
    try:
        return frozenset(expand(hostlist))
    except HostlistError:
        return frozenset(hostlist.split(","))


def placeholder_node(job: JobRecord, partition: str, account: str | None = None) -> str | None:
    """The node a placeholder job lends, or None when ``job`` is no placeholder.

    A placeholder runs in the lend partition (under ``account`` when given and Slurm names one) and
    names a valid Slurm node; any other job with such a comment is an ordinary job.
    """
    if not (job.comment or "").startswith(LEND_COMMENT) or job.partition != partition:
        return None
    if account and job.account and job.account != account:
        return None
    m = _NODE_IN_COMMENT.search(job.comment or "")
    return m.group(1) if m and matches("node", m.group(1)) else None


def isvc_gpus(isvc: Mapping[str, Any], gpu_resource: str, **observed: Iterable[Mapping[str, Any]]) -> int:
    """GPUs (``gpu_resource``) one InferenceService wants; ``observed``: see :func:`~slurm_pool.bridge.demand.isvc_demand`."""
    return isvc_demand(isvc, gpu_resource, **observed).get(gpu_resource, 0)


class _Problems(list[str]):
    """The problems met reading one object; :meth:`read` gives a cautious value for a field it cannot read."""

    def read(self, get: Callable[[], T], cautious: T) -> T:
        try:
            return get()
        except Unreadable as exc:
            self.append(str(exc))
            return cautious


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
    bad = _Problems()
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
    bad = _Problems()
    namespace, name = bad.read(lambda: identity(obj, "Pod"), ("", ""))
    named = not bad
    meta: Mapping[str, Any] = bad.read(lambda: mapping(obj, "metadata", "metadata"), {})
    owners: list[Mapping[str, Any]] = bad.read(lambda: objects(meta, "ownerReferences", "metadata.ownerReferences"), [])
    notes: dict[str, str] = bad.read(lambda: strings(meta, "annotations", "metadata.annotations"), {})
    gone = meta.get("deletionTimestamp")
    if gone is not None and not isinstance(gone, str):
        bad.append(f"metadata.deletionTimestamp: {show(gone)} is not a time")
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
    )


def build_snapshot(
    config: Bridge,
    slurm_nodes: Iterable[NodeRecord],
    jobs: Iterable[JobRecord],
    k8s_nodes: Iterable[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]],
    inference_services: Iterable[Mapping[str, Any]],
    deployments: Iterable[Mapping[str, Any]] = (),
    hpas: Iterable[Mapping[str, Any]] = (),
    serving_runtimes: Iterable[Mapping[str, Any]] = (),
    cluster_serving_runtimes: Iterable[Mapping[str, Any]] = (),
    preemptors: Iterable[str] | None = None,
) -> Snapshot:
    """Both systems' raw data -> :class:`Snapshot`.

    ``pods`` are all live pods, bound or not: unbound ones count only as inference demand.
    ``preemptors``: the QOS whose jobs preempt placeholders (None: every job's does).
    """
    may_preempt = None if preemptors is None else frozenset(preemptors)
    nodes = {
        n.name: SlurmNodeView(
            n.name, n.state, n.reason, n.partitions, tuple(sorted(gpu_counts(n.gres).items())), n.features
        )
        for n in slurm_nodes
    }
    placeholders, pending = [], []
    busy: dict[str, list[int]] = {}
    for job in jobs:
        lent = placeholder_node(job, config.partition, config.account)
        if lent is not None:
            placeholders.append(Placeholder(job.job_id, lent, job.state, job.restart_count, job.start_time or None))
            continue
        if job.on_node:
            for n in _nodes_of(job.nodes):
                busy.setdefault(n, []).append(job.job_id)
        elif job.waiting:
            parts = tuple(p for p in job.partition.split(",") if p and p != config.partition)
            if not parts:
                continue
            pending.append(
                PendingJob(
                    job.job_id,
                    parts,
                    required=_nodes_of(job.required_nodes),
                    excluded=_nodes_of(job.excluded_nodes),
                    reason=job.reason,
                    gpus=job.gpus,
                    gpu_types=tuple(sorted(job.gpu_types.items())),
                    node_count=job.node_count or 1,
                    features=job.features,
                    preempts_lend=may_preempt is None or job.qos in may_preempt,
                )
            )
    k8s = {v.name: v for v in (k8s_node_view(o, config.gpu_resource) for o in k8s_nodes)}
    pods = list(pods)
    pod_views = tuple(p for p in (pod_view(o) for o in pods) if p is not None)
    problems = [v.problem for v in k8s.values() if v.problem] + [p.problem for p in pod_views if p.problem]
    demand = total_demand(
        inference_services,
        config.gpu_resource,
        deployments=deployments,
        hpas=hpas,
        runtimes=serving_runtimes,
        cluster_runtimes=cluster_serving_runtimes,
        pods=pods,
        problems=problems,
    )
    return Snapshot(
        slurm_nodes=nodes,
        placeholders=tuple(sorted(placeholders, key=lambda p: p.job_id)),
        pending=tuple(pending),
        busy={n: tuple(sorted(ids)) for n, ids in busy.items()},
        k8s_nodes=k8s,
        pods=pod_views,
        demand_gpus=demand.get(config.gpu_resource, 0),
        lend_partition=config.partition,
        demand_by_resource=demand,
        unreadable=tuple(dict.fromkeys(problems)),
    )
