"""Volcano gang jobs as the bridge sees them: indivisible units of demand (pure: no I/O).

A gang is a PodGroup (``scheduling.volcano.sh/v1beta1``) of the configured
scheduler (``bridge.gangs.scheduler_name``) whose ``minMember`` pods must be
placed at once.  :class:`Gang` holds what the planner needs of it: the shapes
of those ``minMember`` pods (read from its vcjob's task templates), whether it
still waits for nodes, its priority and its pods' termination grace.

Nodes lent for a gang form one group: each carries the label and the
``NoSchedule`` taint :data:`GANG_LABEL` ``= <group id>`` (so inference pods do
not fill them; the gang's pods tolerate it) and the annotation
:data:`GANG_JOB` ``= <namespace>/<vcjob>``.  The group id is
:func:`group_id` of the PodGroup's uid, so it fits a label value and a gang
made again under the same name is a new group.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from decimal import ROUND_CEILING
from typing import Any, Iterable, Mapping

from slurm_pool.bridge.demand import container_gpus
from slurm_pool.bridge.objects import (
    Obj,
    Problems,
    Unreadable,
    count,
    flag,
    ident,
    identity,
    mapping,
    objects,
    quantity,
    show,
    string,
    strings,
)
from slurm_pool.spec.bridge import GangSettings
from slurm_pool.text import matches

__all__ = [
    "ABORT_ACTION",
    "GANG_JOB",
    "GANG_LABEL",
    "GROUP_ID",
    "GROUP_NAME_ANNOTATION",
    "Gang",
    "PodShape",
    "Toleration",
    "group_id",
    "read_gangs",
]

#: Node label and taint key (value: the group id) of the nodes lent for one gang.
GANG_LABEL = "slurm-pool/gang"
#: Node annotation: ``<namespace>/<vcjob name>`` the group was lent for (stopped as one unit on reclaim).
GANG_JOB = "slurm-pool/gang-job"
#: The annotation Volcano puts on a gang's pods: the name of their PodGroup (same namespace).
GROUP_NAME_ANNOTATION = "scheduling.k8s.io/group-name"
#: The bus Command action that stops a vcjob as one unit (``vcctl job suspend``).
ABORT_ACTION = "AbortJob"
#: PodGroup phases in which a gang waits for nodes.
WAITING_PHASES = frozenset({"Pending", "Inqueue"})
#: vcjob phases after which it will not run again without a person (no lending for it).
JOB_ENDED = frozenset({"Aborting", "Aborted", "Completing", "Completed", "Failed", "Terminating", "Terminated"})


#: What :func:`group_id` makes: the only group ids the bridge reads back from a label or a comment.
GROUP_ID = re.compile(r"g[0-9a-f]{16}")


def group_id(podgroup_uid: str) -> str:
    """The label value naming the group of nodes lent for the PodGroup with this uid."""
    return "g" + hashlib.sha256(podgroup_uid.encode()).hexdigest()[:16]


def job_ok(job: object) -> bool:
    """``job`` is ``namespace/name`` of Kubernetes names (a group's vcjob, as its nodes' annotation names it)."""
    if not isinstance(job, str):
        return False
    ns, _, name = job.partition("/")
    return matches("k8s-label", ns) and matches("k8s-name", name)


@dataclass(frozen=True)
class Toleration:
    """One toleration of a pod template (Kubernetes' fields; ``operator`` Equal or Exists)."""

    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""

    def tolerates(self, key: str, value: str, effect: str) -> bool:
        """This toleration covers the taint ``key=value:effect`` (Kubernetes' rule)."""
        if self.effect and self.effect != effect:
            return False
        if self.operator == "Exists":
            return not self.key or self.key == key
        return self.key == key and self.value == value


@dataclass(frozen=True)
class PodShape:
    """What one pod of a gang needs of a node."""

    #: GPU-like resources (``bridge.gpu_resource``, ``nvidia.com/mig-*``) it asks for.
    resources: Mapping[str, int] = field(default_factory=dict)
    cpu_milli: int = 0
    memory: int = 0
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Toleration, ...] = ()

    def tolerates(self, key: str, value: str, effect: str) -> bool:
        return any(t.tolerates(key, value, effect) for t in self.tolerations)


@dataclass(frozen=True)
class Gang:
    """A PodGroup of the gang scheduler and its vcjob."""

    namespace: str
    #: The PodGroup's name and uid.
    name: str
    uid: str
    min_member: int
    #: The shapes of its first ``min_member`` pods (task by task, each task's ``minAvailable`` first).
    pods: tuple[PodShape, ...] = ()
    #: The PodGroup's ``status.phase`` (Pending, Inqueue, Running, Unknown, Completed).
    phase: str = "Pending"
    #: Pods of it running (``status.running``).
    running: int = 0
    #: The vcjob that owns it ("" when none does), and that job's ``status.state.phase``.
    job: str = ""
    job_phase: str = ""
    #: Its PriorityClass's value (0: none or unknown), and when it was made (RFC 3339, for the order).
    priority: int = 0
    created: str = ""
    #: The longest ``terminationGracePeriodSeconds`` of its pods (Kubernetes' default 30).
    grace_seconds: int = 30
    #: Why it cannot be read whole ("" : it can); such a gang is named in the report, never lent for.
    problem: str = ""

    @property
    def ref(self) -> str:
        """``namespace/podgroup``."""
        return f"{self.namespace}/{self.name}"

    @property
    def job_ref(self) -> str:
        """``namespace/vcjob`` ("" when no vcjob owns it)."""
        return f"{self.namespace}/{self.job}" if self.job else ""

    @property
    def group(self) -> str:
        """The group id its lent nodes carry (:func:`group_id`)."""
        return group_id(self.uid)

    @property
    def ended(self) -> bool:
        """Its vcjob ended or is being stopped, or it completed: it needs no node."""
        return self.job_phase in JOB_ENDED or self.phase == "Completed"

    @property
    def waiting(self) -> bool:
        """It waits for nodes: pending or in queue, or running below ``min_member``."""
        if self.ended:
            return False
        return self.phase in WAITING_PHASES or (self.phase == "Running" and self.running < self.min_member)

    def gpus(self, gpu_resource: str) -> int:
        """Its ``min_member`` pods' GPUs of ``gpu_resource``."""
        return sum(p.resources.get(gpu_resource, 0) for p in self.pods)


# -- reading gangs from Volcano's objects -------------------------------------

#: The vcjob kind a PodGroup's owner reference names.
VCJOB_API = "batch.volcano.sh/v1alpha1"
#: Kubernetes' default ``terminationGracePeriodSeconds``.
DEFAULT_GRACE = 30
#: Pods a gang may need at once when the caller names no bound (Kubernetes' tested limit for a whole
#: cluster: 150,000 pods); the bridge's bound is what the pool's nodes can hold (``max_pods``).
MAX_GANG_PODS = 150_000
#: A PriorityClass value is an int32.
_INT32 = 2**31
_UID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9]{0,63}")
_TIME = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]{1,9})?(?:Z|[+-][0-9]{2}:[0-9]{2})")
_OPERATORS = {"": "Equal", "Equal": "Equal", "Exists": "Exists"}
_EFFECTS = frozenset({"", "NoSchedule", "PreferNoSchedule", "NoExecute"})


def _keep(problems: list[str] | None, exc: Unreadable) -> None:
    if problems is None:
        raise exc
    problems.append(str(exc))


def _matching(value: str, pattern: re.Pattern[str] | str, path: str, what: str) -> str:
    """``value`` when it is empty or matches ``pattern`` (a pattern or a :data:`~slurm_pool.text.RULES` name)."""
    if value and not matches(pattern, value):
        raise Unreadable(f"{path}: {show(value)} is not {what}")
    return value


@dataclass(frozen=True)
class _Priorities:
    """PriorityClass name -> value; the classes that could not be read; the global default's value."""

    values: Mapping[str, int]
    unreadable: frozenset[str]
    default: int

    def of(self, name: str) -> int:
        """Volcano's rule: the named class's value, else the global default's (0: none)."""
        if name in self.unreadable:
            raise Unreadable(f"PriorityClass {show(name)} cannot be read")
        return self.values.get(name, self.default)


def _priorities(classes: Iterable[Any], problems: list[str] | None) -> _Priorities:
    values: dict[str, int] = {}
    bad: set[str] = set()
    defaults: list[int] = []
    for pc in classes:
        try:
            _, name = identity(pc, "PriorityClass", namespaced=False)
        except Unreadable as exc:
            _keep(problems, exc)
            continue
        try:
            raw = pc.get("value")
            value = 0 if raw is None else _int32(raw, f"{ident('PriorityClass', pc)}: value")
            if flag(pc, "globalDefault", f"{ident('PriorityClass', pc)}: globalDefault"):
                defaults.append(value)
        except Unreadable as exc:
            _keep(problems, exc)
            bad.add(name)
            continue
        values[name] = value
    return _Priorities(values, frozenset(bad), max(defaults, default=0))


def _int32(value: Any, path: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not -_INT32 <= value < _INT32:
        raise Unreadable(f"{path}: {show(value)} is not a 32-bit whole number")
    return value


@dataclass(frozen=True)
class _Job:
    name: str
    uid: str
    obj: Obj


def _jobs(vcjobs: Iterable[Any], problems: list[str] | None) -> dict[tuple[str, str], _Job]:
    """(namespace, name) -> vcjob; each is also found as (namespace, ``<name>-<uid>``), its PodGroup's name."""
    out: dict[tuple[str, str], _Job] = {}
    for job in vcjobs:
        try:
            ns, name = identity(job, "Job")
            meta = mapping(job, "metadata", f"{ident('Job', job)}: metadata")
            uid = _matching(string(meta, "uid", "metadata.uid"), _UID, f"{ident('Job', job)}: metadata.uid", "a uid")
        except Unreadable as exc:
            _keep(problems, exc)
            continue
        out[(ns, name)] = _Job(name, uid, job)
        if uid:
            out.setdefault((ns, f"{name}-{uid}"), _Job(name, uid, job))
    return out


def _owner(meta: Obj) -> tuple[str, str] | None:
    """(name, uid) of the vcjob that owns a PodGroup (None: no vcjob does)."""
    for i, ref in enumerate(objects(meta, "ownerReferences", "metadata.ownerReferences")):
        at = f"metadata.ownerReferences[{i}]"
        if string(ref, "kind", f"{at}.kind") == "Job" and string(ref, "apiVersion", f"{at}.apiVersion") == VCJOB_API:
            name = string(ref, "name", f"{at}.name")
            if not matches("k8s-name", name):
                raise Unreadable(f"{at}.name: {show(name)} is not a Kubernetes name")
            return name, _matching(string(ref, "uid", f"{at}.uid"), _UID, f"{at}.uid", "a uid")
    return None


def _find_job(ns: str, name: str, owner: tuple[str, str] | None, jobs: Mapping[tuple[str, str], _Job]) -> _Job | None:
    """The owner reference's vcjob (same uid), else the one whose ``<name>-<uid>`` is the PodGroup's
    name (vc-controller's naming), else the one of the PodGroup's own name (Volcano before 1.5)."""
    if owner is not None:
        job = jobs.get((ns, owner[0]))
        if job is not None and job.name == owner[0] and (not owner[1] or job.uid == owner[1]):
            return job
    job = jobs.get((ns, name))
    if job is not None and (job.name == name or f"{job.name}-{job.uid}" == name):
        return job
    return None


def read_gangs(
    podgroups: Iterable[Any],
    vcjobs: Iterable[Any],
    priority_classes: Iterable[Any],
    settings: GangSettings,
    gpu_resource: str,
    problems: list[str] | None = None,
    max_pods: int = MAX_GANG_PODS,
) -> tuple[Gang, ...]:
    """The gangs of ``settings.scheduler_name`` in ``settings.namespaces``, highest priority first.

    Each PodGroup is matched with its vcjob (owner reference, else vc-controller's ``<job>-<uid>``
    name); one whose vcjob names another scheduler is left out.  A gang with a field that cannot be
    read (or without a vcjob: its pods' shapes are not known) is kept with ``problem`` set, never
    read as a smaller demand, and the problem is listed in ``problems`` too.  A PodGroup, vcjob or
    PriorityClass that cannot be named is listed in ``problems`` (raises
    :class:`~slurm_pool.bridge.objects.Unreadable` without it).  A gang that needs more than
    ``max_pods`` pods at once (what the pool's nodes can hold) is such a problem too: its pods are
    never listed one by one.
    """
    jobs = _jobs(vcjobs, problems)
    priorities = _priorities(priority_classes, problems)
    wanted = frozenset(settings.namespaces)
    out = []
    for pg in podgroups:
        try:
            ns, name = identity(pg, "PodGroup")
        except Unreadable as exc:
            _keep(problems, exc)
            continue
        if wanted and ns not in wanted:
            continue
        gang = _gang(pg, ns, name, jobs, priorities, settings.scheduler_name, gpu_resource, max_pods)
        if gang is None:
            continue
        if gang.problem and problems is not None:
            problems.append(gang.problem)
        out.append(gang)
    return tuple(sorted(out, key=lambda g: (-g.priority, g.created, g.ref)))


def _gang(
    pg: Obj,
    ns: str,
    name: str,
    jobs: Mapping[tuple[str, str], _Job],
    priorities: _Priorities,
    scheduler: str,
    gpu_resource: str,
    max_pods: int = MAX_GANG_PODS,
) -> Gang | None:
    """One PodGroup as a :class:`Gang` (None: its vcjob is another scheduler's)."""
    bad = Problems()
    meta = pg["metadata"]
    spec: Obj = bad.read(lambda: mapping(pg, "spec", "spec"), {})
    status: Obj = bad.read(lambda: mapping(pg, "status", "status"), {})
    owner = bad.read(lambda: _owner(meta), None)
    job = _find_job(ns, name, owner, jobs)
    job_spec: Obj = {}
    job_phase = ""
    if job is not None:
        where = ident("Job", job.obj)
        job_spec = bad.read(lambda: mapping(job.obj, "spec", f"{where}: spec"), {})
        try:
            if string(job_spec, "schedulerName", f"{where}: spec.schedulerName") != scheduler:
                return None
        except Unreadable as exc:
            bad.append(str(exc))
        job_phase = bad.read(lambda: _job_phase(job.obj, where), "")
    elif owner is not None:
        bad.append(f"its vcjob {ns}/{owner[0]} is not there")
    else:
        bad.append("no vcjob owns it: the shapes of its pods cannot be read")
    min_member = bad.read(lambda: _count(spec, "minMember", "spec.minMember"), 0)
    pods: tuple[PodShape, ...] = ()
    grace = DEFAULT_GRACE
    if min_member > max_pods:
        bad.append(f"spec.minMember: {min_member} pods at once are more than the pool's nodes can hold ({max_pods})")
    elif job is not None:
        pods, grace = bad.read(lambda: _pods(spec, job, min_member, gpu_resource, max_pods), (pods, grace))
    klass = bad.read(lambda: _class_name(spec, job_spec, job), "")
    return Gang(
        namespace=ns,
        name=name,
        uid=bad.read(lambda: _matching(string(meta, "uid", "metadata.uid"), _UID, "metadata.uid", "a uid"), ""),
        min_member=min_member,
        pods=pods,
        phase=bad.read(lambda: _word(status, "phase", "status.phase", "Pending"), "Unknown"),
        running=bad.read(lambda: _count(status, "running", "status.running"), 0),
        job=job.name if job is not None else owner[0] if owner is not None else "",
        job_phase=job_phase,
        priority=bad.read(lambda: priorities.of(klass), 0),
        created=bad.read(lambda: _created(meta), ""),
        grace_seconds=grace,
        problem=f"{ident('PodGroup', pg)}: " + "; ".join(bad) if bad else "",
    )


def _count(obj: Obj, key: str, path: str, default: int = 0) -> int:
    """``obj[key]`` as a count (``default`` when absent or null)."""
    value = obj.get(key)
    return default if value is None else count(value, path)


def _word(obj: Obj, key: str, path: str, default: str = "") -> str:
    """A phase or state: one word of letters and digits."""
    value = string(obj, key, path, default)
    return _matching(value, _WORD, path, "a phase")


def _job_phase(job: Obj, where: str) -> str:
    state = mapping(mapping(job, "status", f"{where}: status"), "state", f"{where}: status.state")
    return _word(state, "phase", f"{where}: status.state.phase")


def _created(meta: Obj) -> str:
    return _matching(
        string(meta, "creationTimestamp", "metadata.creationTimestamp"), _TIME, "creationTimestamp", "a time"
    )


def _class_name(spec: Obj, job_spec: Obj, job: _Job | None) -> str:
    """The PodGroup's ``priorityClassName``, else its vcjob's."""
    name = string(spec, "priorityClassName", "spec.priorityClassName")
    if not name and job is not None:
        name = string(job_spec, "priorityClassName", f"{ident('Job', job.obj)}: spec.priorityClassName")
    return _matching(name, "k8s-name", "priorityClassName", "a PriorityClass name")


def _pods(
    spec: Obj, job: _Job, min_member: int, gpu_resource: str, max_pods: int = MAX_GANG_PODS
) -> tuple[tuple[PodShape, ...], int]:
    """The shapes of the pods the gang needs at once, and the longest grace of its tasks' pods.

    Each task's minimum (the PodGroup's ``minTaskMember``, else the task's ``minAvailable``,
    else its ``replicas``) first, task by task, then more pods from the tasks in order up to
    ``minMember``.  More than ``max_pods`` pods is :class:`~slurm_pool.bridge.objects.Unreadable`.
    """
    where = ident("Job", job.obj)
    minimums = mapping(spec, "minTaskMember", "spec.minTaskMember")
    tasks = objects(mapping(job.obj, "spec", f"{where}: spec"), "tasks", f"{where}: spec.tasks")
    read = []
    grace = DEFAULT_GRACE if not tasks else 0
    for i, task in enumerate(tasks):
        at = f"{where}: spec.tasks[{i}]"
        name = _matching(string(task, "name", f"{at}.name"), "k8s-label", f"{at}.name", "a task name")
        replicas = _count(task, "replicas", f"{at}.replicas")
        if name and minimums.get(name) is not None:
            least = count(minimums[name], f"spec.minTaskMember[{name}]")
        else:
            least = _task_minimum(task, replicas, at)
        pod_spec = mapping(mapping(task, "template", f"{at}.template"), "spec", f"{at}.template.spec")
        shape = _shape(pod_spec, gpu_resource, f"{at}.template.spec")
        seconds = "terminationGracePeriodSeconds"
        grace = max(grace, _count(pod_spec, seconds, f"{at}.template.spec.{seconds}", DEFAULT_GRACE))
        read.append((shape, replicas, min(least, replicas)))
    taken = [least for _, _, least in read]
    more = min_member - sum(taken)
    for i, (_, replicas, _) in enumerate(read):
        extra = max(0, min(more, replicas - taken[i]))
        taken[i] += extra
        more -= extra
    if more > 0:
        raise Unreadable(f"spec.minMember: {min_member} pods are more than its vcjob's tasks make")
    if sum(taken) > max_pods:
        raise Unreadable(f"{where}: its tasks' minimums, {sum(taken)} pods at once, are more than {max_pods}")
    return tuple(shape for (shape, _, _), n in zip(read, taken, strict=True) for _ in range(n)), grace


def _task_minimum(task: Obj, replicas: int, at: str) -> int:
    """vc-controller's minimum of a task: ``minAvailable``, else its partitions', else ``replicas``."""
    if task.get("minAvailable") is not None:
        return count(task["minAvailable"], f"{at}.minAvailable")
    part = mapping(task, "partitionPolicy", f"{at}.partitionPolicy")
    least = _count(part, "minPartitions", f"{at}.partitionPolicy.minPartitions")
    size = _count(part, "partitionSize", f"{at}.partitionPolicy.partitionSize")
    return least * size if least and size else replicas


def _shape(pod_spec: Obj, gpu_resource: str, at: str) -> PodShape:
    """What one pod of this template needs of a node (Kubernetes' effective requests)."""
    regular = [
        _needs(c, gpu_resource, f"{at}.containers[{i}]")
        for i, c in enumerate(objects(pod_spec, "containers", f"{at}.containers"))
    ]
    total: dict[str, int] = {}
    peaks: list[dict[str, int]] = []
    for i, c in enumerate(objects(pod_spec, "initContainers", f"{at}.initContainers")):
        need = _needs(c, gpu_resource, f"{at}.initContainers[{i}]")
        if string(c, "restartPolicy", f"{at}.initContainers[{i}].restartPolicy") == "Always":
            _add(total, need)  # a sidecar: runs beside the rest
        else:
            peaks.append(_plus(total, need))
    for need in regular:
        _add(total, need)
    for peak in peaks:
        total = {k: max(total.get(k, 0), peak.get(k, 0)) for k in {*total, *peak}}
    cpu, memory = total.pop("cpu", 0), total.pop("memory", 0)
    tolerations = objects(pod_spec, "tolerations", f"{at}.tolerations")
    return PodShape(
        resources={k: v for k, v in sorted(total.items()) if v},
        cpu_milli=cpu,
        memory=memory,
        node_selector=strings(pod_spec, "nodeSelector", f"{at}.nodeSelector"),
        tolerations=tuple(_toleration(t, f"{at}.tolerations[{i}]") for i, t in enumerate(tolerations)),
    )


def _add(total: dict[str, int], more: Mapping[str, int]) -> None:
    for k, v in more.items():
        total[k] = total.get(k, 0) + v


def _plus(total: Mapping[str, int], more: Mapping[str, int]) -> dict[str, int]:
    out = dict(total)
    _add(out, more)
    return out


def _needs(container: Obj, gpu_resource: str, at: str) -> dict[str, int]:
    """One container's GPU-like resources (limits, else requests), ``cpu`` (millicores) and ``memory`` (bytes)."""
    out = container_gpus(container, gpu_resource, at)
    res = mapping(container, "resources", f"{at}.resources")
    requests = mapping(res, "requests", f"{at}.resources.requests")
    limits = mapping(res, "limits", f"{at}.resources.limits")
    for name, scale in (("cpu", 1000), ("memory", 1)):
        key, values = ("requests", requests) if name in requests else ("limits", limits)
        if values.get(name) is not None:
            q = quantity(values[name], f"{at}.resources.{key}[{name}]") * scale
            out[name] = int(q.to_integral_value(rounding=ROUND_CEILING))
    return out


def _toleration(t: Obj, at: str) -> Toleration:
    operator = string(t, "operator", f"{at}.operator")
    effect = string(t, "effect", f"{at}.effect")
    if operator not in _OPERATORS:
        raise Unreadable(f"{at}.operator: {show(operator)} is not Equal or Exists")
    if effect not in _EFFECTS:
        raise Unreadable(f"{at}.effect: {show(effect)} is not a taint effect")
    return Toleration(string(t, "key", f"{at}.key"), _OPERATORS[operator], string(t, "value", f"{at}.value"), effect)
