"""Waiting on the state of the test bed's Kubernetes, and saying what it was when a wait times out.

Tests wait on states, never on sleeps, with :func:`wait_state`: long enough for
a loaded 2-core machine (:data:`WAIT_SECONDS`), and on a timeout the error
reports what the cluster looked like (:func:`cluster_state`: the pods' phases
and conditions, the namespace's events, the nodes' cordons and taints).
"""

from __future__ import annotations

import os
from typing import Callable

#: How long a test waits for a state of the cluster.  Alone the control plane reaches each in a few
#: seconds; on a 2-core machine with one core kept busy by other work the scheduler, the
#: controllers and kwok share what is left, and a state took over 60 s (issue 30).
WAIT_SECONDS = float(os.environ.get("SLURM_POOL_K8S_WAIT", "240"))


def described(describe: Callable[[], str]) -> str:
    """``describe()`` and a newline, or why it could not be had (a diagnostic never raises)."""
    try:
        return describe() + "\n"
    except Exception as exc:  # noqa: BLE001 - a diagnostic: say why there is none
        return f"(cluster state not read: {exc!r})\n"


def node_state(core) -> str:
    """Each node: Ready, cordon, taints and allocatable GPUs."""
    lines = []
    for n in core.list_node().items:
        ready = [f"{c.status} ({c.reason})" for c in n.status.conditions or [] if c.type == "Ready"]
        taints = [f"{t.key}={t.value or ''}:{t.effect}" for t in n.spec.taints or []]
        gpus = (n.status.allocatable or {}).get("nvidia.com/gpu")
        lines.append(
            f"node {n.metadata.name}: Ready={ready} unschedulable={n.spec.unschedulable} taints={taints} gpus={gpus}"
        )
    return "\n".join(lines)


def cluster_state(api_client, namespace: str | None = None) -> str:
    """What a failed wait saw: the namespace's pods (phase, node, conditions), its last events, the nodes."""
    from kubernetes import client

    core = client.CoreV1Api(api_client)
    lines = []
    if namespace:
        for p in core.list_namespaced_pod(namespace).items:
            conds = [
                f"{c.type}={c.status}" + (f" {c.reason}: {c.message}" if c.reason else "")
                for c in p.status.conditions or []
            ]
            gone = " (terminating)" if p.metadata.deletion_timestamp else ""
            lines.append(f"pod {p.metadata.name}: {p.status.phase} on {p.spec.node_name}{gone} {conds}")
        events = sorted(
            core.list_namespaced_event(namespace).items,
            key=lambda e: str(e.last_timestamp or e.event_time or e.metadata.creation_timestamp),
        )
        for e in events[-20:]:
            lines.append(f"event {e.involved_object.kind}/{e.involved_object.name}: {e.type} {e.reason}: {e.message}")
    lines.append(node_state(core))
    return "\n".join(lines)


def nodes_settled(core, names: set[str]) -> bool:
    """Each of ``names`` is Ready and carries none of the node lifecycle controller's taints.

    A Node just created is changed several times as kwok and the controllers take it up;
    a test that patches it waits for this first, so its patch does not race their updates.
    """
    settled = set()
    for node in core.list_node().items:
        conds = {c.type: c.status for c in (node.status.conditions or [])}
        taints = [t.key for t in (node.spec.taints or []) if t.key.startswith("node.kubernetes.io/")]
        if conds.get("Ready") == "True" and not taints:
            settled.add(node.metadata.name)
    return names <= settled


def wait_state(
    check: Callable[[], object],
    what: str,
    api_client=None,
    namespace: str | None = None,
    timeout: float = WAIT_SECONDS,
    describe: Callable[[], str] | None = None,
):
    """Poll ``check`` until it returns something truthy, and return that.

    Any exception counts as "not yet" (the API server may be briefly away).  On a timeout the
    AssertionError names ``what``, the last answer, and the cluster as it was: ``describe()``,
    else :func:`cluster_state` of ``api_client`` and ``namespace``.
    """
    from slurm_pool.localcluster.procs import wait_for

    try:
        return wait_for(check, timeout, what, 0.25, ignore=(Exception,))
    except TimeoutError as exc:
        if describe is None and api_client is not None:
            describe = lambda: cluster_state(api_client, namespace)  # noqa: E731
        state = described(describe) if describe else ""
        raise AssertionError(f"{exc}\n{state}") from None
