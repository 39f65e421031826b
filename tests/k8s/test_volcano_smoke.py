"""Volcano's own scheduler and controllers run gang jobs on the test bed's kwok nodes.

A vcjob whose pods fit gets its PodGroup ``Running`` and all its pods bound and
Running at once; one whose pods fit no node binds none; a ``bus.volcano.sh``
``AbortJob`` Command stops a running vcjob as a unit.  Every wait is on a state
(:func:`tests.support.k8s_wait.wait_state`).
"""

from __future__ import annotations

import uuid

import pytest

from slurm_pool.bridge.gangs import group_id
from slurm_pool.bridge.k8s import abort_command
from tests.support import volcano as vc
from tests.support.k8s import GPU_RESOURCE
from tests.support.k8s_wait import cluster_state, wait_state

pytestmark = pytest.mark.k8s


def create_job(custom, ns: str, replicas: int, min_available: int, gpus: int) -> dict:
    name = f"gang-{uuid.uuid4().hex[:6]}"
    manifest = vc.vcjob_manifest(name, ns, replicas, min_available, gpus)
    return custom.create_namespaced_custom_object(vc.JOB_GROUP, vc.JOB_VERSION, ns, vc.JOB_PLURAL, manifest)


def podgroup_of(custom, job: dict) -> dict | None:
    """The PodGroup the job controller made for ``job`` (owned by it), or None."""
    ns, uid = job["metadata"]["namespace"], job["metadata"]["uid"]
    pgs = custom.list_namespaced_custom_object(vc.PG_GROUP, vc.PG_VERSION, ns, vc.PG_PLURAL)["items"]
    owned = [pg for pg in pgs if any(o.get("uid") == uid for o in pg["metadata"].get("ownerReferences") or [])]
    return owned[0] if owned else None


def pods_of(core, job: dict) -> list:
    ns, name = job["metadata"]["namespace"], job["metadata"]["name"]
    return [
        p
        for p in core.list_namespaced_pod(ns).items
        if (p.metadata.annotations or {}).get("volcano.sh/job-name") == name
    ]


def pg_phase(custom, job: dict) -> str | None:
    pg = podgroup_of(custom, job)
    return (pg.get("status") or {}).get("phase") if pg else None


def job_phase(custom, job: dict) -> str | None:
    meta = job["metadata"]
    cur = custom.get_namespaced_custom_object(
        vc.JOB_GROUP, vc.JOB_VERSION, meta["namespace"], vc.JOB_PLURAL, meta["name"]
    )
    return ((cur.get("status") or {}).get("state") or {}).get("phase")


def describe(api, custom, ns: str):
    def state() -> str:
        lines = []
        for pg in custom.list_namespaced_custom_object(vc.PG_GROUP, vc.PG_VERSION, ns, vc.PG_PLURAL)["items"]:
            lines.append(f"podgroup {pg['metadata']['name']}: spec={pg.get('spec')} status={pg.get('status')}")
        for job in custom.list_namespaced_custom_object(vc.JOB_GROUP, vc.JOB_VERSION, ns, vc.JOB_PLURAL)["items"]:
            lines.append(f"vcjob {job['metadata']['name']}: status={job.get('status')}")
        return "\n".join(lines) + "\n" + cluster_state(api, ns)

    return state


def running_gang(api, core, custom, ns: str, volcano: vc.Volcano) -> dict:
    """A 2-pod, 1-GPU-each gang, waited on until its PodGroup and both pods run."""
    job = create_job(custom, ns, replicas=2, min_available=2, gpus=1)
    show = describe(api, custom, ns)
    wait_state(lambda: pg_phase(custom, job) == "Running", "the gang's PodGroup to be Running", describe=show)

    def both_running() -> list | None:
        pods = pods_of(core, job)
        ok = len(pods) == 2 and all(p.status.phase == "Running" and p.spec.node_name for p in pods)
        return pods if ok else None

    pods = wait_state(both_running, "both gang pods to be Running on nodes", describe=show)
    assert all(p.spec.scheduler_name == vc.SCHEDULER_NAME for p in pods), volcano.tail()
    return job


def test_gang_fits_runs_all_its_pods(volcano, k8s_api, k8s_namespace) -> None:
    from kubernetes import client

    core, custom = client.CoreV1Api(k8s_api), client.CustomObjectsApi(k8s_api)
    job = running_gang(k8s_api, core, custom, k8s_namespace, volcano)
    pg = podgroup_of(custom, job)
    assert pg is not None
    assert pg["spec"]["minMember"] == 2
    assert pg["spec"]["queue"] == vc.QUEUE
    assert int(pg["spec"]["minResources"][GPU_RESOURCE]) == 2
    for p in pods_of(core, job):
        assert (p.metadata.annotations or {}).get(vc.GROUP_NAME_KEY) == pg["metadata"]["name"]
    assert job_phase(custom, job) == "Running"


def test_gang_too_big_binds_no_pod(volcano, k8s_api, k8s_namespace) -> None:
    from kubernetes import client

    core, custom = client.CoreV1Api(k8s_api), client.CustomObjectsApi(k8s_api)
    # 3 GPUs a pod: no kwok node has more than 2.
    job = create_job(custom, k8s_namespace, replicas=2, min_available=2, gpus=3)

    def refused() -> bool:
        pg = podgroup_of(custom, job)
        conds = ((pg or {}).get("status") or {}).get("conditions") or []
        return any(c.get("type") == "Unschedulable" and c.get("status") == "True" for c in conds)

    wait_state(
        refused, "the scheduler to find the gang unschedulable", describe=describe(k8s_api, custom, k8s_namespace)
    )
    assert pg_phase(custom, job) in ("Pending", "Inqueue")
    assert [p.metadata.name for p in pods_of(core, job) if p.spec.node_name] == []


def test_abort_command_stops_the_gang(volcano, k8s_api, k8s_namespace) -> None:
    from kubernetes import client

    core, custom = client.CoreV1Api(k8s_api), client.CustomObjectsApi(k8s_api)
    job = running_gang(k8s_api, core, custom, k8s_namespace, volcano)
    meta = job["metadata"]
    # The bridge's own Command (slurm_pool.bridge.k8s.abort_command), so real Volcano checks its shape.
    cmd = abort_command(group_id(meta["uid"]), meta["namespace"], meta["name"], meta["uid"])
    custom.create_namespaced_custom_object(vc.BUS_GROUP, vc.BUS_VERSION, k8s_namespace, vc.COMMAND_PLURAL, cmd)
    show = describe(k8s_api, custom, k8s_namespace)
    wait_state(lambda: job_phase(custom, job) == "Aborted", "the vcjob to be Aborted", describe=show)
    wait_state(lambda: not pods_of(core, job), "the gang's pods to be gone", describe=show)
