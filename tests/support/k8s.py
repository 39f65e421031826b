"""A real, local Kubernetes control plane for the bridge's tests.

``ControlPlane`` runs etcd, kube-apiserver, kube-controller-manager,
kube-scheduler and kwok (which plays the kubelets) from binaries built by
:mod:`tests.support.k8s_build`.  Everything listens on 127.0.0.1 on ports
picked free at start, lives in one temporary state directory (certificates,
kubeconfig, etcd data, logs) and is stopped by the pids it started.

Tests wait on states with :func:`tests.support.k8s_wait.wait_state`, never
on sleeps; a timeout reports what the cluster looked like.

Command line::

    python3 -m tests.support.k8s build   # build once; a fast no-op when cached
    python3 -m tests.support.k8s info    # where the cache is, what it holds
    python3 -m tests.support.k8s up      # run a control plane until Ctrl-C
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Iterator, Sequence

from tests.support.k8s_build import (
    BuildError,
    Toolset,
    kserve_toolset,
    module_dir_of,
    require_binaries,
    volcano_toolset,
)
from tests.support.k8s_certs import SERVICE_CIDR, PkiPaths, generate_pki, write_kubeconfig
from tests.support.k8s_wait import described, node_state, nodes_settled

#: The example pool's nodes (examples/pool.yaml): 2 GPUs, 4 CPUs, 8000 MB each.
DEFAULT_NODE_NAMES: tuple[str, ...] = ("a-gpu1", "a-gpu2", "b-gpu1", "c-gpu1")
GPU_RESOURCE = "nvidia.com/gpu"
#: c-gpu1's MIG slice (the example's ``gpus.mig`` 3g.20gb on one of its two A100s) as the
#: NVIDIA device plugin's mixed strategy advertises it: one whole GPU plus one slice.
MIG_SLICE = "nvidia.com/mig-3g.20gb"
DEFAULT_SLICES: dict[str, dict[str, int]] = {"c-gpu1": {MIG_SLICE: 1}}
KWOK_ANNOTATION = ("kwok.x-k8s.io/node", "fake")
#: Label put on every node the control plane creates.
NODE_LABEL = "slurm-pool.testing/kwok-node"
#: Order of start; stop goes the other way.
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
#: How long the control plane may take to start (and its nodes to be Ready) on a loaded 2-core machine.
START_SECONDS = float(os.environ.get("SLURM_POOL_K8S_START", "300"))
_PR_SET_PDEATHSIG = 1


KWOK_CONFIG = "apiVersion: config.kwok.x-k8s.io/v1alpha1\nkind: KwokConfiguration\noptions: {}\n"
#: kwok's own default pod stages (its ``kustomize/stage/pod/fast``), read from its module at run time.
KWOK_POD_STAGES = ("pod-ready", "pod-complete", "pod-delete")
#: One stage of ours beside them.  kwok plays the kubelets, and a kubelet sets a pod Ready again
#: once its node is back; kwok's stages never do.  So one moment of a node seen NotReady on this
#: loaded machine (the node lifecycle controller then marks its pods NotReady) would leave a
#: Running pod unready for good, and its Deployment short of ready replicas.
POD_READY_AGAIN = """apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: slurm-pool-pod-ready-again
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: 'DoesNotExist'
    - key: '.status.phase'
      operator: 'In'
      values: ['Running']
    - key: '.status.podIP'
      operator: 'Exists'
    - key: '.status.conditions.[] | select( .type == "Ready" ) | .status'
      operator: 'In'
      values: ['False']
  next:
    statusTemplate: |
      {{ $now := Now }}
      conditions:
      - lastTransitionTime: {{ $now | Quote }}
        status: "True"
        type: Ready
      - lastTransitionTime: {{ $now | Quote }}
        status: "True"
        type: ContainersReady
"""


def kwok_pod_stages(tools: Toolset) -> list[str]:
    """kwok's default pod stages from its module source, plus :data:`POD_READY_AGAIN`.

    Any pod stage in kwok's config replaces all of its defaults, so they come along.
    """
    src = module_dir_of(tools.module_dir / "kwok", "sigs.k8s.io/kwok") / "kustomize" / "stage" / "pod" / "fast"
    stages = [(src / f"{name}.yaml").read_text() for name in KWOK_POD_STAGES]
    return [batch_jobs_only(s) for s in stages] + [POD_READY_AGAIN]


def batch_jobs_only(stage: str) -> str:
    """kwok's ``pod-complete`` stage (pods of a ``Job`` end ``Succeeded`` at once) kept to ``batch/v1`` Jobs.

    Its selector matches the owner's kind only, so it would also end the pods of a Volcano
    Job (``batch.volcano.sh``) the moment they run: a training gang must keep running.
    """
    import yaml

    doc = yaml.safe_load(stage)
    if doc.get("metadata", {}).get("name") != "pod-complete":
        return stage
    rule = {"key": ".metadata.ownerReferences.[].apiVersion", "operator": "In", "values": ["batch/v1"]}
    doc["spec"]["selector"]["matchExpressions"].append(rule)
    return yaml.safe_dump(doc, sort_keys=False)


class ControlPlaneError(RuntimeError):
    """The control plane could not be started or did not become ready."""


@dataclass(frozen=True)
class NodeSpec:
    """One kwok node: a Kubernetes mirror of a Slurm node."""

    name: str
    gpus: int = 2
    cpus: int = 4
    memory: str = "8000Mi"
    labels: dict[str, str] = field(default_factory=dict)
    #: MIG resources (``nvidia.com/mig-*``) besides its whole GPUs.
    slices: dict[str, int] = field(default_factory=dict)

    def manifest(self) -> dict:
        capacity = {"cpu": str(self.cpus), "memory": self.memory, "pods": "110", GPU_RESOURCE: str(self.gpus)}
        capacity |= {r: str(v) for r, v in self.slices.items()}
        labels = {
            "kubernetes.io/hostname": self.name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "type": "kwok",
            NODE_LABEL: "true",
            **self.labels,
        }
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": self.name,
                "labels": labels,
                "annotations": {KWOK_ANNOTATION[0]: KWOK_ANNOTATION[1], "node.alpha.kubernetes.io/ttl": "0"},
            },
            "status": {"capacity": capacity, "allocatable": dict(capacity)},
        }


def node_specs(nodes: Iterable[str | NodeSpec] | None) -> list[NodeSpec]:
    """Normalise node names (or specs) to specs; ``None`` means the example pool."""
    if nodes is None:
        env = os.environ.get("SLURM_POOL_K8S_NODES", "").split()
        nodes = env or DEFAULT_NODE_NAMES
    return [n if isinstance(n, NodeSpec) else _default_spec(n) for n in nodes]


def _default_spec(name: str) -> NodeSpec:
    """A node named like the example pool's: a MIG node has one whole GPU per slice fewer."""
    slices = DEFAULT_SLICES.get(name, {})
    return NodeSpec(name, gpus=2 - sum(slices.values()), slices=dict(slices))


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def die_with_parent() -> None:
    """In the child: get SIGKILL if the starting thread dies, so a killed test run leaves nothing."""
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def spawn(argv: list[str], log_path: Path, cwd: Path, env: dict[str, str]) -> subprocess.Popen:
    """Start ``argv`` in its own process group (see :func:`stop_groups`), dying with the starting
    thread (:func:`die_with_parent`), its output appended to ``log_path``."""
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env=env,
            start_new_session=True,
            close_fds=True,
            preexec_fn=die_with_parent,
        )


def stop_groups(procs: Iterable[subprocess.Popen], grace: float = 10.0) -> None:
    """SIGTERM each process's own group (made at spawn), then SIGKILL what is left after ``grace`` seconds."""
    procs = list(procs)
    for proc in procs:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
    end = time.monotonic() + grace
    for proc in procs:
        try:
            proc.wait(timeout=max(0.1, end - time.monotonic()))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _tail(path: Path, lines: int = 25) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


class ControlPlane:
    """etcd + kube-apiserver + controller-manager + scheduler + kwok on loopback.

    Use as a context manager, or call :meth:`start` and :meth:`stop`.  Call
    ``start`` from a thread that outlives the control plane: the children are
    told to die with it.
    """

    def __init__(
        self,
        nodes: Iterable[str | NodeSpec] | None = None,
        crds: Sequence[Path] = (),
        state_dir: Path | None = None,
        toolset: Toolset | None = None,
        keep_state: bool = False,
    ) -> None:
        self.nodes = node_specs(nodes)
        self.crds = [Path(c) for c in crds]
        self._toolset = toolset
        self._state_arg = state_dir
        self.keep_state = keep_state
        self.state_dir: Path | None = None
        self.procs: dict[str, subprocess.Popen] = {}
        self.ports: dict[str, int] = {}
        self.pki: PkiPaths | None = None
        self.kubeconfig: Path | None = None
        self.server: str | None = None
        self.start_seconds: float | None = None

    # -- lifecycle ---------------------------------------------------------

    def start(self, timeout: float = START_SECONDS) -> "ControlPlane":
        """Start every component and wait until nodes are Ready and CRDs established."""
        if self.procs:
            raise ControlPlaneError("already started")
        tools = self._toolset or require_binaries()
        began = time.monotonic()
        deadline = began + timeout
        for attempt in range(3):
            if self._state_arg is None:
                self.state_dir = Path(tempfile.mkdtemp(prefix="slurm-pool-k8s-"))
            else:
                self.state_dir = self._state_arg
                shutil.rmtree(self.state_dir, ignore_errors=True)
                self.state_dir.mkdir(parents=True)
            try:
                self._start(tools, deadline)
                break
            except ControlPlaneError as exc:
                self.stop()
                # A port picked free was taken before its server bound it: pick again.
                if "address already in use" not in str(exc) or attempt == 2:
                    raise
            except BaseException:
                self.stop()
                raise
        self.start_seconds = round(time.monotonic() - began, 1)
        (self.state_dir / "control-plane.json").write_text(json.dumps(self.describe(), indent=2) + "\n")
        return self

    def _start(self, tools: Toolset, deadline: float) -> None:
        state = self.state_dir
        assert state is not None
        (state / "logs").mkdir(exist_ok=True)
        self.pki = generate_pki(state / "pki")
        self.ports = {"etcd": free_port(), "etcd-peer": free_port(), "apiserver": free_port()}
        self.server = f"https://127.0.0.1:{self.ports['apiserver']}"
        self.kubeconfig = write_kubeconfig(state / "admin.kubeconfig", self.server, self.pki)

        self._spawn(tools, "etcd", self._etcd_args())
        self._spawn(tools, "kube-apiserver", self._apiserver_args())
        self._wait("kube-apiserver /readyz", self._apiserver_ready, deadline)

        from kubernetes import client

        with self.api_client() as api:
            # CRDs first, so the controller-manager's garbage collector and
            # quota controllers see them in their first discovery.
            self._install_crds(api, deadline)
            for name, args in (
                ("kube-controller-manager", self._controller_manager_args()),
                ("kube-scheduler", self._scheduler_args()),
                ("kwok", self._kwok_args(tools)),
            ):
                self._spawn(tools, name, args)
            core = client.CoreV1Api(api)
            for node in self.nodes:
                core.create_node(node.manifest())
            self._wait("nodes Ready and untainted", lambda: self._nodes_ready(core), deadline, lambda: node_state(core))
            self._wait("the default service account", lambda: self._default_sa(core), deadline)

    def stop(self, grace: float = 10.0) -> None:
        """Stop the processes this object started (by pid), newest first, and clean up."""
        stop_groups(reversed(list(self.procs.values())), grace)
        self.procs.clear()
        if self.state_dir and not self.keep_state and self._state_arg is None:
            shutil.rmtree(self.state_dir, ignore_errors=True)

    def __enter__(self) -> "ControlPlane":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- access --------------------------------------------------------------

    @property
    def pids(self) -> dict[str, int]:
        return {name: proc.pid for name, proc in self.procs.items()}

    def api_client(self):
        """A fresh ``kubernetes.client.ApiClient`` for the admin kubeconfig."""
        from kubernetes import config

        if self.kubeconfig is None:
            raise ControlPlaneError("not started")
        return config.new_client_from_config(config_file=str(self.kubeconfig))

    def describe(self) -> dict:
        return {
            "server": self.server,
            "kubeconfig": str(self.kubeconfig),
            "pids": self.pids,
            "ports": self.ports,
            "state_dir": str(self.state_dir),
            "nodes": [n.name for n in self.nodes],
            "start_seconds": self.start_seconds,
        }

    def log_path(self, name: str) -> Path:
        assert self.state_dir is not None
        return self.state_dir / "logs" / f"{name}.log"

    # -- components ----------------------------------------------------------

    @contextlib.contextmanager
    def apiserver_stopped(self, timeout: float = 60.0) -> Iterator[None]:
        """kube-apiserver stopped (by pid) for the body, then started again with the same flags and port."""
        proc = self.procs.pop("kube-apiserver")
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        try:
            yield
        finally:
            self._spawn(self._toolset or require_binaries(), "kube-apiserver", self._apiserver_args())
            restarted = time.monotonic() + max(timeout, START_SECONDS)
            self._wait("kube-apiserver /readyz after its restart", self._apiserver_ready, restarted)

    def _spawn(self, tools: Toolset, name: str, args: list[str]) -> None:
        assert self.state_dir is not None
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(self.state_dir)}
        self.procs[name] = spawn([str(tools.binary(name)), *args], self.log_path(name), self.state_dir, env)

    def _etcd_args(self) -> list[str]:
        assert self.state_dir is not None
        client_url = f"http://127.0.0.1:{self.ports['etcd']}"
        peer_url = f"http://127.0.0.1:{self.ports['etcd-peer']}"
        return [
            "--name=default",
            f"--data-dir={self.state_dir / 'etcd'}",
            f"--listen-client-urls={client_url}",
            f"--advertise-client-urls={client_url}",
            f"--listen-peer-urls={peer_url}",
            f"--initial-advertise-peer-urls={peer_url}",
            f"--initial-cluster=default={peer_url}",
            "--initial-cluster-state=new",
            "--unsafe-no-fsync=true",
            "--log-level=warn",
        ]

    def _apiserver_args(self) -> list[str]:
        pki = self.pki
        assert pki is not None
        return [
            f"--etcd-servers=http://127.0.0.1:{self.ports['etcd']}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={self.ports['apiserver']}",
            f"--tls-cert-file={pki.apiserver_cert}",
            f"--tls-private-key-file={pki.apiserver_key}",
            f"--client-ca-file={pki.ca_cert}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={pki.sa_pub}",
            f"--service-account-signing-key-file={pki.sa_key}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--authorization-mode=RBAC",
            "--allow-privileged=true",
            "--endpoint-reconciler-type=none",
            "--profiling=false",
        ]

    def _controller_manager_args(self) -> list[str]:
        pki = self.pki
        assert pki is not None
        return [
            f"--kubeconfig={self.kubeconfig}",
            "--leader-elect=false",
            "--bind-address=127.0.0.1",
            "--secure-port=0",
            f"--service-account-private-key-file={pki.sa_key}",
            f"--root-ca-file={pki.ca_cert}",
            "--controllers=*",
            "--profiling=false",
            # kwok plays the kubelets; on a loaded machine its heartbeats can lapse past the default
            # 50 s, and the node lifecycle controller then marks every pod NotReady for good (kwok does
            # not set Ready again).  No test here needs a node to go NotReady by itself.
            "--node-monitor-grace-period=300s",
        ]

    def _scheduler_args(self) -> list[str]:
        return [
            f"--kubeconfig={self.kubeconfig}",
            "--leader-elect=false",
            "--bind-address=127.0.0.1",
            "--secure-port=0",
            "--profiling=false",
        ]

    def _kwok_args(self, tools: Toolset) -> list[str]:
        assert self.state_dir is not None
        config = self.state_dir / "kwok.yaml"
        config.write_text("---\n".join([KWOK_CONFIG, *kwok_pod_stages(tools)]))
        selector = "=".join(KWOK_ANNOTATION)
        return [
            f"--kubeconfig={self.kubeconfig}",
            f"--config={config}",
            "--manage-all-nodes=false",
            f"--manage-nodes-with-annotation-selector={selector}",
            "--cidr=10.244.0.1/16",
            "--node-ip=10.240.0.1",
        ]

    # -- readiness -----------------------------------------------------------

    def _wait(
        self, what: str, ready: Callable[[], bool], deadline: float, seen: Callable[[], str] | None = None
    ) -> None:
        """Poll ``ready`` until ``deadline``; on a timeout report the logs and what ``seen`` says."""
        last: object = None
        while True:
            for name, proc in self.procs.items():
                if proc.poll() is not None:
                    raise ControlPlaneError(
                        f"{name} exited with status {proc.returncode} while waiting for {what}; "
                        f"last log lines:\n{_tail(self.log_path(name))}"
                    )
            try:
                if ready():
                    return
            except Exception as exc:  # noqa: BLE001 - not ready yet; said on a timeout
                last = exc
            if time.monotonic() > deadline:
                logs = "\n".join(f"--- {n}\n{_tail(self.log_path(n), 8)}" for n in self.procs)
                state = described(seen) if seen else ""
                raise ControlPlaneError(f"timed out waiting for {what} (last error: {last!r})\n{state}{logs}")
            time.sleep(0.25)

    def _apiserver_ready(self) -> bool:
        pki = self.pki
        assert pki is not None
        ctx = ssl.create_default_context(cafile=str(pki.ca_cert))
        ctx.load_cert_chain(str(pki.admin_cert), str(pki.admin_key))
        with urllib.request.urlopen(f"{self.server}/readyz", context=ctx, timeout=2) as resp:
            return resp.status == 200

    def _nodes_ready(self, core) -> bool:
        return nodes_settled(core, {n.name for n in self.nodes})

    @staticmethod
    def _default_sa(core) -> bool:
        core.read_namespaced_service_account("default", "default")
        return True

    def _install_crds(self, api, deadline: float) -> None:
        import yaml
        from kubernetes import client

        ext = client.ApiextensionsV1Api(api)
        names = []
        for path in self.crds:
            for doc in yaml.safe_load_all(path.read_text()):
                if doc:
                    ext.create_custom_resource_definition(doc)
                    names.append(doc["metadata"]["name"])

        def established() -> bool:
            for name in names:
                crd = ext.read_custom_resource_definition(name)
                conds = {c.type: c.status for c in (crd.status.conditions or [])}
                if conds.get("Established") != "True":
                    return False
            return True

        self._wait("CRDs established", established, deadline)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python3 -m tests.support.k8s", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="cmd", required=True)
    build = sub.add_parser("build", help="build the Go programs unless cached")
    build.add_argument("--force", action="store_true", help="rebuild even if cached")
    sub.add_parser("info", help="show the cache directory and build record")
    up = sub.add_parser("up", help="run a control plane until interrupted")
    up.add_argument("--crd", action="append", default=[], type=Path, help="CRD YAML to install")
    up.add_argument("nodes", nargs="*", help="node names (default: the example pool's)")
    args = parser.parse_args(argv)

    try:
        if args.cmd == "build":
            record = Toolset.for_module().build(force=args.force)
            record = {
                "control-plane": record,
                "kserve": kserve_toolset().build(force=args.force),
                "volcano": volcano_toolset().build(force=args.force),
            }
            print(json.dumps(record, indent=2))
        elif args.cmd == "info":
            tools = Toolset.for_module()
            print(
                json.dumps(
                    {
                        "directory": str(tools.directory),
                        "built": tools.is_built(),
                        "versions": tools.versions,
                        "record": tools.build_info(),
                    },
                    indent=2,
                )
            )
        else:
            signal.signal(signal.SIGTERM, _interrupt)
            cp = ControlPlane(nodes=args.nodes or None, crds=args.crd)
            with contextlib.suppress(KeyboardInterrupt), cp:
                print(json.dumps(cp.describe(), indent=2), flush=True)
                while True:
                    signal.pause()
    except (BuildError, ControlPlaneError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(_main())


def node_kubeconfig(kubeconfig: Path, dest: Path, user: str = "slurmpool") -> Path:
    """A copy of ``kubeconfig`` for the placeholders' fence, which runs as ``user``: 0600, theirs."""
    import pwd
    import shutil

    dest.parent.mkdir(exist_ok=True)
    dest.parent.chmod(0o755)
    shutil.copyfile(kubeconfig, dest)
    owner = pwd.getpwnam(user)
    os.chown(dest, owner.pw_uid, owner.pw_gid)
    dest.chmod(0o600)
    return dest
