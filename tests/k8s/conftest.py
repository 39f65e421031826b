"""Session fixtures: one real Kubernetes control plane for every k8s test.

``k8s_control_plane`` starts etcd, kube-apiserver, kube-controller-manager,
kube-scheduler and kwok on loopback (nodes mirror the example Slurm pool:
a-gpu1 a-gpu2 b-gpu1 c-gpu1, or ``$SLURM_POOL_K8S_NODES``), installs the
InferenceService CRD and runs the InferenceService test controller.  Tests talk
to it with the official ``kubernetes`` client through ``k8s_kubeconfig``.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Iterator

import pytest

from slurm_pool.testing.k8s import ControlPlane
from slurm_pool.testing.k8s_build import BuildError, require_binaries
from slurm_pool.testing.k8s_controller import InferenceServiceController, wait_for

CRD_PATH = Path(__file__).with_name("inferenceservice-crd.yaml")


@pytest.fixture(scope="session")
def k8s_control_plane() -> Iterator[ControlPlane]:
    """The running control plane (fails, never skips, when the binaries are missing)."""
    problem = None
    try:
        tools = require_binaries()
    except BuildError as exc:
        problem = str(exc)
    if problem:
        pytest.fail(problem, pytrace=False)
    cp = ControlPlane(crds=[CRD_PATH], toolset=tools)
    cp.start()
    try:
        yield cp
    finally:
        cp.stop()


@pytest.fixture(scope="session")
def isvc_controller(k8s_control_plane: ControlPlane) -> Iterator[InferenceServiceController]:
    """The InferenceService test controller, running in a thread."""
    assert k8s_control_plane.kubeconfig is not None
    ctrl = InferenceServiceController(k8s_control_plane.kubeconfig).start()
    try:
        yield ctrl
    finally:
        ctrl.stop()


@pytest.fixture(scope="session")
def k8s_kubeconfig(k8s_control_plane: ControlPlane, isvc_controller: InferenceServiceController) -> Path:
    """Admin kubeconfig for ``kubernetes.config.new_client_from_config``."""
    assert k8s_control_plane.kubeconfig is not None
    return k8s_control_plane.kubeconfig


@pytest.fixture
def k8s_api(k8s_kubeconfig: Path):
    """A ``kubernetes.client.ApiClient`` for this test."""
    from kubernetes import config

    with config.new_client_from_config(config_file=str(k8s_kubeconfig)) as api:
        yield api


@pytest.fixture
def k8s_namespace(k8s_api) -> Iterator[str]:
    """A fresh namespace; deleted afterwards, waiting until its pods are gone."""
    from kubernetes import client

    core = client.CoreV1Api(k8s_api)
    name = f"t-{uuid.uuid4().hex[:8]}"
    core.create_namespace({"metadata": {"name": name}})
    wait_for(lambda: _has_default_sa(core, name), timeout=30, what=f"default service account in {name}")
    yield name
    core.delete_namespace(name)
    wait_for(lambda: not core.list_namespaced_pod(name).items, timeout=60,
             what=f"pods of namespace {name} to be gone")


def _has_default_sa(core, namespace: str) -> bool:
    core.read_namespaced_service_account("default", namespace)
    return True
