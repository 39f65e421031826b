"""The bridge's Kubernetes test bed behaves like a real cluster.

Scheduling, cordons and taints, PodDisruptionBudget-guarded evictions and
InferenceService merge patches (reconciled by KServe's own controller) all act
through the real API server, scheduler, controller-manager and kwok nodes; the last test checks that a control plane
leaves nothing running once stopped.

Every wait is on a state, never a sleep, with :func:`tests.support.k8s_wait.wait_state`:
long enough for a loaded 2-core machine, and a timeout reports what the cluster
looked like (the pods' conditions, the events, the nodes' cordons and taints).
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import pytest

from tests.support.k8s import GPU_RESOURCE, KWOK_ANNOTATION, ControlPlane
from tests.support.k8s_wait import wait_state
from tests.support.kserve import GROUP, PLURAL, VERSION, KServe, is_ready, isvc_manifest

pytestmark = pytest.mark.k8s

MERGE = "application/merge-patch+json"
IMAGE = "slurm-pool-test/app:0"


def pod(name: str, gpus: int = 0, labels: dict | None = None, spec: dict | None = None) -> dict:
    """A pod manifest; ``gpus`` > 0 asks for that many ``nvidia.com/gpu``; ``spec`` adds pod fields."""
    container: dict = {"name": "main", "image": IMAGE}
    if gpus:
        container["resources"] = {"limits": {GPU_RESOURCE: str(gpus)}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"containers": [container], **(spec or {})},
    }


def placements(core, ns: str) -> dict[str, str | None]:
    """Pod name -> node it is bound to (None while pending)."""
    return {p.metadata.name: p.spec.node_name for p in core.list_namespaced_pod(ns).items}


def running_on(core, ns: str, name: str) -> str | None:
    p = core.read_namespaced_pod(name, ns)
    return p.spec.node_name if p.status.phase == "Running" else None


def unschedulable(core, ns: str, name: str) -> str | None:
    """The scheduler's message if it found no node for the pod."""
    p = core.read_namespaced_pod(name, ns)
    for cond in p.status.conditions or []:
        if cond.type == "PodScheduled" and cond.status == "False" and cond.reason == "Unschedulable":
            return cond.message or "unschedulable"
    return None


def gone(core, ns: str, name: str) -> bool:
    from kubernetes.client.rest import ApiException

    try:
        core.read_namespaced_pod(name, ns)
    except ApiException as exc:
        return exc.status == 404
    return False


def rejected_on(core, k8s_api, ns: str, name: str, node: str) -> str:
    """The scheduler's message for a pod pinned to ``node`` that it rejects.

    A change to a node reaches the scheduler through its watch, and a pod created right after the
    patch may meet the node as it was; a pod bound there is that, so it is deleted and tried again.
    Once one is rejected, the scheduler has seen the change and every later pod meets it.
    """
    for attempt in range(5):
        probe = f"{name}-{attempt}" if attempt else name
        core.create_namespaced_pod(ns, pod(probe, spec={"nodeSelector": {"kubernetes.io/hostname": node}}))

        def outcome(probe: str = probe) -> str | None:
            if core.read_namespaced_pod(probe, ns).spec.node_name:
                return "bound"
            return unschedulable(core, ns, probe)

        seen = wait_state(outcome, f"pod {probe} pinned to {node} rejected (or bound)", k8s_api, ns)
        if seen != "bound":
            return seen
        core.delete_namespaced_pod(probe, ns, grace_period_seconds=0)
        wait_state(lambda probe=probe: gone(core, ns, probe), f"pod {probe} gone", k8s_api, ns)
    raise AssertionError(f"the scheduler kept binding pods to {node}")


def test_gpu_pods_schedule_onto_kwok_nodes(k8s_control_plane: ControlPlane, k8s_api, k8s_namespace: str):
    from kubernetes import client

    core = client.CoreV1Api(k8s_api)
    ns = k8s_namespace
    nodes = {n.metadata.name: n for n in core.list_node().items}
    assert set(nodes) == {s.name for s in k8s_control_plane.nodes}
    for spec in k8s_control_plane.nodes:
        node = nodes[spec.name]
        assert node.metadata.annotations[KWOK_ANNOTATION[0]] == KWOK_ANNOTATION[1]
        assert node.status.allocatable[GPU_RESOURCE] == str(spec.gpus)

    total = sum(s.gpus for s in k8s_control_plane.nodes)
    for i in range(total):
        core.create_namespaced_pod(ns, pod(f"gpu-{i}", gpus=1))
    wait_state(
        lambda: all(running_on(core, ns, f"gpu-{i}") for i in range(total)), "every GPU pod Running", k8s_api, ns
    )
    per_node = Counter(placements(core, ns).values())
    assert per_node == Counter({s.name: s.gpus for s in k8s_control_plane.nodes})

    # Every GPU is taken: one more GPU pod must not fit anywhere.
    core.create_namespaced_pod(ns, pod("gpu-extra", gpus=1))
    message = wait_state(lambda: unschedulable(core, ns, "gpu-extra"), "gpu-extra unschedulable", k8s_api, ns)
    assert GPU_RESOURCE in message
    assert core.read_namespaced_pod("gpu-extra", ns).spec.node_name is None


def test_cordoned_and_tainted_nodes_get_no_new_pods(k8s_control_plane: ControlPlane, k8s_api, k8s_namespace: str):
    from kubernetes import client

    core = client.CoreV1Api(k8s_api)
    ns = k8s_namespace
    specs = k8s_control_plane.nodes
    assert len(specs) >= 3, "needs at least three nodes"
    cordoned, tainted, open_nodes = specs[0].name, specs[1].name, [s.name for s in specs[2:]]
    open_gpus = sum(s.gpus for s in specs[2:])
    taint = {"key": "slurm-pool.testing/reclaimed", "value": "true", "effect": "NoSchedule"}
    core.patch_node(cordoned, {"spec": {"unschedulable": True}}, _content_type=MERGE)
    core.patch_node(tainted, {"spec": {"taints": [taint]}}, _content_type=MERGE)
    try:
        # First the scheduler must have seen both changes (a pod created at once may meet the node as
        # it was): a pod pinned to each node is rejected, for the cordon and for the taint.
        assert "unschedulable" in rejected_on(core, k8s_api, ns, "on-cordoned", cordoned)
        assert "taint" in rejected_on(core, k8s_api, ns, "on-tainted", tainted)

        for i in range(open_gpus + 1):
            core.create_namespaced_pod(ns, pod(f"gpu-{i}", gpus=1))

        def settled() -> bool:
            bound = [f"gpu-{i}" for i in range(open_gpus + 1) if placements(core, ns).get(f"gpu-{i}")]
            pending = [f"gpu-{i}" for i in range(open_gpus + 1) if unschedulable(core, ns, f"gpu-{i}")]
            return len(bound) == open_gpus and len(pending) == 1

        wait_state(settled, "open nodes full and one GPU pod pending", k8s_api, ns)
        assert set(n for n in placements(core, ns).values() if n) <= set(open_nodes)

        tolerating = pod(
            "tolerates-taint",
            spec={
                "nodeSelector": {"kubernetes.io/hostname": tainted},
                "tolerations": [{"key": taint["key"], "operator": "Exists", "effect": "NoSchedule"}],
            },
        )
        core.create_namespaced_pod(ns, tolerating)
        running = wait_state(lambda: running_on(core, ns, "tolerates-taint"), "tolerating pod running", k8s_api, ns)
        assert running == tainted
    finally:
        core.patch_node(cordoned, {"spec": {"unschedulable": None}}, _content_type=MERGE)
        core.patch_node(tainted, {"spec": {"taints": None}}, _content_type=MERGE)


def test_a_running_pod_marked_not_ready_becomes_ready_again(k8s_api, k8s_namespace: str):
    """As a kubelet does once its node is back: the node lifecycle controller's NotReady mark (here
    written the way it writes it) does not stick to a Running pod (kwok stage slurm-pool-pod-ready-again)."""
    from kubernetes import client

    core = client.CoreV1Api(k8s_api)
    core.create_namespaced_pod(k8s_namespace, pod("flap"))

    def ready() -> str | None:
        p = core.read_namespaced_pod("flap", k8s_namespace)
        conds = {c.type: c.status for c in p.status.conditions or []}
        return conds.get("Ready") if p.status.phase == "Running" and p.status.pod_ip else None

    wait_state(lambda: ready() == "True", "pod flap Running and Ready", k8s_api, k8s_namespace)
    mark = {"status": {"conditions": [{"type": "Ready", "status": "False", "reason": "NodeNotReady"}]}}
    core.patch_namespaced_pod_status("flap", k8s_namespace, mark)
    wait_state(lambda: ready() == "True", "pod flap Ready again", k8s_api, k8s_namespace)


def test_eviction_respects_pod_disruption_budget(k8s_api, k8s_namespace: str):
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    core, apps, policy = client.CoreV1Api(k8s_api), client.AppsV1Api(k8s_api), client.PolicyV1Api(k8s_api)
    ns = k8s_namespace
    labels = {"app": "guarded"}
    template = pod("unused", gpus=1, labels=labels)
    apps.create_namespaced_deployment(
        ns,
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "guarded"},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": labels},
                "template": {"metadata": {"labels": labels}, "spec": template["spec"]},
            },
        },
    )
    policy.create_namespaced_pod_disruption_budget(
        ns,
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "guarded"},
            "spec": {"minAvailable": 2, "selector": {"matchLabels": labels}},
        },
    )

    def budget(allowed: int) -> bool:
        pdb = policy.read_namespaced_pod_disruption_budget("guarded", ns)
        st = pdb.status
        return bool(
            st
            and st.observed_generation == pdb.metadata.generation
            and st.current_healthy == 2
            and st.disruptions_allowed == allowed
        )

    wait_state(lambda: budget(0), "PDB with 2 healthy pods and no disruption allowed", k8s_api, ns)
    victim = core.list_namespaced_pod(ns, label_selector="app=guarded").items[0].metadata.name
    eviction = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": victim, "namespace": ns}}

    with pytest.raises(ApiException) as blocked:
        core.create_namespaced_pod_eviction(victim, ns, eviction)
    assert blocked.value.status == 429
    assert core.read_namespaced_pod(victim, ns).metadata.deletion_timestamp is None

    policy.patch_namespaced_pod_disruption_budget("guarded", ns, {"spec": {"minAvailable": 1}}, _content_type=MERGE)
    wait_state(lambda: budget(1), "PDB allowing one disruption", k8s_api, ns)
    core.create_namespaced_pod_eviction(victim, ns, eviction)
    wait_state(lambda: gone(core, ns, victim), f"evicted pod {victim} deleted", k8s_api, ns)

    def replaced() -> bool:
        pods = core.list_namespaced_pod(ns, label_selector="app=guarded").items
        names = {p.metadata.name for p in pods if p.status.phase == "Running"}
        return len(names) == 2 and victim not in names

    # The ReplicaSet replaces it on a node with a free GPU.
    wait_state(replaced, "replacement pod running", k8s_api, ns)


def _kserve_state(k8s_api, ns: str, dep: str, kserve: KServe) -> str:
    """What the cluster looked like, for a failed wait: the predictor, its pods, the nodes, events, KServe's log."""
    from kubernetes import client

    core, apps = client.CoreV1Api(k8s_api), client.AppsV1Api(k8s_api)
    lines = []
    try:
        d = apps.read_namespaced_deployment(dep, ns)
        lines.append(f"deployment: spec {d.spec.replicas}, ready {d.status.ready_replicas}, {d.status.conditions}")
    except Exception as exc:  # noqa: BLE001 - a diagnostic: say what went wrong and go on
        lines.append(f"deployment: {exc}")
    for p in core.list_namespaced_pod(ns).items:
        lines.append(f"pod {p.metadata.name}: {p.status.phase} on {p.spec.node_name} {p.status.conditions}")
    for n in core.list_node().items:
        ready = [c.status for c in n.status.conditions or [] if c.type == "Ready"]
        lines.append(
            f"node {n.metadata.name}: Ready={ready} unschedulable={n.spec.unschedulable} taints={n.spec.taints}"
        )
    for e in core.list_namespaced_event(ns).items[-15:]:
        lines.append(f"event {e.involved_object.kind}/{e.involved_object.name}: {e.reason} {e.message}")
    log = kserve.log_path
    lines.append("kserve-manager log:\n" + (log.read_text(errors="replace")[-3000:] if log.is_file() else "(none)"))
    return "\n".join(lines)


def test_kserve_scales_the_predictor_with_min_replicas(k8s_api, k8s_namespace: str, kserve: KServe):
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    core, apps, custom = client.CoreV1Api(k8s_api), client.AppsV1Api(k8s_api), client.CustomObjectsApi(k8s_api)
    scaling = client.AutoscalingV2Api(k8s_api)
    ns = k8s_namespace
    custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, isvc_manifest("llm", min_replicas=2))
    dep = "llm-predictor"  # KServe's name for the predictor's Deployment, Service and HPA

    def serving(n: int) -> bool:
        d = apps.read_namespaced_deployment(dep, ns)
        pods = [
            p
            for p in core.list_namespaced_pod(ns).items
            if p.status.phase == "Running" and p.metadata.deletion_timestamp is None
        ]
        return d.spec.replicas == n and (d.status.ready_replicas or 0) == n and len(pods) == n

    def ready() -> bool:
        return is_ready(custom.get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "llm"))

    def wait(check, timeout: float, what: str) -> None:
        wait_state(check, what, timeout=timeout, describe=lambda: _kserve_state(k8s_api, ns, dep, kserve))

    wait(lambda: serving(2) and ready(), 300, f"{dep} at 2 ready replicas, llm Ready")
    d = apps.read_namespaced_deployment(dep, ns)
    assert d.metadata.owner_references[0].kind == "InferenceService"
    limits = {c.name: (c.resources.limits or {}) for c in d.spec.template.spec.containers}
    assert limits["kserve-container"][GPU_RESOURCE] == "1"
    core.read_namespaced_service(dep, ns)
    hpa = scaling.read_namespaced_horizontal_pod_autoscaler(dep, ns)
    assert (hpa.spec.min_replicas, hpa.spec.max_replicas) == (2, 2)

    custom.patch_namespaced_custom_object(
        GROUP, VERSION, ns, PLURAL, "llm", {"spec": {"predictor": {"minReplicas": 3}}}, _content_type=MERGE
    )
    wait(lambda: serving(3), 240, f"{dep} grown to 3 after the merge patch")
    hpa = scaling.read_namespaced_horizontal_pod_autoscaler(dep, ns)
    assert hpa.status.desired_replicas == 3

    custom.patch_namespaced_custom_object(
        GROUP, VERSION, ns, PLURAL, "llm", {"spec": {"predictor": {"minReplicas": 1}}}, _content_type=MERGE
    )
    wait(lambda: serving(1), 240, f"{dep} shrunk to 1 after the merge patch")

    # Deleting the service lets the garbage collector remove its predictor.
    custom.delete_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "llm")

    def predictor_gone() -> bool:
        try:
            apps.read_namespaced_deployment(dep, ns)
        except ApiException as exc:
            return exc.status == 404
        return False

    wait(predictor_gone, 240, f"{dep} garbage-collected")


def _listening(pid: int) -> list[str]:
    """Local addresses of the TCP sockets ``pid`` listens on (IPv4 and IPv6)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found = []
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            cols = line.split()
            if cols[3] == "0A" and cols[9] in inodes:  # 0A: LISTEN
                found.append(cols[1])
    return found


def _loopback(hex_addr: str) -> bool:
    addr = hex_addr.split(":")[0]
    if len(addr) == 8:  # IPv4, little-endian: 0100007F is 127.0.0.1
        return addr.endswith("7F")
    return addr in ("00000000000000000000000001000000",)  # ::1


def test_start_and_stop_leave_no_processes(k8s_control_plane: ControlPlane):
    # Started, and said how long it took (how long is for a benchmark, not for a test on a loaded machine).
    assert k8s_control_plane.start_seconds is not None and k8s_control_plane.start_seconds > 0

    cp = ControlPlane(nodes=["leak-check"])
    cp.start()
    try:
        pids = dict(cp.pids)
        state_dir = cp.state_dir
        assert set(pids) == {"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"}
        assert cp.start_seconds is not None and cp.start_seconds > 0
        for name, pid in pids.items():
            assert os.getpgid(pid) == pid, f"{name} is not in its own process group"
            addresses = _listening(pid)
            assert all(_loopback(a) for a in addresses), f"{name} listens beyond loopback: {addresses}"
        assert _listening(pids["kube-apiserver"]) and _listening(pids["etcd"])
    finally:
        cp.stop()

    assert not cp.pids
    for name, pid in pids.items():
        assert not Path(f"/proc/{pid}").exists(), f"{name} (pid {pid}) is still there"
    leftovers = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cmdline = (proc / "cmdline").read_bytes().decode(errors="replace")
            except OSError:
                continue
            if str(state_dir) in cmdline:
                leftovers.append(f"{proc.name}: {cmdline}")
    assert not leftovers
    assert state_dir is not None and not state_dir.exists()
