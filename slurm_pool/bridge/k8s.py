"""The bridge's Kubernetes adapter: a small protocol and the official-client implementation.

Objects cross the protocol as the plain JSON dicts the API server sends, so a
fake for tests is a few dicts.  Node changes are read-modify-write JSON merge
patches carrying the ``resourceVersion`` just read (a concurrent change gives
409 and the change is retried on the fresh object); the patch bodies come from
the pure :func:`fence_patch`, :func:`open_patch` and :func:`release_patch`.
A node opened for a gang's group also carries the group's marks (label, taint
and job annotation of :mod:`slurm_pool.bridge.gangs`); the fence keeps them,
the release drops them.  :func:`abort_job` stops a group's vcjob as one unit
with a Volcano bus Command (``AbortJob``, as ``vcctl job suspend`` does).

Evictions go through the Eviction API and so respect PodDisruptionBudgets:
429 becomes :class:`EvictionBlocked`, 404 (already gone) is success.

A patch is made only from a Node it can read: a field of the wrong shape in
what the patch keeps (the taints, the ``resourceVersion``) raises
:class:`~slurm_pool.bridge.objects.Unreadable` and the node is left as it is.
The API server's messages are kept terminal-safe (:func:`slurm_pool.text.shown`).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Protocol

from slurm_pool.bridge.demand import total_demand
from slurm_pool.bridge.gangs import ABORT_ACTION, GANG_JOB, GANG_LABEL, GROUP_ID, JOB_ENDED, job_ok
from slurm_pool.bridge.model import LENT_LABEL, RECLAIM_SINCE, RECLAIM_TAINT
from slurm_pool.bridge.objects import Unreadable, ident, listed, mapping, objects, show, string
from slurm_pool.errors import InputError, PoolError
from slurm_pool.spec.bridge import Bridge
from slurm_pool.text import matches, shown

MERGE_PATCH = "application/merge-patch+json"
ISVC = ("serving.kserve.io", "v1beta1", "inferenceservices")
SERVING_RUNTIMES = ("serving.kserve.io", "v1alpha1", "servingruntimes")
CLUSTER_SERVING_RUNTIMES = ("serving.kserve.io", "v1alpha1", "clusterservingruntimes")
#: Volcano's kinds the bridge reads (gangs) and creates (a bus Command that stops a vcjob as one unit).
PODGROUPS = ("scheduling.volcano.sh", "v1beta1", "podgroups")
VCJOBS = ("batch.volcano.sh", "v1alpha1", "jobs")
COMMANDS = ("bus.volcano.sh", "v1alpha1", "commands")


class K8sError(PoolError, RuntimeError):
    """A Kubernetes API call failed."""

    def __init__(self, status: int, message: str):
        self.status = status
        super().__init__(f"{status}: {message}" if status else message)


class EvictionBlocked(K8sError):
    """429: evicting the pod now would violate a PodDisruptionBudget."""


class NotFound(K8sError):
    """404."""


class K8sAPI(Protocol):
    """What the bridge needs from Kubernetes."""

    def list_nodes(self) -> list[dict[str, Any]]: ...
    def read_node(self, name: str) -> dict[str, Any]: ...
    def patch_node(self, name: str, patch: dict[str, Any]) -> None: ...
    def list_pods(self, node: str | None = None) -> list[dict[str, Any]]: ...
    def list_inference_services(self) -> list[dict[str, Any]]: ...
    def list_deployments(self) -> list[dict[str, Any]]:
        """``apps/v1`` Deployments where the InferenceServices are (KServe's components)."""

    def list_hpas(self) -> list[dict[str, Any]]:
        """``autoscaling/v2`` HorizontalPodAutoscalers there."""

    def list_serving_runtimes(self) -> list[dict[str, Any]]:
        """``serving.kserve.io/v1alpha1`` ServingRuntimes there."""

    def list_cluster_serving_runtimes(self) -> list[dict[str, Any]]: ...
    def evict(self, namespace: str, name: str) -> None: ...
    def delete_pod(self, namespace: str, name: str, grace: int | None = 0) -> None:
        """Delete at once (``grace`` 0: the force of ``force_after``), or with the pod's own grace (None)."""

    def create_event(self, namespace: str, body: dict[str, Any]) -> None: ...
    def read_lease(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The Lease, or None when there is none."""

    def write_lease(self, namespace: str, body: dict[str, Any]) -> None:
        """Create (no ``resourceVersion``) or replace the Lease; 409 when it changed since it was read."""

    def list_podgroups(self, namespaces: list[str]) -> list[dict[str, Any]]:
        """Volcano PodGroups in ``namespaces`` (empty: all)."""

    def list_vcjobs(self, namespaces: list[str]) -> list[dict[str, Any]]:
        """Volcano Jobs (``batch.volcano.sh/v1alpha1``) in ``namespaces`` (empty: all)."""

    def list_priority_classes(self) -> list[dict[str, Any]]: ...
    def read_vcjob(self, namespace: str, name: str) -> dict[str, Any]:
        """The vcjob; :class:`NotFound` when there is none."""

    def create_command(self, namespace: str, body: dict[str, Any]) -> None:
        """Create a ``bus.volcano.sh/v1alpha1`` Command; 409 when one of that name exists."""


# -- pure patch bodies ---------------------------------------------------------------


def _read(node: Any, get: Callable[[Mapping[str, Any]], Any]) -> Any:
    """``get(node)``, with the Node named in an :class:`Unreadable`."""
    try:
        if not isinstance(node, Mapping):
            raise Unreadable(f"{show(node)} is not an object")
        return get(node)
    except Unreadable as exc:
        raise Unreadable(f"{ident('Node', node)}: {exc}") from None


def _taints(node: Mapping[str, Any], drop: tuple[str, ...] = (RECLAIM_TAINT,)) -> list[dict[str, Any]]:
    """The Node's taints but those keyed ``drop`` (ours), kept as they are."""
    taints = _read(node, lambda n: objects(mapping(n, "spec", "spec"), "taints", "spec.taints"))
    return [dict(t) for t in taints if t.get("key") not in drop]


def _version(node: Mapping[str, Any]) -> dict[str, Any]:
    rv = _read(
        node, lambda n: string(mapping(n, "metadata", "metadata"), "resourceVersion", "metadata.resourceVersion")
    )
    return {"resourceVersion": rv} if rv else {}


def inference_demand(api: K8sAPI, config: Bridge) -> dict[str, int]:
    """What the InferenceServices want now, per GPU-like resource, read the way the planner reads it."""
    return total_demand(
        api.list_inference_services(),
        config.gpu_resource,
        deployments=api.list_deployments(),
        hpas=api.list_hpas(),
        runtimes=api.list_serving_runtimes(),
        cluster_runtimes=api.list_cluster_serving_runtimes(),
        pods=api.list_pods(),
    )


def fence_patch(node: Mapping[str, Any], since: str | None = None) -> dict[str, Any]:
    """Cordon and taint ``slurm-pool/reclaimed=true:NoSchedule``; mark the reclaim start if given."""
    meta = _version(node)
    if since:
        meta["annotations"] = {RECLAIM_SINCE: since}
    taint = {"key": RECLAIM_TAINT, "value": "true", "effect": "NoSchedule"}
    return {"metadata": meta, "spec": {"unschedulable": True, "taints": _taints(node) + [taint]}}


#: Where the bridge's Node events go (Node events live in ``default``, as the kubelet's do).
EVENT_NAMESPACE = "default"


def node_event(node: str, reason: str, message: str, when: str) -> dict[str, Any]:
    """A core/v1 Event about Node ``node`` from the rebalancer (``when``: an RFC 3339 time)."""
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{node}.slurm-pool-", "namespace": EVENT_NAMESPACE},
        "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": node, "uid": node},
        "reason": reason,
        "message": message,
        "type": "Normal",
        "source": {"component": "slurm-pool-rebalancer"},
        "firstTimestamp": when,
        "lastTimestamp": when,
        "count": 1,
    }


def gang_problem(group: str, job: str) -> str:
    """Why ``group`` / ``job`` (``namespace/vcjob``) cannot mark a node or name a job ("": they can)."""
    if not matches(GROUP_ID, group):
        return f"gang group {show(group)} is not a group id (g and 16 hex digits)"
    if not job_ok(job):
        return f"gang job {show(job)} is not <namespace>/<name> of Kubernetes names"
    return ""


def open_patch(node: Mapping[str, Any], group: str = "", job: str = "") -> dict[str, Any]:
    """Uncordon, drop our taints and reclaim mark, label ``slurm-pool/lent=true``.

    With ``group`` (and its vcjob ``job``, ``namespace/name``) the node is marked as that gang
    group's: label and ``NoSchedule`` taint ``slurm-pool/gang=<group>``, annotation
    ``slurm-pool/gang-job=<job>``; without, any gang marks are dropped.
    """
    taints = _taints(node, (RECLAIM_TAINT, GANG_LABEL))
    if group or job:
        problem = gang_problem(group, job)
        if problem:
            raise InputError(problem)
        taints.append({"key": GANG_LABEL, "value": group, "effect": "NoSchedule"})
    labels = {LENT_LABEL: "true", GANG_LABEL: group or None}
    annotations = {RECLAIM_SINCE: None, GANG_JOB: job or None}
    meta = _version(node) | {"labels": labels, "annotations": annotations}
    return {"metadata": meta, "spec": {"unschedulable": None, "taints": taints or None}}


def release_patch(node: Mapping[str, Any]) -> dict[str, Any]:
    """Drop the lent label, the reclaim mark and the gang marks (the node stays fenced)."""
    labels = {LENT_LABEL: None, GANG_LABEL: None}
    patch: dict[str, Any] = {
        "metadata": _version(node) | {"labels": labels, "annotations": {RECLAIM_SINCE: None, GANG_JOB: None}}
    }
    kept = _taints(node, (GANG_LABEL,))
    if len(kept) != len(_taints(node, ())):
        patch["spec"] = {"taints": kept or None}
    return patch


#: Pauses before each retry of a Node patch that lost a race (409).  A kubelet's status update and
#: the node lifecycle controller's taints change a Node several times in a second while it settles,
#: so retries right after each other can all lose; these spread them over about three seconds.
UPDATE_BACKOFF = (0.0, 0.1, 0.2, 0.4, 0.8, 1.6)


def update_node(
    api: K8sAPI,
    name: str,
    make: Callable[[dict[str, Any]], dict[str, Any]],
    backoff: tuple[float, ...] = UPDATE_BACKOFF,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Read ``name``, patch it with ``make(node)``; on a 409 (changed meanwhile) read and try again."""
    for attempt, pause in enumerate(backoff):
        if pause:
            sleep(pause)
        try:
            api.patch_node(name, make(api.read_node(name)))
            return
        except K8sError as exc:
            if exc.status != 409 or attempt == len(backoff) - 1:
                raise


#: vcjob phases in which it is stopped or stopping already: no Command is sent.  The gang has ended
#: in all of :data:`~slurm_pool.bridge.gangs.JOB_ENDED`, but a job still completing or terminating is
#: sent the Command all the same, so that its pods are taken down as one unit.
JOB_STOPPED = JOB_ENDED - {"Completing", "Terminating"}


def abort_command(group: str, namespace: str, job: str, uid: str) -> dict[str, Any]:
    """The bus Command that stops vcjob ``namespace/job`` (``uid``) as one unit; the job owns it."""
    owner = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "name": job, "uid": uid, "controller": True}
    return {
        "apiVersion": "bus.volcano.sh/v1alpha1",
        "kind": "Command",
        "metadata": {"name": f"slurm-pool-abort-{group}", "namespace": namespace, "ownerReferences": [dict(owner)]},
        "action": ABORT_ACTION,
        "target": owner,  # the Go field TargetObject is `target` in JSON (a `targetObject` key is pruned)
    }


def abort_job(api: K8sAPI, group: str, job: str) -> tuple[bool, str]:
    """Stop gang ``group``'s vcjob ``job`` (``namespace/name``) as one unit.

    Returns whether a Command was created now, and what was done.  A job gone or
    already stopping needs none; a Command of that name already there (409) counts as done.
    """
    problem = gang_problem(group, job)
    if problem:
        raise InputError(problem)
    ns, _, name = job.partition("/")
    try:
        obj = api.read_vcjob(ns, name)
    except NotFound:
        return False, f"vcjob {job} is gone: nothing to stop"
    try:
        if not isinstance(obj, Mapping):
            raise Unreadable(f"{show(obj)} is not an object")
        uid = string(mapping(obj, "metadata", "metadata"), "uid", "metadata.uid")
        state = mapping(mapping(obj, "status", "status"), "state", "status.state")
        phase = string(state, "phase", "status.state.phase")
        if not uid:
            raise Unreadable("metadata.uid: none, so no Command can name it")
    except Unreadable as exc:
        raise Unreadable(f"vcjob {job}: {exc}") from None
    if phase in JOB_STOPPED:
        return False, f"vcjob {job} is {phase} already: nothing to stop"
    command = f"{ns}/slurm-pool-abort-{group}"
    try:
        api.create_command(ns, abort_command(group, ns, name, uid))
    except K8sError as exc:
        if exc.status != 409:
            raise
        return False, f"vcjob {job} stopping as one unit ({ABORT_ACTION} Command {command} was there already)"
    return True, f"vcjob {job} stopped as one unit ({ABORT_ACTION} Command {command})"


# -- the official client ---------------------------------------------------------------


def _items(answer: Any, plural: str) -> list[dict[str, Any]]:
    """The ``items`` of a custom objects list (plain JSON): :class:`Unreadable` unless it is a list."""
    if not isinstance(answer, Mapping):
        raise Unreadable(f"Kubernetes' list of {plural}: {show(answer)} is not an object")
    return listed(answer.get("items") or [], plural)


def _error(exc: Exception) -> K8sError:
    status = int(getattr(exc, "status", 0) or 0)
    message = str(getattr(exc, "reason", "") or exc)
    body = getattr(exc, "body", None)
    if body:
        try:
            message = str(json.loads(body).get("message") or message)
        except (ValueError, AttributeError):
            message = str(body)[:300]
    cls = EvictionBlocked if status == 429 else NotFound if status == 404 else K8sError
    return cls(status, shown(message)[:1000])


class KubernetesAPI:
    """:class:`K8sAPI` with the official ``kubernetes`` client."""

    def __init__(self, api_client: Any, config: Bridge):
        from kubernetes import client

        self.api_client = api_client
        self.config = config
        self.core = client.CoreV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self.coordination = client.CoordinationV1Api(api_client)
        self.apps = client.AppsV1Api(api_client)
        self.autoscaling = client.AutoscalingV2Api(api_client)

    @classmethod
    def connect(cls, config: Bridge, kubeconfig: str | Path | None = None) -> "KubernetesAPI":
        """From ``kubeconfig`` (else ``$KUBECONFIG``/``~/.kube/config``, else in-cluster)."""
        from kubernetes import config as kconfig
        from kubernetes.config.config_exception import ConfigException

        if kubeconfig:
            return cls(kconfig.new_client_from_config(config_file=str(kubeconfig)), config)
        try:
            return cls(kconfig.new_client_from_config(), config)
        except (ConfigException, OSError):
            from kubernetes import client

            kconfig.load_incluster_config()
            return cls(client.ApiClient(), config)

    def close(self) -> None:
        self.api_client.close()

    def _call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        from kubernetes.client.rest import ApiException
        from urllib3.exceptions import HTTPError

        try:
            return fn(*args, **kwargs)
        except ApiException as exc:
            raise _error(exc) from None
        except (HTTPError, OSError) as exc:  # no answer at all: the API server is down or unreachable
            raise K8sError(0, shown(f"cannot reach the API server: {exc}")) from None

    def _plain(self, obj: Any) -> Any:
        return self.api_client.sanitize_for_serialization(obj)

    def list_nodes(self) -> list[dict[str, Any]]:
        res = self._call(self.core.list_node, label_selector=self.config.node_selector or None)
        return self._plain(res.items)

    def read_node(self, name: str) -> dict[str, Any]:
        return self._plain(self._call(self.core.read_node, name))

    def patch_node(self, name: str, patch: dict[str, Any]) -> None:
        self._call(self.core.patch_node, name, patch, _content_type=MERGE_PATCH)

    def list_pods(self, node: str | None = None) -> list[dict[str, Any]]:
        selector = "status.phase!=Succeeded,status.phase!=Failed"
        if node:
            selector += f",spec.nodeName={node}"
        return self._plain(self._call(self.core.list_pod_for_all_namespaces, field_selector=selector).items)

    def list_inference_services(self) -> list[dict[str, Any]]:
        return self._list_custom(ISVC, self.config.kserve_selector or None)

    def list_serving_runtimes(self) -> list[dict[str, Any]]:
        return self._list_custom(SERVING_RUNTIMES, None)

    def list_cluster_serving_runtimes(self) -> list[dict[str, Any]]:
        group, version, plural = CLUSTER_SERVING_RUNTIMES
        return _items(self._call(self.custom.list_cluster_custom_object, group, version, plural), plural)

    def _namespaced(self, namespaced: Callable[..., Any], everywhere: Callable[..., Any]) -> list[dict[str, Any]]:
        ns = self.config.kserve_namespace
        res = self._call(namespaced, ns) if ns else self._call(everywhere)
        return self._plain(res.items)

    def list_deployments(self) -> list[dict[str, Any]]:
        return self._namespaced(self.apps.list_namespaced_deployment, self.apps.list_deployment_for_all_namespaces)

    def list_hpas(self) -> list[dict[str, Any]]:
        return self._namespaced(
            self.autoscaling.list_namespaced_horizontal_pod_autoscaler,
            self.autoscaling.list_horizontal_pod_autoscaler_for_all_namespaces,
        )

    def _list_custom(self, kind: tuple[str, str, str], selector: str | None) -> list[dict[str, Any]]:
        group, version, plural = kind
        if self.config.kserve_namespace:
            res = self._call(
                self.custom.list_namespaced_custom_object,
                group,
                version,
                self.config.kserve_namespace,
                plural,
                label_selector=selector,
            )
        else:
            res = self._call(self.custom.list_cluster_custom_object, group, version, plural, label_selector=selector)
        return _items(res, plural)

    def _list_volcano(self, kind: tuple[str, str, str], namespaces: list[str]) -> list[dict[str, Any]]:
        group, version, plural = kind
        if not namespaces:
            return _items(self._call(self.custom.list_cluster_custom_object, group, version, plural), plural)
        out: list[dict[str, Any]] = []
        for ns in namespaces:
            out += _items(self._call(self.custom.list_namespaced_custom_object, group, version, ns, plural), plural)
        return out

    def list_podgroups(self, namespaces: list[str]) -> list[dict[str, Any]]:
        return self._list_volcano(PODGROUPS, namespaces)

    def list_vcjobs(self, namespaces: list[str]) -> list[dict[str, Any]]:
        return self._list_volcano(VCJOBS, namespaces)

    def list_priority_classes(self) -> list[dict[str, Any]]:
        from kubernetes import client

        res = self._call(client.SchedulingV1Api(self.api_client).list_priority_class)
        return self._plain(res.items)

    def read_vcjob(self, namespace: str, name: str) -> dict[str, Any]:
        group, version, plural = VCJOBS
        return self._call(self.custom.get_namespaced_custom_object, group, version, namespace, plural, name)

    def create_command(self, namespace: str, body: dict[str, Any]) -> None:
        group, version, plural = COMMANDS
        self._call(self.custom.create_namespaced_custom_object, group, version, namespace, plural, body)

    def evict(self, namespace: str, name: str) -> None:
        body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": namespace}}
        try:
            self._call(self.core.create_namespaced_pod_eviction, name, namespace, body)
        except NotFound:
            pass

    def delete_pod(self, namespace: str, name: str, grace: int | None = 0) -> None:
        try:
            if grace is None:
                self._call(self.core.delete_namespaced_pod, name, namespace)
            else:
                self._call(self.core.delete_namespaced_pod, name, namespace, grace_period_seconds=grace)
        except NotFound:
            pass

    def create_event(self, namespace: str, body: dict[str, Any]) -> None:
        self._call(self.core.create_namespaced_event, namespace, body)

    def read_lease(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return self._plain(self._call(self.coordination.read_namespaced_lease, name, namespace))
        except NotFound:
            return None

    def write_lease(self, namespace: str, body: dict[str, Any]) -> None:
        name = body["metadata"]["name"]
        if body["metadata"].get("resourceVersion"):
            self._call(self.coordination.replace_namespaced_lease, name, namespace, body)
        else:
            self._call(self.coordination.create_namespaced_lease, namespace, body)
