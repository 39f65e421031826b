"""Cluster data at face value (issue 49): gangs too big to list, tagged accounts under a site's parent,
sacctmgr rows with a surplus field."""

from __future__ import annotations

import time
from typing import Any

import pytest

from slurm_pool.accounting.apply import foreign_parent
from slurm_pool.accounting.owned import NameCollision
from slurm_pool.adapters.records import NodeRecord, node_state
from slurm_pool.adapters.runner import RecordingRunner
from slurm_pool.adapters.slurm import SlurmClient
from slurm_pool.bridge.gangs import MAX_GANG_PODS, read_gangs
from slurm_pool.bridge.model import build_snapshot
from slurm_pool.spec.bridge import Bridge, GangSettings
from tests.unit.test_accounting_adopt import _apply, _changes, _spec, _world
from tests.unit.test_bridge_gangs_read import GPU, SETTINGS, _podgroup, _task, _vcjob

BIG = 2**31 - 1

# -- gangs ------------------------------------------------------------------------------------


def _gang(replicas: int, min_member: int, min_available: int | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    task = _task("worker", replicas, minAvailable=min_available if min_available is not None else min_member)
    job = _vcjob(tasks=[task])
    pg = _podgroup(job)
    pg["spec"]["minMember"] = min_member
    return job, pg


# (replicas, minMember, the task's minAvailable, the bound, what the problem says)
HUGE = [
    (BIG, BIG, BIG, MAX_GANG_PODS, f"spec.minMember: {BIG} pods at once are more than the pool's nodes can hold"),
    (BIG, 2, BIG, MAX_GANG_PODS, f"its tasks' minimums, {BIG} pods at once, are more than {MAX_GANG_PODS}"),
    (5, 5, 5, 4, "spec.minMember: 5 pods at once are more than the pool's nodes can hold (4)"),
    (5, 2, 5, 4, "its tasks' minimums, 5 pods at once, are more than 4"),
]


@pytest.mark.parametrize("replicas, min_member, min_available, bound, said", HUGE)
def test_a_gang_too_big_for_the_pool_is_a_named_problem_never_a_list_of_pods(
    replicas, min_member, min_available, bound, said
):
    job, pg = _gang(replicas, min_member, min_available)
    problems: list[str] = []
    start = time.monotonic()
    (gang,) = read_gangs([pg], [job], [], SETTINGS, GPU, problems, bound)
    assert time.monotonic() - start < 1.0  # nothing was expanded pod by pod
    assert gang.pods == () and said in gang.problem and problems == [gang.problem]


@pytest.mark.parametrize("pods", [1, 4])
def test_a_gang_the_pool_can_hold_is_read_whole(pods):
    job, pg = _gang(pods, pods)
    (gang,) = read_gangs([pg], [job], [], SETTINGS, GPU, [], 4)
    assert gang.problem == "" and len(gang.pods) == pods


def _node(name: str, gpus: int) -> NodeRecord:
    return NodeRecord(name=name, state=node_state("IDLE"), gres=f"gpu:a100:{gpus}" if gpus else "")


@pytest.mark.parametrize(
    "nodes, pods, fits",
    [
        ([_node("n1", 2), _node("n2", 2)], 4, True),  # a pod per GPU
        ([_node("n1", 2), _node("n2", 2)], 5, False),
        ([_node("n1", 0), _node("n2", 0)], 2, True),  # a node without GPUs holds a pod
        ([], 1, False),
    ],
)
def test_the_bridge_bounds_a_gang_by_its_nodes(nodes, pods, fits):
    job, pg = _gang(pods, pods)
    snap = build_snapshot(Bridge(gangs=GangSettings()), nodes, [], [], [], [], podgroups=[pg], vcjobs=[job])
    (gang,) = snap.gangs
    assert (gang.problem == "") == fits, gang.problem
    assert len(gang.pods) == (pods if fits else 0)


def test_rebalance_reads_a_gang_of_int32_max_members_in_bounded_time():
    job, pg = _gang(BIG, BIG)
    start = time.monotonic()
    snap = build_snapshot(Bridge(gangs=GangSettings()), [_node("n1", 8)], [], [], [], [], podgroups=[pg], vcjobs=[job])
    assert time.monotonic() - start < 1.0
    assert "more than the pool's nodes can hold (8)" in snap.gangs[0].problem


# -- a tagged account under a site's parent -----------------------------------------------------


def _tagged_under(parent: str):
    def site(fake: Any) -> None:
        fake.accounts["proja"] = {"Descr": "slurm-pool", "Org": "slurm-pool"}
        fake.assoc[("proja", "")] = {"ParentName": parent, "Fairshare": "1"}
        fake.assoc[("proja", "mallory")] = {}

    return site


@pytest.mark.parametrize("parent", ["physics", "Physics", "root2"])
def test_a_tagged_account_under_a_sites_parent_is_left_as_it_is(parent):
    fake, runner, slurm = _world(_tagged_under(parent))
    for prune in (False, True):  # a collision now: named, and nothing is applied
        with pytest.raises(NameCollision) as err:
            _apply(_spec(), slurm, prune=prune)
        said = [line for line in err.value.lines() if line.startswith("account proja")]
        assert said and f"carries slurm-pool's tag under the site's account {parent}" in said[0]
        assert "adopt: {accounts: [{name: proja, fields: [...]}]}" in said[0]
    touched = [c for c in _changes(runner) if any("proja" in a for a in c)]
    assert touched == []  # no association, no limit, no deletion: the site's account is the site's
    assert ("proja", "alice") not in fake.assoc and ("proja", "mallory") in fake.assoc


@pytest.mark.parametrize("parent", ["root", "", " root "])
def test_a_tagged_account_under_root_is_the_pools(parent):
    fake, runner, slurm = _world(_tagged_under(parent))
    _apply(_spec(), slurm)
    assert ("proja", "alice") in fake.assoc
    assert foreign_parent(fake.assoc, "proja") == ""


def test_an_adopted_account_under_a_sites_parent_is_managed():
    fake, runner, slurm = _world(_tagged_under("physics"))
    _apply(_spec({"accounts": [{"name": "proja", "fields": []}]}), slurm)
    assert ("proja", "alice") in fake.assoc


# -- sacctmgr rows ------------------------------------------------------------------------------


def _show(out: str, fields: list[str], entity: str = "account") -> list[dict[str, str]]:
    r = RecordingRunner()
    r.on(["sacctmgr"], out)
    return SlurmClient(r).sacctmgr_show(entity, fields)


@pytest.mark.parametrize(
    "out, fields, want",
    [
        # an account named projb|zzz: "alice" must not become projb's coordinator
        ("alice|projb|zzz\nbob|projc\n", ["Coordinators", "Account"], [{"Coordinators": "bob", "Account": "projc"}]),
        ("projb|zzz|alice\nprojc|bob\n", ["Account", "Coordinators"], [{"Account": "projc", "Coordinators": "bob"}]),
        ("a|b|c|d\nx|y\n", ["User", "DefaultAccount"], [{"User": "x", "DefaultAccount": "y"}]),
        ("proja|u||||normal|extra\n", ["Account", "User", "Fairshare", "QOS", "DefaultQOS", "ParentName"], []),
        # one free-text field takes the surplus: a description holding "|"
        ("a|b|proja\n", ["Descr", "Account"], [{"Descr": "a|b", "Account": "proja"}]),
    ],
)
def test_a_sacctmgr_row_with_a_surplus_field_is_reported_and_skipped(out, fields, want, caplog):
    assert _show(out, fields) == want
    if len(want) < len(out.splitlines()):
        assert "skipped a record: sacctmgr show account" in caplog.text and "fields, not" in caplog.text


@pytest.mark.parametrize("order", ["site row last", "site row first"])
def test_an_account_name_holding_a_bar_never_changes_whose_account_is_whose(order, caplog):
    """A site account ``x|proja``: its rows read as another ``proja`` row; proja is then no one's tag."""

    def site(fake: Any) -> None:
        fake.accounts["proja"] = {"Descr": "slurm-pool", "Org": "slurm-pool"}
        fake.assoc[("proja", "")] = {}
        fake.accounts["x|proja"] = {"Descr": "mine", "Org": "slurm-pool"}
        fake.assoc[("x|proja", "")] = {}
        if order == "site row first":
            fake.accounts = dict(reversed(list(fake.accounts.items())))

    fake, runner, slurm = _world(site)
    with pytest.raises(NameCollision) as err:
        _apply(_spec(), slurm)
    assert err.value.lines()[0].startswith("account proja: exists in slurmdbd and slurm-pool did not create it")
    assert not [c for c in _changes(runner) if any("proja" in a for a in c)]
    assert "'proja' is listed twice" in caplog.text
