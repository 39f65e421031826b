"""KServe's own controller manager beside the test control plane (Standard deployment mode).

:class:`KServe` installs what Standard mode needs, read from the pinned KServe
module in the Go module cache (:func:`tests.support.k8s_build.require_kserve`),
never copied into the repository: the CRDs of ``config/crd/full`` (given to the
:class:`~tests.support.k8s.ControlPlane`, see :func:`crd_files`), the
``inferenceservice-config`` ConfigMap with ``defaultDeploymentMode`` patched to
``Standard`` in memory (no Knative, no Istio), the default
ClusterStorageContainer and the Hugging Face ClusterServingRuntime.  It then
runs ``manager`` outside the cluster on 127.0.0.1 ports with a self-signed
webhook serving certificate (no webhooks are registered with the API server),
waits on its readiness probe and stops it by pid.

KServe makes, per InferenceService ``NAME``: Deployment, Service and HPA
``NAME-predictor``; kube-controller-manager scales it, kwok runs the pods.
"""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import json
import os
import shutil
import subprocess
import tempfile
import urllib.request
from pathlib import Path

from tests.support.k8s_build import Toolset, require_kserve

NAMESPACE = "kserve"
CONFIGMAP = "inferenceservice-config"
GROUP, VERSION, PLURAL = "serving.kserve.io", "v1beta1", "inferenceservices"
RUNTIME = "config/runtimes/kserve-huggingfaceserver.yaml"
STORAGE_CONTAINER = "config/storagecontainers/default.yaml"
CONFIGMAP_FILE = "config/configmap/inferenceservice.yaml"


class KServeError(RuntimeError):
    """The KServe controller could not be started."""


def crd_files(tools: Toolset | None = None) -> list[Path]:
    """KServe's CRDs (InferenceService, (Cluster)ServingRuntime, ..., ClusterStorageContainer)."""
    src = (tools or require_kserve()).module_source / "config" / "crd" / "full"
    files = sorted(src.glob("serving.kserve.io_*.yaml")) + sorted(
        (src / "clusterstoragecontainer").glob("serving.kserve.io_*.yaml")
    )
    if not files:
        raise KServeError(f"no KServe CRDs under {src}")
    return files


def standard_configmap(source: Path) -> dict:
    """``inferenceservice-config`` with the default deployment mode set to Standard."""
    import yaml

    cm = next(d for d in yaml.safe_load_all(source.read_text()) if d and d.get("kind") == "ConfigMap")
    deploy = json.loads(cm["data"]["deploy"])
    deploy["defaultDeploymentMode"] = "Standard"
    cm["data"]["deploy"] = json.dumps(deploy)
    cm["data"].pop("_example", None)
    cm["metadata"] = {"name": CONFIGMAP, "namespace": NAMESPACE}
    return cm


def write_serving_cert(directory: Path) -> None:
    """A self-signed ``tls.crt``/``tls.key`` for 127.0.0.1 (the webhook server wants one to start)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509.oid import NameOID

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kserve-webhook-server")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(
            x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "tls.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (directory / "tls.key").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption()
        )
    )
    (directory / "tls.key").chmod(0o600)


class KServe:
    """KServe's controller manager for one control plane (its CRDs must be installed already)."""

    def __init__(self, kubeconfig: Path, tools: Toolset | None = None) -> None:
        self.kubeconfig = Path(kubeconfig)
        self.tools = tools or require_kserve()
        self.proc: subprocess.Popen | None = None
        self.state_dir: Path | None = None
        self.ports: dict[str, int] = {}

    @property
    def log_path(self) -> Path:
        assert self.state_dir is not None
        return self.state_dir / "manager.log"

    def start(self, timeout: float = 120.0) -> "KServe":
        from tests.support.k8s import free_port, spawn

        self.state_dir = Path(tempfile.mkdtemp(prefix="slurm-pool-kserve-"))
        try:
            self._install()
            # controller-runtime reads the serving certificate from $TMPDIR/k8s-webhook-server/serving-certs
            write_serving_cert(self.state_dir / "k8s-webhook-server" / "serving-certs")
            self.ports = {name: free_port() for name in ("metrics", "probe", "webhook")}
            env = {
                "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                "HOME": str(self.state_dir),
                "TMPDIR": str(self.state_dir),
                "POD_NAMESPACE": NAMESPACE,
            }
            args = [
                str(self.tools.binary("kserve-manager")),
                f"-kubeconfig={self.kubeconfig}",
                f"-metrics-addr=127.0.0.1:{self.ports['metrics']}",
                f"-health-probe-addr=127.0.0.1:{self.ports['probe']}",
                f"-webhook-port={self.ports['webhook']}",
            ]
            self.proc = spawn(args, self.log_path, self.state_dir, env)
            self._wait_ready(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _install(self) -> None:
        import yaml
        from kubernetes import client, config
        from kubernetes.client.rest import ApiException

        src = self.tools.module_source
        with config.new_client_from_config(config_file=str(self.kubeconfig)) as api:
            core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
            with contextlib.suppress(ApiException):  # 409: there already
                core.create_namespace({"metadata": {"name": NAMESPACE}})
            core.create_namespaced_config_map(NAMESPACE, standard_configmap(src / CONFIGMAP_FILE))
            for rel, plural in ((STORAGE_CONTAINER, "clusterstoragecontainers"), (RUNTIME, "clusterservingruntimes")):
                for doc in yaml.safe_load_all((src / rel).read_text()):
                    if doc:
                        custom.create_cluster_custom_object("serving.kserve.io", "v1alpha1", plural, doc)

    def _ready(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            raise KServeError(f"the KServe manager exited with {self.proc.returncode}:\n{self.tail()}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.ports['probe']}/readyz", timeout=2) as resp:
                return resp.status == 200
        except OSError:
            return False

    def _wait_ready(self, timeout: float) -> None:
        from slurm_pool.localcluster.procs import wait_for

        try:
            wait_for(self._ready, timeout, "the KServe manager's readiness probe", interval=0.5)
        except TimeoutError as exc:
            raise KServeError(f"{exc}\n{self.tail()}") from None

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except (OSError, AssertionError):
            return ""

    def stop(self, grace: float = 10.0) -> None:
        """Stop the manager by pid (its own process group), then remove its state directory."""
        from tests.support.k8s import stop_groups

        proc, self.proc = self.proc, None
        stop_groups([proc] if proc is not None else [], grace)
        if self.state_dir is not None:
            shutil.rmtree(self.state_dir, ignore_errors=True)
            self.state_dir = None

    def __enter__(self) -> "KServe":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def isvc_manifest(
    name: str, min_replicas: int, gpus: int = 1, max_replicas: int | None = None, resource: str = "nvidia.com/gpu"
) -> dict:
    """An InferenceService in Standard mode on the Hugging Face runtime, ``gpus`` of ``resource`` per predictor pod."""
    predictor: dict = {
        "minReplicas": min_replicas,
        "model": {"modelFormat": {"name": "huggingface"}, "resources": {"limits": {resource: str(gpus)}}},
    }
    if max_replicas is not None:
        predictor["maxReplicas"] = max_replicas
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "InferenceService",
        "metadata": {"name": name, "annotations": {"serving.kserve.io/deploymentMode": "Standard"}},
        "spec": {"predictor": predictor},
    }


def is_ready(isvc: dict) -> bool:
    """Its ``Ready`` condition is True."""
    conds = (isvc.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds)


def wait_for(predicate, timeout: float = 30.0, interval: float = 0.25, what: str = "condition"):
    """Poll ``predicate`` until truthy (any exception counts as "not yet": the API may be briefly away)."""
    from slurm_pool.localcluster.procs import wait_for as poll
    from tests.support.patience import patience

    return poll(predicate, patience(timeout), what, interval, ignore=(Exception,))
