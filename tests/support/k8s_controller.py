"""A tiny stand-in for the KServe controller, for tests only.

It keeps one Deployment of predictor pods per ``InferenceService``
(``serving.kserve.io/v1beta1``, the minimal CRD in ``tests/k8s``) so that the
scheduler, the disruption controller and evictions act on real pods.

Replica rule (no real autoscaler here): demand is taken as saturating, so the
predictor runs ``maxReplicas`` pods, never fewer than ``minReplicas``.  A test
can model lower demand with the annotation ``testing.slurm-pool/demand: "N"``;
the replicas are then ``N`` clamped to ``[minReplicas, maxReplicas]``.
``minReplicas`` defaults to 1 and ``maxReplicas`` to ``minReplicas``.

The Deployment is owned by its InferenceService, so deleting the service lets
the garbage collector remove the Deployment and pods.  The controller also
writes ``status`` (``desiredReplicas``, ``readyReplicas`` and a ``Ready``
condition).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

GROUP = "serving.kserve.io"
VERSION = "v1beta1"
PLURAL = "inferenceservices"
KIND = "InferenceService"
ISVC_LABEL = "serving.kserve.io/inferenceservice"
DEMAND_ANNOTATION = "testing.slurm-pool/demand"
PREDICTOR_IMAGE = "slurm-pool-test/predictor:0"
_COPIED_POD_FIELDS = ("nodeSelector", "tolerations", "affinity", "priorityClassName")


def desired_replicas(isvc: dict) -> int:
    """Replicas for an InferenceService under the rule in the module docstring."""
    predictor = isvc.get("spec", {}).get("predictor", {}) or {}
    low = int(predictor.get("minReplicas", 1))
    high = predictor.get("maxReplicas")
    high = low if high is None else max(int(high), low)
    demand = (isvc.get("metadata", {}).get("annotations") or {}).get(DEMAND_ANNOTATION)
    want = high if demand is None else int(demand)
    return min(max(want, low), high)


def deployment_name(isvc_name: str) -> str:
    return f"{isvc_name}-predictor"


def predictor_deployment(isvc: dict) -> dict:
    """The Deployment that serves ``isvc``'s predictor."""
    meta = isvc["metadata"]
    predictor = isvc.get("spec", {}).get("predictor", {}) or {}
    model = predictor.get("model", {}) or {}
    labels = {ISVC_LABEL: meta["name"], "component": "predictor"}
    container: dict[str, Any] = {"name": "kserve-container", "image": model.get("image", PREDICTOR_IMAGE)}
    if model.get("resources"):
        container["resources"] = {
            kind: {res: str(qty) for res, qty in (amounts or {}).items()}
            for kind, amounts in model["resources"].items()
        }
    if model.get("storageUri"):
        container["env"] = [{"name": "STORAGE_URI", "value": model["storageUri"]}]
    pod_spec: dict[str, Any] = {"containers": [container], "terminationGracePeriodSeconds": 5}
    for key in _COPIED_POD_FIELDS:
        if predictor.get(key):
            pod_spec[key] = predictor[key]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": deployment_name(meta["name"]),
            "namespace": meta["namespace"],
            "labels": dict(labels),
            "ownerReferences": [
                {
                    "apiVersion": f"{GROUP}/{VERSION}",
                    "kind": KIND,
                    "name": meta["name"],
                    "uid": meta["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "replicas": desired_replicas(isvc),
            "selector": {"matchLabels": dict(labels)},
            "template": {"metadata": {"labels": dict(labels)}, "spec": pod_spec},
        },
    }


class InferenceServiceController:
    """Reconciles InferenceServices to predictor Deployments in a background thread."""

    def __init__(self, kubeconfig: Path, resync_seconds: float = 2.0) -> None:
        self.kubeconfig = Path(kubeconfig)
        self.resync_seconds = resync_seconds
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> "InferenceServiceController":
        self._thread = threading.Thread(target=self._run, name="isvc-test-controller", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 15.0) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(timeout)
            if self._thread.is_alive():
                raise RuntimeError("the InferenceService test controller did not stop")
            self._thread = None

    def __enter__(self) -> "InferenceServiceController":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- loop ------------------------------------------------------------------

    def _run(self) -> None:
        from kubernetes import client, config, watch

        with config.new_client_from_config(config_file=str(self.kubeconfig)) as api:
            custom = client.CustomObjectsApi(api)
            apps = client.AppsV1Api(api)
            while not self._stop.is_set():
                try:
                    listing = custom.list_cluster_custom_object(GROUP, VERSION, PLURAL)
                    for item in listing.get("items", []):
                        self._reconcile(custom, apps, item)
                    stream = watch.Watch().stream(
                        custom.list_cluster_custom_object,
                        GROUP,
                        VERSION,
                        PLURAL,
                        resource_version=listing["metadata"]["resourceVersion"],
                        timeout_seconds=max(1, int(self.resync_seconds)),
                    )
                    for event in stream:
                        if self._stop.is_set():
                            break
                        if event["type"] in ("ADDED", "MODIFIED"):
                            self._reconcile(custom, apps, event["object"])
                except Exception as exc:  # keep reconciling; tests read .errors
                    self.errors = (self.errors + [f"{type(exc).__name__}: {exc}"])[-20:]
                    self._stop.wait(0.5)

    def _reconcile(self, custom, apps, isvc: dict) -> None:
        from kubernetes.client.rest import ApiException

        meta = isvc["metadata"]
        if meta.get("deletionTimestamp"):
            return
        want = predictor_deployment(isvc)
        name, ns = want["metadata"]["name"], meta["namespace"]
        try:
            have = apps.read_namespaced_deployment(name, ns)
        except ApiException as exc:
            if exc.status != 404:
                raise
            have = apps.create_namespaced_deployment(ns, want)
        else:
            current = api_dict(apps.api_client, have)
            if current["spec"].get("replicas") != want["spec"]["replicas"] or not _covers(
                current["spec"]["template"]["spec"], want["spec"]["template"]["spec"]
            ):
                have = apps.patch_namespaced_deployment(
                    name,
                    ns,
                    {"spec": {"replicas": want["spec"]["replicas"], "template": want["spec"]["template"]}},
                    _content_type="application/merge-patch+json",
                )
        self._write_status(custom, isvc, want["spec"]["replicas"], have)

    @staticmethod
    def _write_status(custom, isvc: dict, desired: int, deployment) -> None:
        ready = (deployment.status.ready_replicas if deployment.status else None) or 0
        status = {
            "observedGeneration": isvc["metadata"].get("generation"),
            "desiredReplicas": desired,
            "readyReplicas": ready,
            "conditions": [{"type": "Ready", "status": "True" if ready >= desired else "False"}],
        }
        old = isvc.get("status") or {}
        if all(old.get(k) == v for k, v in status.items()):
            return
        meta = isvc["metadata"]
        custom.patch_namespaced_custom_object_status(
            GROUP,
            VERSION,
            meta["namespace"],
            PLURAL,
            meta["name"],
            {"status": status},
            _content_type="application/merge-patch+json",
        )


def api_dict(api_client, obj: Any) -> dict:
    """A typed client object as the plain JSON dict the API server sent."""
    return api_client.sanitize_for_serialization(obj)


def _covers(have: Any, want: Any) -> bool:
    """Whether ``have`` holds every value of ``want`` (server defaults may add more)."""
    if isinstance(want, dict):
        return isinstance(have, dict) and all(_covers(have.get(k), v) for k, v in want.items())
    if isinstance(want, list):
        return (
            isinstance(have, list)
            and len(have) == len(want)
            and all(_covers(h, w) for h, w in zip(have, want, strict=False))
        )
    return have == want or str(have) == str(want)


def wait_for(predicate, timeout: float = 30.0, interval: float = 0.25, what: str = "condition"):
    """Poll ``predicate`` until it returns a truthy value; raise TimeoutError otherwise.

    Any exception counts as "not yet": the API server may be briefly unavailable.
    """
    from slurm_pool.localcluster.procs import wait_for as poll

    return poll(predicate, timeout, what, interval, ignore=(Exception,))
