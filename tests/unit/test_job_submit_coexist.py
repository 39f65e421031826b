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
        text = text.replace("  job_submit:\n    script: /etc/slurm/site_job_submit.lua\n    order: before\n", "")
    else:
        text = text.replace("/etc/slurm/site_job_submit.lua", str(site)).replace("order: before", f"order: {order}")
    if not job_submit:
        text = text.replace("policy:\n  default_tier: spot\n", "policy:\n  default_tier: spot\n  job_submit: false\n")
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
    # A pool project's association offers only the pool's QOS: on the site's partition it would run in one.
    (
        "site partition, pool account",
        {"partition": "batch", "account": "proja"},
        E_PARTITION,
        None,
        ["account 'proja' is a project of the pool", "partitions (a-owner, shared, spot)", "with a site account"],
    ),
    ("site QOS on a site partition", {"partition": "site-gpu", "qos": "site-normal", "user_name": "dave"}, OK, {}, []),
    # The site's own scavenger QOS (the pool's spot tier once had its name): the site's, wherever it is asked.
    (
        "the site's scavenger on a site partition",
        {"partition": "site-gpu", "qos": "scavenger", "default_account": "physics", "user_name": "dave"},
        OK,
        {},
        [],
    ),
    (
        "the site's scavenger, no partition",
        {"qos": "scavenger", "default_account": "physics", "user_name": "dave"},
        OK,
        {},
        [],
    ),
    (
        "the site's scavenger, a pool user on the default partition",
        {"qos": "scavenger", "default_account": "physics", "user_name": "alice"},
        OK,
        {},
        [],
    ),
    ("site QOS, no partition", {"qos": "site-normal", "default_account": "physics", "user_name": "dave"}, OK, {}, []),
    (
        "pool QOS on a site partition, site account",
        {"partition": "site-gpu", "qos": "shared", "account": "physics", "user_name": "dave"},
        E_PARTITION,
        None,
        [
            "QOS 'shared' is the pool's and runs only in its partitions (shared)",
            "partition site-gpu is the site's",
            "Submit with -p shared (or without -p), or keep -p site-gpu with one of the site's QOS.",
        ],
    ),
    (
        "pool QOS on a site partition, pool user's default account",
        {"partition": "site-gpu", "qos": "guaranteed", "default_account": "physics", "user_name": "alice"},
        E_PARTITION,
        None,
        ["QOS 'guaranteed' is the pool's and runs only in its partitions (a-owner, b-owner, c-owner)"],
    ),
    (
        "pool QOS among site QOS on a site partition",
        {"partition": "site-gpu", "qos": "site-normal,shared", "user_name": "dave"},
        E_PARTITION,
        None,
        ["QOS 'shared' is the pool's"],
    ),
    (
        "site account on a pool partition: the user's project named",
        {"partition": "a-owner", "account": "physics", "user_name": "alice"},
        E_ACCOUNT,
        None,
        [
            "account 'physics' is not a project of this pool",
            "Submit with -A proja (user 'alice' is in the pool's project proja).",
        ],
    ),
    (
        "pool partition, a user in no project",
        {"partition": "shared", "default_account": "physics", "user_name": "dave"},
        E_ACCOUNT,
        None,
        [
            "User 'dave' is in none of the pool's projects (proja, projb, projc, k8s-bridge): ask ",
            "or leave the pool's partitions and QOS out to run on the site's.",
        ],
    ),
    (
        "pool QOS, a user in no project",
        {"qos": "shared", "default_account": "physics", "user_name": "dave"},
        E_ACCOUNT,
        None,
        ["User 'dave' is in none of the pool's projects"],
    ),
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
        [
            "partition 'batch' is not one of the pool's",
            "mix the pool's partitions with the site's",
            "Submit to a-owner alone, or to the site's partitions without the pool's.",
        ],
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


GOOD_SITE = """
function slurm_job_submit(job_desc, part_list, submit_uid)
    job_desc.comment = "site v2"
    return slurm.SUCCESS
end
function slurm_job_modify(job_desc, job_rec, part_list, modify_uid) return slurm.SUCCESS end
"""

# (why, the site's file (None: gone), what slurmctld's log names)
BROKEN = [
    ("a syntax error", "function slurm_job_submit(\n  this is not lua (\n", ":2: "),
    ("an error while loading", GOOD_SITE + "error('boom at load')\n", ":7: boom at load"),
    ("a return code other than SUCCESS", GOOD_SITE + "return slurm.ERROR\n", "returned -1 on load"),
    (
        "slurm_job_modify missing",
        "function slurm_job_submit() return slurm.SUCCESS end\n",
        "missing required function slurm_job_modify",
    ),
    ("both functions missing", "x = 1\n", "missing required function slurm_job_modify, slurm_job_submit"),
    ("the file gone", None, "No such file or directory"),
]


def _break(site: Path, script: str | None) -> None:
    if script is None:
        site.unlink()
    else:
        site.write_text(script)


@pytest.mark.parametrize("why,script,logged", BROKEN, ids=[b[0] for b in BROKEN])
def test_a_site_script_broken_later_keeps_the_last_that_loaded(
    tmp_path: Path, lua: str, why: str, script: str | None, logged: str
) -> None:
    """As job_submit/lua keeps its own script: site and pool jobs still pass, under the site's old functions."""
    policy = _policy(tmp_path, lua)
    site = tmp_path / "site_job_submit.lua"
    assert policy.submit(unset_job(partition="batch", account="physics")).job["comment"] == "site saw batch #1"
    _break(site, script)
    for n, job in enumerate(
        [unset_job(partition="batch", account="physics"), unset_job(account="proja", user_name="alice")]
    ):
        out = policy.submit(job)
        assert out.rc == OK, (why, out)
        assert out.job["comment"].startswith("site saw ") and out.job["comment"].endswith(f"#{n + 2}"), out.job
        assert not out.user, out.user
        # slurmctld's log names the file, the error, and that the old functions stay, at every call (as Slurm's does).
        assert [e for e in out.error if str(site) in e and logged in e and "using the one that loaded before" in e]
    assert policy.modify({"comment": "x"}, {"partition": "batch", "job_id": 3}).rc == OK
    # Mended: the new version is loaded at the next call.
    site.write_text(GOOD_SITE)
    out = policy.submit(unset_job(partition="batch", account="physics"))
    assert (out.rc, out.job["comment"], out.error) == (OK, "site v2", [])
    assert any("loaded the site's job_submit script" in i and str(site) in i for i in out.info)


def test_a_site_script_is_reloaded_when_its_text_changes(tmp_path: Path, lua: str) -> None:
    policy = _policy(tmp_path, lua)
    site = tmp_path / "site_job_submit.lua"
    assert policy.submit(unset_job(partition="batch", account="physics")).job["comment"] == "site saw batch #1"
    site.write_text(GOOD_SITE)
    assert policy.submit(unset_job(partition="batch", account="physics")).job["comment"] == "site v2"
    site.write_text(SITE_SCRIPT)  # the first text again: loaded anew, its counter from 0
    assert policy.submit(unset_job(partition="batch", account="physics")).job["comment"] == "site saw batch #1"


@pytest.mark.parametrize("why,script,logged", BROKEN, ids=[b[0] for b in BROKEN])
def test_a_site_script_broken_from_the_start_fails_the_load(
    tmp_path: Path, lua: str, why: str, script: str | None, logged: str
) -> None:
    """Slurm with the site's broken script alone would not load it: nor does the chain, naming the file."""
    site = tmp_path / "site_job_submit.lua"
    site.write_text(SITE_SCRIPT)
    _break(site, script)
    with pytest.raises(Exception) as exc:  # each lupa runtime has its own LuaError
        LuaPolicy(render_job_submit(load_spec_text(_spec(site)), V2605), lua=lua)
    assert type(exc.value).__name__ == "LuaError"
    text = str(exc.value)
    assert f"the site's job_submit script {site} failed to load" in text and logged in text, text


def test_site_script_error_at_submit_rejects(tmp_path: Path, lua: str) -> None:
    """As job_submit/lua does with its own script: the job is refused with the Lua error."""
    script = "function slurm_job_submit() error('site bug') end\nfunction slurm_job_modify() return 0 end\n"
    policy = _policy(tmp_path, lua, script=script)
    out = policy.submit(unset_job(partition="batch", account="physics"))
    assert out.rc == ERROR
    assert any("site bug" in e for e in out.error) and "site bug" in out.message


def test_site_script_without_a_number_passes(tmp_path: Path, lua: str) -> None:
    """job_submit/lua takes a return that is not a number as SUCCESS ("non-numeric return code")."""
    script = "function slurm_job_submit() return 'yes' end\nfunction slurm_job_modify() end\n"
    policy = _policy(tmp_path, lua, script=script)
    out = policy.submit(unset_job(partition="batch", account="physics"))
    assert out.rc == OK and any("non-numeric return code" in i for i in out.info)
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


def test_an_update_into_a_pool_qos_on_a_site_partition_is_refused(tmp_path: Path, lua: str) -> None:
    policy = _policy(tmp_path, lua, script=None)
    out = policy.modify({"qos": "shared"}, {"partition": "site-gpu", "account": "proja", "job_id": 7})
    assert out.rc == E_PARTITION and "QOS 'shared' is the pool's" in out.message, out
    # The site's own QOS on the same job is the site's business.
    assert policy.modify({"qos": "site-normal"}, {"partition": "site-gpu", "account": "physics", "job_id": 7}).rc == OK


# (spec edit, job, rc, message fragment)
OWNERSHIP = [
    (
        "a user in two projects is shown both",
        ("    users: [bob]\n", "    users: [bob, alice]\n"),
        {"partition": "b-owner", "account": "physics", "user_name": "alice"},
        E_ACCOUNT,
        "Submit with -A proja or -A projb (user 'alice' is in the pool's projects proja, projb).",
    ),
    (
        "an adopted account keeps its jobs on the site's partitions",
        ("checkpoint:\n", "adopt:\n  accounts: [{name: proja, fields: []}]\ncheckpoint:\n"),
        {"partition": "batch", "account": "proja"},
        OK,
        "",
    ),
    (
        "an adopted account with a pool QOS on a site partition is the pool's",
        ("checkpoint:\n", "adopt:\n  accounts: [{name: proja, fields: []}]\ncheckpoint:\n"),
        {"partition": "batch", "account": "proja", "qos": "shared"},
        E_PARTITION,
        "QOS 'shared' is the pool's",
    ),
    (
        "an adopted account without a partition is routed",
        ("checkpoint:\n", "adopt:\n  accounts: [{name: proja, fields: []}]\ncheckpoint:\n"),
        {"account": "proja", "user_name": "alice"},
        OK,
        "",
    ),
]


@pytest.mark.parametrize("case,edit,fields,rc,fragment", OWNERSHIP, ids=[c[0] for c in OWNERSHIP])
def test_ownership(lua: str, case: str, edit: tuple[str, str], fields: dict, rc: int, fragment: str) -> None:
    text = _spec(None)
    assert edit[0] in text
    policy = LuaPolicy(render_job_submit(load_spec_text(text.replace(edit[0], edit[1], 1)), V2605), lua=lua)
    out = policy.submit(unset_job(**fields))
    assert out.rc == rc, out
    assert fragment in out.message
