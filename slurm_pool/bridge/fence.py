"""The placeholder's fence: take a lent node away from Kubernetes from the node itself.

When Slurm preempts a placeholder, the preempting job may start as soon as the
placeholder exits.  So the placeholder runs this first (``slurm-pool
fence-node``): cordon and taint the node, delete every workload pod bound to
it, and wait until none is left.  Pods are deleted, not evicted: Slurm has
already decided, so a PodDisruptionBudget may not block it.  Each pod keeps
its own termination grace, so a pod is gone from the API only once its kubelet
has stopped it (a delete with grace 0 would remove it while it still runs).  The deadline is ``bridge.fence_seconds``, which the
lend tier's GraceTime covers (``check_bridge``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

from slurm_pool.bridge.k8s import K8sAPI, K8sError, NotFound, fence_patch, update_node
from slurm_pool.bridge.model import pod_view


@dataclass
class FenceResult:
    ok: bool
    detail: str


def _left(api: K8sAPI, node: str) -> list[tuple[str, str, bool]]:
    """(namespace, name, terminating) of the workload pods still bound to ``node``."""
    out = []
    for obj in api.list_pods(node):
        p = pod_view(obj)
        if p is not None and p.node == node and p.workload:
            out.append((p.namespace, p.name, p.terminating))
    return out


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
    except K8sError as exc:  # go on: deleting the pods still frees the GPUs
        cordon = f"cordon failed ({exc}); "
    else:
        cordon = "cordoned; "
    deleted: set[tuple[str, str]] = set()
    while True:
        try:
            left = _left(api, node)
        except K8sError as exc:
            left, note = None, str(exc)
        if left == []:
            return FenceResult(True, f"{cordon}{len(deleted)} pod(s) deleted, none left")
        for namespace, name, terminating in left or []:
            if (namespace, name) not in deleted and not terminating:
                try:
                    api.delete_pod(namespace, name, grace=None)  # the kubelet stops it first
                    deleted.add((namespace, name))
                except K8sError as exc:
                    note = f"{namespace}/{name}: {exc}"
        if left:
            note = f"{len(left)} pod(s) still bound: " + ", ".join(f"{ns}/{n}" for ns, n, _ in left[:5])
        if clock() >= deadline:
            return FenceResult(False, f"{cordon}after {seconds:g}s: {note}")
        sleep(poll)
