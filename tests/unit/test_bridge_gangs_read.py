"""Volcano gangs read into the bridge's snapshot (slurm_pool.bridge.gangs.read_gangs), table-driven.

The vcjobs and PodGroups are shaped as the API server sends them: a vcjob with the
fields Volcano's webhook fills, and the PodGroup vc-controller makes of it
(``<job>-<job uid>``, owned by the job, ``minMember``/``minTaskMember`` from it).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from slurm_pool.bridge.gangs import DEFAULT_GRACE, Gang, PodShape, Toleration, read_gangs
from slurm_pool.bridge.k8sview import _NOT_PLAIN, _plain_pod, pod_view, read_pod
from slurm_pool.bridge.model import build_snapshot
from slurm_pool.bridge.objects import Unreadable
from slurm_pool.bridge.reconcile import observe
from slurm_pool.spec.bridge import Bridge, GangSettings
from tests.support.k8s_fake import FakeK8s

GPU = "nvidia.com/gpu"
MIG = "nvidia.com/mig-3g.40gb"
GI = 1024**3
SETTINGS = GangSettings()
UID = "7d3c2c4e-3f1a-4b8e-9d61-0c5a1e2b3f40"


def _container(name: str = "main", **resources: Any) -> dict[str, Any]:
    return {"name": name, "image": "trainer:1", "resources": resources}


def _task(name: str, replicas: int, *containers: dict[str, Any], **more: Any) -> dict[str, Any]:
    spec = {"containers": list(containers) or [_container(limits={GPU: "1"})], "restartPolicy": "OnFailure"}
    spec |= more.pop("pod", {})
    return {"name": name, "replicas": replicas, "template": {"metadata": {}, "spec": spec}, **more}


def _vcjob(
    name: str = "train", tasks: list[dict[str, Any]] | None = None, uid: str = UID, ns: str = "ml", **spec: Any
) -> dict[str, Any]:
    tasks = tasks if tasks is not None else [_task("worker", 2, minAvailable=2)]
    body = {
        "schedulerName": "volcano",
        "queue": "default",
        "maxRetry": 3,
        "minAvailable": sum(t.get("minAvailable", t["replicas"]) for t in tasks),
        "tasks": tasks,
        **spec,
    }
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": ns, "uid": uid, "creationTimestamp": "2026-01-07T01:00:00Z"},
        "spec": body,
        "status": {"state": {"phase": "Pending"}, "minAvailable": body["minAvailable"]},
    }


def _podgroup(job: dict[str, Any], owned: bool = True, **spec: Any) -> dict[str, Any]:
    """The PodGroup vc-controller makes of ``job``."""
    meta = job["metadata"]
    tasks = job["spec"]["tasks"]
    body = {
        "minMember": job["spec"]["minAvailable"],
        "minTaskMember": {t["name"]: t.get("minAvailable", t["replicas"]) for t in tasks},
        "queue": "default",
        **spec,
    }
    owners = [
        {
            "apiVersion": "batch.volcano.sh/v1alpha1",
            "kind": "Job",
            "name": meta["name"],
            "uid": meta["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {
            "name": f"{meta['name']}-{meta['uid']}",
            "namespace": meta["namespace"],
            "uid": "pg-" + meta["uid"],
            "creationTimestamp": meta["creationTimestamp"],
            **({"ownerReferences": owners} if owned else {}),
        },
        "spec": {k: v for k, v in body.items() if v is not None},
        "status": {"phase": "Pending"},
    }


def _class(name: str, value: Any, default: bool = False) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": name},
        "value": value,
    } | ({"globalDefault": True} if default else {})


def _read(job: dict[str, Any], pg: dict[str, Any] | None = None, classes: Any = (), **kw: Any) -> Gang:
    problems: list[str] = []
    (gang,) = read_gangs([pg or _podgroup(job)], [job], list(classes), kw.pop("settings", SETTINGS), GPU, problems)
    assert problems == ([gang.problem] if gang.problem else [])
    return gang


def _set(obj: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A copy of ``obj`` with the dotted ``path`` (list indexes as digits) set to ``value`` (``...``: removed)."""
    out = copy.deepcopy(obj)
    where: Any = out
    keys = [int(k) if k.isdigit() else k for k in path.split(".")]
    for key in keys[:-1]:
        where = where[key]
    if value is ...:
        del where[keys[-1]]
    else:
        where[keys[-1]] = value
    return out


ONE_GPU = PodShape(resources={GPU: 1})

# -- pod shapes ---------------------------------------------------------------

SHAPES: list[tuple[str, dict[str, Any], dict[str, Any], tuple[PodShape, ...]]] = [
    ("task minAvailable", _vcjob(tasks=[_task("w", 4, minAvailable=2)]), {}, (ONE_GPU,) * 2),
    ("replicas without minAvailable", _vcjob(tasks=[_task("w", 3)]), {}, (ONE_GPU,) * 3),
    (
        "minTaskMember before minAvailable",
        _vcjob(tasks=[_task("w", 4, minAvailable=1)]),
        {"minMember": 3, "minTaskMember": {"w": 3}},
        (ONE_GPU,) * 3,
    ),
    (
        "each task's minimum, then more in order up to minMember",
        _vcjob(
            tasks=[
                _task("ps", 2, _container(requests={"cpu": "500m", "memory": "1Gi"}), minAvailable=1),
                _task("worker", 4, _container(limits={GPU: "2"}), minAvailable=1),
            ]
        ),
        {"minMember": 4, "minTaskMember": {"ps": 1, "worker": 1}},
        (PodShape(cpu_milli=500, memory=GI),) * 2 + (PodShape(resources={GPU: 2}),) * 2,
    ),
    (
        "no minTaskMember: the tasks' minAvailable",
        _vcjob(tasks=[_task("a", 2, minAvailable=1), _task("b", 2, _container(limits={MIG: "1"}), minAvailable=1)]),
        {"minMember": 2, "minTaskMember": None},
        (ONE_GPU, PodShape(resources={MIG: 1})),
    ),
    (
        "partitions' minimum",
        _vcjob(tasks=[_task("w", 8, partitionPolicy={"totalPartitions": 4, "partitionSize": 2, "minPartitions": 2})]),
        {"minMember": 4, "minTaskMember": None},
        (ONE_GPU,) * 4,
    ),
    (
        "limits before requests for GPUs, requests before limits for cpu and memory",
        _vcjob(
            tasks=[
                _task(
                    "w",
                    1,
                    _container(
                        requests={GPU: "1", "cpu": "2", "memory": "1Gi"}, limits={GPU: "2", "cpu": "4", "memory": "2Gi"}
                    ),
                )
            ]
        ),
        {},
        (PodShape(resources={GPU: 2}, cpu_milli=2000, memory=GI),),
    ),
    (
        "limits alone stand for requests",
        _vcjob(tasks=[_task("w", 1, _container(limits={"cpu": "1.5", "memory": "512Mi"}))]),
        {},
        (PodShape(cpu_milli=1500, memory=512 * 1024**2),),
    ),
    (
        "containers add up, init containers count at their peak",
        _vcjob(
            tasks=[
                _task(
                    "w",
                    1,
                    _container("a", requests={"cpu": "250m", "memory": "1G"}, limits={GPU: "1"}),
                    _container("b", requests={"cpu": "250m"}, limits={MIG: "2"}),
                    pod={"initContainers": [_container("init", requests={"cpu": "3", "memory": "100Mi"})]},
                )
            ]
        ),
        {},
        (PodShape(resources={GPU: 1, MIG: 2}, cpu_milli=3000, memory=10**9),),
    ),
    (
        "a sidecar init container adds to the rest",
        _vcjob(
            tasks=[
                _task(
                    "w",
                    1,
                    _container(requests={"cpu": "1"}),
                    pod={"initContainers": [_container("side", requests={"cpu": "1m"}) | {"restartPolicy": "Always"}]},
                )
            ]
        ),
        {},
        (PodShape(cpu_milli=1001),),
    ),
    (
        "a fraction of a millicore and of a byte rounds up",
        _vcjob(tasks=[_task("w", 1, _container(requests={"cpu": "0.0001", "memory": "1.5"}))]),
        {},
        (PodShape(cpu_milli=1, memory=2),),
    ),
    (
        "node selector and tolerations",
        _vcjob(
            tasks=[
                _task(
                    "w",
                    1,
                    pod={
                        "nodeSelector": {"gpu": "h100"},
                        "tolerations": [
                            {"key": "slurm-pool/gang", "operator": "Exists", "effect": "NoSchedule"},
                            {"key": "dedicated", "value": "ml"},
                        ],
                    },
                )
            ]
        ),
        {},
        (
            PodShape(
                resources={GPU: 1},
                node_selector={"gpu": "h100"},
                tolerations=(
                    Toleration("slurm-pool/gang", "Exists", "", "NoSchedule"),
                    Toleration("dedicated", "Equal", "ml", ""),
                ),
            ),
        ),
    ),
]


@pytest.mark.parametrize(("job", "pg_spec", "want"), [c[1:] for c in SHAPES], ids=[c[0] for c in SHAPES])
def test_pod_shapes(job, pg_spec, want):
    pg = _podgroup(job)
    pg["spec"] |= pg_spec
    pg["spec"] = {k: v for k, v in pg["spec"].items() if v is not None}
    gang = _read(job, pg)
    assert gang.problem == ""
    assert gang.pods == want
    assert gang.min_member == pg["spec"]["minMember"]


def test_a_gang_reads_whole():
    job = _vcjob(tasks=[_task("w", 2, minAvailable=2, pod={"terminationGracePeriodSeconds": 15}), _task("x", 1)])
    job["status"]["state"]["phase"] = "Running"
    pg = _podgroup(job, priorityClassName="training")
    pg["status"] = {"phase": "Running", "running": 3}
    gang = _read(job, pg, [_class("training", 1000)])
    assert gang == Gang(
        namespace="ml",
        name=f"train-{UID}",
        uid=f"pg-{UID}",
        min_member=3,
        pods=(ONE_GPU,) * 3,
        phase="Running",
        running=3,
        job="train",
        job_phase="Running",
        priority=1000,
        created="2026-01-07T01:00:00Z",
        grace_seconds=DEFAULT_GRACE,  # the task without its own grace has Kubernetes' 30
        problem="",
    )
    assert gang.job_ref == "ml/train" and gang.gpus(GPU) == 3 and not gang.waiting


def test_grace_is_the_longest_of_the_templates():
    tasks = [
        _task("a", 1, pod={"terminationGracePeriodSeconds": 5}),
        _task("b", 1, pod={"terminationGracePeriodSeconds": 12}),
    ]
    assert _read(_vcjob(tasks=tasks)).grace_seconds == 12


# -- priority -----------------------------------------------------------------

CLASSES = [_class("training", 1000), _class("batch", 100), _class("low", -5)]
PRIORITY: list[tuple[str, dict[str, Any], dict[str, Any], list[Any], int]] = [
    ("the PodGroup's class", {}, {"priorityClassName": "training"}, CLASSES, 1000),
    (
        "the PodGroup's before the vcjob's",
        {"priorityClassName": "batch"},
        {"priorityClassName": "training"},
        CLASSES,
        1000,
    ),
    ("the vcjob's when the PodGroup names none", {"priorityClassName": "batch"}, {}, CLASSES, 100),
    ("a negative value", {}, {"priorityClassName": "low"}, CLASSES, -5),
    ("no class", {}, {}, CLASSES, 0),
    ("an unknown class", {}, {"priorityClassName": "gone"}, CLASSES, 0),
    ("no class: the global default's", {}, {}, [*CLASSES, _class("dflt", 7, default=True)], 7),
    ("an unknown class: the global default's, as Volcano", {}, {"priorityClassName": "x"}, [_class("d", 7, True)], 7),
]


@pytest.mark.parametrize(
    ("job_spec", "pg_spec", "classes", "want"), [c[1:] for c in PRIORITY], ids=[c[0] for c in PRIORITY]
)
def test_priority(job_spec, pg_spec, classes, want):
    job = _vcjob(**job_spec)
    gang = _read(job, _podgroup(job, **pg_spec), classes)
    assert (gang.priority, gang.problem) == (want, "")


def test_order_is_priority_then_age_then_name():
    jobs = [
        _set(_vcjob("old", uid="u1", priorityClassName="batch"), "metadata.creationTimestamp", "2026-01-01T00:00:00Z"),
        _vcjob("new", uid="u2", priorityClassName="batch"),
        _vcjob("top", uid="u3", priorityClassName="training"),
        _vcjob("alpha", uid="u4", priorityClassName="batch"),
    ]
    gangs = read_gangs([_podgroup(j) for j in reversed(jobs)], jobs, CLASSES, SETTINGS, GPU)
    assert [g.job for g in gangs] == ["top", "old", "alpha", "new"]


# -- phases -------------------------------------------------------------------

PHASES: list[tuple[str, int, str, bool, bool]] = [
    # (PodGroup phase, running, vcjob phase, waiting, ended)
    ("Pending", 0, "Pending", True, False),
    ("Inqueue", 0, "Pending", True, False),
    ("Running", 2, "Running", False, False),
    ("Running", 1, "Running", True, False),  # below minMember (2): a member was lost
    ("Pending", 0, "Aborted", False, True),
    ("Running", 2, "Aborting", False, True),
    ("Pending", 0, "Completed", False, True),
    ("Completed", 0, "Completed", False, True),
    ("Inqueue", 0, "Terminating", False, True),
    ("Unknown", 1, "Running", False, False),
]


@pytest.mark.parametrize(("phase", "running", "job_phase", "waiting", "ended"), PHASES)
def test_waiting_and_ended(phase, running, job_phase, waiting, ended):
    job = _set(_vcjob(), "status.state.phase", job_phase)
    pg = _podgroup(job)
    pg["status"] = {"phase": phase, "running": running} if running else {"phase": phase}
    gang = _read(job, pg)
    assert (gang.phase, gang.running, gang.job_phase) == (phase, running, job_phase)
    assert (gang.waiting, gang.ended) == (waiting, ended)


# -- which PodGroups count ----------------------------------------------------


def test_the_vcjob_is_found_by_owner_or_by_name():
    job = _vcjob()
    by_owner = _podgroup(job)
    by_owner["metadata"]["name"] = "renamed"
    assert _read(job, by_owner).job == "train"
    assert _read(job, _podgroup(job, owned=False)).job == "train"  # vc-controller's <job>-<uid>
    legacy = _set(_podgroup(job, owned=False), "metadata.name", "train")  # Volcano before 1.5
    assert _read(job, legacy).job == "train"


def test_an_owner_of_another_uid_is_not_the_job():
    """A vcjob made again under the same name is not the old PodGroup's job."""
    job = _vcjob()
    pg = _set(_podgroup(job), "metadata.ownerReferences.0.uid", "other-uid")
    pg["metadata"]["name"] = "train-other-uid"
    gang = _read(job, pg)
    assert gang.job == "train" and gang.pods == ()
    assert gang.problem.endswith("its vcjob ml/train is not there")


SCHEDULERS: list[tuple[str, Any, GangSettings, int]] = [
    ("volcano", "volcano", SETTINGS, 1),
    ("another scheduler", "default-scheduler", SETTINGS, 0),
    ("none named: Kubernetes' default scheduler", ..., SETTINGS, 0),
    ("a scheduler of another name", "vc2", GangSettings(scheduler_name="vc2"), 1),
    ("in a namespace given", "volcano", GangSettings(namespaces=["ml", "x"]), 1),
    ("in no namespace given", "volcano", GangSettings(namespaces=["x"]), 0),
]


@pytest.mark.parametrize(("scheduler", "settings", "n"), [c[1:] for c in SCHEDULERS], ids=[c[0] for c in SCHEDULERS])
def test_which_gangs_count(scheduler, settings, n):
    job = _set(_vcjob(), "spec.schedulerName", scheduler)
    assert len(read_gangs([_podgroup(job)], [job], [], settings, GPU)) == n


def test_a_podgroup_without_a_vcjob_is_a_problem():
    job = _vcjob()
    problems: list[str] = []
    (gang,) = read_gangs([_podgroup(job, owned=False)], [], [], SETTINGS, GPU, problems)
    assert gang.job == "" and gang.pods == () and gang.min_member == 2
    assert problems == [gang.problem] and "no vcjob owns it" in gang.problem


# -- what cannot be read --------------------------------------------------------

BROKEN: list[tuple[str, str, Any, str]] = [
    ("pg", "spec.minMember", "two", "spec.minMember: 'two' is not a whole number"),
    ("pg", "spec.minMember", -1, "spec.minMember: -1 is negative"),
    ("pg", "spec.minMember", 9, "spec.minMember: 9 pods are more than its vcjob's tasks make"),
    ("pg", "spec.minTaskMember", ["worker"], "spec.minTaskMember: ['worker'] is not a map"),
    ("pg", "spec.minTaskMember.worker", True, "spec.minTaskMember[worker]: True is not a whole number"),
    ("pg", "spec.priorityClassName", "Bad Name", "priorityClassName: 'Bad Name' is not a PriorityClass name"),
    ("pg", "status.running", "1_0", "status.running: '1_0' is not a whole number"),
    ("pg", "status.phase", "Pend\x1b[2Jing", "status.phase"),
    ("pg", "metadata.uid", 7, "metadata.uid: 7 is not a string"),
    ("pg", "metadata.creationTimestamp", "yesterday", "creationTimestamp: 'yesterday' is not a time"),
    ("pg", "metadata.ownerReferences", {"kind": "Job"}, "metadata.ownerReferences"),
    ("job", "spec.tasks", {"name": "w"}, "spec.tasks: {'name': 'w'} is not a list"),
    ("job", "spec.tasks.0.replicas", 1.5, "spec.tasks[0].replicas: 1.5 is not a whole number"),
    ("job", "spec.tasks.0.name", "Worker_1", "spec.tasks[0].name: 'Worker_1' is not a task name"),
    ("job", "spec.tasks.0.template.spec.containers.0.resources.limits", {GPU: "1.5"}, "not a whole number of devices"),
    ("job", "spec.tasks.0.template.spec.containers.0.resources.requests", {"cpu": "NaN"}, "not a Kubernetes quantity"),
    ("job", "spec.tasks.0.template.spec.containers.0.resources.requests", {"memory": "-1Gi"}, "is negative"),
    ("job", "spec.tasks.0.template.spec.containers.0.resources.requests", {"cpu": "1_0"}, "not a Kubernetes quantity"),
    ("job", "spec.tasks.0.template.spec.nodeSelector", {"gpu": 1}, "nodeSelector: 'gpu': 1 is not a string"),
    ("job", "spec.tasks.0.template.spec.tolerations", [{"operator": "Gt"}], "operator: 'Gt' is not Equal or Exists"),
    ("job", "spec.tasks.0.template.spec.tolerations", [{"effect": "Later"}], "effect: 'Later' is not a taint effect"),
    ("job", "spec.tasks.0.template.spec.terminationGracePeriodSeconds", "long", "terminationGracePeriodSeconds"),
    ("job", "spec.schedulerName", ["volcano"], "spec.schedulerName: ['volcano'] is not a string"),
    ("job", "spec.priorityClassName", 3, "spec.priorityClassName: 3 is not a string"),
    ("job", "status.state", "Running", "status.state: 'Running' is not a map"),
]


@pytest.mark.parametrize(("which", "path", "value", "said"), BROKEN, ids=[c[0] + " " + c[1] for c in BROKEN])
def test_an_unreadable_field_makes_a_problem_never_a_smaller_gang(which, path, value, said):
    job = _vcjob(tasks=[_task("worker", 2, minAvailable=2)])
    pg = _podgroup(job)
    if which == "pg":
        pg = _set(pg, path, value)
    else:
        job = _set(job, path, value)
    gang = _read(job, pg)
    assert gang.problem.startswith(f"PodGroup ml/train-{UID}: ")
    assert said in gang.problem
    assert "\x1b" not in gang.problem
    assert gang.name == f"train-{UID}" and gang.ref == f"ml/train-{UID}"


def test_an_unreadable_priority_class_is_a_problem_of_the_gangs_that_name_it():
    job = _vcjob()
    classes = [_class("training", "high"), _class("batch", 100)]
    problems: list[str] = []
    gangs = read_gangs(
        [
            _podgroup(job, priorityClassName="training"),
            _set(_podgroup(job, priorityClassName="batch"), "metadata.name", "b"),
        ],
        [job],
        classes,
        SETTINGS,
        GPU,
        problems,
    )
    by_class = {g.name: g for g in gangs}
    assert "PriorityClass 'training' cannot be read" in by_class[f"train-{UID}"].problem
    assert by_class["b"].problem == "" and by_class["b"].priority == 100
    assert problems[0] == "PriorityClass training: value: 'high' is not a 32-bit whole number"


UNNAMED: list[tuple[str, list[Any], list[Any], list[Any]]] = [
    ("a PodGroup", [{"metadata": {"name": "Bad!", "namespace": "ml"}}], [], []),
    ("a PodGroup that is no object", ["pg"], [], []),
    ("a vcjob", [], [{"metadata": {"namespace": "ml"}}], []),
    ("a PriorityClass", [], [], [{"metadata": {"name": 3}, "value": 1}]),
]


@pytest.mark.parametrize(("pgs", "jobs", "classes"), [c[1:] for c in UNNAMED], ids=[c[0] for c in UNNAMED])
def test_an_object_that_cannot_be_named_is_listed_or_raised(pgs, jobs, classes):
    problems: list[str] = []
    assert read_gangs(pgs, jobs, classes, SETTINGS, GPU, problems) == ()
    assert len(problems) == 1
    with pytest.raises(Unreadable):
        read_gangs(pgs, jobs, classes, SETTINGS, GPU)


# -- the snapshot and observe ---------------------------------------------------


def test_the_snapshot_reads_gangs_only_with_settings_and_never_freezes_on_them():
    job = _vcjob()
    broken = _set(_podgroup(job), "spec.minMember", "x")
    broken["metadata"]["name"] = "broken"
    volcano = {"podgroups": [_podgroup(job), broken], "vcjobs": [job], "priority_classes": []}
    without = build_snapshot(Bridge(), [], [], [], [], [], **volcano)
    assert without.gangs == ()
    snap = build_snapshot(Bridge(gangs=GangSettings()), [], [], [], [], [], **volcano)
    assert [g.name for g in snap.gangs] == ["broken", f"train-{UID}"]
    assert snap.gangs[0].problem and snap.unreadable == ()


class _Side:
    """Slurm with no nodes and no jobs."""

    def nodes(self) -> list[Any]:
        return []

    def jobs(self) -> list[Any]:
        return []


class _Counting(FakeK8s):
    def __init__(self) -> None:
        super().__init__(nodes={})
        self.asked: list[tuple[str, Any]] = []

    def list_podgroups(self, namespaces: list[str]) -> list[dict[str, Any]]:
        self.asked.append(("podgroups", namespaces))
        return super().list_podgroups(namespaces)

    def list_vcjobs(self, namespaces: list[str]) -> list[dict[str, Any]]:
        self.asked.append(("vcjobs", namespaces))
        return super().list_vcjobs(namespaces)

    def list_priority_classes(self) -> list[dict[str, Any]]:
        self.asked.append(("priority_classes", None))
        return super().list_priority_classes()


@pytest.mark.parametrize(
    ("gangs", "asked", "found"),
    [
        (None, [], 0),
        (GangSettings(), [("podgroups", []), ("vcjobs", []), ("priority_classes", None)], 1),
        (GangSettings(namespaces=["ml"]), [("podgroups", ["ml"]), ("vcjobs", ["ml"]), ("priority_classes", None)], 1),
        (
            GangSettings(namespaces=["other"]),
            [("podgroups", ["other"]), ("vcjobs", ["other"]), ("priority_classes", None)],
            0,
        ),
    ],
)
def test_observe_reads_volcano_only_when_gangs_are_set(gangs, asked, found):
    k8s = _Counting()
    job = _vcjob()
    k8s.vcjobs, k8s.podgroups, k8s.priority_classes = [job], [_podgroup(job)], [_class("training", 1)]
    snap = observe(_Side(), k8s, Bridge(gangs=gangs))  # type: ignore[arg-type]
    assert k8s.asked == asked
    assert len(snap.gangs) == found


# -- PodView.group ------------------------------------------------------------

GROUP = "scheduling.k8s.io/group-name"


def _pod(notes: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "train-worker-0", "namespace": "ml"}
    if notes is not ...:
        meta["annotations"] = notes
    return {"metadata": meta, "spec": {"nodeName": "a-gpu1"}, "status": {"phase": "Running"}}


POD_GROUPS: list[tuple[str, Any, str]] = [
    ("a gang's pod", {GROUP: f"train-{UID}"}, f"train-{UID}"),
    ("other annotations", {"a": "b"}, ""),
    ("no annotations", ..., ""),
    ("null annotations", None, ""),
    ("empty group", {GROUP: ""}, ""),
    ("no PodGroup name", {GROUP: "Not a name"}, ""),
    ("control characters", {GROUP: "a\x1bb"}, ""),
]


@pytest.mark.parametrize(("notes", "want"), [c[1:] for c in POD_GROUPS], ids=[c[0] for c in POD_GROUPS])
def test_pod_group_on_both_paths(notes, want):
    pod = _pod(notes)
    plain = _plain_pod(pod)
    assert plain is not _NOT_PLAIN
    careful = read_pod(pod)
    assert careful is not None and careful.group == want and careful.problem == ""
    assert plain == careful


def test_pod_group_when_the_annotations_cannot_be_read():
    pod = _pod({GROUP: 5})
    assert _plain_pod(pod) is _NOT_PLAIN
    view = pod_view(pod)
    assert view is not None and view.group == "" and "metadata.annotations" in view.problem
