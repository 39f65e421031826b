"""``bridge.node_names: {by: label}`` on a real API server: a lend marks the labelled Node (issue 33).

Kubernetes Nodes named ``names-<slurm node>`` carry ``slurm-pool/slurm-node``;
the session's node named like a Slurm node (``a-gpu1``) is Kubernetes' own
here and must never be touched.  Slurm is the unit tests' in-memory model
(``tests/unit/test_bridge_plan.py``); the InferenceService demand is given
directly, so KServe's controller plays no part.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from slurm_pool.adapters.runner import RecordingRunner
from slurm_pool.adapters.slurm import SlurmClient
from slurm_pool.bridge.k8s import KubernetesAPI
from slurm_pool.bridge.model import LENT_LABEL, RECLAIM_TAINT
from slurm_pool.bridge.reconcile import reconcile
from slurm_pool.bridge.slurm_side import SlurmSide
from slurm_pool.spec.bridge import Bridge, NodeNames
from tests.support.k8s import NodeSpec
from tests.support.k8s_fake import NODES, isvc
from tests.support.k8s_wait import nodes_settled, wait_state
from tests.unit.test_bridge_plan import NIGHT, NOON, FakeSlurm

pytestmark = [pytest.mark.k8s, pytest.mark.usefixtures("narrow_from_json")]

SLURM_NODE = "slurm-pool/slurm-node"


class DemandGiven(KubernetesAPI):
    """The real API for Nodes, pods, events and the Lease; the InferenceServices as given."""

    def __init__(self, api_client: Any, config: Bridge, gpus: int):
        super().__init__(api_client, config)
        self.gpus = gpus

    def list_inference_services(self) -> list[dict[str, Any]]:
        return [isvc("llm", self.gpus)] if self.gpus else []

    def list_deployments(self) -> list[dict[str, Any]]:
        return []

    def list_hpas(self) -> list[dict[str, Any]]:
        return []

    def list_serving_runtimes(self) -> list[dict[str, Any]]:
        return []

    def list_cluster_serving_runtimes(self) -> list[dict[str, Any]]:
        return []


@pytest.fixture
def renamed_nodes(k8s_api):
    """A Node ``names-<n>`` labelled with each Slurm node ``n``, and the selector that lists only them."""
    from kubernetes import client

    core = client.CoreV1Api(k8s_api)
    mark = f"names-test-{uuid.uuid4().hex[:6]}"
    names = {n: f"names-{n}" for n in NODES}
    for slurm, name in names.items():
        core.create_node(NodeSpec(name, labels={SLURM_NODE: slurm, mark: "1"}).manifest())
    try:
        wait_state(lambda: nodes_settled(core, set(names.values())), "the renamed Nodes Ready", k8s_api)
        yield names, f"{mark}=1"
    finally:
        for name in names.values():
            core.delete_node(name)


def test_a_lend_marks_the_labelled_node(k8s_api, k8s_namespace, renamed_nodes):
    from kubernetes import client

    names, selector = renamed_nodes
    core = client.CoreV1Api(k8s_api)
    config = Bridge(
        timezone="UTC",
        reclaim_wait=5,
        placeholder_start_timeout=5,
        node_selector=selector,
        node_names=NodeNames(by="label"),
        lease_namespace=k8s_namespace,
    )
    slurm = FakeSlurm()
    side = SlurmSide(SlurmClient(slurm.install(RecordingRunner())), config, submit_as="slurmpool")
    same_name = core.read_node("a-gpu1")  # the session's node of a Slurm node's name: Kubernetes' own here

    assert reconcile(side, DemandGiven(k8s_api, config, 0), config, now=NOON).ok
    report = reconcile(side, DemandGiven(k8s_api, config, 2), config, now=NIGHT)
    assert report.ok, report.text()
    lent = [n for n, k in names.items() if (core.read_node(k).metadata.labels or {}).get(LENT_LABEL) == "true"]
    assert len(lent) == 1, report.text()
    node = core.read_node(names[lent[0]])
    assert not node.spec.unschedulable and not any(t.key == RECLAIM_TAINT for t in node.spec.taints or [])
    fenced = [core.read_node(names[n]) for n in NODES if n != lent[0]]
    assert all(n.spec.unschedulable and any(t.key == RECLAIM_TAINT for t in n.spec.taints) for n in fenced)
    placeholder = next(j for j in slurm.jobs if j["comment"].startswith("slurm-pool:lend"))
    assert placeholder["nodes"] == lent[0]  # Slurm holds the Slurm node
    after = core.read_node("a-gpu1")
    assert after.metadata.resource_version == same_name.metadata.resource_version  # never touched
    events = core.list_namespaced_event("default", field_selector=f"involvedObject.name={names[lent[0]]}").items
    assert any(e.reason == "SlurmPoolLent" for e in events)
