"""pytest fixtures for the real Kubernetes control plane, shared by test directories.

Import them into a ``conftest.py`` (``tests/k8s`` and ``tests/bridge`` do)::

    from tests.support.k8s_fixtures import (  # noqa: F401
        kserve, k8s_api, k8s_control_plane, k8s_crds, k8s_kubeconfig, k8s_namespace, volcano)

``k8s_control_plane`` starts etcd, kube-apiserver, kube-controller-manager,
kube-scheduler and kwok on loopback (nodes mirror the example Slurm pool:
a-gpu1 a-gpu2 b-gpu1 c-gpu1, or ``$SLURM_POOL_K8S_NODES``), installs the CRDs
of ``k8s_crds`` (KServe's and Volcano's, from the Go module cache), ``kserve`` runs
KServe's own controller manager (:mod:`tests.support.kserve`) and ``volcano``
Volcano's scheduler and controller manager (:mod:`tests.support.volcano`).  Each
``conftest.py`` that imports a session fixture gets its own fixture
definition, so the running control plane and controller are kept here and
shared by reference count: one per test session, however many directories
use them.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any, Callable, Iterator, TypeVar

import pytest

from tests.support import volcano as vc
from tests.support.k8s import ControlPlane
from tests.support.k8s_build import BuildError, Toolset, require_binaries, require_kserve, require_volcano
from tests.support.k8s_wait import wait_state
from tests.support.kserve import KServe, crd_files

T = TypeVar("T")
_shared: dict[str, list[Any]] = {}


def _acquire(key: str, start: Callable[[], T]) -> T:
    entry = _shared.get(key)
    if entry is None:
        entry = _shared[key] = [start(), 0]
    entry[1] += 1
    return entry[0]


def _release(key: str, stop: Callable[[Any], None]) -> None:
    entry = _shared[key]
    entry[1] -= 1
    if entry[1] == 0:
        del _shared[key]
        stop(entry[0])


def _kserve_tools() -> Toolset:
    try:
        return require_kserve()
    except BuildError as exc:
        pytest.fail(str(exc), pytrace=False)


def _volcano_tools() -> Toolset:
    try:
        return require_volcano()
    except BuildError as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture(scope="session")
def k8s_crds() -> list[Path]:
    """CRD files installed into the control plane: KServe's and Volcano's (fails, never skips, when not built)."""
    return crd_files(_kserve_tools()) + vc.crd_files(_volcano_tools())


def _start_control_plane(crds: list[Path]) -> ControlPlane:
    problem = None
    try:
        tools = require_binaries()
    except BuildError as exc:
        problem = str(exc)
    if problem:
        pytest.fail(problem, pytrace=False)
    cp = ControlPlane(crds=crds, toolset=tools)
    cp.start()
    return cp


@pytest.fixture(scope="session")
def k8s_control_plane(k8s_crds: list[Path]) -> Iterator[ControlPlane]:
    """The running control plane (fails, never skips, when the binaries are missing)."""
    cp = _acquire("control-plane", lambda: _start_control_plane(k8s_crds))
    try:
        yield cp
    finally:
        _release("control-plane", lambda c: c.stop())


@pytest.fixture(scope="session")
def kserve(k8s_control_plane: ControlPlane) -> Iterator[KServe]:
    """KServe's controller manager (Standard mode) for the session's control plane."""
    assert k8s_control_plane.kubeconfig is not None
    kubeconfig = k8s_control_plane.kubeconfig
    ctrl = _acquire("kserve", lambda: KServe(kubeconfig, _kserve_tools()).start())
    try:
        yield ctrl
    finally:
        _release("kserve", lambda c: c.stop())


@pytest.fixture(scope="session")
def volcano(k8s_control_plane: ControlPlane) -> Iterator[vc.Volcano]:
    """Volcano's scheduler and controller manager for the session's control plane."""
    assert k8s_control_plane.kubeconfig is not None
    kubeconfig = k8s_control_plane.kubeconfig
    ctrl = _acquire("volcano", lambda: vc.Volcano(kubeconfig, _volcano_tools()).start())
    try:
        yield ctrl
    finally:
        _release("volcano", lambda c: c.stop())


@pytest.fixture(scope="session")
def k8s_kubeconfig(k8s_control_plane: ControlPlane, kserve: KServe) -> Path:
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
    wait_state(lambda: _has_default_sa(core, name), f"default service account in {name}", k8s_api, name)
    yield name
    core.delete_namespace(name)
    wait_state(lambda: not core.list_namespaced_pod(name).items, f"pods of namespace {name} to be gone", k8s_api, name)


def _has_default_sa(core, namespace: str) -> bool:
    core.read_namespaced_service_account("default", namespace)
    return True
