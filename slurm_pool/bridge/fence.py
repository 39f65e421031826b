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
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

from slurm_pool.bridge.k8s import K8sAPI, K8sError, NotFound, fence_patch, update_node
from slurm_pool.bridge.model import PodView, pod_view
from slurm_pool.bridge.objects import Unreadable, listed


@dataclass
class FenceResult:
    ok: bool
    detail: str


def _left(api: K8sAPI, node: str) -> list[PodView]:
    """The workload pods still bound to ``node``."""
    views = (pod_view(obj, node) for obj in listed(api.list_pods(node), "Pods"))
    return [p for p in views if p is not None and p.node == node and p.workload]


def fence_node(
    api: K8sAPI,
    node: str,
    seconds: float,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    poll: float = 0.2,
) -> FenceResult:
    """Cordon ``node`` and delete its pods; ok once none is bound, or not after ``seconds``."""
    deadline = clock() + seconds
    try:
        update_node(api, node, fence_patch)  # no reclaim mark: that is the rebalancer's
    except NotFound:
        return FenceResult(True, f"{node} is not a Kubernetes node: nothing to fence")
    except (K8sError, Unreadable) as exc:  # go on: deleting the pods still frees the GPUs
        cordon = f"cordon failed ({exc}); "
    else:
        cordon = "cordoned; "
    deleted: set[tuple[str, str]] = set()
    while True:
        try:
            left: list[PodView] | None = _left(api, node)
        except (K8sError, Unreadable) as exc:
            left, note = None, str(exc)
        if left == []:
            return FenceResult(True, f"{cordon}{len(deleted)} pod(s) deleted, none left")
        for p in left or []:
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
