"""Fixtures for the bridge's end-to-end tests: the real Slurm cluster (root
``tests/conftest.py``: ``cluster``) plus the real Kubernetes control plane
(shared with ``tests/k8s`` through :mod:`tests.support.k8s_fixtures`).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Iterator

import pytest

from tests.support.k8s import node_kubeconfig

#: Inside the default off-peak window (19:00-07:00) and outside it, in UTC.
NIGHT = datetime(2026, 1, 7, 2, 0, tzinfo=timezone.utc)
NOON = datetime(2026, 1, 7, 12, 0, tzinfo=timezone.utc)
ISVC_LABEL = "serving.kserve.io/inferenceservice"
#: sacct states of a placeholder that has ended.  One still fencing its node when its preemption GraceTime
#: runs out is killed by slurmctld, and 22.05 records that end as TIMEOUT (26.05.3's ``_job_timed_out`` in
#: src/slurmctld/job_mgr.c sets TIMEOUT only when the job is not being preempted); seen on a loaded machine.
PLACEHOLDER_ENDED = ("COMPLETED", "PREEMPTED", "CANCELLED", "TIMEOUT")


@dataclass
class BridgeBed:
    """The bridge wired to the test Slurm cluster and control plane, with helpers."""

    cluster: Any
    api: Any
    namespace: str
    config: Any
    kubeconfig: Any

    def __post_init__(self) -> None:
        from kubernetes import client

        from slurm_pool.bridge.k8s import KubernetesAPI
        from slurm_pool.bridge.slurm_side import SlurmSide

        self.core = client.CoreV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)
        self.policy = client.PolicyV1Api(self.api)
        self.k8s = KubernetesAPI(self.api, self.config)
        self.slurm = SlurmSide(self.cluster.slurm, self.config)

    def reconcile(self, now: datetime = NIGHT, **kw: Any):
        from slurm_pool.bridge.reconcile import reconcile
        from slurm_pool.spec.bridge import lend_preemptors

        kw.setdefault("preemptors", lend_preemptors(self.cluster.spec, self.config))
        return reconcile(self.slurm, self.k8s, self.config, now=now, **kw)

    # -- Kubernetes --------------------------------------------------------------
    def node(self, name: str):
        return self.core.read_node(name)

    def lent(self, name: str) -> bool:
        n = self.node(name)
        return (
            (n.metadata.labels or {}).get("slurm-pool/lent") == "true"
            and not n.spec.unschedulable
            and not any(t.key == "slurm-pool/reclaimed" for t in n.spec.taints or [])
        )

    def fenced(self, name: str) -> bool:
        n = self.node(name)
        return bool(n.spec.unschedulable) and any(
            t.key == "slurm-pool/reclaimed" and t.effect == "NoSchedule" for t in n.spec.taints or []
        )

    def create_isvc(self, name: str, replicas: int, gpus: int = 1, resource: str = "nvidia.com/gpu") -> None:
        """An InferenceService for KServe (Standard mode): ``replicas`` is its minReplicas."""
        from tests.support.kserve import GROUP, PLURAL, VERSION, isvc_manifest

        body = isvc_manifest(name, min_replicas=replicas, gpus=gpus, resource=resource)
        self.custom.create_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, body)

    def isvc(self, name: str = "llm") -> dict[str, Any]:
        from tests.support.kserve import GROUP, PLURAL, VERSION

        return self.custom.get_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, name)

    def set_min_replicas(self, replicas: int, name: str = "llm") -> None:
        from tests.support.kserve import GROUP, PLURAL, VERSION

        patch = {"spec": {"predictor": {"minReplicas": replicas}}}
        self.custom.patch_namespaced_custom_object(
            GROUP, VERSION, self.namespace, PLURAL, name, patch, _content_type="application/merge-patch+json"
        )

    def hpa_desired(self, name: str = "llm") -> int | None:
        """The HPA KServe made for the predictor: its ``status.desiredReplicas``."""
        from kubernetes import client

        hpa = client.AutoscalingV2Api(self.api).read_namespaced_horizontal_pod_autoscaler(
            f"{name}-predictor", self.namespace
        )
        return hpa.status.desired_replicas if hpa.status else None

    def predictors(self, name: str = "llm") -> list[Any]:
        return [
            p
            for p in self.core.list_namespaced_pod(self.namespace, label_selector=f"{ISVC_LABEL}={name}").items
            if p.metadata.deletion_timestamp is None
        ]

    def running_on(self, name: str = "llm") -> dict[str, str]:
        """Predictor pod -> node, for Running pods."""
        return {p.metadata.name: p.spec.node_name for p in self.predictors(name) if p.status.phase == "Running"}

    def wait_predictors(self, count: int, node: str, name: str = "llm", timeout: float = 60) -> None:
        from tests.support.kserve import wait_for

        wait_for(
            lambda: list(self.running_on(name).values()) == [node] * count,
            timeout=timeout,
            what=f"{count} predictor pod(s) of {name} Running on {node}",
        )

    # -- Slurm -------------------------------------------------------------------
    def placeholders(self, completing: bool = False) -> list[dict[str, str]]:
        """Queued placeholder jobs as squeue prints them (cancelled ones still COMPLETING only if asked)."""
        out = self.cluster.run(["squeue", "-h", "-o", "%i|%T|%P|%q|%a|%u|%N|%k"]).stdout
        rows = [
            dict(
                zip(
                    ("id", "state", "partition", "qos", "account", "user", "node", "comment"),
                    row.split("|"),
                    strict=False,
                )
            )
            for row in out.splitlines()
            if row.strip()
        ]
        return [
            r for r in rows if r["comment"].startswith("slurm-pool:lend") and (completing or r["state"] != "COMPLETING")
        ]


#: A node label the gang tests put on the nodes a gang's pods may use (removed afterwards).
TEST_GROUP_LABEL = "test.slurm-pool/group"


def _reset_nodes(core) -> None:
    """Undo every mark the bridge may have left: the k8s tests expect open nodes."""
    for n in core.list_node().items:
        taints = [t for t in n.spec.taints or [] if not t.key.startswith("slurm-pool/")]
        labels = {"slurm-pool/lent": None, "slurm-pool/gang": None, TEST_GROUP_LABEL: None}
        notes = {"slurm-pool/reclaim-since": None, "slurm-pool/gang-job": None}
        core.patch_node(
            n.metadata.name,
            {
                "metadata": {"labels": labels, "annotations": notes},
                "spec": {
                    "unschedulable": None,
                    "taints": [core.api_client.sanitize_for_serialization(t) for t in taints] or None,
                },
            },
            _content_type="application/merge-patch+json",
        )


@pytest.fixture
def bridge(cluster, k8s_kubeconfig, k8s_api, k8s_namespace) -> Iterator[BridgeBed]:
    """The bridge on an empty Slurm queue and fresh Kubernetes marks; cleaned up afterwards."""
    from kubernetes import client

    from slurm_pool.spec.bridge import Bridge, OffPeakWindow

    core = client.CoreV1Api(k8s_api)
    _reset_nodes(core)
    config = Bridge(
        timezone="UTC",
        off_peak=[OffPeakWindow(start="19:00", end="07:00")],
        kserve_namespace=k8s_namespace,
        placeholder_start_timeout=30,
        reclaim_wait=30,
        fence_kubeconfig=str(
            node_kubeconfig(k8s_kubeconfig, cluster.cluster.layout.root / "bridge" / "node.kubeconfig")
        ),
        fence_command=f"{sys.executable} -m slurm_pool",
        fence_seconds=5,  # the example's k8s-lend GraceTime is 10 s
    )
    bed = BridgeBed(cluster, k8s_api, k8s_namespace, config, k8s_kubeconfig)
    yield bed
    cluster.cancel_all()  # placeholders fence their nodes as they go: then undo the marks
    _reset_nodes(core)


#: The toleration a gang's pods carry for the nodes lent to gangs (docs/bridge.md).
GANG_TOLERATION = {"key": "slurm-pool/gang", "operator": "Exists", "effect": "NoSchedule"}


class GangBed(BridgeBed):
    """:class:`BridgeBed` with ``bridge.gangs`` set and real Volcano beside the control plane."""

    def with_config(self, **update: Any) -> "GangBed":
        """The same bed with ``config`` fields replaced (the adapters made again for it)."""
        return GangBed(self.cluster, self.api, self.namespace, self.config.model_copy(update=update), self.kubeconfig)

    def create_vcjob(self, name: str, pods: int, gpus: int = 2, **kw: Any) -> None:
        """A vcjob of ``pods`` pods, all of them its ``minAvailable``, each asking for ``gpus`` GPUs."""
        from tests.support.volcano import vcjob_manifest

        kw.setdefault("tolerations", (GANG_TOLERATION,))
        body = vcjob_manifest(name, self.namespace, pods, pods, gpus, **kw)
        body["spec"]["tasks"][0]["template"]["spec"]["terminationGracePeriodSeconds"] = 0
        self.custom.create_namespaced_custom_object("batch.volcano.sh", "v1alpha1", self.namespace, "jobs", body)

    def vcjob_phase(self, name: str) -> str:
        job = self.custom.get_namespaced_custom_object("batch.volcano.sh", "v1alpha1", self.namespace, "jobs", name)
        return ((job.get("status") or {}).get("state") or {}).get("phase", "")

    def gang_pods(self, name: str) -> list[Any]:
        """The live pods of vcjob ``name``."""
        pods = self.core.list_namespaced_pod(self.namespace, label_selector=f"volcano.sh/job-name={name}").items
        return [p for p in pods if p.metadata.deletion_timestamp is None]

    def gang_nodes(self, name: str) -> dict[str, str]:
        """Running pod -> node, for vcjob ``name``."""
        return {p.metadata.name: p.spec.node_name for p in self.gang_pods(name) if p.status.phase == "Running"}

    def bound_anywhere(self, nodes: tuple[str, ...]) -> list[str]:
        """Pods (any) bound to ``nodes``, DaemonSets' left out."""
        out = []
        for n in nodes:
            for p in self.core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={n}").items:
                owners = p.metadata.owner_references or []
                if not owners or owners[0].kind != "DaemonSet":
                    out.append(f"{p.metadata.namespace}/{p.metadata.name}@{n}")
        return out

    def group_of(self, node: str) -> str:
        return (self.node(node).metadata.labels or {}).get("slurm-pool/gang", "")

    def label_nodes(self, nodes: tuple[str, ...], value: str = "train") -> None:
        """Put :data:`TEST_GROUP_LABEL` on ``nodes`` (a gang's node selector picks them)."""
        for n in nodes:
            self.core.patch_node(n, {"metadata": {"labels": {TEST_GROUP_LABEL: value}}})


@pytest.fixture
def gang_bridge(bridge: BridgeBed, volcano: Any) -> GangBed:
    """:func:`bridge` with ``bridge.gangs`` on for the test's namespace (pods' grace 0 fits fence_seconds 5)."""
    from slurm_pool.spec.bridge import GangSettings

    gangs = GangSettings(namespaces=[bridge.namespace], grace_seconds=0)
    return GangBed(bridge.cluster, bridge.api, bridge.namespace, bridge.config, bridge.kubeconfig).with_config(
        gangs=gangs
    )
