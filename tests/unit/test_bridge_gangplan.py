"""The planner with Volcano gangs (pure, table-driven): lend all or nothing, keep and reclaim groups as wholes.

Snapshots are built directly (Slurm and Kubernetes as the planner sees them), four
nodes of two GPUs in the lend partition, at night inside the off-peak window.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timezone
from typing import Any

import pytest

from slurm_pool.adapters.records import State
from slurm_pool.bridge.forecast import Forecast, flat
from slurm_pool.bridge.gangs import GANG_JOB, GANG_LABEL, Gang, PodShape, Toleration
from slurm_pool.bridge.model import (
    LENT_LABEL,
    RECLAIM_TAINT,
    K8sNodeView,
    Placeholder,
    PodView,
    SlurmNodeView,
    Snapshot,
    Taint,
)
from slurm_pool.bridge.plan import Plan, plan
from slurm_pool.spec.bridge import Bridge, ForecastSettings, GangSettings

GPU = "nvidia.com/gpu"
NIGHT = datetime(2026, 1, 7, 2, 0, tzinfo=timezone.utc)
NOON = datetime(2026, 1, 7, 12, 0, tzinfo=timezone.utc)
T = NIGHT.timestamp()
NODES = ("n1", "n2", "n3", "n4")
CONFIG = Bridge(timezone="UTC", gangs=GangSettings())


def pods(count: int, gpus: int = 2, **shape: Any) -> tuple[PodShape, ...]:
    return tuple(PodShape({GPU: gpus}, **shape) for _ in range(count))


def gang(name: str = "train", count: int = 2, gpus: int = 2, **more: Any) -> Gang:
    fields: dict[str, Any] = {"pods": pods(count, gpus), "job": name, "job_phase": "Pending", "grace_seconds": 10}
    fields.update(more)
    return Gang("ml", f"{name}-pg", f"uid-{name}", count, **fields)


def site(
    demand: int = 0,
    lent: dict[str, str] | None = None,
    gangs: tuple[Gang, ...] = (),
    on: dict[str, list[str]] | None = None,
    job: str = "ml/train",
    started: float = T - 3600,
    **node: dict[str, Any],
) -> Snapshot:
    """The site: ``lent`` node -> its gang group ("": lent for inference), ``on``: node -> pods ("ns/name")."""
    lent = lent or {}
    slurm, k8s, held = {}, {}, []
    for i, n in enumerate(NODES):
        state = State("ALLOCATED") if n in lent else State("IDLE")
        slurm[n] = SlurmNodeView(n, state, partitions=("k8s-lend",))
        if n in lent:
            held.append(Placeholder(100 + i, n, State("RUNNING"), start_time=started))
            labels, taints, notes = {LENT_LABEL: "true"}, [], {}
            if lent[n]:
                labels[GANG_LABEL] = lent[n]
                taints.append(Taint(GANG_LABEL, lent[n]))
                notes = {GANG_JOB: job} if job else {}
            view = K8sNodeView(n, 2, False, tuple(taints), labels, notes)
        else:
            view = K8sNodeView(n, 2, True, (Taint(RECLAIM_TAINT),))
        k8s[n] = replace(view, **node.get(n, {}))
    views = tuple(pod_of(ref, n) for n, refs in (on or {}).items() for ref in refs)
    return Snapshot(
        slurm_nodes=slurm,
        placeholders=tuple(held),
        pending=(),
        busy={},
        k8s_nodes=k8s,
        pods=views,
        demand_gpus=demand,
        lend_partition="k8s-lend",
        demand_by_resource={GPU: demand},
        gangs=gangs,
    )


def pod_of(ref: str, node: str) -> PodView:
    """Pod ``ns/name`` on ``node``; one of namespace ``ml`` is its gang's (``train-0`` -> PodGroup ``train-pg``)."""
    ns, name = ref.split("/")
    return PodView(ns, name, node, group=f"{name.rsplit('-', 1)[0]}-pg" if ns == "ml" else "")


def run(snap: Snapshot, now: datetime = NIGHT, **config: Any) -> Plan:
    return plan(snap, CONFIG.model_copy(update=config), now)


def grouped(p: Plan) -> list[str]:
    """The nodes lent (or being lent) for a gang."""
    return [n.node for n in p.nodes for s in n.steps if s.kind == "open" and s.group]


def for_inference(p: Plan) -> list[str]:
    return [n.node for n in p.nodes for s in n.steps if s.kind == "open" and not s.group]


def notes(p: Plan) -> str:
    return "\n".join(p.notes)


G = gang().group

LENDING = {
    # case: (gangs, demand, config, nodes changed, lent for gangs, lent for inference, note fragment)
    "a 2-pod gang gets exactly 2 nodes": ((gang(),), 0, {}, {}, ["n1", "n2"], [], ""),
    "two 1-GPU pods share one node": ((gang(gpus=1),), 0, {}, {}, ["n1"], [], ""),
    "a gang too big: nothing lent, inference unaffected": (
        (gang(count=5),),
        2,
        {},
        {},
        [],
        ["n1"],
        "gang ml/train-pg (5 pods, 10 GPU(s)): no set of lendable nodes fits all its pods: "
        "5 pod(s) of 2 nvidia.com/gpu, 3 of 3 free node(s) fit one",
    ),
    "a pod bigger than any node": ((gang(count=2, gpus=4),), 0, {}, {}, [], [], "0 of 4 free node(s) fit one"),
    "the cap leaves too little room": (
        (gang(count=3),),
        0,
        {"max_lent_nodes": 2},
        {},
        [],
        [],
        "within bridge.max_lent_nodes: it needs 3 node(s), 2 more may be lent",
    ),
    "inference first takes the one free node": (
        (gang(count=1),),
        2,
        {"gangs": GangSettings(first="inference")},
        {n: {"problem": "broken"} for n in ("n2", "n3", "n4")},
        [],
        ["n1"],
        "free nodes go to inference first, then gangs (bridge.gangs.first)",
    ),
    "gangs first take the one free node": (
        (gang(count=1),),
        2,
        {"gangs": GangSettings(first="gangs")},
        {n: {"problem": "broken"} for n in ("n2", "n3", "n4")},
        ["n1"],
        [],
        "free nodes go to gangs first, then inference (bridge.gangs.first)",
    ),
    "a node selector picks the node": (
        (gang(pods=pods(2, node_selector={"gpu": "h100"})),),
        0,
        {},
        {"n3": {"labels": {"gpu": "h100"}}, "n4": {"labels": {"gpu": "h100"}}},
        ["n3", "n4"],
        [],
        "",
    ),
    "a foreign taint must be tolerated": (
        (gang(),),
        0,
        {},
        {n: {"taints": (Taint(RECLAIM_TAINT), Taint("dedicated", "x"))} for n in ("n1", "n2")},
        ["n3", "n4"],
        [],
        "",
    ),
    "a tolerated taint is no bar": (
        (gang(pods=pods(2, tolerations=(Toleration("dedicated", "Exists"),))),),
        0,
        {},
        {n: {"taints": (Taint(RECLAIM_TAINT), Taint("dedicated", "x"))} for n in ("n1", "n2")},
        ["n1", "n2"],
        [],
        "",
    ),
    "a gang with a pod running is not lent for": (
        (gang(phase="Running", running=1),),
        0,
        {},
        {},
        [],
        [],
        "runs 1 of its 2 pods already: lending nothing for it",
    ),
    "a grace longer than allowed": (
        (gang(grace_seconds=60),),
        0,
        {},
        {},
        [],
        [],
        "termination grace (60s) is longer than bridge.gangs.grace_seconds (20s)",
    ),
    "a gang that cannot be read": ((gang(problem="bad template"),), 0, {}, {}, [], [], "cannot be read whole"),
    "without bridge.gangs no gang is seen": ((gang(),), 0, {"gangs": None}, {}, [], [], ""),
}


@pytest.mark.parametrize("case", LENDING)
def test_lending_for_gangs(case):
    gangs, demand, config, changed, want_gang, want_inference, note = LENDING[case]
    p = run(site(demand, gangs=gangs, **changed), **config)
    assert grouped(p) == want_gang, p.to_dict()
    assert for_inference(p) == want_inference, p.to_dict()
    assert note in notes(p)
    assert (p.gangs is None) == (config.get("gangs", CONFIG.gangs) is None)
    if want_gang:
        opened = [s for s in p.steps if s.kind == "open" and s.group]
        assert {(s.group, s.job) for s in opened} == {(gangs[0].group, "ml/train")}
        assert "lent for gang ml/train-pg" in p.node(want_gang[0]).reasons[0]
        assert [s.kind for s in p.node(want_gang[0]).steps] == ["submit", "wait-running", "open"]
        assert p.lent_gpus == len(want_inference) * 2  # gang nodes are no inference supply
        assert p.gangs is not None and p.gangs[0]["nodes"] == want_gang


def test_the_lend_reason_names_the_gang_and_its_shape():
    p = run(site(gangs=(gang(),)))
    assert p.node("n1").reasons == ("lent for gang ml/train-pg (2 pods x 2 GPU(s))",)
    assert p.to_dict()["gangs"] == [
        {
            "group": G,
            "gang": "ml/train-pg",
            "job": "ml/train",
            "nodes": ["n1", "n2"],
            "intent": "lend",
            "why": "lent for gang ml/train-pg (2 pods x 2 GPU(s))",
        }
    ]


def test_without_gangs_a_plan_is_as_before():
    snap = site(2)
    off = CONFIG.model_copy(update={"gangs": None})
    assert plan(replace(snap, gangs=(gang(),)), off, NIGHT).to_dict() == plan(snap, off, NIGHT).to_dict()
    assert "gangs" not in plan(snap, off, NIGHT).to_dict()


@pytest.mark.parametrize(
    "gang_now, pods_on",
    [
        (gang(), {}),  # lent, the gang's pods not bound yet
        (gang(phase="Running", running=2), {"n1": ["ml/train-0"], "n2": ["ml/train-1"]}),
    ],
)
def test_level_triggered_once_the_lend_is_carried_out(gang_now, pods_on):
    first = run(site(gangs=(gang(),)))
    assert grouped(first) == ["n1", "n2"]
    done = site(lent={"n1": G, "n2": G}, gangs=(gang_now,), on=pods_on)
    again = run(done)
    assert again.steps == [], again.to_dict()
    assert {again.node(n).intent for n in ("n1", "n2")} == {"lent"}
    assert again.gangs and again.gangs[0]["intent"] == "lent"


def test_a_group_missing_its_marks_is_opened_again():
    done = site(lent={"n1": G, "n2": G}, gangs=(gang(),), n2={"taints": ()})
    p = run(done)
    assert [(s.node, s.kind, s.group) for s in p.steps] == [("n2", "open", G)]


RECLAIM = {
    # case: (site changes, gang in the snapshot, frozen, aborts (node, job), evicted pods per node, reason)
    "one node drained by Slurm: the whole group goes, one abort": (
        {"n1": {}},
        gang(phase="Running", running=2),
        False,
        [("n1", "ml/train")],
        {"n2": ("ml/eval-0", "web/other")},  # another gang's pod in the same namespace is no pod of this one
        f"gang group {G} of ml/train: node n1 is needed by Slurm (slurm: DRAIN by a person (disk))",
    ),
    "the gang is gone: no abort, its pods are evicted": (
        {},
        None,
        False,
        [],
        {"n1": ("ml/train-0",), "n2": ("ml/train-1", "ml/eval-0", "web/other")},
        f"gang group {G} of ml/train: its gang is gone",
    ),
    "the gang ended (aborted): no abort again": (
        {},
        gang(job_phase="Aborted"),
        False,
        [],
        {"n1": ("ml/train-0",), "n2": ("ml/train-1", "ml/eval-0", "web/other")},
        "its gang ml/train-pg ended (Aborted)",
    ),
}


@pytest.mark.parametrize("case", RECLAIM)
def test_reclaim_of_a_group(case):
    drained, gang_now, frozen, aborts, evicted, reason = RECLAIM[case]
    snap = site(
        lent={"n1": G, "n2": G},
        gangs=(gang_now,) if gang_now else (),
        on={"n1": ["ml/train-0"], "n2": ["ml/train-1", "ml/eval-0", "web/other"]},
    )
    if drained:
        slurm = dict(snap.slurm_nodes)
        slurm["n1"] = replace(slurm["n1"], state=State("ALLOCATED", frozenset({"DRAIN"})), reason="disk")
        snap = replace(snap, slurm_nodes=slurm)
    p = run(snap)
    assert [p.node(n).intent for n in ("n1", "n2")] == ["reclaim", "reclaim"]
    assert [(s.node, s.job) for s in p.steps if s.kind == "abort"] == aborts
    assert all(s.group == G for s in p.steps if s.kind == "abort")
    assert {s.node: s.pods for s in p.steps if s.kind == "evict"} == evicted
    for n in ("n1", "n2"):
        assert reason in p.node(n).reasons[0]
        assert [s.kind for s in p.node(n).steps if s.kind not in ("abort", "evict")] == [
            "fence",
            "wait-empty",
            "cancel",
            "release",
        ]
    assert p.gangs and p.gangs[0]["intent"] == "reclaim" and p.gangs[0]["nodes"] == ["n1", "n2"]


def test_a_group_without_a_valid_job_annotation_is_evicted_and_says_so():
    snap = site(lent={"n1": G, "n2": G}, job="not a job", on={"n1": ["ml/train-0"]})
    p = run(replace(snap, unreadable=("PodGroup ml/x: bad",)))  # the gang cannot be told: kept as it is
    assert {p.node(n).intent for n in ("n1", "n2")} == {"lent"}
    drained = dict(snap.slurm_nodes)
    drained["n2"] = replace(drained["n2"], state=State("ALLOCATED", frozenset({"DRAIN"})), reason="disk")
    p = run(replace(snap, unreadable=("PodGroup ml/x: bad",), slurm_nodes=drained))
    assert not [s for s in p.steps if s.kind == "abort"]
    assert [s.pods for s in p.steps if s.kind == "evict"] == [("ml/train-0",)]
    assert p.node("n1").reasons[0].startswith(f"gang group {G} of an unknown job: node n2 is needed by Slurm")
    assert "no valid slurm-pool/gang-job annotation (not a job), so its pods are evicted" in p.node("n1").reasons[0]


@pytest.mark.parametrize("ago, kept", [(60, True), (700, False)])
def test_an_ended_gang_gives_its_group_back_after_the_minimum_lease(ago, kept):
    snap = site(lent={"n1": G, "n2": G}, gangs=(gang(job_phase="Completed"),), started=T - ago)
    p = run(snap, min_lease_seconds=600)
    assert {p.node(n).intent for n in ("n1", "n2")} == ({"lent"} if kept else {"reclaim"})
    if kept:
        assert "kept for its minimum lease (540s left)" in p.node("n2").reasons[0]
    assert not [s for s in p.steps if s.kind == "abort"]


def test_more_than_the_cap_gives_back_whole_groups_of_the_lower_gang():
    low, high = gang("low", priority=1), gang("high", priority=9)
    lent = {"n1": high.group, "n2": high.group, "n3": low.group, "n4": low.group}
    p = run(site(lent=lent, gangs=(high, low)), max_lent_nodes=3)
    assert {n.node: n.intent for n in p.nodes} == {"n1": "lent", "n2": "lent", "n3": "reclaim", "n4": "reclaim"}
    assert "more than bridge.max_lent_nodes (3) lent: the whole group goes back" in p.node("n4").reasons[0]
    assert len([s for s in p.steps if s.kind == "abort"]) == 1


def test_outside_the_windows_a_group_goes_back():
    p = run(site(lent={"n1": G, "n2": G}, gangs=(gang(phase="Running", running=2),)), now=NOON)
    assert {p.node(n).intent for n in ("n1", "n2")} == {"reclaim"}
    assert "outside the off-peak windows" in p.node("n2").reasons[0]


def test_outside_the_windows_no_gang_is_lent_for():
    p = run(site(gangs=(gang(),)), now=NOON)
    assert grouped(p) == []
    assert "0 of 0 free node(s) fit one" in notes(p)


def test_a_lent_group_leaves_inference_its_own_nodes():
    snap = site(2, lent={"n1": G, "n2": G, "n3": ""}, gangs=(gang(phase="Running", running=2),))
    p = run(snap)
    assert {n.node: n.intent for n in p.nodes} == {"n1": "lent", "n2": "lent", "n3": "lent", "n4": "slurm"}
    assert p.lent_gpus == 2


@pytest.mark.parametrize(
    "slurm_wants, lent, vetoed",
    [
        ({}, ["n1", "n2"], []),
        ({"a": 4.0}, ["n3", "n4"], []),  # Slurm wants group a soon: b's nodes cost less
        ({"a": 2.0, "b": 2.0}, ["n1", "n3"], ["n2"]),  # half of each group may go: one node of each
        ({"a": 4.0, "b": 2.0}, [], ["n1", "n2", "n4"]),  # one node in all may go: the gang gets none
    ],
)
def test_a_forecast_veto_keeps_a_node_from_a_gang_too(slurm_wants, lent, vetoed):
    fc = Forecast({"n1": "a", "n2": "a", "n3": "b", "n4": "b"}, {"a": 4, "b": 4}, None, {
        g: flat(v) for g, v in slurm_wants.items()
    })  # fmt: skip
    config = CONFIG.model_copy(update={"forecast": ForecastSettings()})
    p = plan(site(gangs=(gang(),)), config, NIGHT, forecast=fc)
    assert grouped(p) == lent, p.to_dict()
    assert [n for n in NODES if any(r.startswith("forecast:") for r in p.node(n).reasons)] == vetoed


CUT_SHORT = {
    # case: placeholders submitted for the group (no node marked yet) -> (intents, step kinds per node, aborts)
    "both placeholders submitted: the group is finished, not lent again": (
        ("n1", "n2"),
        {"n1": "lend", "n2": "lend"},
        {"n1": ["open"], "n2": ["open"]},
    ),
    "one of two submitted: it cannot hold the gang, so it goes back and the gang waits": (
        ("n1",),
        {"n1": "reclaim"},
        {"n1": ["fence", "cancel", "release"]},
    ),
}


@pytest.mark.parametrize("case", CUT_SHORT)
def test_a_lend_cut_short_is_known_by_its_placeholders_comment(case):
    submitted, intents, kinds = CUT_SHORT[case]
    snap = site(gangs=(gang(),))
    held = tuple(Placeholder(200 + i, n, State("RUNNING"), start_time=T - 10, group=G) for i, n in enumerate(submitted))
    slurm = {n: replace(v, state=State("ALLOCATED")) if n in submitted else v for n, v in snap.slurm_nodes.items()}
    p = run(replace(snap, placeholders=held, slurm_nodes=slurm))
    assert {n: p.node(n).intent for n in submitted} == intents, p.to_dict()
    assert {n: [s.kind for s in p.node(n).steps] for n in submitted} == kinds
    assert not [s for s in p.steps if s.kind == "abort"], "a gang that never ran on the group is not stopped"
    assert all(s.group == G and s.job == "ml/train" for s in p.steps if s.kind == "open")
    if len(submitted) == 1:
        assert "cannot hold all of gang ml/train-pg's pods (a lend cut short)" in p.node("n1").reasons[0]
        assert grouped(p) == [], "the gang is lent for again only once the node is back"


UNREACHABLE = Taint("node.kubernetes.io/unreachable", "", "NoSchedule")

STATUS_LAGS = {
    # case: (PodGroup phase, status.running, pods of the gang on its group's nodes, a node unreachable) -> kept
    "status lags, both pods bound, one node briefly unreachable: kept": (
        "Running",
        1,
        ["train-0", "train-1"],
        True,
        True,
    ),
    "status still Inqueue, both pods bound: kept": ("Inqueue", 0, ["train-0", "train-1"], True, True),
    "one pod bound, the other node cannot take the second: cut short": ("Running", 1, ["train-0"], True, False),
    "one pod bound, the nodes can hold both: kept (it is placing)": ("Running", 1, ["train-0"], False, True),
    "a pod on its way out does not count: cut short": ("Running", 1, ["train-0", "train-1:terminating"], True, False),
}


@pytest.mark.parametrize("case", STATUS_LAGS)
def test_a_running_gang_is_not_cut_short_by_a_lagging_status(case):
    phase, running, bound_pods, unreachable, kept = STATUS_LAGS[case]
    g = gang(phase=phase, running=running, job_phase="Running")
    n2 = {"taints": (Taint(GANG_LABEL, G), UNREACHABLE)} if unreachable else {}
    snap = site(lent={"n1": G, "n2": G}, gangs=(g,), n2=n2)
    views = []
    for i, ref in enumerate(bound_pods):
        name, _, how = ref.partition(":")
        views.append(replace(pod_of(f"ml/{name}", f"n{i + 1}"), terminating=how == "terminating"))
    p = run(replace(snap, pods=tuple(views)))
    intents = {n: p.node(n).intent for n in ("n1", "n2")}
    assert intents == ({"n1": "lent", "n2": "lent"} if kept else {"n1": "reclaim", "n2": "reclaim"}), p.to_dict()
    if not kept:
        assert "(a lend cut short)" in p.node("n1").reasons[0]
