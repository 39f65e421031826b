"""The rendered bridge RBAC on a real API server (RBAC mode): what each credential may do (issue 10).

The objects of ``k8s-bridge-rbac.yaml`` are created as rendered, and the API
server's own authorizer answers SubjectAccessReviews for the rebalancer's and
the nodes' users.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from slurm_pool.render.k8s_rbac import bridge_rbac
from slurm_pool.spec import load_spec

pytestmark = pytest.mark.k8s

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "pool.yaml"
REB = "slurm-pool-rebalancer"
#: The gangs' namespace in the ``gangs`` case (made once, kept: a Role lives in a namespace that exists).
TRAINING = "slurm-pool-training"


def _namespace(k8s_api, name: str) -> None:
    from kubernetes import client

    try:
        client.CoreV1Api(k8s_api).create_namespace({"metadata": {"name": name}})
    except client.ApiException as exc:
        if exc.status != 409:
            raise


def _create(k8s_api, doc: dict) -> tuple[str, str, str | None]:
    from kubernetes import client

    rbac = client.RbacAuthorizationV1Api(k8s_api)
    kind, name, ns = doc["kind"], doc["metadata"]["name"], doc["metadata"].get("namespace")
    {
        "ClusterRole": lambda: rbac.create_cluster_role(doc),
        "ClusterRoleBinding": lambda: rbac.create_cluster_role_binding(doc),
        "Role": lambda: rbac.create_namespaced_role(ns, doc),
        "RoleBinding": lambda: rbac.create_namespaced_role_binding(ns, doc),
    }[kind]()
    return kind, name, ns


def _delete(k8s_api, kind: str, name: str, ns: str | None) -> None:
    from kubernetes import client

    rbac = client.RbacAuthorizationV1Api(k8s_api)
    {
        "ClusterRole": lambda: rbac.delete_cluster_role(name),
        "ClusterRoleBinding": lambda: rbac.delete_cluster_role_binding(name),
        "Role": lambda: rbac.delete_namespaced_role(name, ns),
        "RoleBinding": lambda: rbac.delete_namespaced_role_binding(name, ns),
    }[kind]()


@pytest.fixture(params=["inference", "gangs"])
def rendered(request, k8s_api, k8s_namespace):
    """The example spec's bridge with a fence, serving in ``k8s_namespace``: its RBAC, created.

    ``gangs``: with ``bridge.gangs`` too, its gangs in namespace :data:`TRAINING`.
    """
    from slurm_pool.spec.bridge import GangSettings

    gangs = None
    if request.param == "gangs":
        gangs = GangSettings(namespaces=[TRAINING])
        _namespace(k8s_api, TRAINING)
    spec = load_spec(str(EXAMPLE))
    tiers = [t.model_copy(update={"grace_time": 60}) if t.name == "k8s-lend" else t for t in spec.tiers]
    assert spec.bridge is not None
    bridge = spec.bridge.model_copy(
        update={
            "fence_kubeconfig": "/etc/slurm-pool/node.kubeconfig",
            "kserve_namespace": k8s_namespace,
            "lease_namespace": k8s_namespace,
            "gangs": gangs,
        }
    )
    text = bridge_rbac(spec.model_copy(update={"tiers": tiers, "bridge": bridge}))
    assert text is not None
    made = []
    try:
        for doc in yaml.safe_load_all(text):
            if doc:
                made.append(_create(k8s_api, doc))
        yield k8s_namespace, request.param
    finally:
        for kind, name, ns in reversed(made):
            _delete(k8s_api, kind, name, ns)


def _allowed(k8s_api, user: str, verb: str, resource: str, **attrs: str) -> bool:
    from kubernetes import client

    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {"user": user, "resourceAttributes": {"verb": verb, "resource": resource, **attrs}},
    }
    return bool(client.AuthorizationV1Api(k8s_api).create_subject_access_review(review).status.allowed)


CASES = [
    # (user, verb, resource, attributes, allowed); "NS" is the serving namespace
    (REB, "patch", "nodes", {"name": "a-gpu1"}, True),
    (REB, "list", "pods", {}, True),
    (REB, "create", "pods", {"subresource": "eviction", "namespace": "NS"}, True),
    (REB, "list", "inferenceservices", {"group": "serving.kserve.io"}, True),
    (REB, "update", "leases", {"group": "coordination.k8s.io", "namespace": "NS"}, True),
    (REB, "update", "leases", {"group": "coordination.k8s.io", "namespace": "kube-system"}, False),
    (REB, "create", "events", {"namespace": "default"}, True),
    (REB, "delete", "nodes", {"name": "a-gpu1"}, False),
    (REB, "create", "pods", {"namespace": "NS"}, False),
    ("slurm-pool-node:a-gpu1", "patch", "nodes", {"name": "a-gpu1"}, True),
    ("slurm-pool-node:a-gpu1", "get", "nodes", {"name": "a-gpu1"}, True),
    ("slurm-pool-node:a-gpu1", "patch", "nodes", {"name": "a-gpu2"}, False),
    ("slurm-pool-node:a-gpu1", "list", "nodes", {}, False),
    ("slurm-pool-node:a-gpu1", "list", "pods", {}, True),
    ("slurm-pool-node:a-gpu1", "delete", "pods", {"namespace": "NS"}, True),
    ("slurm-pool-node:a-gpu1", "delete", "pods", {"namespace": "kube-system"}, False),
    ("slurm-pool-node:c-gpu1", "patch", "nodes", {"name": "c-gpu1"}, True),
    ("someone-else", "patch", "nodes", {"name": "a-gpu1"}, False),
]


#: With ``bridge.gangs``: the same cases, but a node's fence closes its whole group, and the Volcano rights.
GANG_CHANGES = {
    ("slurm-pool-node:a-gpu1", "patch", "nodes", "a-gpu2"): True,
    ("slurm-pool-node:a-gpu1", "list", "nodes", ""): True,
}
GANG_CASES = [
    (REB, "list", "podgroups", {"group": "scheduling.volcano.sh"}, True),
    (REB, "get", "jobs", {"group": "batch.volcano.sh", "namespace": TRAINING}, True),
    (REB, "create", "commands", {"group": "bus.volcano.sh", "namespace": TRAINING}, True),
    (REB, "list", "priorityclasses", {"group": "scheduling.k8s.io"}, True),
    (REB, "delete", "jobs", {"group": "batch.volcano.sh", "namespace": TRAINING}, False),
    ("slurm-pool-node:a-gpu1", "get", "nodes", {"name": "b-gpu1"}, True),
    ("slurm-pool-node:a-gpu1", "get", "jobs", {"group": "batch.volcano.sh", "namespace": TRAINING}, True),
    ("slurm-pool-node:a-gpu1", "create", "commands", {"group": "bus.volcano.sh", "namespace": TRAINING}, True),
    ("slurm-pool-node:a-gpu1", "delete", "pods", {"namespace": TRAINING}, True),
    ("slurm-pool-node:a-gpu1", "delete", "nodes", {"name": "a-gpu2"}, False),
    ("slurm-pool-node:a-gpu1", "delete", "pods", {"namespace": "kube-system"}, False),
    ("slurm-pool-node:a-gpu1", "list", "podgroups", {"group": "scheduling.volcano.sh"}, False),
]


def test_each_credential_may_do_what_the_bridge_needs_and_no_more(k8s_api, rendered):
    namespace, mode = rendered
    cases = CASES
    if mode == "gangs":
        cases = [(*c[:4], GANG_CHANGES.get((*c[:3], c[3].get("name", "")), c[4])) for c in CASES] + GANG_CASES
    got = []
    for user, verb, resource, attrs, _ in cases:
        attrs = {k: (namespace if v == "NS" else v) for k, v in attrs.items()}
        got.append(_allowed(k8s_api, user, verb, resource, **attrs))
    wrong = [(c[:4], g) for c, g in zip(cases, got, strict=True) if g != c[4]]
    assert wrong == [], wrong
