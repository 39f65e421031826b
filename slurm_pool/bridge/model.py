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
from dataclasses import dataclass, field, replace
from functools import cached_property, lru_cache
from typing import Any, Iterable, Mapping, TypeVar

from slurm_pool.adapters.gres import gpu_counts
from slurm_pool.adapters.records import OUT_OF_SERVICE, JobRecord, NodeRecord, State
from slurm_pool.adapters.slurmjson import REASON_PREFIX
from slurm_pool.bridge.demand import isvc_demand, total_demand
from slurm_pool.bridge.gangs import GROUP_ID, Gang, read_gangs
from slurm_pool.bridge.k8sview import (
    LENT_LABEL,
    RECLAIM_SINCE,
    RECLAIM_TAINT,
    K8sNodeView,
    PodView,
    Taint,
    k8s_node_view,
    pod_view,
    sum_resources,
)
from slurm_pool.bridge.names import NodeNaming
from slurm_pool.spec.bridge import Bridge
from slurm_pool.spec.hosts import HostlistError, expand
from slurm_pool.text import RULES, matches

__all__ = [
    "LEND_COMMENT",
    "LENT_LABEL",
    "PLACEHOLDER_NAME",
    "RECLAIM_SINCE",
    "RECLAIM_TAINT",
    "K8sNodeView",
    "PendingJob",
    "Placeholder",
    "PodView",
    "SlurmNodeView",
    "Snapshot",
    "Taint",
    "build_snapshot",
    "isvc_gpus",
    "k8s_node_view",
    "placeholder_group",
    "placeholder_node",
    "pod_view",
    "sum_resources",
]

#: Comment of every placeholder job; the node follows as ``node=NAME``.
LEND_COMMENT = f"{REASON_PREFIX}lend"
#: Job name of placeholder jobs (for squeue readers; the comment is what counts).
PLACEHOLDER_NAME = "slurm-pool-lend"

#: Slurm node states that rule out lending (and reclaim a lent node): out of service, or about to be.
UNAVAILABLE_STATES = OUT_OF_SERVICE | frozenset(
    {
        "MAINT",
        "RESERVED",
        "POWER_DOWN",
        "POWERED_DOWN",
        "POWERING_DOWN",
        "POWERING_UP",
        "REBOOT_REQUESTED",
        "REBOOT_ISSUED",
        "PLANNED",
    }
)
#: Placeholder states that still count as "the lend is in force or on its way".
PLACEHOLDER_ACTIVE = frozenset(
    {"PENDING", "RUNNING", "CONFIGURING", "SUSPENDED", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED"}
)
PLACEHOLDER_RUNNING = frozenset({"RUNNING", "CONFIGURING"})
_NODE = RULES["node"]
_NODE_IN_COMMENT = re.compile(r"(?:^|\s)node=(\S+)")
_GROUP_IN_COMMENT = re.compile(r"(?:^|\s)gang=(\S+)")


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
    #: The gang group it was submitted for (its comment's ``gang=<id>``; "": none).
    group: str = ""

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
        """One node's share of its request fits ``node`` (:meth:`need`)."""
        return has(node, self.need)

    @cached_property
    def need(self) -> Need:
        """What one node must have for its share: GPUs per type and in all, features (None: not checked)."""
        per_node = max(self.node_count, 1)
        typed = frozenset((typ, -(-count // per_node)) for typ, count in self.gpu_types if typ)
        feats = None
        if self.features and _SIMPLE_CONSTRAINT.fullmatch(self.features):
            feats = frozenset(re.split(r"[&,]", self.features))
        return typed, -(-self.gpus // per_node), feats


#: :attr:`PendingJob.need`: (GPU type, GPUs of it) pairs, GPUs in all, the features of a simple constraint.
Need = tuple[frozenset[tuple[str, int]], int, frozenset[str] | None]


def has(node: SlurmNodeView, need: Need) -> bool:
    """``node`` has what ``need`` asks of one node."""
    typed, total, feats = need
    have = dict(node.gpus)
    if any(have.get(typ, 0) < count for typ, count in typed):
        return False
    if sum(have.values()) < total:
        return False
    return feats is None or feats <= set(node.features)


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
    #: ``k8s_nodes`` and the pods' ``node`` are keyed by Slurm node name (``bridge.node_names``); this
    #: is each one's Kubernetes Node name.  Nodes matched with no Slurm node are in ``k8s_only``.
    k8s_names: Mapping[str, str] = field(default_factory=dict)
    k8s_only: tuple[K8sNodeView, ...] = ()
    #: Why Kubernetes Nodes were left alone (:class:`~slurm_pool.bridge.names.NameMap`).
    name_problems: tuple[str, ...] = ()
    #: Slurm nodes whose Kubernetes Node is in doubt: their placeholders are kept as if unselected.
    in_doubt: frozenset[str] = frozenset()
    #: Volcano gangs (``bridge.gangs``; empty without it), every one read, waiting or not.
    gangs: tuple[Gang, ...] = ()

    # The indexes below are made once per snapshot (its fields never change), so that what the
    # planner asks per node costs nothing like a scan of the whole cluster.

    @cached_property
    def _managed(self) -> frozenset[str]:
        names = {n for n, v in self.slurm_nodes.items() if self.lend_partition in v.partitions}
        names &= self.k8s_nodes.keys()
        names |= {n for n, v in self.k8s_nodes.items() if v.lent or v.reclaim_since}
        names |= {n for n, v in self.k8s_nodes.items() if v.problem and n in self._placeholders}
        return frozenset(names)

    @cached_property
    def _placeholders(self) -> dict[str, tuple[Placeholder, ...]]:
        """Node -> its active placeholders, in job id order."""
        return _by_node(p for p in self.placeholders if p.active)

    @cached_property
    def _workload(self) -> dict[str, tuple[PodView, ...]]:
        """Node -> the pods on it that have to leave before it goes back to Slurm, in listing order."""
        return _by_node(p for p in self.pods if p.workload)

    @property
    def managed(self) -> list[str]:
        """Nodes the bridge may lend: in the lend partition and in Kubernetes, plus any it marked.

        A node whose marks cannot be read but that holds a placeholder counts as marked.
        """
        return sorted(self._managed)

    @cached_property
    def base_gpus(self) -> int:
        """GPUs of schedulable Kubernetes nodes that are not Slurm's (always there for inference)."""
        managed = self._managed
        mapped = sum(v.gpus for n, v in self.k8s_nodes.items() if n not in managed and not v.unschedulable)
        return mapped + sum(v.gpus for v in self.k8s_only if not v.unschedulable)

    def base_resources(self, gpu_resource: str) -> dict[str, int]:
        """:attr:`base_gpus` per GPU-like resource, MIG slices included."""
        managed = self._managed
        views = [v for n, v in self.k8s_nodes.items() if n not in managed and not v.unschedulable]
        return sum_resources(views + [v for v in self.k8s_only if not v.unschedulable], gpu_resource)

    def placeholders_on(self, node: str) -> list[Placeholder]:
        """The active placeholders on ``node``."""
        return list(self._placeholders.get(node, ()))

    def workload_pods(self, node: str) -> list[PodView]:
        """The pods on ``node`` that keep it from Slurm (:attr:`PodView.workload`)."""
        return list(self._workload.get(node, ()))


_On = TypeVar("_On", Placeholder, PodView)


def _by_node(items: Iterable[_On]) -> dict[str, tuple[_On, ...]]:
    """``items`` grouped by their ``node``, each group in the order given."""
    out: dict[str, list[_On]] = {}
    for item in items:
        out.setdefault(item.node, []).append(item)
    return {n: tuple(group) for n, group in out.items()}


# -- building a snapshot ------------------------------------------------------


@lru_cache(maxsize=1 << 16)
def _nodes_of(hostlist: str) -> frozenset[str]:
    """The nodes of a Slurm hostlist (a job's nodes, required or excluded nodes), each list expanded once."""
    if not hostlist or hostlist in ("(null)", "None"):
        return frozenset()
    names = hostlist.split(",")
    if all(_NODE.fullmatch(n) for n in names):  # no ranges: the names themselves
        return frozenset(names)
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


def placeholder_group(comment: str) -> str:
    """The gang group a placeholder's comment names (``gang=<id>``; "": none, or no group id)."""
    found = _GROUP_IN_COMMENT.search(comment)
    return found.group(1) if found and matches(GROUP_ID, found.group(1)) else ""


def isvc_gpus(isvc: Mapping[str, Any], gpu_resource: str, **observed: Iterable[Mapping[str, Any]]) -> int:
    """GPUs (``gpu_resource``) one InferenceService wants; ``observed``: see :func:`~slurm_pool.bridge.demand.isvc_demand`."""
    return isvc_demand(isvc, gpu_resource, **observed).get(gpu_resource, 0)


def _jobs(
    config: Bridge, jobs: Iterable[JobRecord], may_preempt: frozenset[str] | None
) -> tuple[list[Placeholder], list[PendingJob], dict[str, list[int]]]:
    """The placeholders, the pending jobs outside the lend partition, and node -> the other jobs on it."""
    placeholders, pending = [], []
    busy: dict[str, list[int]] = {}
    where: dict[State, tuple[bool, bool]] = {}  # a state -> (on a node, waiting): a handful of states
    for job in jobs:
        lent = placeholder_node(job, config.partition, config.account)
        if lent is not None:
            gid = placeholder_group(job.comment or "")
            placeholders.append(
                Placeholder(job.job_id, lent, job.state, job.restart_count, job.start_time or None, gid)
            )
            continue
        seen = where.get(job.state)
        if seen is None:
            seen = where[job.state] = (job.on_node, job.waiting)
        on_node, waiting = seen
        if on_node:
            for n in _nodes_of(job.nodes):
                busy.setdefault(n, []).append(job.job_id)
        elif waiting:
            parts = tuple(p for p in job.partition.split(",") if p and p != config.partition)
            if parts:
                pending.append(_pending(job, parts, may_preempt))
    return placeholders, pending, busy


def _pending(job: JobRecord, parts: tuple[str, ...], may_preempt: frozenset[str] | None) -> PendingJob:
    return PendingJob(
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
    podgroups: Iterable[Mapping[str, Any]] = (),
    vcjobs: Iterable[Mapping[str, Any]] = (),
    priority_classes: Iterable[Mapping[str, Any]] = (),
) -> Snapshot:
    """Both systems' raw data -> :class:`Snapshot`.

    ``pods`` are all live pods, bound or not: unbound ones count only as inference demand.
    ``preemptors``: the QOS whose jobs preempt placeholders (None: every job's does).
    ``podgroups``, ``vcjobs``, ``priority_classes``: Volcano's objects, read into
    :attr:`Snapshot.gangs` when ``config.gangs`` is set (:func:`~slurm_pool.bridge.gangs.read_gangs`).
    A gang that cannot be read carries its ``problem``; it is not in :attr:`Snapshot.unreadable`,
    so it never holds inference lending still.
    """
    may_preempt = None if preemptors is None else frozenset(preemptors)
    nodes = {
        n.name: SlurmNodeView(
            n.name, n.state, n.reason, n.partitions, tuple(sorted(gpu_counts(n.gres).items())), n.features
        )
        for n in slurm_nodes
    }
    placeholders, pending, busy = _jobs(config, jobs, may_preempt)
    views = [k8s_node_view(o, config.gpu_resource) for o in k8s_nodes]
    naming = NodeNaming(config.node_names)
    names = naming.match(((v.name, v.labels) for v in views), nodes)
    k8s = {names.to_slurm[v.name]: v for v in views if v.name in names.to_slurm}
    k8s_only = tuple(v for v in views if v.name not in names.to_slurm)
    marked = [
        f"Kubernetes Node {v.name} carries the bridge's marks but is no Slurm node's by bridge.node_names: left alone"
        for v in k8s_only
        if v.lent or v.reclaim_since or v.ours_tainted
    ]
    pods = list(pods)
    pod_views = tuple(p for p in (pod_view(o) for o in pods) if p is not None)
    problems = [v.problem for v in views if v.problem] + [p.problem for p in pod_views if p.problem]
    pod_views = _on_slurm_nodes(pod_views, names.to_slurm, naming)
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
    gangs: tuple[Gang, ...] = ()
    if config.gangs is not None:
        room = sum(max(1, sum(gpus for _, gpus in v.gpus)) for v in nodes.values())  # a pod per GPU, or per node
        gangs = read_gangs(podgroups, vcjobs, priority_classes, config.gangs, config.gpu_resource, [], room)
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
        k8s_names=names.to_k8s,
        k8s_only=k8s_only,
        name_problems=names.problems + tuple(marked),
        in_doubt=names.doubtful,
        gangs=gangs,
    )


def _on_slurm_nodes(pods: tuple[PodView, ...], to_slurm: Mapping[str, str], naming: NodeNaming) -> tuple[PodView, ...]:
    """``pods`` with their ``node`` a Slurm node name; those on a Node matched with none are left out."""
    if naming.rule.by == "name":
        return pods
    out = []
    for p in pods:
        slurm = to_slurm.get(p.node) or naming.slurm_name(p.node)
        if slurm is not None:
            out.append(p if slurm == p.node else replace(p, node=slurm))
    return tuple(out)
