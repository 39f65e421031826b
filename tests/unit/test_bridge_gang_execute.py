"""Gang steps: a node opened for a gang's group carries its marks; ``abort`` stops the gang's job as one unit."""

from __future__ import annotations

import copy
from datetime import datetime, timezone
from typing import Any

import pytest

from slurm_pool.adapters.runner import RecordingRunner
from slurm_pool.adapters.slurm import SlurmClient
from slurm_pool.bridge.execute import Executor, StepResult
from slurm_pool.bridge.gangs import ABORT_ACTION, GANG_JOB, GANG_LABEL, group_id
from slurm_pool.bridge.k8s import K8sError, fence_patch, open_patch, release_patch
from slurm_pool.bridge.model import LENT_LABEL, RECLAIM_SINCE, RECLAIM_TAINT
from slurm_pool.bridge.plan import NodePlan, Plan, Step
from slurm_pool.bridge.slurm_side import SlurmSide
from slurm_pool.errors import InputError
from slurm_pool.spec.bridge import Bridge
from tests.support.k8s_fake import FakeK8s, merge, node_manifest

A = group_id("podgroup-a")
B = group_id("podgroup-b")
JOB = "research/train"
FOREIGN = {"key": "gpu-vendor", "value": "nv", "effect": "NoSchedule"}
NOW = datetime(2026, 1, 7, 2, 0, tzinfo=timezone.utc)


def _node(marks: str = "", fenced: bool = True) -> dict[str, Any]:
    """A Node with a foreign taint, fenced by us, lent for group ``marks`` ("": no gang)."""
    node = node_manifest("x")
    node["spec"]["taints"] = [dict(FOREIGN)]
    if marks:
        merge(node, open_patch(node, marks, JOB))
    if fenced:
        merge(node, fence_patch(node, "2026-01-07T02:00:00+00:00"))
    return node


def _taints(node: dict[str, Any]) -> list[tuple[str, str]]:
    return [(t["key"], t["value"]) for t in node["spec"].get("taints", [])]


# name: (node before, the patch, labels after, gang-job annotation after, taints after, cordoned after)
PATCHES = {
    "open-plain": (_node(), lambda n: open_patch(n), {LENT_LABEL: "true"}, None, [("gpu-vendor", "nv")], False),
    "open-gang": (
        _node(),
        lambda n: open_patch(n, A, JOB),
        {LENT_LABEL: "true", GANG_LABEL: A},
        JOB,
        [("gpu-vendor", "nv"), (GANG_LABEL, A)],
        False,
    ),
    "open-other-gang-replaces-the-mark": (
        _node(A),
        lambda n: open_patch(n, B, "research/other"),
        {LENT_LABEL: "true", GANG_LABEL: B},
        "research/other",
        [("gpu-vendor", "nv"), (GANG_LABEL, B)],
        False,
    ),
    "open-plain-drops-a-gang-mark": (
        _node(A),
        lambda n: open_patch(n),
        {LENT_LABEL: "true"},
        None,
        [("gpu-vendor", "nv")],
        False,
    ),
    "fence-keeps-the-gang-marks": (
        _node(A, fenced=False),
        lambda n: fence_patch(n),
        {LENT_LABEL: "true", GANG_LABEL: A},
        JOB,
        [("gpu-vendor", "nv"), (GANG_LABEL, A), (RECLAIM_TAINT, "true")],
        True,
    ),
    "release-gang": (
        _node(A),
        release_patch,
        {},
        None,
        [("gpu-vendor", "nv"), (RECLAIM_TAINT, "true")],
        True,
    ),
    "release-plain": (_node(), release_patch, {}, None, [("gpu-vendor", "nv"), (RECLAIM_TAINT, "true")], True),
}


@pytest.mark.parametrize("name", sorted(PATCHES))
def test_patch_bodies_set_and_drop_the_gang_marks(name: str) -> None:
    before, patch, labels, job, taints, cordoned = PATCHES[name]
    node = copy.deepcopy(before)
    merge(node, patch(before))
    assert node["metadata"]["labels"] == labels
    assert node["metadata"]["annotations"].get(GANG_JOB) == job
    assert _taints(node) == taints
    assert bool(node["spec"].get("unschedulable")) is cordoned
    if not name.startswith("fence"):
        assert RECLAIM_SINCE not in node["metadata"]["annotations"]


def test_a_plain_release_leaves_the_taints_alone() -> None:
    assert "spec" not in release_patch(_node())


BAD_MARKS = [
    ("", JOB),  # a job without its group
    (A, ""),  # a group without its job
    ("g0123", JOB),
    (A.upper(), JOB),
    (A + "\n", JOB),
    ("x" + A[1:], JOB),
    (A, "research"),
    (A, "research/"),
    (A, "/train"),
    (A, "Research/train"),
    (A, "research/train\n"),
    (A, "research/a/b"),
    (A, "research/train_1"),
    (A, "research/train\x1b[2J"),
]


@pytest.mark.parametrize(("group", "job"), BAD_MARKS)
def test_open_patch_refuses_bad_gang_marks(group: str, job: str) -> None:
    with pytest.raises(InputError, match="gang"):
        open_patch(_node(), group, job)


# -- the executor ---------------------------------------------------------------------


def _vcjob(phase: str = "Running", name: str = "train") -> dict[str, Any]:
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "research", "uid": f"uid-{name}"},
        "status": {"state": {"phase": phase}},
    }


def _run(k8s: FakeK8s, step: Step) -> StepResult:
    runner = RecordingRunner()
    runner.on(["squeue", "-h", "-j"], "RUNNING|None\n")
    config = Bridge(timezone="UTC")
    side = SlurmSide(SlurmClient(runner), config, submit_as="slurmpool")
    plan = Plan(NOW, True, 0, 0, 0, nodes=(NodePlan(step.node, "lend", steps=(step,)),))
    [res] = Executor(side, k8s, config, clock=lambda: 0.0, sleep=lambda s: None).run(plan)
    return res


def test_an_open_step_for_a_gang_marks_the_node() -> None:
    k8s = FakeK8s()
    merge(k8s.nodes["a-gpu1"], fence_patch(k8s.nodes["a-gpu1"]))
    res = _run(k8s, Step("open", "a-gpu1", job_ids=(7,), group=A, job=JOB))
    assert res.ok, res.errors
    node = k8s.nodes["a-gpu1"]
    assert node["metadata"]["labels"] == {LENT_LABEL: "true", GANG_LABEL: A}
    assert node["metadata"]["annotations"][GANG_JOB] == JOB
    assert _taints(node) == [(GANG_LABEL, A)] and A in res.detail and JOB in res.detail
    assert JOB in k8s.events[-1][1]["message"]


@pytest.mark.parametrize(("group", "job"), BAD_MARKS)
@pytest.mark.parametrize("kind", ["open", "abort"])
def test_gang_steps_refuse_bad_marks(kind: str, group: str, job: str) -> None:
    class NoRead(FakeK8s):
        def read_vcjob(self, namespace: str, name: str) -> dict[str, Any]:
            raise AssertionError("a refused step reads nothing")

    k8s = NoRead(vcjobs=[_vcjob()])
    before = copy.deepcopy(k8s.nodes)
    res = _run(k8s, Step(kind, "a-gpu1", job_ids=(7,), group=group, job=job))
    assert not res.ok and "gang" in res.detail
    assert k8s.nodes == before and k8s.patches == [] and k8s.commands == [] and k8s.events == []


def _expected_command() -> dict[str, Any]:
    owner = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "name": "train", "uid": "uid-train"}
    owner["controller"] = True
    return {
        "apiVersion": "bus.volcano.sh/v1alpha1",
        "kind": "Command",
        "metadata": {"name": f"slurm-pool-abort-{A}", "namespace": "research", "ownerReferences": [owner]},
        "action": ABORT_ACTION,
        "target": owner,
    }


# name: (vcjobs, commands already there, ok, commands after (count), an event recorded, words in the detail)
ABORTS = {
    "running": ([_vcjob()], 0, True, 1, True, "stopped as one unit"),
    "gone": ([_vcjob(name="other")], 0, True, 0, False, "gone"),
    "aborted": ([_vcjob("Aborted")], 0, True, 0, False, "Aborted already"),
    "aborting": ([_vcjob("Aborting")], 0, True, 0, False, "Aborting already"),
    "completed": ([_vcjob("Completed")], 0, True, 0, False, "Completed already"),
    "command-exists": ([_vcjob()], 1, True, 1, False, "there already"),
    "no-uid": ([_vcjob() | {"metadata": {"name": "train", "namespace": "research"}}], 0, False, 0, False, ""),
}


@pytest.mark.parametrize("name", sorted(ABORTS))
def test_abort_step(name: str) -> None:
    vcjobs, existing, ok, commands, event, words = ABORTS[name]
    k8s = FakeK8s(vcjobs=copy.deepcopy(vcjobs))
    k8s.commands = [("research", _expected_command())] * existing
    res = _run(k8s, Step("abort", "a-gpu1", group=A, job=JOB))
    assert res.ok is ok, (res.detail, res.errors)
    assert len(k8s.commands) == commands
    if commands:
        assert k8s.commands[-1] == ("research", _expected_command())
    assert bool(k8s.events) is event
    if event:
        assert k8s.events[0][1]["reason"] == "SlurmPoolGangStopped" and JOB in k8s.events[0][1]["message"]
    if ok:
        assert JOB in res.detail and words in res.detail
    assert k8s.patches == [] and k8s.deletions == [] and k8s.evictions == []


def test_an_abort_that_the_api_refuses_fails_the_step() -> None:
    class Refusing(FakeK8s):
        def create_command(self, namespace: str, body: dict[str, Any]) -> None:
            raise K8sError(403, "commands.bus.volcano.sh is forbidden")

    res = _run(Refusing(vcjobs=[_vcjob()]), Step("abort", "a-gpu1", group=A, job=JOB))
    assert not res.ok and "forbidden" in " ".join(res.errors)


PLACEHOLDER_GROUP = {
    # case: group -> the comment, or the refusal
    "no gang": ("", "--comment=slurm-pool:lend node=b-gpu1"),
    "a gang's group": ("g0123456789abcdef", "--comment=slurm-pool:lend node=b-gpu1 gang=g0123456789abcdef"),
    "not a group id": ("g0123 node=a-gpu1", InputError),
    "a newline": ("g0123456789abcdef\n", InputError),
}


@pytest.mark.parametrize("case", PLACEHOLDER_GROUP)
def test_a_placeholder_for_a_gang_names_its_group_in_its_comment(case):
    from slurm_pool.bridge.model import placeholder_group
    from slurm_pool.bridge.slurm_side import SlurmSide
    from slurm_pool.versions import SlurmVersion

    group, want = PLACEHOLDER_GROUP[case]
    side = SlurmSide(SlurmClient(RecordingRunner(), version=SlurmVersion(22, 5, 8)), Bridge(), submit_as="slurmpool")
    if want is InputError:
        with pytest.raises(InputError):
            side.placeholder_argv("b-gpu1", group)
        return
    argv = side.placeholder_argv("b-gpu1", group)
    assert want in argv
    assert placeholder_group(want.removeprefix("--comment=")) == group
