"""The placeholder's fence: take a lent node away from Kubernetes from the node itself.

When Slurm preempts a placeholder, the preempting job may start as soon as the
placeholder exits.  So the placeholder runs this first (``slurm-pool
fence-node``): cordon and taint the node, delete every workload pod bound to
it, and wait until none is left.  Pods are deleted, not evicted: Slurm has
already decided, so a PodDisruptionBudget may not block it.  Each pod keeps
its own termination grace, so a pod is gone from the API only once its kubelet
has stopped it (a delete with grace 0 would remove it while it still runs).  The deadline is ``bridge.fence_seconds``, which the
lend tier's GraceTime covers (``check_bridge``).  A pod listed on the node that
cannot be read still counts as there; one that cannot be named cannot be
deleted, so the fence then ends not ok at its deadline.

A node lent for a gang (label ``slurm-pool/gang=<group>``) is taken back with
its whole group, since the gang runs only whole: every node of the group is
fenced, then the group's vcjob (annotation ``slurm-pool/gang-job``) is stopped
as one unit with an ``AbortJob`` Command, and the fence waits for the job's
pods to leave this node.  Only pods still bound after half the deadline are
deleted as above (Slurm must never share the GPUs); when the job cannot be
stopped they are deleted at once.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from slurm_pool.bridge.gangs import GANG_JOB, GANG_LABEL, GROUP_ID
from slurm_pool.bridge.k8s import (
    K8sAPI,
    K8sError,
    NotFound,
    abort_job,
    fence_patch,
    gang_problem,
    update_node,
)
from slurm_pool.bridge.model import PodView, pod_view
from slurm_pool.bridge.objects import Unreadable, listed, mapping, show, string, strings
from slurm_pool.text import matches


@dataclass
class FenceResult:
    ok: bool
    detail: str


def _left(api: K8sAPI, node: str) -> list[PodView]:
    """The workload pods still bound to ``node``."""
    views = (pod_view(obj, node) for obj in listed(api.list_pods(node), "Pods"))
    return [p for p in views if p is not None and p.node == node and p.workload]


def _marks(node: Any) -> tuple[str, str, str]:
    """The Node's name, gang group and gang job ("" when absent); :class:`Unreadable` if misshapen."""
    if not isinstance(node, Mapping):
        raise Unreadable(f"Node {show(node)} is not an object")
    meta = mapping(node, "metadata", "metadata")
    labels = strings(meta, "labels", "metadata.labels")
    annotations = strings(meta, "annotations", "metadata.annotations")
    name = string(meta, "name", "metadata.name")
    return name, labels.get(GANG_LABEL, ""), annotations.get(GANG_JOB, "")


def _fence_group(api: K8sAPI, node: str, group: str) -> tuple[list[str], list[str]]:
    """Fence every other node of ``group``: (those fenced, those not, with why)."""
    fenced, failed = [], []
    for obj in listed(api.list_nodes(), "Nodes"):
        try:
            name, theirs, _ = _marks(obj)
        except Unreadable:
            continue  # a Node whose labels cannot be read is not known to be the group's
        if theirs != group or name == node or not name:
            continue
        try:
            update_node(api, name, fence_patch)
            fenced.append(name)
        except (K8sError, Unreadable) as exc:
            failed.append(f"{name} ({exc})")
    return fenced, failed


def _stop_group(api: K8sAPI, node: str, cordoned: bool, group: str, job: str) -> tuple[str, bool]:
    """Fence ``group``'s other nodes, then stop its vcjob ``job``: (what was done, whether the job stops)."""
    fenced = [node] if cordoned else []
    try:
        others, failed = _fence_group(api, node, group)
        fenced += others
        text = f"gang group {group}: nodes fenced: {', '.join(fenced) or 'none'}"
        text += f"; not fenced: {', '.join(failed)}" if failed else ""
    except (K8sError, Unreadable) as exc:
        text = f"gang group {group}: nodes fenced: {', '.join(fenced) or 'none'}; the group's nodes not listed ({exc})"
    problem = gang_problem(group, job)
    if problem:
        return f"{text}; no job stopped: {problem}", False
    try:
        stopping = abort_job(api, group, job)[1]
    except (K8sError, Unreadable) as exc:
        return f"{text}; job {job} not stopped: {exc}", False
    return f"{text}; {stopping}", True


def fence_node(
    api: K8sAPI,
    node: str,
    seconds: float,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    poll: float = 0.2,
) -> FenceResult:
    """Cordon ``node`` and delete its pods; ok once none is bound, or not after ``seconds``.

    A gang's node: fence its whole group and stop the gang's job first; delete pods
    still bound only after ``seconds / 2``.
    """
    began = clock()
    deadline = began + seconds
    read: list[Any] = []

    def fence(obj: dict[str, Any]) -> dict[str, Any]:
        read.append(obj)
        return fence_patch(obj)

    try:
        update_node(api, node, fence)  # no reclaim mark: that is the rebalancer's
    except NotFound:
        return FenceResult(True, f"{node} is not a Kubernetes node: nothing to fence")
    except (K8sError, Unreadable) as exc:  # go on: deleting the pods still frees the GPUs
        cordon = f"cordon failed ({exc}); "
    else:
        cordon = "cordoned; "
    group, job, stopping = "", "", False
    try:
        _, group, job = _marks(read[-1]) if read else ("", "", "")
    except Unreadable as exc:
        cordon += f"gang marks unreadable ({exc}), fenced alone; "
    if group and not matches(GROUP_ID, group):
        cordon += f"gang label {show(group)} is no group id, fenced alone; "
        group = ""
    if group:
        done, stopping = _stop_group(api, node, cordon == "cordoned; ", group, job)
        cordon = f"{cordon}{done}; "
    # A gang's pods leave with its job; only those still bound at half the deadline are deleted.
    delete_from = began + seconds / 2 if stopping else began
    deleted: set[tuple[str, str]] = set()
    while True:
        try:
            left: list[PodView] | None = _left(api, node)
        except (K8sError, Unreadable) as exc:
            left, note = None, str(exc)
        if left == []:
            if not group:
                return FenceResult(True, f"{cordon}{len(deleted)} pod(s) deleted, none left")
            if not deleted:
                return FenceResult(True, f"{cordon}no pod deleted, none left")
            late = f" still bound after {seconds / 2:g}s" if stopping else ""
            return FenceResult(
                True, f"{cordon}{len(deleted)} pod(s){late} deleted (Slurm must never share the GPUs), none left"
            )
        due = (left or []) if clock() >= delete_from else []
        for p in due:
            if p.named and (p.namespace, p.name) not in deleted and not p.terminating:
                try:
                    api.delete_pod(p.namespace, p.name, grace=None)  # the kubelet stops it first
                    deleted.add((p.namespace, p.name))
                except K8sError as exc:
                    note = f"{p.ref}: {exc}"
        if left:
            note = f"{len(left)} pod(s) still bound: " + ", ".join(p.ref for p in left[:5])
            unnamed = [p.problem for p in left if not p.named]
            if unnamed:
                note += f" ({len(unnamed)} cannot be named, so not deleted: {unnamed[0]})"
        if clock() >= deadline:
            return FenceResult(False, f"{cordon}after {seconds:g}s: {note}")
        sleep(poll)
