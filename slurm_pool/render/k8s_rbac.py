"""The bridge's Kubernetes RBAC, rendered from the spec (``k8s-bridge-rbac.yaml``).

Two kinds of credentials act for the bridge (docs/bridge.md):

* the rebalancer (``bridge.k8s_user``): reads nodes, pods and InferenceServices
  (and the Deployments, HPAs and (Cluster)ServingRuntimes behind them),
  patches nodes, evicts and deletes pods, records Node events, and holds its
  Lease in ``bridge.lease_namespace`` only;
* each node's placeholder fence (``bridge.fence_user``, ``{node}`` its name),
  only with ``bridge.fence_kubeconfig``: it may get and patch its own Node and
  no other (``resourceNames``), list pods, and delete pods in
  ``bridge.kserve_namespace`` (everywhere when no namespace is set).

With ``bridge.gangs`` (Volcano gang jobs) the rebalancer also reads PodGroups,
vcjobs and PriorityClasses and creates bus Commands (a gang is stopped as one
unit), and each fence may list and patch every Node (it fences the whole group;
RBAC cannot limit a patch to the Nodes with a label), get vcjobs and create
Commands.  :func:`priority_classes` renders ``bridge.gangs.priority_classes``
(``k8s-priorityclasses.yaml``).

Every object is named and labelled ``slurm-pool``.  Pure: spec in, YAML text out.
"""

from __future__ import annotations

from typing import Any

import yaml

from slurm_pool.spec.bridge import Bridge
from slurm_pool.spec.hosts import expand
from slurm_pool.spec.model import PoolSpec

LABELS = {"app.kubernetes.io/managed-by": "slurm-pool"}
RBAC = "rbac.authorization.k8s.io/v1"
#: Volcano's API groups: PodGroups, vcjobs and the bus Commands that stop a vcjob as one unit.
VOLCANO_SCHEDULING = "scheduling.volcano.sh"
VOLCANO_BATCH = "batch.volcano.sh"
VOLCANO_BUS = "bus.volcano.sh"


def _meta(name: str, namespace: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": dict(LABELS)}
    if namespace:
        meta["namespace"] = namespace
    return meta


def _rule(groups: list[str], resources: list[str], verbs: list[str], names: list[str] | None = None) -> dict:
    rule: dict[str, Any] = {"apiGroups": groups, "resources": resources, "verbs": verbs}
    if names:
        rule["resourceNames"] = names
    return rule


def _users(names: list[str]) -> list[dict[str, str]]:
    return [{"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": n} for n in names]


def _role(kind: str, name: str, rules: list[dict], namespace: str | None = None) -> dict:
    return {"apiVersion": RBAC, "kind": kind, "metadata": _meta(name, namespace), "rules": rules}


def _binding(kind: str, name: str, role_kind: str, users: list[str], namespace: str | None = None) -> dict:
    return {
        "apiVersion": RBAC,
        "kind": kind,
        "metadata": _meta(name, namespace),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": name},
        "subjects": _users(users),
    }


def lend_nodes(spec: PoolSpec, bridge: Bridge) -> list[str]:
    """The nodes of the lend partition, in order."""
    part = next((p for p in spec.partitions if p.name == bridge.partition), None)
    if part is None:
        return []
    groups = {g.name: g for g in spec.node_groups}
    names: list[str] = []
    entries = [g.name for g in spec.node_groups] if "ALL" in part.nodes else part.nodes
    for entry in entries:
        for n in expand(groups[entry].hosts if entry in groups else entry):
            if n not in names:
                names.append(n)
    return names


def bridge_rbac(spec: PoolSpec) -> str | None:
    """``k8s-bridge-rbac.yaml`` for the spec's bridge, or None without an enabled bridge."""
    b = spec.bridge
    if b is None or not b.enabled:
        return None
    rebalancer = "slurm-pool-rebalancer"
    docs: list[dict] = [
        _role(
            "ClusterRole",
            rebalancer,
            [
                _rule([""], ["nodes"], ["get", "list", "watch", "patch"]),
                _rule([""], ["pods"], ["get", "list", "watch", "delete"]),
                _rule([""], ["pods/eviction"], ["create"]),
                _rule(["serving.kserve.io"], ["inferenceservices"], ["get", "list", "watch"]),
                # what KServe made of them: the inference demand (bridge/demand.py)
                _rule(["apps"], ["deployments"], ["get", "list"]),
                _rule(["autoscaling"], ["horizontalpodautoscalers"], ["get", "list"]),
                _rule(["serving.kserve.io"], ["servingruntimes", "clusterservingruntimes"], ["get", "list"]),
                _rule([""], ["events"], ["create"]),
                *_gang_rules(b),
            ],
        ),
        _binding("ClusterRoleBinding", rebalancer, "ClusterRole", [b.k8s_user]),
        _role(
            "Role",
            rebalancer,
            [_rule(["coordination.k8s.io"], ["leases"], ["get", "create", "update"])],
            b.lease_namespace,
        ),
        _binding("RoleBinding", rebalancer, "Role", [b.k8s_user], b.lease_namespace),
    ]
    if b.fence_kubeconfig:
        nodes = lend_nodes(spec, b)
        users = [b.fence_user.replace("{node}", n) for n in nodes]
        fence = "slurm-pool-fence"
        docs += [
            _role("ClusterRole", fence, [_rule([""], ["pods"], ["list"]), *_fence_gang_rules(b)]),
            _binding("ClusterRoleBinding", fence, "ClusterRole", users),
        ]
        delete = [_rule([""], ["pods"], ["delete"])]
        namespaces = _delete_namespaces(b)
        if namespaces:
            for ns in namespaces:
                docs += [
                    _role("Role", f"{fence}-delete", delete, ns),
                    _binding("RoleBinding", f"{fence}-delete", "Role", users, ns),
                ]
        else:
            docs += [
                _role("ClusterRole", f"{fence}-delete", delete),
                _binding("ClusterRoleBinding", f"{fence}-delete", "ClusterRole", users),
            ]
        for node, user in zip(nodes, users, strict=True):
            own = f"{fence}-node-{node}"
            # The Kubernetes Node the fence of this Slurm node closes; by label it is known only at run time,
            # so the Slurm name stands in (docs/bridge.md, "Node names": set it by hand).
            k8s_node = b.node_names.k8s_name(node) or node
            docs += [
                _role("ClusterRole", own, [_rule([""], ["nodes"], ["get", "patch"], [k8s_node])]),
                _binding("ClusterRoleBinding", own, "ClusterRole", [user]),
            ]
    head = "# Kubernetes RBAC for the slurm-pool bridge -- generated by slurm-pool; see docs/bridge.md.\n"
    return head + yaml.safe_dump_all(docs, sort_keys=False, explicit_start=True)


def _delete_namespaces(b: Bridge) -> list[str]:
    """Where a fence deletes pods: KServe's namespace and the gangs' (empty: every namespace)."""
    if not b.kserve_namespace or (b.gangs is not None and not b.gangs.namespaces):
        return []
    return list(dict.fromkeys([b.kserve_namespace, *(b.gangs.namespaces if b.gangs else [])]))


def _gang_rules(b: Bridge) -> list[dict]:
    """The rebalancer's rights over Volcano's objects (none without ``bridge.gangs``)."""
    if b.gangs is None:
        return []
    return [
        _rule([VOLCANO_SCHEDULING], ["podgroups"], ["list", "watch"]),
        _rule([VOLCANO_BATCH], ["jobs"], ["get", "list"]),
        _rule([VOLCANO_BUS], ["commands"], ["create"]),
        _rule(["scheduling.k8s.io"], ["priorityclasses"], ["list"]),
    ]


def _fence_gang_rules(b: Bridge) -> list[dict]:
    """A fence's rights for a gang's group: it fences every node of it and stops its vcjob as one unit.

    A patch cannot be limited to the Nodes with a label, so this reaches every Node.
    """
    if b.gangs is None:
        return []
    return [
        _rule([""], ["nodes"], ["get", "list", "patch"]),
        _rule([VOLCANO_BATCH], ["jobs"], ["get"]),
        _rule([VOLCANO_BUS], ["commands"], ["create"]),
    ]


def priority_classes(spec: PoolSpec) -> str | None:
    """``k8s-priorityclasses.yaml``: ``bridge.gangs.priority_classes`` as PriorityClasses (None: none listed)."""
    b = spec.bridge
    if b is None or not b.enabled or b.gangs is None or not b.gangs.priority_classes:
        return None
    docs = [
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": _meta(c.name),
            "value": c.value,
            "globalDefault": False,
            "preemptionPolicy": c.preemption,
            "description": c.description,
        }
        for c in b.gangs.priority_classes
    ]
    head = "# PriorityClasses for training and batch pods -- generated by slurm-pool; see docs/bridge.md.\n"
    return head + yaml.safe_dump_all(docs, sort_keys=False, explicit_start=True)
