"""Issue 31: Volcano gang jobs borrow idle Slurm nodes as one unit and give them back as one.

The real Slurm cluster, the real control plane (kwok nodes), and real Volcano
(vc-scheduler, vc-controller-manager) beside it.  Every gang here is a vcjob
whose pods all form its ``minAvailable``, each asking for 2 GPUs: a whole node
of the example pool.
"""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from tests.bridge.conftest import PLACEHOLDER_ENDED, TEST_GROUP_LABEL
from tests.bridge.test_bridge_e2e import OWNER_JOB, Overlap
from tests.support.kserve import wait_for

pytestmark = [pytest.mark.slurm, pytest.mark.k8s]

NIGHT = datetime(2026, 1, 7, 2, 0, tzinfo=timezone.utc)
NODES = ("a-gpu1", "a-gpu2", "b-gpu1", "c-gpu1")
GANG_NODES = ("a-gpu1", "a-gpu2")


def _fence_all(bed) -> None:
    report = bed.reconcile(NIGHT)
    assert report.ok and all(bed.fenced(n) for n in NODES), report.text()


def _pods_pending(bed, name: str, count: int) -> None:
    """Volcano made the gang's pods (its PodGroup left Pending) and none is bound: they wait for nodes."""
    wait_for(
        lambda: len(bed.gang_pods(name)) == count and not any(p.spec.node_name for p in bed.gang_pods(name)),
        timeout=60,
        what=f"{count} pods of {name} made, none bound",
    )


def _lend_gang(bed, name: str = "train", selector: dict[str, str] | None = None) -> list[str]:
    """A 2-pod gang of 2 GPUs a pod pends; one run lends two nodes; Volcano binds both pods there."""
    _fence_all(bed)
    bed.create_vcjob(name, pods=2, gpus=2, node_selector=selector)
    _pods_pending(bed, name, 2)
    report = bed.reconcile(NIGHT)
    assert report.ok, report.text()
    lent = [n for n in NODES if report.plan.node(n).intent == "lend"]
    assert len(lent) == 2, report.text()
    wait_for(
        lambda: sorted(bed.gang_nodes(name).values()) == sorted(lent),
        timeout=60,
        what=f"both pods of {name} Running, one on each of {lent}",
    )
    return lent


def test_a_gang_of_two_borrows_two_nodes_in_one_run_and_runs(gang_bridge):
    bed = gang_bridge
    lent = _lend_gang(bed)
    groups = {bed.group_of(n) for n in lent}
    assert len(groups) == 1 and "" not in groups, groups
    assert all(bed.lent(n) for n in lent)
    assert sorted(p["node"] for p in bed.placeholders()) == sorted(lent)
    taints = {n: [t.key for t in bed.node(n).spec.taints or []] for n in lent}
    assert all(keys == ["slurm-pool/gang"] for keys in taints.values()), taints
    assert all(bed.fenced(n) for n in NODES if n not in lent)
    assert bed.vcjob_phase("train") == "Running"
    again = bed.reconcile(NIGHT)
    assert again.ok and again.plan.steps == [], again.text()
    assert {again.plan.node(n).intent for n in lent} == {"lent"}


def test_a_gang_that_fits_no_set_of_lendable_nodes_leaves_lending_alone(gang_bridge):
    bed = gang_bridge
    _fence_all(bed)
    bed.create_vcjob("huge", pods=3, gpus=2)  # 3 whole nodes, and only 2 may be lent
    bed = bed.with_config(max_lent_nodes=2)
    wait_for(lambda: len(bed.gang_pods("huge")) == 3, timeout=60, what="3 pods of huge made")
    report = bed.reconcile(NIGHT)
    assert report.ok, report.text()
    assert report.plan.steps == [], report.text()
    assert all(bed.fenced(n) for n in NODES) and not bed.placeholders()
    assert any("huge" in note and "no set of lendable nodes" in note for note in report.plan.notes), report.text()
    assert "huge" in report.text()
    assert not any(p.spec.node_name for p in bed.gang_pods("huge"))


def test_an_owner_job_on_one_node_stops_the_whole_gang_and_both_nodes_go_back(gang_bridge):
    bed = gang_bridge
    bed.label_nodes(GANG_NODES)
    lent = _lend_gang(bed, selector={TEST_GROUP_LABEL: "train"})
    assert sorted(lent) == sorted(GANG_NODES)
    placeholders = [int(p["id"]) for p in bed.placeholders()]

    owner = bed.cluster.sbatch(
        "-p", "a-owner", "--qos=guaranteed", "-A", "proja", "-w", "a-gpu1", "--gres=gpu:2",
        "-o", "/dev/null", "-D", "/tmp", user="alice", script=OWNER_JOB,
    )  # fmt: skip
    poller = Overlap(bed, owner, "a-gpu1")
    poller.start()
    try:
        bed.cluster.wait_state(owner, ["RUNNING"], timeout=30)
        wait_for(lambda: sum(s[1] == "RUNNING" for s in poller.samples) >= 10, timeout=30, what="10 samples")
    finally:
        poller.done.set()
        poller.join()
    assert poller.both_sides() == [], poller.samples
    # The placeholder's fence closed every node of the group and stopped the job as one unit.
    assert all(bed.fenced(n) for n in GANG_NODES)
    assert bed.vcjob_phase("train") in ("Aborting", "Aborted"), bed.vcjob_phase("train")
    wait_for(lambda: bed.bound_anywhere(GANG_NODES) == [], timeout=30, what="no pod bound to the group's nodes")

    report = bed.reconcile(NIGHT)
    assert report.ok, report.text()
    assert {report.plan.node(n).intent for n in GANG_NODES} == {"reclaim"}, report.text()
    assert not [r for r in report.results if r.kind == "evict"], report.text()
    ended = PLACEHOLDER_ENDED
    for job in placeholders:
        bed.cluster.wait_sacct(job, "State", lambda v: v.startswith(ended))
    assert not bed.placeholders()
    assert not any(bed.lent(n) or bed.group_of(n) for n in GANG_NODES)
    assert bed.bound_anywhere(GANG_NODES) == []
    assert bed.cluster.job_field(owner, "%T") == "RUNNING"
    again = bed.reconcile(NIGHT)
    assert again.ok and not any(bed.lent(n) for n in NODES), again.text()
    wait_for(lambda: bed.vcjob_phase("train") == "Aborted", timeout=30, what="the vcjob Aborted")


@pytest.mark.parametrize("first", ["inference", "gangs"])
def test_inference_and_a_gang_share_the_free_nodes_by_the_specs_rule(gang_bridge, first):
    from slurm_pool.spec.bridge import GangSettings

    bed = gang_bridge
    gangs = GangSettings(namespaces=[bed.namespace], grace_seconds=0, first=first)
    bed = bed.with_config(max_lent_nodes=2, gangs=gangs)
    _fence_all(bed)
    bed.create_isvc("llm", replicas=2)  # 2 GPUs: one node
    wait_for(lambda: len(bed.predictors()) == 2, timeout=30, what="2 predictor pods created")
    bed.create_vcjob("train", pods=2, gpus=2)  # two nodes; only 2 nodes may be lent in all
    _pods_pending(bed, "train", 2)

    dry = bed.reconcile(NIGHT, dry_run=True)
    rule = next(n for n in dry.plan.notes if "bridge.gangs.first" in n)
    assert first in rule, dry.text()
    report = bed.reconcile(NIGHT)
    assert report.ok, report.text()
    lent = [n for n in NODES if report.plan.node(n).intent == "lend"]
    if first == "inference":
        assert len(lent) == 1, report.text()
        bed.wait_predictors(2, lent[0])
        assert any("train" in n and "no set of lendable nodes" in n for n in report.plan.notes), report.text()
        assert not any(p.spec.node_name for p in bed.gang_pods("train"))
    else:
        assert len(lent) == 2 and {bed.group_of(n) for n in lent} != {""}, report.text()
        wait_for(lambda: sorted(bed.gang_nodes("train").values()) == sorted(lent), timeout=60, what="the gang runs")
        assert bed.running_on() == {}, "the gang's nodes are tainted against inference pods"
        assert any("inference demand cannot be met" in n for n in report.plan.notes), report.text()
