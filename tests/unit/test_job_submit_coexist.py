"""job_submit.lua in a shared cluster (the spec's ``coexist``): jobs outside the pool pass untouched,
and the site's own script runs before or after the pool's rules, on Lua 5.1, 5.3 and 5.4."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_pool.policy.lua import render_job_submit
from slurm_pool.spec import load_spec_text
from slurm_pool.versions import SlurmVersion
from tests.support.lua_policy import LUA_VERSIONS, LuaPolicy, unset_job

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = (ROOT / "examples" / "pool-coexist.yaml").read_text()
V2605 = SlurmVersion(26, 5, 3)
OK, ERROR, E_PARTITION, E_ACCOUNT = 0, -1, 2000, 2045

#: The site's own rules: a comment "forbidden" is refused, every job is stamped with what the site saw.
SITE_SCRIPT = """
local seen = 0
function slurm_job_submit(job_desc, part_list, submit_uid)
    seen = seen + 1
    if job_desc.comment == "forbidden" then
        slurm.log_user("site: comment forbidden")
        return slurm.ERROR
    end
    job_desc.comment = "site saw " .. tostring(job_desc.partition) .. " #" .. seen
    return slurm.SUCCESS
end
function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
    if job_desc.comment == "forbidden" then return slurm.ERROR end
    return slurm.SUCCESS
end
-- A site script that defines globals must not reach the pool's.
SLURM_POOL = nil
return slurm.SUCCESS
"""


def _spec(site: Path | None, order: str = "before", job_submit: bool = True) -> str:
    text = EXAMPLE
    if site is None:
        text = text.replace("  job_submit:\n    script: /etc/slurm/site_job_submit.lua\n    order: before\n", "  {}\n")
        text = text.replace("coexist:\n  {}\n", "coexist: {}\n")
    else:
        text = text.replace("/etc/slurm/site_job_submit.lua", str(site)).replace("order: before", f"order: {order}")
    if not job_submit:
        text = text.replace(
            "policy:\n  default_tier: spot\n", "policy:\n  default_tier: spot\n  job_submit: false\n"
        )
    return text


def _policy(tmp_path: Path, lua: str, script: str | None = SITE_SCRIPT, **kw) -> LuaPolicy:
    site = None
    if script is not None:
        site = tmp_path / "site_job_submit.lua"
        site.write_text(script)
    return LuaPolicy(render_job_submit(load_spec_text(_spec(site, **kw)), V2605), lua=lua)


@pytest.fixture(params=LUA_VERSIONS)
def lua(request: pytest.FixtureRequest) -> str:
    return request.param


# (case, job fields, rc, fields after (None: untouched), message fragments)
SHARED = [
    ("site partition, site account", {"partition": "batch", "account": "physics"}, OK, {}, []),
    ("site partition, pool account", {"partition": "batch", "account": "proja"}, OK, {}, []),
    ("no partition, site default account", {"default_account": "physics", "user_name": "dave"}, OK, {}, []),
    (
        "no partition, pool user whose default account is the site's",
        {"default_account": "physics", "user_name": "alice"},
        OK,
        {},
        [],
    ),
    (
        "no partition, pool account: routed",
        {"account": "proja", "user_name": "alice"},
        OK,
        {"partition": "a-owner", "qos": "guaranteed"},
        [],
    ),
    (
        "pool partition without account: the user's project",
        {"partition": "a-owner", "default_account": "physics", "user_name": "alice"},
        OK,
        {"account": "proja", "qos": "guaranteed"},
        [],
    ),
    (
        "pool tier without partition",
        {"qos": "guaranteed", "default_account": "physics", "user_name": "alice"},
        OK,
        {"account": "proja", "partition": "a-owner"},
        [],
    ),
    (
        "pool partition, site account",
        {"partition": "a-owner", "account": "physics"},
        E_ACCOUNT,
        None,
        ["account 'physics' is not a project of this pool"],
    ),
    (
        "pool and site partitions mixed",
        {"partition": "a-owner,batch", "account": "proja"},
        E_PARTITION,
        None,
        ["partition 'batch' is not one of the pool's", "mix the pool's partitions with the site's"],
    ),
]


@pytest.mark.parametrize("case,fields,rc,after,fragments", SHARED, ids=[c[0] for c in SHARED])
def test_shared_scope(tmp_path: Path, lua: str, case: str, fields: dict, rc: int, after, fragments: list[str]) -> None:
    policy = _policy(tmp_path, lua, script=None)
    job = unset_job(**fields)
    out = policy.submit(job)
    assert out.rc == rc, out
    for frag in fragments:
        assert frag in out.message, out.message
    if after is None:
        return
    if not after:  # untouched: no field the policy sets
        assert out.job == job
        assert not out.user, out.user
    for key, value in after.items():
        assert out.job.get(key) == value, (key, out.job)


def test_site_job_modify_passes(tmp_path: Path, lua: str) -> None:
    policy = _policy(tmp_path, lua, script=None)
    out = policy.modify({"account": "physics2"}, {"partition": "batch", "account": "physics", "job_id": 7})
    assert out.rc == OK and not out.user


def test_pool_job_modify_is_policed(tmp_path: Path, lua: str) -> None:
    policy = _policy(tmp_path, lua, script=None)
    out = policy.modify({"account": "physics"}, {"partition": "a-owner", "account": "proja", "job_id": 7})
    assert out.rc == E_ACCOUNT, out


def test_moving_a_site_job_into_the_pool_is_policed(tmp_path: Path, lua: str) -> None:
    policy = _policy(tmp_path, lua, script=None)
    out = policy.modify({"partition": "a-owner"}, {"partition": "batch", "account": "physics", "job_id": 7})
    assert out.rc == E_ACCOUNT, out


# (order, job, rc, comment after, the site's message shown)
CHAIN = [
    ("before", {"partition": "batch", "account": "physics"}, OK, "site saw batch #1", False),
    ("before", {"account": "proja", "user_name": "alice"}, OK, "site saw nil #1", False),
    ("after", {"account": "proja", "user_name": "alice"}, OK, "site saw a-owner #1", False),
    ("before", {"partition": "batch", "account": "physics", "comment": "forbidden"}, ERROR, "forbidden", True),
    ("after", {"account": "proja", "user_name": "alice", "comment": "forbidden"}, ERROR, "forbidden", True),
]


@pytest.mark.parametrize("order,fields,rc,comment,site_said", CHAIN)
def test_site_script_chained(tmp_path: Path, lua: str, order: str, fields: dict, rc: int, comment: str, site_said):
    policy = _policy(tmp_path, lua, order=order)
    job = unset_job(**fields)
    out = policy.submit(job)
    assert out.rc == rc, out
    assert out.job.get("comment") == comment
    assert ("site: comment forbidden" in out.user) == site_said


def test_site_rejection_before_skips_the_pool(tmp_path: Path, lua: str) -> None:
    policy = _policy(tmp_path, lua, order="before")
    out = policy.submit(unset_job(account="proja", user_name="alice", comment="forbidden"))
    assert out.rc == ERROR and "partition" not in out.job


def test_pool_rejection_after_skips_the_site(tmp_path: Path, lua: str) -> None:
    policy = _policy(tmp_path, lua, order="after")
    out = policy.submit(unset_job(partition="a-owner", account="physics"))
    assert out.rc == E_ACCOUNT and "comment" not in out.job


def test_site_script_keeps_its_globals_to_itself(tmp_path: Path, lua: str) -> None:
    policy = _policy(tmp_path, lua)
    assert policy.submit(unset_job(account="proja", user_name="alice")).rc == OK
    # Its "SLURM_POOL = nil" and its entry points stayed in its own table: a second job is still routed.
    out = policy.submit(unset_job(account="projb", user_name="bob"))
    assert out.job.get("partition") == "b-owner" and out.job.get("comment") == "site saw nil #2"


def test_policy_off_still_runs_the_site_script(tmp_path: Path, lua: str) -> None:
    policy = _policy(tmp_path, lua, job_submit=False)
    out = policy.submit(unset_job(account="proja", user_name="alice"))
    assert out.rc == OK and "partition" not in out.job and out.job.get("comment") == "site saw nil #1"


@pytest.mark.parametrize(
    "script,why",
    [
        ("this is not lua (", "a syntax error"),
        (None, "a missing file"),
        ("error('boom at load')", "an error while loading"),
    ],
)
def test_broken_site_script_rejects_with_a_message(tmp_path: Path, lua: str, script: str | None, why: str) -> None:
    site = tmp_path / "site_job_submit.lua"
    if script is not None:
        site.write_text(script)
    policy = LuaPolicy(render_job_submit(load_spec_text(_spec(site)), V2605), lua=lua)
    out = policy.submit(unset_job(partition="batch", account="physics"))
    assert out.rc == ERROR, why
    assert "the site's job policy could not be loaded" in out.message
    assert any("failed to load" in e for e in out.error)


def test_site_script_error_at_submit_rejects(tmp_path: Path, lua: str) -> None:
    policy = _policy(tmp_path, lua, script="function slurm_job_submit() error('site bug') end")
    out = policy.submit(unset_job(partition="batch", account="physics"))
    assert out.rc == ERROR
    assert any("site bug" in e for e in out.error)


def test_site_script_without_modify_passes_modify(tmp_path: Path, lua: str) -> None:
    policy = _policy(tmp_path, lua, script="function slurm_job_submit() return slurm.SUCCESS end")
    assert policy.modify({"comment": "x"}, {"partition": "batch", "job_id": 3}).rc == OK


def test_cluster_the_pool_owns_is_unchanged() -> None:
    """Without coexist the data carries no scope, so the rendered file is what it was."""
    owned = load_spec_text((ROOT / "examples" / "pool.yaml").read_text())
    assert "\tscope = " not in render_job_submit(owned, V2605)
    assert "\tscope = " in render_job_submit(load_spec_text(_spec(None)), V2605)


def test_default_partition_refused_in_a_shared_cluster() -> None:
    from slurm_pool.errors import SpecError

    text = _spec(None).replace("priority_tier: 10}", "priority_tier: 10, default: true}")
    with pytest.raises(SpecError) as exc:
        load_spec_text(text)
    assert "partitions[4].default" in str(exc.value)
