"""Volcano's own scheduler and controller manager beside the test control plane.

:class:`Volcano` runs ``vc-scheduler`` (``--scheduler-name=volcano``, actions
``enqueue, allocate, backfill``) and ``vc-controller-manager`` (the job,
podgroup, queue and gc controllers) outside the cluster, built by
:func:`tests.support.k8s_build.require_volcano`, with leader election off and
their health ports on 127.0.0.1.  Their CRDs are read from the pinned Volcano
module in the Go module cache (:func:`crd_files`, given to the
:class:`~tests.support.k8s.ControlPlane`), never copied into the repository.

There is no ``vc-webhook-manager``, so nothing fills a vcjob's defaults:
:func:`vcjob_manifest` writes every field the webhook would.  The controller
creates a vcjob's PodGroup, and its pods once the scheduler's enqueue step
lets the PodGroup leave ``Pending``.  The bridge's own
:func:`slurm_pool.bridge.k8s.abort_command` stops a vcjob as a unit, as
``vcctl job suspend`` does.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

from tests.support.k8s import free_port, spawn, stop_groups
from tests.support.k8s_build import Toolset, require_volcano

SCHEDULER_NAME = "volcano"
QUEUE = "default"
JOB_GROUP, JOB_VERSION, JOB_PLURAL = "batch.volcano.sh", "v1alpha1", "jobs"
PG_GROUP, PG_VERSION, PG_PLURAL = "scheduling.volcano.sh", "v1beta1", "podgroups"
QUEUE_PLURAL = "queues"
BUS_GROUP, BUS_VERSION, COMMAND_PLURAL = "bus.volcano.sh", "v1alpha1", "commands"
#: The pod annotation (and label) naming a pod's PodGroup.
GROUP_NAME_KEY = "scheduling.k8s.io/group-name"
#: CRD files of ``config/crd/volcano/bases`` (the scheduler also waits for its hypernode cache).
CRD_DIR = Path("config", "crd", "volcano", "bases")
CONTROLLERS = "job-controller,pg-controller,queue-controller,gc-controller"
#: vc-scheduler's own default configuration (pkg/scheduler/util.go), written out.
SCHEDULER_CONF = """\
actions: "enqueue, allocate, backfill"
tiers:
- plugins:
  - name: priority
  - name: gang
  - name: conformance
- plugins:
  - name: overcommit
  - name: drf
  - name: predicates
  - name: proportion
  - name: nodeorder
"""
PROGRAMS = ("vc-scheduler", "vc-controller-manager")


class VolcanoError(RuntimeError):
    """Volcano's scheduler or controller manager could not be started."""


def crd_files(tools: Toolset | None = None) -> list[Path]:
    """Volcano's CRDs: jobs, podgroups, queues, commands, hypernodes and the rest of ``bases``."""
    src = (tools or require_volcano()).module_source / CRD_DIR
    files = sorted(src.glob("*.volcano.sh_*.yaml"))
    names = {f.name for f in files}
    needed = {
        "batch.volcano.sh_jobs.yaml",
        "scheduling.volcano.sh_podgroups.yaml",
        "scheduling.volcano.sh_queues.yaml",
        "bus.volcano.sh_commands.yaml",
        "topology.volcano.sh_hypernodes.yaml",
    }
    if not needed <= names:
        raise VolcanoError(f"Volcano CRDs missing under {src}: {sorted(needed - names)}")
    return files


class Volcano:
    """vc-scheduler and vc-controller-manager for one control plane (its CRDs must be installed already)."""

    def __init__(self, kubeconfig: Path, tools: Toolset | None = None) -> None:
        self.kubeconfig = Path(kubeconfig)
        self.tools = tools or require_volcano()
        self.procs: dict[str, subprocess.Popen] = {}
        self.state_dir: Path | None = None
        self.ports: dict[str, int] = {}
        #: Seconds :meth:`start` took, until the ``default`` queue was Open.
        self.start_seconds: float | None = None

    @property
    def log_path(self) -> Path:
        """The scheduler's log (the controller's is :meth:`log_of` ``vc-controller-manager``)."""
        return self.log_of("vc-scheduler")

    def log_of(self, name: str) -> Path:
        assert self.state_dir is not None
        return self.state_dir / f"{name}.log"

    def args(self, name: str) -> list[str]:
        """The command line of ``name`` (one of :data:`PROGRAMS`)."""
        assert self.state_dir is not None
        common = [
            f"--kubeconfig={self.kubeconfig}",
            "--leader-elect=false",
            "--enable-healthz=true",
            f"--healthz-address=127.0.0.1:{self.ports[name]}",
            f"--listen-address=127.0.0.1:{self.ports[name + '-metrics']}",
            f"--scheduler-name={SCHEDULER_NAME}",
        ]
        if name == "vc-scheduler":
            return [
                str(self.tools.binary(name)),
                *common,
                f"--scheduler-conf={self.state_dir / 'scheduler.conf'}",
                f"--default-queue={QUEUE}",
                f"--cache-dump-dir={self.state_dir}",
            ]
        return [str(self.tools.binary(name)), *common, f"--controllers={CONTROLLERS}"]

    def start(self, timeout: float = 120.0) -> "Volcano":
        began = time.monotonic()
        self.state_dir = Path(tempfile.mkdtemp(prefix="slurm-pool-volcano-"))
        try:
            (self.state_dir / "scheduler.conf").write_text(SCHEDULER_CONF)
            self.ports = {f"{n}{s}": free_port() for n in PROGRAMS for s in ("", "-metrics")}
            env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(self.state_dir)}
            for name in PROGRAMS:
                self.procs[name] = spawn(self.args(name), self.log_of(name), self.state_dir, env)
            self._wait_ready(timeout)
        except BaseException:
            self.stop()
            raise
        self.start_seconds = round(time.monotonic() - began, 1)
        return self

    def _healthy(self, name: str) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.ports[name]}/healthz", timeout=2) as resp:
                return resp.status == 200
        except OSError:
            return False

    def _ready(self) -> bool:
        """Both healthy and the ``default`` Queue (made by the scheduler) Open (set by the queue controller)."""
        from kubernetes import client, config

        for name, proc in self.procs.items():
            if proc.poll() is not None:
                raise VolcanoError(f"{name} exited with {proc.returncode}:\n{self.tail(name=name)}")
        if not all(self._healthy(n) for n in PROGRAMS):
            return False
        with config.new_client_from_config(config_file=str(self.kubeconfig)) as api:
            try:
                queue = client.CustomObjectsApi(api).get_cluster_custom_object(
                    PG_GROUP, PG_VERSION, QUEUE_PLURAL, QUEUE
                )
            except client.ApiException:
                return False
        return (queue.get("status") or {}).get("state") == "Open"

    def _wait_ready(self, timeout: float) -> None:
        from slurm_pool.localcluster.procs import wait_for

        try:
            wait_for(self._ready, timeout, f"Volcano's {QUEUE} queue to be Open", interval=0.5)
        except TimeoutError as exc:
            raise VolcanoError(f"{exc}\n{self.tail()}") from None

    def tail(self, lines: int = 30, name: str | None = None) -> str:
        """The last lines of both logs (or of ``name``'s)."""
        out = []
        for prog in (name,) if name else PROGRAMS:
            try:
                text = self.log_of(prog).read_text(errors="replace").splitlines()[-lines:]
            except (OSError, AssertionError):
                continue
            out.append(f"--- {prog}\n" + "\n".join(text))
        return "\n".join(out)

    def stop(self, grace: float = 10.0) -> None:
        """Stop both by pid (each its own process group), then remove the state directory."""
        procs, self.procs = self.procs, {}
        stop_groups(procs.values(), grace)
        if self.state_dir is not None:
            shutil.rmtree(self.state_dir, ignore_errors=True)
            self.state_dir = None

    def __enter__(self) -> "Volcano":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def vcjob_manifest(
    name: str,
    namespace: str,
    replicas: int,
    min_available: int,
    gpus_per_pod: int,
    resource: str = "nvidia.com/gpu",
    priority_class: str | None = None,
    tolerations: tuple[dict, ...] | list[dict] = (),
    node_selector: dict[str, str] | None = None,
    image: str = "slurm-pool-test/gang:0",
) -> dict:
    """A vcjob of one task ``worker`` with every default vc-webhook-manager would fill (no policies, no plugins)."""
    if not 1 <= min_available <= replicas:
        raise ValueError(f"min_available {min_available} must be within 1..replicas ({replicas})")
    amounts = {resource: str(gpus_per_pod), "cpu": "1", "memory": "1Gi"}
    pod_spec: dict = {
        "schedulerName": SCHEDULER_NAME,
        "restartPolicy": "Never",
        "containers": [{"name": "main", "image": image, "resources": {"requests": amounts, "limits": dict(amounts)}}],
    }
    if priority_class:
        pod_spec["priorityClassName"] = priority_class
    if tolerations:
        pod_spec["tolerations"] = [dict(t) for t in tolerations]
    if node_selector:
        pod_spec["nodeSelector"] = dict(node_selector)
    spec: dict = {
        "schedulerName": SCHEDULER_NAME,
        "queue": QUEUE,
        "minAvailable": min_available,
        "maxRetry": 3,
        "tasks": [
            {
                "name": "worker",
                "replicas": replicas,
                "minAvailable": min_available,
                "maxRetry": 3,
                "template": {"metadata": {"labels": {"app": name}}, "spec": pod_spec},
            }
        ],
    }
    if priority_class:
        spec["priorityClassName"] = priority_class
    return {
        "apiVersion": f"{JOB_GROUP}/{JOB_VERSION}",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }
