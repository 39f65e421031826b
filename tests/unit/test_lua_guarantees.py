"""Floating guarantees in job_submit.lua, run in-process on Lua 5.1, 5.3 and 5.4 (lupa).

A floating project's job in the guarantee tier goes to the floating partition
with the project's own QOS while the GPUs the project holds or waits for there
(counted from a fake ``slurm.jobs``, as slurmctld exposes it) plus the job's fit
the guarantee; beyond it, to the overflow tier with a message.  Table-driven.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from slurm_pool.policy.lua import policy_data
from slurm_pool.policy.overflow import overflow_tag
from slurm_pool.policy.tables import GuaranteeRule, build_tables
from slurm_pool.spec import load_spec, load_spec_text
from slurm_pool.spec.model import PoolSpec
from slurm_pool.versions import SlurmVersion
from tests.support.lua_policy import LUA_VERSIONS, LuaPolicy, junk, random_job, unset_job

V2205 = SlurmVersion(22, 5, 8)
V2411 = SlurmVersion(24, 11, 0)
OK, E_ACCESS, E_LIMIT, E_QOS = 0, 2002, 2050, 2066
H100 = "nvidia_h100_80gb_hbm3"
A100 = "nvidia_a100-sxm4-80gb"

# proja owns group a; projd is guaranteed 2 GPUs of any type, proje 2 H100s, on
# partition floating (groups f: H100, g: A100); projx borrows.
SPEC = f"""
version: 1
cluster: {{name: floating}}
node_groups:
  - {{name: a, hosts: a1, cpus: 4, memory_mb: 8000, gpus: {{model: A100-80GB, count: 2}}}}
  - {{name: f, hosts: "f[1-2]", cpus: 4, memory_mb: 8000, gpus: {{model: H100-80GB, count: 2}}}}
  - {{name: g, hosts: g1, cpus: 4, memory_mb: 8000, gpus: {{model: A100-80GB, count: 2}}}}
tiers:
  - {{name: guaranteed, priority: 1000, preempt: [shared, scavenger], preempt_mode: "off"}}
  - name: shared
    priority: 500
    preempt: [scavenger]
    preempt_mode: requeue
    policy: {{checkpoint: add_requeue}}
  - {{name: scavenger, priority: 100, preempt_mode: requeue}}
partitions:
  - {{name: a-owner, nodes: [a], tier: guaranteed, priority_tier: 100, allow_accounts: [proja]}}
  - {{name: floating, nodes: [f, g], tier: guaranteed, priority_tier: 100}}
  - {{name: shared, nodes: [ALL], tier: shared, priority_tier: 50}}
  - {{name: scavenger, nodes: [ALL], tier: scavenger, priority_tier: 10, default: true}}
projects:
  - {{name: proja, users: [alice], owns: [a], tiers: [guaranteed, shared, scavenger], default_tier: guaranteed}}
  - name: projd
    users: [dave]
    guarantee: {{gres/gpu: 2}}
    tiers: [guaranteed, shared, scavenger]
    default_tier: guaranteed
  - name: proje
    users: [erin]
    guarantee: {{"gres/gpu:{H100}": 2}}
    tiers: [guaranteed, shared, scavenger]
    default_tier: guaranteed
  - {{name: projx, users: [xavier], tiers: [shared, scavenger], default_tier: scavenger}}
guarantees: {{tier: guaranteed, partition: floating, overflow: shared}}
policy: {{default_tier: scavenger}}
"""

IN_D = {"partition": "floating", "qos": "guaranteed-projd"}
IN_E = {"partition": "floating", "qos": "guaranteed-proje"}
OUT = {"partition": "shared", "qos": "shared", "requeue": 1}
BEYOND_D = (
    "slurm-pool: projd's guarantee is 2 GPUs and 2 are in use or queued; this job asks for 1 GPU, "
    "so it runs in tier 'shared' (partition 'shared', preemptible) instead."
)


@pytest.fixture(scope="module")
def spec() -> PoolSpec:
    return load_spec_text(SPEC)


@pytest.fixture(scope="module", params=LUA_VERSIONS, ids=lambda v: f"lua{v}")
def lua_version(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture()
def policy(spec: PoolSpec, lua_version: str) -> LuaPolicy:
    return LuaPolicy.from_data(policy_data(build_tables(spec, V2205), V2205), lua=lua_version)


def rec(job_id: int, account: str, qos: str, state: int, tres: str | None = None, **fields: Any) -> dict[str, Any]:
    """A job record as slurm.jobs holds it; ``tres`` is what it asked for (and holds, when it runs)."""
    out: dict[str, Any] = {"job_id": job_id, "account": account, "qos": qos, "job_state": state, **fields}
    if tres is not None:
        out["tres_fmt_req_str"] = f"cpu=1,mem=1000M,node=1,billing=1,{tres}"
        if state % 256 in (1, 2):
            out["tres_fmt_alloc_str"] = out["tres_fmt_req_str"]
    return out


PENDING, RUNNING, SUSPENDED, COMPLETED, CANCELLED = 0, 1, 2, 3, 4
D1 = "gres/gpu=1"
E_H1 = f"gres/gpu=1,gres/gpu:{H100}=1"


def gpus(n: int, gtype: str | None = None) -> dict[str, Any]:
    return {"tres_per_node": f"gres:gpu:{gtype}:{n}" if gtype else f"gres:gpu:{n}"}


# (case, account, job fields, jobs in slurm.jobs, rc, job fields after, message fragments)
SUBMIT_CASES: list[tuple[str, str, dict[str, Any], list[dict[str, Any]], int, dict[str, Any], list[str]]] = [
    ("within, nothing used", "projd", gpus(1), [], OK, IN_D, []),
    (
        "within, default tier, no GPUs asked",
        "projd",
        {},
        [rec(1, "projd", "guaranteed-projd", RUNNING, "gres/gpu=2")],
        OK,
        IN_D,
        [],
    ),
    ("exactly at the guarantee", "projd", gpus(1), [rec(1, "projd", "guaranteed-projd", RUNNING, D1)], OK, IN_D, []),
    ("the whole guarantee in one job", "projd", gpus(2), [], OK, IN_D, []),
    (
        "beyond: running",
        "projd",
        gpus(1),
        [rec(1, "projd", "guaranteed-projd", RUNNING, "gres/gpu=2")],
        OK,
        OUT,
        [BEYOND_D],
    ),
    (
        "beyond: pending counted",
        "projd",
        gpus(1),
        [rec(1, "projd", "guaranteed-projd", RUNNING, D1), rec(2, "projd", "guaranteed-projd", PENDING, D1)],
        OK,
        OUT,
        [BEYOND_D],
    ),
    (
        "beyond: suspended counted",
        "projd",
        gpus(1),
        [rec(1, "projd", "guaranteed-projd", SUSPENDED, "gres/gpu=2")],
        OK,
        OUT,
        [BEYOND_D],
    ),
    (
        "state flags ignored",
        "projd",
        gpus(1),
        [rec(1, "projd", "guaranteed-projd", RUNNING + 0x8000, "gres/gpu=2")],
        OK,
        OUT,
        ["2 are in use"],
    ),
    ("beyond in one job", "projd", gpus(3), [], OK, OUT, ["0 are in use or queued; this job asks for 3 GPUs"]),
    (
        "multi-node job counts every node",
        "projd",
        {**gpus(1), "min_nodes": 3},
        [],
        OK,
        OUT,
        ["this job asks for 3 GPUs"],
    ),
    (
        "--gpus counts",
        "projd",
        {"tres_per_job": "gres:gpu:2"},
        [rec(1, "projd", "guaranteed-projd", PENDING, D1)],
        OK,
        OUT,
        ["1 is in use"],
    ),
    (
        "pending array counts every task",
        "projd",
        gpus(1),
        [rec(1, "projd", "guaranteed-projd", PENDING, D1, array_task_cnt=2)],
        OK,
        OUT,
        ["2 are in use"],
    ),
    (
        "finished jobs not counted",
        "projd",
        gpus(2),
        [rec(1, "projd", "guaranteed-projd", COMPLETED, D1), rec(2, "projd", "guaranteed-projd", CANCELLED, D1)],
        OK,
        IN_D,
        [],
    ),
    (
        "other projects and other QOS not counted",
        "projd",
        gpus(2),
        [
            rec(1, "proje", "guaranteed-proje", RUNNING, E_H1),
            rec(2, "projd", "shared", RUNNING, "gres/gpu=4"),
            rec(3, "projx", "guaranteed-projd", RUNNING, D1),
        ],
        OK,
        IN_D,
        [],
    ),
    (
        "record without TRES: its GRES request counts",
        "projd",
        gpus(1),
        [rec(1, "projd", "guaranteed-projd", PENDING, tres_per_node="gres:gpu:1", min_nodes=2)],
        OK,
        OUT,
        ["2 are in use"],
    ),
    (
        "running job: its allocation counts",
        "projd",
        gpus(1),
        [{**rec(1, "projd", "guaranteed-projd", RUNNING, D1), "tres_fmt_alloc_str": "cpu=2,gres/gpu=2"}],
        OK,
        OUT,
        ["2 are in use"],
    ),
    (
        "non-GPU job at a full guarantee",
        "projd",
        {},
        [rec(1, "projd", "guaranteed-projd", RUNNING, "gres/gpu=2")],
        OK,
        IN_D,
        [],
    ),
    ("asked by tier", "projd", {"qos": "guaranteed", **gpus(1)}, [], OK, IN_D, []),
    ("asked by its QOS", "projd", {"qos": "guaranteed-projd", **gpus(1)}, [], OK, {"partition": "floating"}, []),
    ("asked by partition", "projd", {"partition": "floating", **gpus(1)}, [], OK, {"qos": "guaranteed-projd"}, []),
    (
        "asked by its QOS, beyond",
        "projd",
        {"qos": "guaranteed-projd", **gpus(1)},
        [rec(1, "projd", "guaranteed-projd", RUNNING, "gres/gpu=2")],
        OK,
        OUT,
        [BEYOND_D],
    ),
    (
        "overflow gets the overflow tier's checkpoint rules",
        "projd",
        gpus(3),
        [],
        OK,
        {"requeue": 1},
        ["tier 'shared' is preemptible and this job declares no checkpointing"],
    ),
    ("other tiers unchanged", "projd", {"qos": "scavenger", **gpus(4)}, [], OK, {"partition": "scavenger"}, []),
    ("typed: within", "proje", gpus(1, H100), [rec(1, "proje", "guaranteed-proje", RUNNING, E_H1)], OK, IN_E, []),
    (
        "typed: beyond",
        "proje",
        gpus(1, H100),
        [rec(1, "proje", "guaranteed-proje", RUNNING, f"gres/gpu=2,gres/gpu:{H100}=2")],
        OK,
        OUT,
        [
            f"slurm-pool: proje's guarantee is 2 GPUs of type {H100} and 2 are in use or queued; this job asks "
            f"for 1 GPU of type {H100}, so it runs in tier 'shared' (partition 'shared', preemptible) instead."
        ],
    ),
    (
        "typed: a record of no known type counts against the type",
        "proje",
        gpus(1, H100),
        [rec(1, "proje", "guaranteed-proje", RUNNING, "gres/gpu=2")],
        OK,
        OUT,
        ["2 are in use"],
    ),
    (
        "typed: a job of no type overflows",
        "proje",
        gpus(1),
        [],
        OK,
        OUT,
        [
            f"slurm-pool: proje's guarantee is for GPUs of type {H100} only and this job names no GPU type, so it "
            f"runs in tier 'shared' (partition 'shared', preemptible) instead. To run in the guarantee, name the "
            f"type: --gres=gpu:{H100}:N."
        ],
    ),
    (
        "typed: another type overflows",
        "proje",
        gpus(1, A100),
        [],
        OK,
        OUT,
        [f"not for type '{A100}' that this job asks for"],
    ),
    ("typed: non-GPU job", "proje", {}, [], OK, IN_E, []),
    ("an array within", "proje", {"array_inx": "0-1", **gpus(1, H100)}, [], OK, IN_E, []),
    (
        "an array counts every task",
        "proje",
        {"array_inx": "0-4:2%1", **gpus(1, H100)},
        [],
        OK,
        OUT,
        [f"this job asks for 3 GPUs of type {H100} in 3 array tasks"],
    ),
    ("an array of listed tasks", "projd", {"array_inx": "1,3,7-8", **gpus(1)}, [], OK, OUT, ["asks for 4 GPUs in 4"]),
    ("an array index of junk counts once", "projd", {"array_inx": "x-y,", **gpus(2)}, [], OK, IN_D, []),
    (
        "typed: the largest of the job's GPU fields counts",
        "proje",
        {"tres_per_job": f"gres:gpu:{H100}:3", "tres_per_node": f"gres:gpu:{H100}:1"},
        [],
        OK,
        OUT,
        [f"this job asks for 3 GPUs of type {H100}"],
    ),
    (
        "other project naming a guarantee QOS",
        "projx",
        {"qos": "guaranteed-projd"},
        [],
        E_QOS,
        {"qos": "guaranteed-projd"},
        ["QOS 'guaranteed-projd' is the guarantee of project projd; account 'projx' may not use it."],
    ),
    (
        "floating project naming another's QOS",
        "proje",
        {"qos": "guaranteed-projd"},
        [],
        E_QOS,
        {},
        ["is the guarantee of project projd; account 'proje' may not use it"],
    ),
    (
        "other project naming the floating partition",
        "proja",
        {"partition": "floating"},
        [],
        E_ACCESS,
        {"partition": "floating"},
        ["partition 'floating' runs the floating guarantees of projd, proje; account 'proja' has no guarantee there."],
    ),
    ("an owner keeps its own partition", "proja", gpus(2), [], OK, {"partition": "a-owner", "qos": "guaranteed"}, []),
    ("a borrower is untouched", "projx", gpus(1), [], OK, {"partition": "scavenger", "qos": "scavenger"}, []),
]


@pytest.mark.parametrize("case,account,fields,jobs,rc,after,fragments", SUBMIT_CASES, ids=[c[0] for c in SUBMIT_CASES])
def test_submit(
    policy: LuaPolicy,
    case: str,
    account: str,
    fields: dict[str, Any],
    jobs: list[dict[str, Any]],
    rc: int,
    after: dict[str, Any],
    fragments: list[str],
) -> None:
    policy.set_jobs(jobs)
    out = policy.submit(unset_job(account=account, **fields))
    assert out.rc == rc, out.message
    for key, value in after.items():
        assert out.job.get(key) == value, (key, out.job.get(key), out.message)
    for frag in fragments:
        assert frag in out.message
    if not fragments:
        assert out.message == ""


def test_a_job_within_its_guarantee_is_told_nothing_and_keeps_its_gpus(policy: LuaPolicy) -> None:
    out = policy.submit(unset_job(account="projd", tres_per_node="gres:gpu:1"))
    assert (out.rc, out.message, out.job["tres_per_node"]) == (OK, "", "gres:gpu:1")
    assert "requeue" not in out.job or out.job["requeue"] != 1


def test_without_slurm_jobs_nothing_is_counted(policy: LuaPolicy) -> None:
    policy.set_jobs(None)
    out = policy.submit(unset_job(account="projd", tres_per_node="gres:gpu:2"))
    assert (out.rc, out.job["qos"]) == (OK, "guaranteed-projd")
    assert any("slurm.jobs is not available" in line for line in out.info)


def test_a_job_without_gpus_reads_no_job_table(policy: LuaPolicy) -> None:
    policy.set_jobs(None)
    out = policy.submit(unset_job(account="projd"))
    assert (out.rc, out.job["qos"], out.info) == (OK, "guaranteed-projd", [])


def test_jobs_sent_in_count_until_slurm_rebuilds_its_job_table(policy: LuaPolicy) -> None:
    """slurm.jobs misses jobs submitted in the second of its last rebuild (seen on 22.05.8)."""
    one = unset_job(account="projd", tres_per_node="gres:gpu:1")
    policy.set_jobs([])
    seen = [policy.submit(one).job["qos"] for _ in range(3)]
    assert seen == ["guaranteed-projd", "guaranteed-projd", "shared"]
    policy.set_jobs([])
    assert policy.submit({**one, "array_inx": "0-1"}).job["qos"] == "guaranteed-projd"
    assert policy.submit(one).job["qos"] == "shared"  # the array's two tasks were noted
    policy.set_jobs([rec(1, "projd", "guaranteed-projd", PENDING, D1)])  # rebuilt: the table counts, not the notes
    assert [policy.submit(one).job["qos"] for _ in range(2)] == ["guaranteed-projd", "shared"]


def test_rejected_and_overflowed_jobs_are_not_noted(policy: LuaPolicy) -> None:
    policy.set_jobs([])
    bad = policy.submit(unset_job(account="projd", tres_per_node="gres:gpu:nope:1"))
    beyond = policy.submit(unset_job(account="projd", tres_per_node="gres:gpu:3"))
    assert (bad.rc, beyond.job["qos"]) == (2072, "shared")
    assert policy.submit(unset_job(account="projd", tres_per_node="gres:gpu:2")).job["qos"] == "guaranteed-projd"


def test_a_type_the_floating_partition_lacks_overflows(spec: PoolSpec, lua_version: str) -> None:
    data = policy_data(build_tables(spec, V2205), V2205)
    data["partitions"]["floating"]["gpu_types"] = [H100]
    policy = LuaPolicy.from_data(data, lua=lua_version)
    out = policy.submit(unset_job(account="projd", tres_per_node=f"gres:gpu:{A100}:1"))
    assert (out.rc, out.job["qos"], out.job["partition"]) == (OK, "shared", "shared")
    assert (
        f"partition 'floating' of projd's guarantee has no GPUs of type {A100}, which this job asks for" in out.message
    )


def test_beyond_without_an_overflow_tier_is_rejected(spec: PoolSpec, lua_version: str) -> None:
    data = policy_data(build_tables(spec, V2205), V2205)
    data["projects"]["projd"]["guarantee"]["overflow_partition"] = None
    policy = LuaPolicy.from_data(data, lua=lua_version)
    policy.set_jobs([rec(1, "projd", "guaranteed-projd", RUNNING, "gres/gpu=2")])
    out = policy.submit(unset_job(account="projd", tres_per_node="gres:gpu:1"))
    assert out.rc == E_LIMIT
    assert "account 'projd' may not use the overflow tier 'shared', so this job cannot run now." in out.message


@pytest.mark.parametrize(
    "used,asked,qos,partition",
    [
        (0, "guaranteed,scavenger", "guaranteed-projd,scavenger", "floating,scavenger"),
        (2, "guaranteed,scavenger", "shared,scavenger", "shared,scavenger"),
        (2, "guaranteed,shared", "shared", "shared"),
    ],
)
def test_several_qos(spec: PoolSpec, lua_version: str, used: int, asked: str, qos: str, partition: str) -> None:
    policy = LuaPolicy.from_data(policy_data(build_tables(spec, V2411), V2411), lua=lua_version)
    policy.set_jobs([rec(1, "projd", "guaranteed-projd", RUNNING, f"gres/gpu={used}")] if used else [])
    out = policy.submit(unset_job(account="projd", qos=asked, tres_per_node="gres:gpu:1"))
    assert (out.rc, out.job["qos"], out.job["partition"]) == (OK, qos, partition), out.message


FULL_D = [rec(1, "projd", "guaranteed-projd", RUNNING, "gres/gpu=2")]
TAG_D = overflow_tag("guaranteed-projd")

# (case, account, job fields, jobs in slurm.jobs, admin comment after: None for none)
TAG_CASES: list[tuple[str, str, dict[str, Any], list[dict[str, Any]], str | None]] = [
    ("beyond a full guarantee: tagged", "projd", gpus(1), FULL_D, TAG_D),
    ("asked by its QOS, beyond: tagged", "projd", {"qos": "guaranteed-projd", **gpus(1)}, FULL_D, TAG_D),
    (
        "typed, beyond: tagged with its own QOS",
        "proje",
        gpus(1, H100),
        [rec(1, "proje", "guaranteed-proje", RUNNING, f"gres/gpu=2,gres/gpu:{H100}=2")],
        overflow_tag("guaranteed-proje"),
    ),
    ("within: not tagged", "projd", gpus(1), [], None),
    ("bigger than the whole guarantee: never fits, not tagged", "projd", gpus(3), [], None),
    ("typed: a job of no type is not tagged", "proje", gpus(1), [], None),
    ("typed: another type is not tagged", "proje", gpus(1, A100), [], None),
    ("asked for the overflow tier itself: not tagged", "projd", {"qos": "shared", **gpus(1)}, FULL_D, None),
    ("a borrower is not tagged", "projx", {"qos": "shared", **gpus(1)}, FULL_D, None),
    ("an admin comment already there is kept", "projd", {"admin_comment": "site: x", **gpus(1)}, FULL_D, "site: x"),
]


@pytest.mark.parametrize("case,account,fields,jobs,tag", TAG_CASES, ids=[c[0] for c in TAG_CASES])
def test_overflow_tag(
    policy: LuaPolicy, case: str, account: str, fields: dict[str, Any], jobs: list[dict[str, Any]], tag: str | None
) -> None:
    policy.set_jobs(jobs)
    out = policy.submit(unset_job(account=account, **fields))
    assert out.rc == OK, out.message
    assert out.job.get("admin_comment") == tag, (out.job.get("admin_comment"), out.job.get("qos"), out.message)


def test_overflow_tag_text() -> None:
    """The tag reconcile looks for is the one job_submit.lua writes (rendered with the same words)."""
    assert TAG_D == "slurm-pool: overflow of guaranteed-projd"


@pytest.mark.parametrize("used,asked", [(2, "guaranteed,scavenger"), (2, "guaranteed,shared"), (0, "guaranteed")])
def test_several_qos_are_not_tagged(spec: PoolSpec, lua_version: str, used: int, asked: str) -> None:
    """A job that also asked for other tiers is not the reconcile's to move into one QOS."""
    policy = LuaPolicy.from_data(policy_data(build_tables(spec, V2411), V2411), lua=lua_version)
    policy.set_jobs([rec(1, "projd", "guaranteed-projd", RUNNING, f"gres/gpu={used}")] if used else [])
    out = policy.submit(unset_job(account="projd", qos=asked, tres_per_node="gres:gpu:1"))
    assert (out.rc, out.job.get("admin_comment")) == (OK, None), out.message


def test_beyond_without_an_overflow_tier_is_not_tagged(spec: PoolSpec, lua_version: str) -> None:
    data = policy_data(build_tables(spec, V2205), V2205)
    data["projects"]["projd"]["guarantee"]["overflow_partition"] = None
    policy = LuaPolicy.from_data(data, lua=lua_version)
    policy.set_jobs(FULL_D)
    out = policy.submit(unset_job(account="projd", tres_per_node="gres:gpu:1"))
    assert (out.rc, out.job.get("admin_comment")) == (E_LIMIT, None)


SHARED_REC = {"job_id": 7, "account": "projd", "qos": "shared", "partition": "shared", "job_state": PENDING}
IN_REC = {"job_id": 7, "account": "projd", "qos": "guaranteed-projd", "partition": "floating", "job_state": PENDING}

# (case, update, job record, jobs in slurm.jobs, rc, job fields after, message fragments)
MODIFY_CASES: list[tuple[str, dict[str, Any], dict[str, Any], list[dict[str, Any]], int, dict[str, Any], list[str]]] = [
    (
        "into the guarantee by tier, fits",
        {"qos": "guaranteed"},
        {**SHARED_REC, "tres_fmt_req_str": D1},
        [rec(1, "projd", "guaranteed-projd", RUNNING, D1)],
        OK,
        IN_D,
        [],
    ),
    (
        "into the guarantee by partition, fits",
        {"partition": "floating"},
        {**SHARED_REC, "tres_fmt_req_str": D1},
        [],
        OK,
        {"qos": "guaranteed-projd", "partition": "floating"},
        [],
    ),
    (
        "into the guarantee by its QOS, fits",
        {"qos": "guaranteed-projd"},
        {**SHARED_REC, "tres_per_node": "gres:gpu:1"},
        [],
        OK,
        IN_D,
        [],
    ),
    (
        "reconcile's move: partition, QOS and the tag cleared, fits",
        {"partition": "floating", "qos": "guaranteed-projd", "admin_comment": ""},
        {**SHARED_REC, "tres_fmt_req_str": D1, "admin_comment": "slurm-pool: overflow of guaranteed-projd"},
        [rec(1, "projd", "guaranteed-projd", RUNNING, D1)],
        OK,
        {**IN_D, "admin_comment": ""},
        [],
    ),
    (
        "reconcile's move, beyond",
        {"partition": "floating", "qos": "guaranteed-projd", "admin_comment": ""},
        {**SHARED_REC, "tres_fmt_req_str": D1},
        [rec(1, "projd", "guaranteed-projd", RUNNING, "gres/gpu=2")],
        E_LIMIT,
        {},
        ["so it cannot move into the guarantee; it stays where it is."],
    ),
    (
        "into the guarantee, beyond",
        {"qos": "guaranteed"},
        {**SHARED_REC, "tres_fmt_req_str": D1},
        [rec(1, "projd", "guaranteed-projd", PENDING, "gres/gpu=2")],
        E_LIMIT,
        {},
        [
            "projd's guarantee is 2 GPUs and 2 are in use or queued; this job asks for 1 GPU, so it cannot move into the guarantee; it stays where it is."
        ],
    ),
    (
        "a pending array counts every task",
        {"qos": "guaranteed"},
        {**SHARED_REC, "tres_fmt_req_str": D1, "array_task_cnt": 3},
        [],
        E_LIMIT,
        {},
        ["this job asks for 3 GPUs in 3 array tasks"],
    ),
    (
        "typed: a job of no type may not move in",
        {"qos": "guaranteed"},
        {**SHARED_REC, "account": "proje", "tres_fmt_req_str": "gres/gpu=1"},
        [],
        E_LIMIT,
        {},
        ["names no GPU type", f"--gres=gpu:{H100}:N."],
    ),
    (
        "already in the guarantee: tier named again",
        {"qos": "guaranteed"},
        {**IN_REC, "tres_fmt_req_str": D1},
        [rec(1, "projd", "guaranteed-projd", RUNNING, "gres/gpu=2")],
        OK,
        {"qos": "guaranteed-projd"},
        [],
    ),
    ("already in the guarantee: time limit", {"time_limit": 60}, IN_REC, [], OK, {"time_limit": 60}, []),
    (
        "out of the guarantee",
        {"qos": "scavenger"},
        {**IN_REC, "tres_fmt_req_str": D1},
        [],
        OK,
        {"qos": "scavenger", "partition": "scavenger"},
        [],
    ),
    (
        "other project naming a guarantee QOS",
        {"qos": "guaranteed-projd"},
        {**SHARED_REC, "account": "projx"},
        [],
        E_QOS,
        {},
        ["is the guarantee of project projd; account 'projx' may not use it"],
    ),
]


@pytest.mark.parametrize("case,update,record,jobs,rc,after,fragments", MODIFY_CASES, ids=[c[0] for c in MODIFY_CASES])
def test_modify(
    policy: LuaPolicy,
    case: str,
    update: dict[str, Any],
    record: dict[str, Any],
    jobs: list[dict[str, Any]],
    rc: int,
    after: dict[str, Any],
    fragments: list[str],
) -> None:
    policy.set_jobs([*jobs, record])
    out = policy.modify(update, record)
    assert out.rc == rc, out.message
    for key, value in after.items():
        assert out.job.get(key) == value, (key, out.job.get(key), out.message)
    for frag in fragments:
        assert frag in out.message


def test_guarantee_rules(spec: PoolSpec) -> None:
    projects = {p.name: p for p in build_tables(spec, V2205).projects}
    assert projects["projd"].guarantee == GuaranteeRule(
        "guaranteed-projd", "guaranteed", "floating", "shared", "shared", (("", 2),)
    )
    assert projects["proje"].guarantee == GuaranteeRule(
        "guaranteed-proje", "guaranteed", "floating", "shared", "shared", ((H100, 2),)
    )
    assert projects["proja"].guarantee is None and projects["projx"].guarantee is None
    assert dict(projects["projd"].routes)["guaranteed"] == "floating"
    assert dict(projects["proja"].routes)["guaranteed"] == "a-owner"


def test_floating_partition_admits_the_floating_projects(spec: PoolSpec) -> None:
    tables = build_tables(spec, V2205)
    parts = {p.name: p for p in tables.partitions}
    assert parts["floating"].accounts == ("projd", "proje")
    assert tables.guarantee_partition == "floating"
    data = policy_data(tables, V2205)
    assert data["guarantees"] == {
        "partition": "floating",
        "qos": {"guaranteed-projd": "projd", "guaranteed-proje": "proje"},
    }


def test_no_guarantee_data_without_guarantees() -> None:
    spec = load_spec(Path(__file__).resolve().parents[2] / "examples" / "pool.yaml")
    data = policy_data(build_tables(spec, V2205), V2205)
    assert "guarantees" not in data
    assert all("guarantee" not in p for p in data["projects"].values())


FUZZ_NAMES = [
    "projd",
    "proje",
    "projx",
    "proja",
    "guaranteed",
    "guaranteed-projd",
    "guaranteed-proje",
    "shared",
    "floating",
]


def fuzz_record(rng: random.Random) -> Any:
    """A random slurm.jobs entry: mostly a record of a floating project's guarantee, with junk mixed in."""
    if rng.random() < 0.05:
        return rng.choice(["x", 3, float("nan")])
    out = random_job(rng)
    for key in ("account", "qos"):
        out[key] = rng.choice(FUZZ_NAMES) if rng.random() < 0.8 else junk(rng)
    out["job_state"] = rng.choice([0, 1, 2, 3, 256, 0x8001, -1, float("nan"), float("inf"), "1", None])
    for key in ("tres_fmt_req_str", "tres_fmt_alloc_str", "array_task_cnt"):
        if rng.random() < 0.6:
            out[key] = rng.choice(
                [D1, E_H1, "gres/gpu=99999999999999999999", "gres/gpumem=5", "gres/gpu:=1", junk(rng)]
            )
    return out


def test_fuzz_with_job_table(spec: PoolSpec, lua_version: str) -> None:
    policy = LuaPolicy.from_data(policy_data(build_tables(spec, V2411), V2411), lua=lua_version)
    rng = random.Random(20261206)
    for i in range(2000):
        records = [fuzz_record(rng) for _ in range(rng.randrange(0, 6))]
        if all(isinstance(r, dict) for r in records):
            policy.set_jobs(records)
        job = random_job(rng)
        for key in ("account", "qos", "partition"):
            if rng.random() < 0.7:
                job[key] = rng.choice(FUZZ_NAMES)
        if i % 4 == 3:
            out = policy.modify(job, fuzz_record(rng) if rng.random() < 0.9 else {})
        else:
            out = policy.submit(job)
        assert isinstance(out.rc, int) and out.rc in {OK, 2000, E_ACCESS, 2045, E_LIMIT, 2051, E_QOS, 2072, 8000}, (
            i,
            out.rc,
        )
        assert not out.error, (i, out.error, job, records)


@pytest.fixture()
def shared_cluster(spec: PoolSpec, lua_version: str) -> LuaPolicy:
    """The policy of a pool that shares its cluster with the site's own partitions (the spec's coexist)."""
    data = policy_data(build_tables(spec, V2205), V2205)
    data["scope"] = {"shared": True, "site_script": None, "site_order": "before"}
    return LuaPolicy.from_data(data, lua=lua_version)


def test_shared_cluster_a_guarantee_qos_makes_a_job_the_pools(shared_cluster: LuaPolicy) -> None:
    out = shared_cluster.submit(unset_job(user_name="dave", qos="guaranteed-projd", tres_per_node="gres:gpu:1"))
    assert (out.rc, out.job.get("account"), out.job.get("partition")) == (OK, "projd", "floating"), out.message
    site = shared_cluster.submit(unset_job(user_name="dave", qos="normal", partition="site-gpu"))
    assert (site.rc, site.job.get("partition"), site.message) == (OK, "site-gpu", "")


def test_shared_cluster_an_update_into_a_guarantee_qos_is_the_pools(shared_cluster: LuaPolicy) -> None:
    record = {"job_id": 9, "account": "siteacct", "qos": "normal", "partition": "site-gpu", "job_state": PENDING}
    out = shared_cluster.modify({"qos": "guaranteed-projd"}, record)
    assert out.rc == 2045 and "account 'siteacct' is not a project of this pool" in out.message
