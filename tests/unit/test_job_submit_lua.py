"""The generated job_submit.lua, run in-process on Lua 5.1, 5.3 and 5.4 (lupa) with a stub ``slurm``.

Table-driven cases cover every policy and every message; a fuzz test feeds
10,000 random job descriptions; a golden file pins the rendered data (the
code is the static ``slurm_pool/policy/job_submit.lua``, which luacheck checks).
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import lupa  # noqa: F401,E402  (required: the policy runs in its Lua runtimes)
import pytest

from slurm_pool.policy.lua import lua_string, policy_code, policy_data, render_job_submit  # noqa: E402
from slurm_pool.policy.tables import build_tables  # noqa: E402
from slurm_pool.spec import load_spec, load_spec_text  # noqa: E402
from slurm_pool.spec.model import PoolSpec  # noqa: E402
from slurm_pool.versions import SlurmVersion  # noqa: E402
from tests.support.lua_policy import INFINITE, LUA_VERSIONS, NO_VAL, NO_VAL16, LuaPolicy, random_job, unset_job  # noqa: E402

V2205 = SlurmVersion(22, 5, 8)

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "pool.yaml"
GOLDEN = ROOT / "tests" / "golden" / "render" / "22.05" / "job_submit.data.lua"  # shared with test_render

OK, ERROR = 0, -1
E_PARTITION, E_ACCESS, E_ACCOUNT, E_LIMIT, E_BAD_TIME, E_QOS, E_GRES, E_NO_TIME = (
    2000,
    2002,
    2045,
    2050,
    2051,
    2066,
    2072,
    8000,
)
CODES = {OK, ERROR, E_PARTITION, E_ACCESS, E_ACCOUNT, E_LIMIT, E_BAD_TIME, E_QOS, E_GRES, E_NO_TIME}

# A second spec: a CPU-only partition, GPU limits, a project without a
# default tier, an admin contact that needs escaping, and an open
# partition competing with a reserved one.
SMALL = """
version: 1
cluster: {name: small}
node_groups:
  - {name: cpu, hosts: "cpu[1-2]", cpus: 8, memory_mb: 8000}
  - name: mig
    hosts: mig1
    cpus: 8
    memory_mb: 8000
    gpus: {model: A100-40GB, count: 2, mig: [[1g.5gb, 1g.5gb, 2g.10gb, 3g.20gb], [3g.20gb, 3g.20gb]]}
  - {name: big, hosts: big1, cpus: 8, memory_mb: 8000, gpus: {model: A100-80GB, count: 4}}
tiers:
  - name: normal
    priority: 100
    preempt: [low]
    policy: {max_gpus_per_job: 2}
  - name: low
    priority: 10
    preempt_mode: requeue
    policy: {checkpoint: add_requeue, require_time_limit: true, max_gpus_per_job: 1}
partitions:
  - {name: cpu, nodes: [cpu], tier: normal, priority_tier: 5}
  - {name: gpu-open, nodes: [mig, big], tier: normal, priority_tier: 50}
  - {name: gpu-team, nodes: ["big1"], tier: normal, priority_tier: 1, allow_accounts: [team]}
  - {name: low, nodes: [ALL], tier: low, priority_tier: 1}
projects:
  - {name: team, users: [dora], tiers: [normal, low]}
  - {name: guests, users: [gus, dora], tiers: [low, normal]}
policy:
  default_tier: low
  admin_contact: "Ops \\"desk\\" ]] room 12, 100% of the time \\\\ %s"
"""


@pytest.fixture(scope="module")
def example() -> PoolSpec:
    return load_spec(EXAMPLE)


@pytest.fixture(scope="module")
def source(example: PoolSpec) -> str:
    return render_job_submit(example, V2205)


@pytest.fixture(scope="module", params=LUA_VERSIONS, ids=lambda v: f"lua{v}")
def lua_version(request: pytest.FixtureRequest) -> str:
    """Every test that runs the policy runs it on each Lua Slurm links against."""
    return str(request.param)


@pytest.fixture()
def runtime(lua_version: str):
    """``LuaPolicy`` on this test's Lua."""
    return lambda text, **kw: LuaPolicy(text, lua=lua_version, **kw)


@pytest.fixture()
def policy(source: str, runtime) -> LuaPolicy:
    return runtime(source)


def small_spec(**policy: Any) -> PoolSpec:
    spec = load_spec_text(SMALL)
    if policy:
        spec = spec.model_copy(update={"policy": spec.policy.model_copy(update=policy)})
    return spec


@pytest.fixture(scope="module")
def small(lua_version: str) -> LuaPolicy:
    return LuaPolicy(render_job_submit(small_spec(), V2205), lua=lua_version)


def env(*items: str) -> dict[str, Any]:
    return {"spank_job_env": list(items), "spank_job_env_size": len(items)}


CKPT = env("SLURM_POOL_CHECKPOINT=1")
TIERS_A = "Tiers account 'proja' may use: guaranteed (partition a-owner), shared (partition shared), scavenger (partition scavenger)."


# --------------------------------------------------------------------------
# Routing
# --------------------------------------------------------------------------

ROUTING = [
    # (case, job fields, rc, fields expected after the call, message fragments)
    ("project default tier", dict(account="proja"), OK, dict(partition="a-owner", qos="guaranteed"), []),
    ("other project's owner partition", dict(account="projb"), OK, dict(partition="b-owner", qos="guaranteed"), []),
    ("first tier when no default fits", dict(account="k8s-bridge"), OK, dict(partition="k8s-lend", qos="k8s-lend"), []),
    (
        "qos routes to its partition",
        dict(account="proja", qos="shared", time_limit=60),
        OK,
        dict(partition="shared", qos="shared"),
        [],
    ),
    (
        "partition sets qos",
        dict(account="proja", partition="scavenger", **CKPT),
        OK,
        dict(partition="scavenger", qos="scavenger"),
        [],
    ),
    (
        "both, consistent",
        dict(account="proja", partition="a-owner", qos="guaranteed"),
        OK,
        dict(partition="a-owner", qos="guaranteed"),
        [],
    ),
    (
        "same-tier partition list",
        dict(account="projc", partition="c-owner,c-owner"),
        OK,
        dict(partition="c-owner,c-owner", qos="guaranteed"),
        [],
    ),
    (
        "tier not allowed",
        dict(account="proja", qos="k8s-lend"),
        E_ACCESS,
        dict(partition=None, qos="k8s-lend"),
        ["slurm-pool: account 'proja' may not use tier 'k8s-lend'. " + TIERS_A],
    ),
    (
        "partition of a tier not allowed",
        dict(account="proja", partition="k8s-lend"),
        E_ACCESS,
        dict(qos=None),
        ["account 'proja' may not use tier 'k8s-lend'", TIERS_A],
    ),
    (
        "someone else's owner partition",
        dict(account="proja", partition="b-owner"),
        E_ACCESS,
        dict(qos=None),
        ["slurm-pool: account 'proja' may not use partition 'b-owner'. " + TIERS_A],
    ),
    (
        "partition and qos disagree",
        dict(account="proja", partition="a-owner", qos="shared"),
        E_QOS,
        {},
        ["slurm-pool: partition 'a-owner' belongs to tier 'guaranteed', not to the requested QOS 'shared'. " + TIERS_A],
    ),
    (
        "unknown qos",
        dict(account="proja", qos="normal"),
        E_QOS,
        {},
        ["slurm-pool: QOS 'normal' is not a tier of this pool. " + TIERS_A],
    ),
    (
        "unknown partition",
        dict(account="proja", partition="debug"),
        E_PARTITION,
        {},
        ["slurm-pool: partition 'debug' does not exist. " + TIERS_A],
    ),
    (
        "partitions of two tiers",
        dict(account="proja", partition="shared,scavenger"),
        E_PARTITION,
        {},
        [
            "slurm-pool: partitions 'shared' (tier shared) and 'scavenger' (tier scavenger) belong to different tiers; "
            "submit to one tier at a time. " + TIERS_A
        ],
    ),
    ("no account: user's project", dict(user_name="alice"), OK, dict(account="proja", partition="a-owner"), []),
    (
        "no account: accounting default first",
        dict(user_name="alice", default_account="projb"),
        OK,
        dict(account="projb", partition="b-owner"),
        [],
    ),
    (
        "no account: default outside the pool",
        dict(user_name="alice", default_account="legacy"),
        OK,
        dict(account="proja"),
        [],
    ),
    (
        "no account, unknown user",
        dict(user_name="eve"),
        E_ACCOUNT,
        dict(account=None),
        [
            "slurm-pool: cannot tell which project this job belongs to: submit with --account=PROJECT "
            "(projects: proja, projb, projc, k8s-bridge)."
        ],
    ),
    (
        "account outside the pool",
        dict(account="physics"),
        E_ACCOUNT,
        {},
        ["slurm-pool: account 'physics' is not a project of this pool. Projects: proja, projb, projc, k8s-bridge."],
    ),
    (
        "root outside the pool passes",
        dict(user_id=0, user_name="root"),
        OK,
        dict(account=None, partition=None, qos=None),
        [],
    ),
    (
        "root inside the pool is policed",
        dict(user_id=0, account="proja", qos="k8s-lend"),
        E_ACCESS,
        {},
        ["may not use tier 'k8s-lend'"],
    ),
    (
        "user input is clipped and made printable",
        dict(account="proja", qos="x\n" + "y" * 200),
        E_QOS,
        {},
        ["QOS 'x?" + "y" * 59 + "...' is not a tier"],
    ),
]


@pytest.mark.parametrize("field", ["qos", "partition", "account", "tres_per_node"])
@pytest.mark.parametrize(
    "text",
    [
        "x\u0085y",
        "x\u009by",
        "x\u2028y",
        "x\u2029y",
        "x\u202ey",
        "x\u200fy",
        "x\u2066y",
        "\ufeffx",
        "x\x1b[2Jy",
        "x\0y",
    ],
    ids=ascii,
)
def test_quoted_user_input_holds_no_control_character(policy: LuaPolicy, field: str, text: str) -> None:
    # Before: clip() replaced only %c (C0 and DEL), so NEL, U+2028 and bidi controls in a QOS,
    # partition or account reached the user's terminal and slurmctld's log.
    from slurm_pool.text import control_chars

    job: dict[str, Any] = {"account": "proja", "time_limit": 60}
    job[field] = "gres/gpu:" + text + ":1" if field == "tres_per_node" else text
    out = policy.submit(unset_job(**job))
    assert out.rc != OK and out.message
    assert not control_chars(out.message.replace("\n", " ")), out.message
    assert "'x?" in out.message or "'?x" in out.message, out.message


def check(out: Any, rc: int, fields: dict[str, Any], fragments: list[str]) -> None:
    assert out.rc == rc, out.message
    for key, value in fields.items():
        assert out.job.get(key) == value, (key, out.job.get(key))
    for frag in fragments:
        assert frag in out.message, (frag, out.message)
    if rc != OK:
        assert out.user, "a rejection must tell the user why"
    assert not out.error, out.error


@pytest.mark.parametrize("case,fields,rc,after,fragments", ROUTING, ids=[c[0] for c in ROUTING])
def test_routing(policy: LuaPolicy, case: str, fields: dict, rc: int, after: dict, fragments: list[str]) -> None:
    check(policy.submit(unset_job(**fields)), rc, after, fragments)


V2411 = SlurmVersion(24, 11)

MULTI_QOS = [
    # (case, job fields, rc, fields expected after the call, message fragments) on Slurm 24.11+
    (
        "two tiers route to both partitions",
        dict(account="proja", qos="guaranteed,shared", time_limit=60, **CKPT),
        OK,
        dict(partition="a-owner,shared", qos="guaranteed,shared", requeue=1),
        [],
    ),
    (
        "a listed partition per tier",
        dict(account="proja", qos="guaranteed,shared", partition="a-owner,shared", time_limit=60),
        OK,
        dict(partition="a-owner,shared"),
        [],
    ),
    (
        "every tier's rules apply",
        dict(account="proja", qos="guaranteed,shared", **CKPT),
        E_NO_TIME,
        {},
        ["tier 'shared' requires a time limit"],
    ),
    (
        "a tier the account may not use",
        dict(account="proja", qos="shared,k8s-lend", time_limit=60),
        E_ACCESS,
        {},
        ["account 'proja' may not use tier 'k8s-lend'"],
    ),
    (
        "a partition of no listed tier",
        dict(account="proja", qos="guaranteed,shared", partition="scavenger"),
        E_QOS,
        {},
        ["partition 'scavenger' belongs to tier 'scavenger', which is not among the requested QOS 'guaranteed,shared'"],
    ),
    (
        "an unknown QOS in the list",
        dict(account="proja", qos="shared,normal", time_limit=60),
        E_QOS,
        {},
        ["QOS 'normal' is not a tier of this pool"],
    ),
]


@pytest.fixture(scope="module")
def policy_2411(example: PoolSpec, lua_version: str) -> LuaPolicy:
    return LuaPolicy(render_job_submit(example, V2411), lua=lua_version)


@pytest.mark.parametrize("case,fields,rc,after,fragments", MULTI_QOS, ids=[c[0] for c in MULTI_QOS])
def test_several_qos_from_24_11(
    policy_2411: LuaPolicy, case: str, fields: dict, rc: int, after: dict, fragments: list[str]
) -> None:
    check(policy_2411.submit(unset_job(**fields)), rc, after, fragments)


def test_several_qos_before_24_11_is_explained(policy: LuaPolicy) -> None:
    out = policy.submit(unset_job(account="proja", qos="guaranteed,shared", time_limit=60))
    check(out, E_QOS, {}, ["QOS 'guaranteed,shared' lists several QOS, but this Slurm takes one per job. " + TIERS_A])


def test_numbers_read_the_same_on_every_lua(policy: LuaPolicy) -> None:
    # Lua 5.3+ prints the float 80.0 as "80.0"; Slurm passes numbers as floats
    out = policy.submit(
        unset_job(account="proja", qos="shared", time_limit=60.0, tres_per_job="gres:gpu:5", **CKPT), submit_uid=1000.0
    )
    assert out.rc == E_LIMIT
    assert "allows at most 4 GPU(s) per job; this job asks for 5." in out.message
    assert any("uid 1000:" in line for line in out.info), out.info
    assert ".0" not in out.message


def test_rejection_changes_nothing(policy: LuaPolicy) -> None:
    out = policy.submit(unset_job(user_name="alice", qos="k8s-lend"))
    assert out.rc == E_ACCESS
    assert out.job.get("account") is None and out.job.get("partition") is None


def test_rejections_are_logged(policy: LuaPolicy) -> None:
    out = policy.submit(unset_job(account="proja", qos="k8s-lend"), submit_uid=1234)
    assert any("rejected submission from uid 1234" in line and "k8s-lend" in line for line in out.info)


def test_policy_default_tier(small: LuaPolicy) -> None:
    # team has no default tier; policy.default_tier (low) is one of its tiers
    out = small.submit(unset_job(account="team", time_limit=30))
    assert (out.rc, out.job["qos"], out.job["partition"]) == (OK, "low", "low")


def test_reserved_partition_wins_over_open_one(small: LuaPolicy) -> None:
    out = small.submit(unset_job(account="team", qos="normal"))
    assert (out.rc, out.job["partition"]) == (OK, "gpu-team")
    out = small.submit(unset_job(account="guests", qos="normal"))
    assert (out.rc, out.job["partition"]) == (OK, "gpu-open")


def test_user_in_two_projects_gets_the_first(small: LuaPolicy) -> None:
    out = small.submit(unset_job(user_name="dora", qos="normal"))
    assert (out.rc, out.job["account"]) == (OK, "team")


def test_route_table() -> None:
    tables = build_tables(small_spec(), V2205)
    routes = {p.name: dict(p.routes) for p in tables.projects}
    assert routes == {"team": {"normal": "gpu-team", "low": "low"}, "guests": {"low": "low", "normal": "gpu-open"}}
    assert [p.default_tier for p in tables.projects] == [None, None]
    parts = {p.name: p.gpu_types for p in tables.partitions}
    assert parts["cpu"] == ()
    whole = [g.name for g in tables.gpu_types if not g.mig]
    assert len(whole) == 1  # mig1's GPUs are both partitioned
    assert parts["gpu-team"] == (whole[0],)  # big1: the A100-80GB only


# --------------------------------------------------------------------------
# GPU types, limits and right-sizing
# --------------------------------------------------------------------------


def gpu_names(spec: PoolSpec) -> dict[str, str]:
    """Short handles for the example's GRES type names (they follow the catalogue)."""
    t = build_tables(spec, V2205)
    whole = [g.name for g in t.gpu_types if not g.mig]
    mig = {g.name.rsplit("_", 1)[-1]: g.name for g in t.gpu_types if g.mig}
    return {"a80": whole[0], "h100": whole[1], "a40": whole[2], **mig}


def test_unknown_gpu_type(policy: LuaPolicy, example: PoolSpec) -> None:
    out = policy.submit(unset_job(account="projc", tres_per_node="gres:gpu:v100:1"))
    t = build_tables(example, V2205)
    listing = ", ".join(f"{g.name} ({'MIG, ' if g.mig else ''}{g.mem_mb // 1024} GB)" for g in t.gpu_types)
    check(
        out,
        E_GRES,
        {"partition": None},
        [f"slurm-pool: GPU type 'v100' does not exist in this pool. Available types: {listing}."],
    )


def test_gpu_type_missing_in_partition(policy: LuaPolicy, example: PoolSpec) -> None:
    n = gpu_names(example)
    out = policy.submit(unset_job(account="proja", tres_per_job=f"gres:gpu:{n['1g.5gb']}:1"))
    check(
        out,
        E_GRES,
        {},
        [
            f"slurm-pool: GPU type '{n['1g.5gb']}' is not available in partition 'a-owner' (tier guaranteed). "
            f"Types there: {n['a80']} (80 GB)."
        ],
    )


def test_later_gres_spelling_is_understood(policy: LuaPolicy) -> None:
    out = policy.submit(unset_job(account="projc", tres_per_task="gres/gpu:v100:1"))
    assert out.rc == E_GRES


def test_known_types_pass(policy: LuaPolicy, example: PoolSpec) -> None:
    n = gpu_names(example)
    for field, value in [
        ("tres_per_node", f"gres:gpu:{n['a40']}:2"),
        ("tres_per_job", f"gres:gpu:{n['3g.20gb']}:1"),
        ("tres_per_node", "gres:gpu"),
        ("tres_per_node", "gres:gpu:2"),
        ("tres_per_node", "gres:shard:1"),
    ]:
        out = policy.submit(unset_job(account="projc", **{field: value}))
        assert out.rc == OK, (value, out.message)
        assert out.job[field] == value


def test_partition_without_gpus(small: LuaPolicy) -> None:
    out = small.submit(unset_job(account="team", partition="cpu", tres_per_node="gres:gpu:1"))
    check(out, E_GRES, {}, ["slurm-pool: partition 'cpu' (tier normal) has no GPUs. Available types in the pool: "])
    assert small.submit(unset_job(account="team", partition="cpu")).rc == OK


@pytest.mark.parametrize(
    "fields,total",
    [
        (dict(tres_per_node="gres:gpu:2", min_nodes=2, max_nodes=2), 4),
        (dict(tres_per_node="gres:gpu:1", min_nodes=1, max_nodes=3), 3),
        (dict(tres_per_task="gres:gpu:1", num_tasks=3), 3),
        (dict(tres_per_task="gres:gpu:1", ntasks_per_node=2, min_nodes=2), 4),
        (dict(tres_per_socket="gres:gpu:1", sockets_per_node=2, min_nodes=2), 4),
        (dict(tres_per_job="gres:gpu:3"), 3),
        (dict(tres_per_job="gres:gpu:1,gres:gpu:big:2".replace("big", "X")), None),
    ],
)
def test_max_gpus_per_job(small: LuaPolicy, fields: dict, total: int | None) -> None:
    if total is None:  # an unknown type is reported before the limit
        assert small.submit(unset_job(account="team", qos="normal", **fields)).rc == E_GRES
        return
    out = small.submit(unset_job(account="team", qos="normal", **fields))
    check(out, E_LIMIT, {}, [f"slurm-pool: tier 'normal' allows at most 2 GPU(s) per job; this job asks for {total}."])


def test_within_gpu_limit(small: LuaPolicy) -> None:
    assert small.submit(unset_job(account="team", qos="normal", tres_per_job="gres:gpu:2")).rc == OK
    assert small.submit(unset_job(account="team", qos="normal", tres_per_node="gres:gpu:1", min_nodes=2)).rc == OK


RIGHT_SIZE = [
    # (case, job fields, field, value after, MIG name in the message or None)
    (
        "smallest that fits",
        dict(tres_per_node="gres:gpu:1", **env("SLURM_POOL_GPU_MEM_MB=5120")),
        "tres_per_node",
        "1g.5gb",
    ),
    ("next size up", dict(tres_per_node="gres:gpu:1", **env("SLURM_POOL_GPU_MEM_MB=6000")), "tres_per_node", "2g.10gb"),
    (
        "SPANK_ prefix",
        dict(tres_per_job="gres:gpu:1", **env("SPANK_SLURM_POOL_GPU_MEM_MB=20480")),
        "tres_per_job",
        "3g.20gb",
    ),
    (
        "typed whole GPU of a MIG model",
        dict(tres_per_node="gres:gpu:<a40>:1", **env("SLURM_POOL_GPU_MEM_MB=1024")),
        "tres_per_node",
        "1g.5gb",
    ),
    (
        "other entries kept",
        dict(tres_per_node="gres:shard:1,gres:gpu:1", **env("SLURM_POOL_GPU_MEM_MB=100")),
        "tres_per_node",
        "1g.5gb",
    ),
    (
        "too big for any slice",
        dict(tres_per_node="gres:gpu:1", **env("SLURM_POOL_GPU_MEM_MB=30000")),
        "tres_per_node",
        None,
    ),
    (
        "two GPUs stay whole",
        dict(tres_per_node="gres:gpu:2", **env("SLURM_POOL_GPU_MEM_MB=1000")),
        "tres_per_node",
        None,
    ),
    (
        "two nodes stay whole",
        dict(tres_per_node="gres:gpu:1", min_nodes=2, **env("SLURM_POOL_GPU_MEM_MB=1000")),
        "tres_per_node",
        None,
    ),
    (
        "already MIG",
        dict(tres_per_node="gres:gpu:<3g.20gb>:1", **env("SLURM_POOL_GPU_MEM_MB=1000")),
        "tres_per_node",
        None,
    ),
    ("no --gpu-mem", dict(tres_per_node="gres:gpu:1"), "tres_per_node", None),
    ("garbage --gpu-mem", dict(tres_per_node="gres:gpu:1", **env("SLURM_POOL_GPU_MEM_MB=lots")), "tres_per_node", None),
    ("zero --gpu-mem", dict(tres_per_node="gres:gpu:1", **env("SLURM_POOL_GPU_MEM_MB=0")), "tres_per_node", None),
]


@pytest.mark.parametrize("case,fields,field,mig", RIGHT_SIZE, ids=[c[0] for c in RIGHT_SIZE])
def test_right_sizing(
    policy: LuaPolicy, example: PoolSpec, case: str, fields: dict, field: str, mig: str | None
) -> None:
    n = gpu_names(example)
    fields = {k: _subst(v, n) if isinstance(v, str) else v for k, v in fields.items()}
    out = policy.submit(unset_job(account="projc", **fields))
    assert out.rc == OK, out.message
    if mig is None:
        assert out.job[field] == fields[field]
        assert not out.user
        return
    expected = (
        fields[field]
        .replace("gres:gpu:1", f"gres:gpu:{n[mig]}:1")
        .replace(f"gres:gpu:{n['a40']}:1", f"gres:gpu:{n[mig]}:1")
    )
    assert out.job[field] == expected
    size = mig.split(".")[1].replace("gb", " GB")
    assert out.user == [
        f"slurm-pool: --gpu-mem={_need(fields)}M fits a MIG slice, so this job gets one {n[mig]} ({size}) "
        "instead of a whole GPU. To keep a whole GPU, submit without --gpu-mem."
    ]


def _subst(text: str, names: dict[str, str]) -> str:
    for short, name in names.items():
        text = text.replace(f"<{short}>", name)
    return text


def _need(fields: dict) -> str:
    return fields["spank_job_env"][0].split("=")[1]


def test_right_sizing_needs_the_type_in_the_partition(policy: LuaPolicy) -> None:
    # proja's default partition (a-owner) has no MIG: the job stays whole
    out = policy.submit(unset_job(account="proja", tres_per_node="gres:gpu:1", **env("SLURM_POOL_GPU_MEM_MB=1000")))
    assert (out.rc, out.job["tres_per_node"], out.user) == (OK, "gres:gpu:1", [])


def test_right_sizing_of_a_typed_gpu_stays_on_its_model(policy: LuaPolicy, example: PoolSpec) -> None:
    n = gpu_names(example)
    out = policy.submit(
        unset_job(
            account="projc",
            qos="shared",
            time_limit=10,
            tres_per_node=f"gres:gpu:{n['a80']}:1",
            **env("SLURM_POOL_GPU_MEM_MB=1000", "SLURM_POOL_CHECKPOINT=1"),
        )
    )
    assert (out.rc, out.job["tres_per_node"]) == (OK, f"gres:gpu:{n['a80']}:1")


def test_right_sizing_can_be_switched_off(example: PoolSpec, runtime) -> None:
    spec = example.model_copy(update={"policy": example.policy.model_copy(update={"right_size_mig": False})})
    out = runtime(render_job_submit(spec, V2205)).submit(
        unset_job(account="projc", tres_per_node="gres:gpu:1", **env("SLURM_POOL_GPU_MEM_MB=1000"))
    )
    assert (out.rc, out.job["tres_per_node"]) == (OK, "gres:gpu:1")


def test_right_sizing_picks_the_type_present_in_every_partition(small: LuaPolicy) -> None:
    out = small.submit(
        unset_job(
            account="guests", partition="gpu-open", tres_per_node="gres:gpu:1", **env("SLURM_POOL_GPU_MEM_MB=512")
        )
    )
    assert out.rc == OK and out.job["tres_per_node"].endswith("_1g.5gb:1")
    # 2g.10gb sits on GPU 0 only, but the 3g.20gb slices are on both GPUs: sizes follow memory
    out = small.submit(
        unset_job(
            account="guests", partition="gpu-open", tres_per_node="gres:gpu:1", **env("SLURM_POOL_GPU_MEM_MB=12000")
        )
    )
    assert out.rc == OK and out.job["tres_per_node"].endswith("_3g.20gb:1")


# --------------------------------------------------------------------------
# Time limits
# --------------------------------------------------------------------------


def test_time_limit_required(policy: LuaPolicy) -> None:
    out = policy.submit(unset_job(account="proja", qos="shared", **CKPT))
    check(
        out,
        E_NO_TIME,
        {"partition": None},
        [
            "slurm-pool: tier 'shared' requires a time limit: submit with --time=[days-]hours:minutes:seconds "
            "(partition 'shared' allows at most 2-00:00:00)."
        ],
    )


@pytest.mark.parametrize("limit", [INFINITE, 0])
def test_time_limit_must_be_finite(policy: LuaPolicy, limit: int) -> None:
    out = policy.submit(unset_job(account="proja", qos="shared", time_limit=limit, **CKPT))
    check(
        out,
        E_BAD_TIME,
        {},
        [
            "slurm-pool: tier 'shared' requires a finite time limit, not UNLIMITED: use "
            "--time=[days-]hours:minutes:seconds (partition 'shared' allows at most 2-00:00:00)."
        ],
    )


def test_time_limit_message_without_partition_maximum(small: LuaPolicy) -> None:
    out = small.submit(unset_job(account="team", qos="low"))
    check(
        out,
        E_NO_TIME,
        {},
        ["slurm-pool: tier 'low' requires a time limit: submit with --time=[days-]hours:minutes:seconds."],
    )


def test_time_limit_not_required_elsewhere(policy: LuaPolicy) -> None:
    assert policy.submit(unset_job(account="proja")).rc == OK


# --------------------------------------------------------------------------
# Checkpoint contract
# --------------------------------------------------------------------------

REJECT_TAIL = (
    ". To comply, submit with --checkpoint[=DIR] (or --checkpoint-signal=SIG, or --signal=[B:]SIG[@SECONDS]) and "
    "without --no-requeue: when the job is preempted it receives SIGUSR1 60 s before it is stopped, saves its state "
    "and is requeued. Tiers without this requirement that account 'proja' may use: guaranteed."
)
SCRIPT_SIGNAL = "#!/bin/bash\n#SBATCH --time=10\n\n#SBATCH --signal=B:USR1@60\nsrun train\n"

CHECKPOINT = [
    # (case, job fields, rc, requeue after, messages)
    (
        "reject: nothing declared",
        dict(),
        E_ACCESS,
        NO_VAL16,
        [
            "slurm-pool: tier 'scavenger' is preemptible: its jobs must be requeueable and checkpoint their work, and it "
            "declares no checkpointing" + REJECT_TAIL
        ],
    ),
    (
        "reject: --no-requeue",
        dict(requeue=0, **CKPT),
        E_ACCESS,
        0,
        [
            "slurm-pool: tier 'scavenger' is preemptible: its jobs must be requeueable and checkpoint their work, and its "
            "requeue is turned off (--no-requeue)" + REJECT_TAIL
        ],
    ),
    (
        "reject: both",
        dict(requeue=0),
        E_ACCESS,
        0,
        ["and its requeue is turned off (--no-requeue) and it declares no checkpointing. "],
    ),
    ("--checkpoint", dict(**CKPT), OK, 1, []),
    ("--checkpoint-signal", env("SPANK_SLURM_POOL_CHECKPOINT_SIGNAL=USR2"), OK, 1, []),
    ("--signal seen by the SPANK plugin", env("SLURM_POOL_SIGNAL=1"), OK, 1, []),
    ("#SBATCH --signal", dict(script=SCRIPT_SIGNAL), OK, 1, []),
    ("#SBATCH --sig abbreviation", dict(script="#!/bin/sh\n#SBATCH --sig=USR1@30\ntrue\n"), OK, 1, []),
    (
        "#SBATCH after the first command is ignored",
        dict(script="#!/bin/sh\ntrue\n#SBATCH --signal=USR1\n"),
        E_ACCESS,
        NO_VAL16,
        ["declares no checkpointing"],
    ),
    ("plain comment is not a directive", dict(script="#!/bin/sh\n# --signal=USR1\ntrue\n"), E_ACCESS, NO_VAL16, []),
    ("--si is too short to tell", dict(script="#!/bin/sh\n#SBATCH --si=USR1\ntrue\n"), E_ACCESS, NO_VAL16, []),
    ("already requeueable", dict(requeue=1, **CKPT), OK, 1, []),
    ("checkpoint value other than 1", env("SLURM_POOL_CHECKPOINT=0"), E_ACCESS, NO_VAL16, []),
]


@pytest.mark.parametrize("case,fields,rc,requeue,messages", CHECKPOINT, ids=[c[0] for c in CHECKPOINT])
def test_checkpoint_reject(
    policy: LuaPolicy, case: str, fields: dict, rc: int, requeue: int, messages: list[str]
) -> None:
    out = policy.submit(unset_job(account="proja", qos="scavenger", **fields))
    check(out, rc, {"requeue": requeue}, messages)
    if rc == OK:
        assert out.user == []


def test_checkpoint_add_requeue(policy: LuaPolicy) -> None:
    out = policy.submit(unset_job(account="proja", qos="shared", time_limit=60, requeue=0))
    assert (out.rc, out.job["requeue"]) == (OK, 1)
    assert out.user == [
        "slurm-pool: tier 'shared' is preemptible: --no-requeue was overridden, so this job is requeued if it is preempted.",
        "slurm-pool: tier 'shared' is preemptible and this job declares no checkpointing (--checkpoint[=DIR] or --signal): "
        "if it is preempted it starts again from the beginning.",
    ]
    out = policy.submit(unset_job(account="proja", qos="shared", time_limit=60, **CKPT))
    assert (out.rc, out.job["requeue"], out.user) == (OK, 1, [])


def test_no_contract_leaves_requeue_alone(policy: LuaPolicy) -> None:
    out = policy.submit(unset_job(account="proja", requeue=0))
    assert (out.rc, out.job["requeue"]) == (OK, 0)


def test_all_problems_reported_together(policy: LuaPolicy) -> None:
    out = policy.submit(unset_job(account="projc", qos="scavenger", tres_per_node="gres:gpu:v100:1"))
    assert out.rc == E_GRES  # the first problem's code
    assert len(out.user) == 1 and out.user[0].count("slurm-pool: ") == 2
    assert "v100" in out.user[0] and "declares no checkpointing" in out.user[0]


def test_no_tier_alternative_means_no_hint(small: LuaPolicy, runtime) -> None:
    spec = small_spec()
    tiers = [t.model_copy(update={"policy": t.policy.model_copy(update={"checkpoint": "reject"})}) for t in spec.tiers]
    lua = runtime(render_job_submit(spec.model_copy(update={"tiers": tiers}), V2205))
    out = lua.submit(unset_job(account="team", qos="normal"))
    assert out.rc == E_ACCESS and "Tiers without this requirement" not in out.message


# --------------------------------------------------------------------------
# slurm_job_modify
# --------------------------------------------------------------------------

REC = dict(job_id=42, account="proja", partition="a-owner", qos="guaranteed", job_state=0, time_limit=60)

MODIFY = [
    # (case, modify request, rc, fields set, message fragments)
    ("nothing pooled changes", dict(time_limit=NO_VAL, comment="x"), OK, dict(partition=None, qos=None), []),
    (
        "into a forbidden tier",
        dict(qos="k8s-lend"),
        E_ACCESS,
        {},
        ["account 'proja' may not use tier 'k8s-lend'. " + TIERS_A],
    ),
    ("into a forbidden partition", dict(partition="b-owner"), E_ACCESS, {}, ["may not use partition 'b-owner'"]),
    ("into an unknown qos", dict(qos="premium"), E_QOS, {}, ["QOS 'premium' is not a tier"]),
    ("qos change reroutes", dict(qos="shared"), OK, dict(partition="shared", qos="shared", requeue=1), []),
    ("partition change sets qos", dict(partition="shared"), OK, dict(partition="shared", qos="shared", requeue=1), []),
    (
        "into a checkpoint tier without checkpointing",
        dict(partition="scavenger"),
        E_ACCESS,
        dict(qos=None),
        ["tier 'scavenger' is preemptible", "it declares no checkpointing"],
    ),
    ("same tier, nothing to set", dict(qos="guaranteed"), OK, dict(partition=None), []),
    (
        "account the partition refuses",
        dict(account="projb"),
        E_ACCESS,
        {},
        ["account 'projb' may not use partition 'a-owner'"],
    ),
    (
        "account outside the pool",
        dict(account="physics"),
        E_ACCOUNT,
        {},
        ["account 'physics' is not a project of this pool"],
    ),
]


@pytest.mark.parametrize("case,fields,rc,after,fragments", MODIFY, ids=[c[0] for c in MODIFY])
def test_modify(policy: LuaPolicy, case: str, fields: dict, rc: int, after: dict, fragments: list[str]) -> None:
    request = {"time_limit": NO_VAL, **fields}
    out = policy.modify(request, REC, modify_uid=1000)
    check(out, rc, after, fragments)


def test_modify_time_limit(policy: LuaPolicy) -> None:
    rec = dict(REC, partition="shared", qos="shared")
    assert policy.modify({"time_limit": INFINITE}, rec).rc == E_BAD_TIME
    assert policy.modify({"time_limit": 120}, rec).rc == OK
    assert policy.modify({"time_limit": INFINITE}, REC).rc == OK  # guaranteed needs no limit
    # without accounting the record has no QOS: the partition tells the tier
    assert policy.modify({"time_limit": INFINITE}, dict(rec, qos=None)).rc == E_BAD_TIME
    # moving into a tier that requires a time limit needs one, new or old
    assert policy.modify({"qos": "shared", "time_limit": NO_VAL}, dict(REC, time_limit=NO_VAL)).rc == E_NO_TIME
    assert policy.modify({"qos": "shared", "time_limit": 30}, dict(REC, time_limit=NO_VAL)).rc == OK
    assert policy.modify({"qos": "shared", "time_limit": NO_VAL}, REC).rc == OK


def test_modify_into_checkpoint_tier(policy: LuaPolicy) -> None:
    rec = dict(REC, **env("SLURM_POOL_CHECKPOINT=1"))
    out = policy.modify({"partition": "scavenger", "time_limit": NO_VAL, "requeue": NO_VAL16}, rec)
    assert (out.rc, out.job["qos"], out.job["requeue"]) == (OK, "scavenger", 1)
    rec = dict(REC, script=SCRIPT_SIGNAL)
    assert policy.modify({"qos": "scavenger", "time_limit": NO_VAL}, rec).rc == OK


def test_modify_requeue_off(policy: LuaPolicy) -> None:
    rec = dict(REC, partition="scavenger", qos="scavenger", **env("SLURM_POOL_CHECKPOINT=1"))
    out = policy.modify({"requeue": 0, "time_limit": NO_VAL}, rec)
    assert out.rc == E_ACCESS and "its requeue is turned off (--no-requeue)" in out.message
    out = policy.modify({"requeue": 0, "time_limit": NO_VAL}, dict(rec, partition="shared", qos="shared"))
    assert (out.rc, out.job["requeue"]) == (OK, 1)  # add_requeue overrides
    out = policy.modify({"requeue": 0, "time_limit": NO_VAL}, REC)
    assert (out.rc, out.job["requeue"]) == (OK, 0)  # guaranteed: no contract


def test_modify_of_jobs_outside_the_pool_passes(policy: LuaPolicy) -> None:
    rec = dict(REC, account="root", qos="normal", partition="debug")
    assert policy.modify({"qos": "k8s-lend", "time_limit": NO_VAL}, rec).rc == OK


def test_modify_rejection_is_logged(policy: LuaPolicy) -> None:
    out = policy.modify({"qos": "k8s-lend", "time_limit": NO_VAL}, REC, modify_uid=7)
    assert any("rejected update of job 42 by uid 7" in line for line in out.info)


# --------------------------------------------------------------------------
# Error handling
# --------------------------------------------------------------------------

EXPLODING = "setmetatable({}, { __index = function(t, k) error('accessor failed: ' .. k) end })"


def test_runtime_error_rejects_by_default(policy: LuaPolicy) -> None:
    out = policy.submit(policy.lua.eval(EXPLODING))
    assert out.rc == ERROR
    assert out.user == [
        "slurm-pool: the pool's job policy failed on this request, so it was rejected. "
        "Please contact your cluster administrators."
    ]
    assert (
        len(out.error) == 1
        and "internal error in slurm_job_submit" in out.error[0]
        and "accessor failed" in out.error[0]
    )


def test_runtime_error_in_modify(policy: LuaPolicy) -> None:
    out = policy.modify(policy.lua.eval(EXPLODING), REC)
    assert out.rc == ERROR and "internal error in slurm_job_modify" in out.error[0]


@pytest.mark.parametrize("job", [None, 7, True])
def test_not_a_table(policy: LuaPolicy, job: Any) -> None:
    out = policy.submit(job)
    assert out.rc == ERROR and out.error


def test_a_string_is_a_job_without_fields(policy: LuaPolicy) -> None:
    # Lua strings index the string library: every field reads as nil
    assert policy.submit("job").rc == E_ACCOUNT


def test_runtime_error_accepted_when_configured(example: PoolSpec, runtime) -> None:
    spec = example.model_copy(update={"policy": example.policy.model_copy(update={"on_error": "accept"})})
    lua = runtime(render_job_submit(spec, V2205))
    out = lua.submit(lua.lua.eval(EXPLODING))
    assert out.rc == OK and out.user == [] and out.error
    assert any("on_error is accept" in line for line in out.info)


def test_admin_contact_is_escaped_and_quoted(runtime) -> None:
    lua = runtime(render_job_submit(small_spec(), V2205))
    out = lua.submit(lua.lua.eval(EXPLODING))
    assert out.user == [
        "slurm-pool: the pool's job policy failed on this request, so it was rejected. "
        'Please contact Ops "desk" ]] room 12, 100% of the time \\ %s.'
    ]


def test_setter_failure_is_caught(policy: LuaPolicy) -> None:
    # slurmctld's setters raise on a wrong type; a failing write is an internal error too
    job = policy.lua.eval(
        "setmetatable({ account = 'proja', requeue = 65534, time_limit = 4294967294 }, "
        "{ __newindex = function() error('setter failed') end })"
    )
    out = policy.submit(job)
    assert out.rc == ERROR and "setter failed" in out.error[0]


def test_broken_log_functions_do_not_escape(source: str, runtime) -> None:
    lua = runtime(source)
    lua.lua.execute("slurm.log_user = function() error('no') end; slurm.log_info = nil; slurm.log_error = 5")
    assert lua.submit(unset_job(account="proja", qos="k8s-lend")).rc == E_ACCESS
    assert lua.submit(lua.lua.eval(EXPLODING)).rc == ERROR


def test_codes_fall_back_without_eslurm_names(source: str, runtime) -> None:
    lua = runtime(source, codes={})
    assert lua.submit(unset_job(account="proja", qos="k8s-lend")).rc == E_ACCESS
    assert lua.submit(unset_job(account="proja", qos="shared", **CKPT)).rc == E_NO_TIME


def test_non_numeric_return_is_an_error(source: str, runtime) -> None:
    # the guard also catches a policy function that returns something odd
    lua = runtime(
        source.replace(
            "return finish(decide_submit(job_desc)", "return tostring(finish(decide_submit(job_desc)", 1
        ).replace(
            '"submission from uid " .. int_text(submit_uid))', '"submission from uid " .. int_text(submit_uid)))', 1
        )
    )
    out = lua.submit(unset_job(account="proja"))
    assert out.rc == ERROR and "instead of a return code" in out.error[0]


# --------------------------------------------------------------------------
# Fuzz
# --------------------------------------------------------------------------


def test_fuzz(source: str, runtime) -> None:
    lua = runtime(source)
    rng = random.Random(20240501)
    # CPU seconds, not wall-clock ones: the bound is on the policy's work, which other processes
    # sharing the CPUs (make test's streams) do not change.
    start = time.process_time()
    for i in range(10_000):
        job = random_job(rng)
        if i % 5 == 4:
            out = lua.modify(job, random_job(rng), modify_uid=rng.choice([0, 1000, "x", None]))
        else:
            out = lua.submit(job, submit_uid=rng.choice([0, 1000, "x", None]))
        assert isinstance(out.rc, int) and out.rc in CODES, (i, out.rc, job)
        assert not out.error, (i, out.error, job)  # garbage fields never reach the error path
        if out.rc != OK:
            assert out.user, (i, job)
        for key in ("partition", "qos", "account", "tres_per_node", "tres_per_job", "tres_per_task", "tres_per_socket"):
            if key in out.job and out.job[key] is not None and out.rc == OK and key not in job:
                assert isinstance(out.job[key], str)
    assert time.process_time() - start < 20


# --------------------------------------------------------------------------
# Rendering
# --------------------------------------------------------------------------


def test_golden_pins_the_data(source: str) -> None:
    # The rendered file is the spec's data, then the static code unchanged.
    code = policy_code()
    assert source.endswith("\n\n" + code)
    data = source[: -len(code)]
    if os.environ.get("SLURM_POOL_UPDATE_GOLDEN"):
        GOLDEN.write_text(data)
    assert data == GOLDEN.read_text(), "the policy data changed; rerun with SLURM_POOL_UPDATE_GOLDEN=1 if intended"
    assert "function" not in data and "local SLURM_POOL = {" in data


def test_static_code_carries_no_spec(example: PoolSpec) -> None:
    code = (ROOT / "slurm_pool" / "policy" / "job_submit.lua").read_text()
    assert code == policy_code()
    for name in ("proja", "a-owner", "k8s-lend", "nvidia_a100", "scavenger", "{{", "{%"):
        assert name not in code, name


def test_luacheck_passes_on_the_static_code() -> None:
    luacheck = shutil.which("luacheck")
    assert luacheck, "luacheck (Debian's lua-check) is not installed; run make deps"
    done = subprocess.run(
        [luacheck, "--no-color", "slurm_pool/policy/job_submit.lua"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_render_is_deterministic(example: PoolSpec, source: str) -> None:
    again = render_job_submit(load_spec(EXAMPLE), V2205)
    assert again == source == render_job_submit(example, V2205)


def test_rendered_file_loads_and_returns_success(policy: LuaPolicy) -> None:
    assert policy.load_rc == 0
    assert policy.lua.eval("type(slurm_job_submit)") == "function"
    assert policy.lua.eval("type(slurm_job_modify)") == "function"


def test_no_globals_leak(policy: LuaPolicy) -> None:
    names = set(
        policy.lua.eval("(function() local t = {} for k in pairs(_G) do t[#t + 1] = k end return t end)()").values()
    )
    assert {"slurm_job_submit", "slurm_job_modify"} <= names
    assert not names & {"POOL", "TIERS", "PARTITIONS", "PROJECTS", "submit", "resolve"}


def test_no_modules_or_io(source: str, runtime) -> None:
    # the policy runs with the module system, I/O and OS access removed
    lua = runtime("require, io, os, dofile, loadfile, loadstring, print, debug, package = nil\n" + source)
    assert lua.submit(unset_job(account="projc", qos="scavenger", tres_per_node="gres:gpu:v100:1")).rc == E_GRES
    assert (
        lua.submit(unset_job(user_name="carol", tres_per_node="gres:gpu:1", **env("SLURM_POOL_GPU_MEM_MB=1"))).rc == OK
    )
    assert lua.submit(lua.lua.eval(EXPLODING)).rc == ERROR
    assert lua.modify({"qos": "shared", "time_limit": INFINITE}, REC).rc == E_BAD_TIME
    assert "/work/" not in source


def test_tables_injected_directly(example: PoolSpec, lua_version: str) -> None:
    # Unit tests can run the code on data of their own, no spec needed.
    data = policy_data(build_tables(example, V2205), V2205)
    job = unset_job(account="projc", qos="scavenger", tres_per_node="gres:gpu:v100:1")
    assert LuaPolicy.from_data(data, lua=lua_version).submit(job).rc == E_GRES
    data["partitions"]["scavenger"]["gpu_types"].append("v100")
    data["gpu_types"]["v100"] = {"mem_mb": 16384, "mig": False, "parents": {"v100": True}}
    data["gpu_type_order"].append("v100")
    data["tiers"]["scavenger"]["checkpoint"] = "none"
    assert LuaPolicy.from_data(data, lua=lua_version).submit(job).rc == OK
    data["enabled"] = False
    assert LuaPolicy.from_data(data, lua=lua_version).submit(unset_job(account="nobody")).rc == OK


def test_code_without_data_fails_to_load() -> None:
    with pytest.raises(Exception, match="no SLURM_POOL data table"):
        LuaPolicy(policy_code())


def test_job_submit_switched_off(example: PoolSpec, runtime) -> None:
    spec = example.model_copy(update={"policy": example.policy.model_copy(update={"job_submit": False})})
    lua = runtime(render_job_submit(spec, V2205))
    out = lua.submit(unset_job(account="nobody", qos="k8s-lend"))
    assert (out.rc, out.user) == (OK, [])
    assert lua.modify({"qos": "x"}, REC).rc == OK


@pytest.mark.parametrize("text", ["plain", 'q"uote', "back\\slash", "new\nline", "tab\t", "nul\0", "é ü", "]]", "\x7f"])
def test_lua_string_round_trip(policy: LuaPolicy, text: str) -> None:
    assert policy.lua.eval(lua_string(text)) == text
