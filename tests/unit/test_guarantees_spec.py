"""Floating guarantees in the spec (issue 28): the rules, the partition's capacity, overcommit."""

from __future__ import annotations

import copy
from typing import Any, Callable

import pytest

from slurm_pool.errors import SpecError
from slurm_pool.spec import parse_spec
from slurm_pool.spec.guarantees import (
    capacity_of,
    check_guarantees,
    guarantee_sums,
    overcommit_issues,
    partition_capacity,
    partition_nodes,
    partition_types,
)

H100 = "nvidia_h100_80gb_hbm3"

#: proja owns group a; the floating partition is over f (2 x 2 H100) and m (an A100-80GB with two 3g.40gb
#: MIG instances and a whole A100): 4 + 3 = 7 gres/gpu.  projd is promised 2 GPUs, proje 2 H100s.
BASE: dict[str, Any] = {
    "version": 1,
    "cluster": {"name": "fl"},
    "node_groups": [
        {"name": "a", "hosts": "a-gpu1", "cpus": 4, "memory_mb": 8000, "gpus": {"model": "A100-80GB", "count": 2}},
        {"name": "f", "hosts": "f-gpu[1-2]", "cpus": 4, "memory_mb": 8000, "gpus": {"model": "H100-80GB", "count": 2}},
        {
            "name": "m",
            "hosts": "m-gpu1",
            "cpus": 4,
            "memory_mb": 8000,
            "gpus": {"model": "A100-80GB", "count": 2, "mig": [["3g.40gb", "3g.40gb"], None]},
        },
    ],
    "tiers": [
        {"name": "guaranteed", "priority": 1000, "preempt": ["shared", "scavenger"]},
        {"name": "shared", "priority": 500, "preempt": ["scavenger"], "preempt_mode": "requeue", "grace_time": 20},
        {"name": "scavenger", "priority": 100, "preempt_mode": "requeue", "grace_time": 20},
    ],
    "partitions": [
        {"name": "a-owner", "nodes": ["a"], "tier": "guaranteed", "priority_tier": 100, "allow_accounts": ["proja"]},
        {"name": "floating", "nodes": ["f", "m"], "tier": "guaranteed", "priority_tier": 100},
        {"name": "shared", "nodes": ["ALL"], "tier": "shared", "priority_tier": 50},
        {"name": "scavenger", "nodes": ["ALL"], "tier": "scavenger", "priority_tier": 10, "default": True},
    ],
    "projects": [
        {"name": "proja", "users": ["alice"], "owns": ["a"], "tiers": ["guaranteed", "shared", "scavenger"]},
        {"name": "projd", "users": ["dave"], "guarantee": {"gres/gpu": 2}, "tiers": ["guaranteed", "shared"]},
        {"name": "proje", "users": ["erin"], "guarantee": {f"gres/gpu:{H100}": 2}, "tiers": ["guaranteed", "shared"]},
        {"name": "projx", "users": ["xavier"], "tiers": ["shared", "scavenger"]},
    ],
    "guarantees": {"tier": "guaranteed", "partition": "floating", "overflow": "shared"},
}


def _with(change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    doc = copy.deepcopy(BASE)
    change(doc)
    return doc


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    """A change that sets ``a.b.0.c`` (list indexes as numbers) to ``value``; None removes the key."""

    def change(doc: dict[str, Any]) -> None:
        *head, last = [int(p) if p.isdigit() else p for p in path.split(".")]
        for p in head:
            doc = doc[p]
        if value is None:
            del doc[last]
        else:
            doc[last] = value

    return change


def _no_guarantees(doc: dict[str, Any]) -> None:
    for proj in doc["projects"]:
        proj.pop("guarantee", None)
    del doc["guarantees"]


def _issues(doc: dict[str, Any]) -> list[tuple[str, str]]:
    try:
        parse_spec(doc)
    except SpecError as exc:
        return [(i.path, i.message) for i in exc.issues]
    return []


OVER_H100 = (
    f"guarantees of gres/gpu:{H100} sum to 6 GPUs, 2 more than 1.0 x 4 GPUs of type {H100} in partition 'floating'"
)

# (case, change, [(path, a part of the message)]; [] where the spec is valid)
RULES: list[tuple[str, Callable[[dict[str, Any]], None], list[tuple[str, str]]]] = [
    ("the base spec", lambda d: None, []),
    ("no guarantee, no section", lambda d: _no_guarantees(d), []),
    (
        "a guarantee without the section",
        _set("guarantees", None),
        [
            ("projects[1].guarantee", "a guarantee needs the spec's guarantees section"),
            ("projects[2].guarantee", "a guarantee needs the spec's guarantees section"),
        ],
    ),
    ("unknown tier", _set("guarantees.tier", "gold"), [("guarantees.tier", "unknown tier 'gold' (known: ")]),
    ("unknown overflow", _set("guarantees.overflow", "spot"), [("guarantees.overflow", "unknown tier 'spot'")]),
    (
        "unknown partition",
        _set("guarantees.partition", "float"),
        [("guarantees.partition", "unknown partition 'float' (known: a-owner, floating, shared, scavenger)")],
    ),
    (
        "overflow into the guarantees' own tier",
        _set("guarantees.overflow", "guaranteed"),
        [("guarantees.overflow", "'guaranteed' is the guarantees' own tier")],
    ),
    (
        "an overflow tier without a partition",
        lambda d: d["partitions"].pop(2),
        [("guarantees.overflow", "tier 'shared' has no partition for jobs beyond a guarantee")],
    ),
    (
        "a partition of another tier",
        _set("partitions.1.tier", "shared"),
        [("guarantees.partition", "partition 'floating' is of tier 'shared', not of the guarantees' tier")],
    ),
    (
        "a partition over an owned group",
        _set("partitions.1.nodes", ["f", "a"]),
        [("guarantees.partition", "includes node group 'a', which project 'proja' owns")],
    ),
    (
        "a partition over every node",
        _set("partitions.1.nodes", ["ALL"]),
        [("guarantees.partition", "includes node group 'a', which project 'proja' owns")],
    ),
    (
        "a partition over an owned node by its name",
        _set("partitions.1.nodes", ["f", "a-gpu1"]),
        [("guarantees.partition", "includes node group 'a', which project 'proja' owns")],
    ),
    (
        "allow_accounts without a floating project",
        _set("partitions.1.allow_accounts", ["projd"]),
        [("partitions[1].allow_accounts", "lacks proje: every project with a guarantee may use partition")],
    ),
    ("allow_accounts with every floating project", _set("partitions.1.allow_accounts", ["projd", "proje"]), []),
    (
        "a floating project without the overflow tier",
        _set("projects.1.tiers", ["guaranteed"]),
        [("projects[1].tiers", "lacks 'shared' (guarantees.overflow)")],
    ),
    (
        "a floating project without the guarantees' tier",
        _set("projects.2.tiers", ["shared"]),
        [("projects[2].tiers", "lacks 'guaranteed' (guarantees.tier)")],
    ),
    (
        "a type no node has",
        _set("projects.2.guarantee", {"gres/gpu:h100": 2}),
        [("projects[2].guarantee.gres/gpu:h100", "'h100' is not a GPU GRES type of the nodes of partition 'floating'")],
    ),
    (
        "a type of a node outside the partition",
        _set("projects.2.guarantee", {"gres/gpu:nvidia_a100-sxm4-80gb": 1}),
        [],  # group m has a whole A100 too
    ),
    (
        "a MIG type, by its name before and after 23.02.6",
        _set("projects.2.guarantee", {"gres/gpu:nvidia_a100_3g.40gb": 1, "gres/gpu:nvidia_a100_3g.39gb": 1}),
        [],
    ),
    (
        "a MIG profile the layout does not have",
        _set("projects.2.guarantee", {"gres/gpu:nvidia_a100_1g.10gb": 1}),
        [("projects[2].guarantee.gres/gpu:nvidia_a100_1g.10gb", "is not a GPU GRES type")],
    ),
    (
        "a guarantee's QOS named like a tier",
        lambda d: d["tiers"].append({"name": "guaranteed-projd", "priority": 1}),
        [("projects[1].guarantee", "its QOS 'guaranteed-projd' (<tier>-<project>) is also a tier's name")],
    ),
    (
        "overcommit of one type, and in all",
        _set("projects.2.guarantee", {f"gres/gpu:{H100}": 6}),
        [
            ("guarantees.overcommit", OVER_H100),
            ("guarantees.overcommit", "guarantees sum to 8 GPUs, 1 more than 1.0 x 7 GPUs in partition 'floating'"),
        ],
    ),
    ("overcommit allowed", lambda d: (_set("projects.2.guarantee", {f"gres/gpu:{H100}": 6})(d),
                                      _set("guarantees.overcommit", 1.5)(d)), []),
    (
        "a fraction over",
        _set("guarantees.overcommit", 0.5),
        [("guarantees.overcommit", "guarantees sum to 4 GPUs, 0.5 more than 0.5 x 7 GPUs in partition 'floating'")],
    ),
    (
        "MIG instances count as gres/gpu",
        _set("projects.1.guarantee", {"gres/gpu": 5}),
        [],  # 5 + 2 = 7: four H100s, two MIG instances and a whole A100
    ),
    (
        "one GPU more than the partition has",
        _set("projects.1.guarantee", {"gres/gpu": 6}),
        [("guarantees.overcommit", "guarantees sum to 8 GPUs, 1 more than 1.0 x 7 GPUs")],
    ),
]  # fmt: skip


@pytest.mark.parametrize("change, want", [(c, w) for _, c, w in RULES], ids=[r[0] for r in RULES])
def test_rules(change, want) -> None:
    got = _issues(_with(change))
    assert len(got) == len(want), got
    for (path, message), (want_path, want_part) in zip(got, want, strict=True):
        assert path == want_path, got
        assert want_part in message, got


def test_the_issues_are_the_rules_own() -> None:
    spec = parse_spec(BASE)
    assert list(check_guarantees(spec)) == []
    bad = spec.model_copy(update={"guarantees": spec.guarantees.model_copy(update={"tier": "gold"})})
    assert [i.path for i in check_guarantees(bad)] == ["guarantees.tier"]


def test_capacity_per_type_and_in_all() -> None:
    spec = parse_spec(BASE)
    assert partition_nodes(spec, "floating") == ["f-gpu1", "f-gpu2", "m-gpu1"]
    assert partition_capacity(spec) == {
        None: 7,
        H100: 4,
        "nvidia_a100-sxm4-80gb": 1,
        "nvidia_a100_3g.40gb": 2,  # 23.02.6 on
        "nvidia_a100_3g.39gb": 2,  # 22.05 to 23.02.5: the same instances
    }
    assert capacity_of(spec, ["f-gpu2"]) == {None: 2, H100: 2}
    assert capacity_of(spec, ["nosuch"]) == {None: 0}
    assert guarantee_sums(spec) == {None: 4, H100: 2}
    assert H100 in partition_types(spec, ["f-gpu1"]) and "nvidia_a100_3g.40gb" not in partition_types(spec, ["f-gpu1"])


@pytest.mark.parametrize(
    "capacity, want",
    [
        ({None: 7, H100: 4}, []),
        ({None: 2, H100: 2}, ["guarantees sum to 4 GPUs, 2 more than 1.0 x 2 GPUs in partition 'floating'"]),
        (
            {None: 4, H100: 1},
            [f"guarantees of gres/gpu:{H100} sum to 2 GPUs, 1 more than 1.0 x 1 GPUs of type {H100} in partition "
             "'floating'"],
        ),
        ({None: 4}, [f"guarantees of gres/gpu:{H100} sum to 2 GPUs, 2 more than 1.0 x 0 GPUs of type {H100} "
                     "in partition 'floating'"]),
    ],
)  # fmt: skip
def test_overcommit_against_fewer_gpus(capacity, want) -> None:
    """What doctor asks with the nodes that are up: the same rule on any capacity."""
    assert overcommit_issues(parse_spec(BASE), capacity) == want


def test_no_section_no_capacity() -> None:
    spec = parse_spec(_with(_no_guarantees))
    assert partition_capacity(spec) == {} and overcommit_issues(spec, {}) == []
