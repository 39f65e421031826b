"""The placeholder's fence on a gang's node: the whole group is fenced and its job stopped as one unit."""

from __future__ import annotations

from typing import Any

import pytest

from slurm_pool.bridge.fence import FenceResult, fence_node
from slurm_pool.bridge.gangs import GANG_JOB, GANG_LABEL, group_id
from slurm_pool.bridge.k8s import open_patch
from slurm_pool.bridge.model import LENT_LABEL
from tests.support.k8s_fake import Clock, FakeK8s, merge, pod_manifest

A = group_id("podgroup-a")
B = group_id("podgroup-b")
SECONDS = 10


class Volcano(FakeK8s):
    """FakeK8s whose vcjob's pods go ``stops_after`` pod lists after its AbortJob Command (never: None)."""

    def __init__(self, clock: Clock, stops_after: int | None, **kw: Any):
        super().__init__(**kw)
        self.clock = clock
        self.stops_after = stops_after
        self.deleted_at: list[float] = []
        self.listed_nodes = 0

    def list_nodes(self) -> list[dict[str, Any]]:
        self.listed_nodes += 1
        return super().list_nodes()

    def list_pods(self, node: str | None = None) -> list[dict[str, Any]]:
        if self.commands and self.stops_after is not None:
            self.stops_after -= 1
            if self.stops_after < 0:
                self.pods = [p for p in self.pods if p["metadata"]["namespace"] != "research"]
        return super().list_pods(node)

    def delete_pod(self, namespace: str, name: str, grace: int | None = 0) -> None:
        self.deleted_at.append(self.clock.t)
        super().delete_pod(namespace, name, grace)


def _vcjob(phase: str = "Running") -> dict[str, Any]:
    return {
        "metadata": {"name": "train", "namespace": "research", "uid": "uid-train"},
        "status": {"state": {"phase": phase}},
    }


def _world(stops_after: int | None, marks: dict[str, tuple[str, str]], vcjobs: list[dict[str, Any]]):
    """Nodes lent (``marks``: node -> (group, job)), each with one pod of the gang; b-gpu1 is group B's."""
    clock = Clock()
    k8s = Volcano(clock, stops_after, vcjobs=vcjobs, linger=1)
    for name, (group, job) in marks.items():
        if group or job:
            k8s.nodes[name]["metadata"]["labels"] = {LENT_LABEL: "true", GANG_LABEL: group}
            k8s.nodes[name]["metadata"]["annotations"] = {GANG_JOB: job}
        else:
            merge(k8s.nodes[name], open_patch(k8s.nodes[name]))
        k8s.pods.append(pod_manifest(f"{name}-pod", name, ns="research"))
    return k8s, clock


GROUPS = {"a-gpu1": (A, "research/train"), "a-gpu2": (A, "research/train"), "b-gpu1": (B, "research/other")}


def _fence(k8s: Volcano, clock: Clock) -> FenceResult:
    return fence_node(k8s, "a-gpu1", SECONDS, clock=clock, sleep=clock.sleep, poll=0.5)


def test_the_whole_group_is_fenced_and_its_job_stopped_once_without_deleting_pods() -> None:
    k8s, clock = _world(2, GROUPS, [_vcjob()])
    res = _fence(k8s, clock)
    assert res.ok, res.detail
    assert k8s.fenced("a-gpu1") and k8s.fenced("a-gpu2")
    assert not k8s.fenced("b-gpu1") and not k8s.fenced("c-gpu1")  # another group's node and a plain one
    assert {name for name, _ in k8s.patches} == {"a-gpu1", "a-gpu2"}
    assert [(ns, body["metadata"]["name"]) for ns, body in k8s.commands] == [("research", f"slurm-pool-abort-{A}")]
    assert k8s.deletions == [] and k8s.evictions == [] and clock.t < SECONDS / 2
    for word in (A, "a-gpu1, a-gpu2", "research/train", "stopped as one unit"):
        assert word in res.detail
    # the group stays known while it is reclaimed
    assert k8s.nodes["a-gpu2"]["metadata"]["labels"][GANG_LABEL] == A


# name: (vcjobs, the job's annotation on a-gpu1, pods stop after, command made, deletions begin at, words)
SLOW = {
    "pods-linger": ([_vcjob()], "research/train", None, True, SECONDS / 2, "after 5s"),
    "job-gone": ([], "research/train", None, False, SECONDS / 2, "gone"),
    "job-aborting": ([_vcjob("Aborting")], "research/train", None, False, SECONDS / 2, "Aborting already"),
    "job-mark-bad": ([_vcjob()], "research/Train", None, False, 0.0, "no job stopped"),
    "job-mark-missing": ([_vcjob()], "", None, False, 0.0, "no job stopped"),
}


@pytest.mark.parametrize("name", sorted(SLOW))
def test_pods_still_on_the_node_are_deleted_only_after_half_the_deadline(name: str) -> None:
    vcjobs, job, stops, commanded, begin, words = SLOW[name]
    k8s, clock = _world(stops, GROUPS | {"a-gpu1": (A, job)}, vcjobs)
    res = _fence(k8s, clock)
    assert res.ok, res.detail
    assert bool(k8s.commands) is commanded
    assert k8s.deletions == ["research/a-gpu1-pod"]  # this node's pod only, never the rest of the gang's
    assert k8s.deleted_at and min(k8s.deleted_at) == begin
    assert k8s.fenced("a-gpu2") and not k8s.fenced("b-gpu1")
    assert "Slurm must never share the GPUs" in res.detail and words in res.detail and A in res.detail


NOT_GANGS = {
    "no-label": {"a-gpu1": ("", ""), "a-gpu2": ("", "")},
    "bad-label": {"a-gpu1": ("g-not-a-group", "research/train"), "a-gpu2": ("g-not-a-group", "research/train")},
}


@pytest.mark.parametrize("name", sorted(NOT_GANGS))
def test_a_node_without_a_valid_gang_label_is_fenced_alone_as_before(name: str) -> None:
    k8s, clock = _world(None, NOT_GANGS[name], [_vcjob()])
    res = _fence(k8s, clock)
    assert res.ok, res.detail
    assert [n for n, _ in k8s.patches] == ["a-gpu1"] and not k8s.fenced("a-gpu2")
    assert k8s.commands == [] and k8s.listed_nodes == 0
    assert k8s.deletions == ["research/a-gpu1-pod"] and k8s.deleted_at == [0.0]
    assert ("no group id" in res.detail) is (name == "bad-label")
