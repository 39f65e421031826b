"""One policy, proven twice: the console's ``explain`` and the generated job_submit.lua agree.

The same job descriptions -- every tier of every example spec, the checkpoint rule, guarantees and
their overflow, shared clusters' site jobs, edge values of GPUs and time limits -- go through
:func:`slurm_pool.web.views.explain` and through job_submit.lua (lupa, Lua 5.1 and 5.4), each as the
console would submit it and as a user's bare request.  They must agree on accepting, on the rules
that refuse (:data:`slurm_pool.policy.rules.RULES`, told by their messages) and, for an accepted
job, on its partition and QOS.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import lupa  # noqa: F401  (required: the policy runs in its Lua runtimes)
import pytest

from slurm_pool.adapters.sbatchopts import header
from slurm_pool.policy.lua import policy_data
from slurm_pool.policy.rules import FINAL, RULES, gpu_gres, rule_of
from slurm_pool.policy.tables import PolicyTables, build_tables
from slurm_pool.spec import load_spec
from slurm_pool.spec.model import PoolSpec
from slurm_pool.spec.ranges import time_seconds
from slurm_pool.versions import SlurmVersion
from slurm_pool.web import models, submitting, views
from tests.support.lua_policy import INFINITE, LuaPolicy, unset_job

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("pool*.yaml"))
VERSION = SlurmVersion(22, 5, 8)
LUAS = ("5.1", "5.4")

#: Scripts: plain, declaring checkpointing by --signal (and its abbreviation), turning requeue off.
SCRIPTS = {
    "plain": "#!/bin/sh\ntrue\n",
    "signal": "#!/bin/sh\n#SBATCH --signal=B:USR1@60\ntrue\n",
    "sig": "#!/bin/sh\n#SBATCH --sig=USR1\ntrue\n",
    "noreq": "#!/bin/sh\n#SBATCH --signal=B:USR1@60\n#SBATCH --no-requeue\ntrue\n",
    "noreq-only": "#!/bin/sh\n#SBATCH --no-requeue\ntrue\n",
}
#: A job over three nodes (for a guarantee's overflow: more GPUs than it, each node's fitting).
THREE_NODES = "#!/bin/sh\n#SBATCH --nodes=3\ntrue\n"
#: Time limits: ordinary, the smallest, a day, and the two ways of asking for none.
TIMES = ("01:00:00", "00:00:01", "1-00:00:00", "0", "UNLIMITED")


@dataclass(frozen=True)
class Pool:
    name: str
    spec: PoolSpec
    tables: PolicyTables
    data: dict[str, Any]


def _pool(path: Path, tmp: Path) -> Pool:
    spec = load_spec(path)
    tables = build_tables(spec, VERSION)
    data = policy_data(tables, VERSION)
    if "scope" in data and data["scope"].get("site_script"):
        site = tmp / f"{path.stem}-site.lua"  # the site's own script, passing every job
        site.write_text("function slurm_job_submit() return 0 end\nfunction slurm_job_modify() return 0 end\n")
        data["scope"]["site_script"] = str(site)
    return Pool(path.stem, spec, tables, data)


@pytest.fixture(scope="module")
def pools(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Pool]:
    tmp = tmp_path_factory.mktemp("site")
    return {p.stem: _pool(p, tmp) for p in EXAMPLES}


@pytest.fixture(scope="module", params=LUAS, ids=lambda v: f"lua{v}")
def luas(request: pytest.FixtureRequest, pools: dict[str, Pool]) -> dict[str, LuaPolicy]:
    out = {}
    for name, pool in pools.items():
        lua = LuaPolicy.from_data(pool.data, lua=request.param)
        lua.set_jobs([])  # the queue is empty: a guarantee is free, as explain counts it
        out[name] = lua
    return out


# -- the descriptions --------------------------------------------------------------------
def _gpu_asks(tables: PolicyTables, route: str) -> list[dict[str, Any]]:
    """GPU requests for a partition: none, one, edges of the tier's limit, each type there and one that is not."""
    part = next(p for p in tables.partitions if p.name == route)
    tier = next(t for t in tables.tiers if t.name == part.tier)
    counts = {0, 1, 2, 8}
    if tier.max_gpus is not None:
        counts |= {tier.max_gpus, tier.max_gpus + 1}
    asks: list[dict[str, Any]] = [{"gpus": n} for n in sorted(counts)]
    whole = [t.name for t in tables.gpu_types if not t.mig]
    for name in whole:
        asks.append({"gpus": 1, "gpu_type": name})
    asks.append({"gpus": 2, "gpu_type": whole[0]})
    for t in tables.gpu_types:
        if t.mig:
            asks.append({"gpus": 1, "mig": t.name.rsplit("_", 1)[-1]})  # the bare profile, as the form takes it
    asks.append({"gpus": 1, "mig": "7g.80gb"})
    return asks


def descriptions(pools: dict[str, Pool]) -> list[tuple[str, str, dict[str, Any]]]:
    """(pool, user, request fields): table-driven over pools, projects, their tiers and the edges."""
    out: list[tuple[str, str, dict[str, Any]]] = []
    for name, pool in sorted(pools.items()):
        t = pool.tables
        tiers = [r.name for r in t.tiers]
        for proj in t.projects:
            user = next((u for u, p in t.users if p == proj.name), "root")
            for tier, route in proj.routes:
                for ask in _gpu_asks(t, route):
                    out.append((name, user, {"tier": tier, "project": proj.name, **ask}))
                rule = next(r for r in t.tiers if r.name == tier)
                for tl, script, ck in itertools.product(TIMES, SCRIPTS, (False, True)):
                    if rule.require_time or rule.checkpoint != "none" or (tl == TIMES[0] and not ck):
                        out.append(
                            (
                                name,
                                user,
                                {
                                    "tier": tier,
                                    "project": proj.name,
                                    "time_limit": tl,
                                    "script": script,
                                    "checkpoint": ck,
                                },
                            )
                        )
            for tier in tiers:  # every tier, also those the project may not use
                out.append((name, user, {"tier": tier, "project": proj.name}))
            out.append((name, user, {"tier": "nosuchtier", "project": proj.name}))
            out.append((name, user, {"tier": proj.tiers[0]}))  # no project: the console picks one
    return out


def _request(fields: dict[str, Any]) -> models.SubmitRequest:
    f = dict(fields)
    f["script"] = THREE_NODES if f.get("script") == "three-nodes" else SCRIPTS[f.get("script", "plain")]
    return models.SubmitRequest(**f)


def _minutes(limit: str) -> float:
    seconds = time_seconds(limit)
    return INFINITE if seconds is None else math.ceil(seconds / 60)


def job_desc(pool: Pool, user: str, req: models.SubmitRequest, options: list[str], console: bool) -> dict[str, Any]:
    """What slurmctld receives: the console's sbatch options (``console``), or the user's bare request."""
    given = {o[2:].split("=", 1)[0]: o.split("=", 1)[1] if "=" in o else "" for o in options}
    directives = header(req.script)
    names = [d.name for d in directives]
    requeue = (
        1
        if "requeue" in given
        else {"requeue": 1, "no-requeue": 0}.get(
            next((n for n in reversed(names) if n in ("requeue", "no-requeue")), ""), 65534
        )
    )
    job = unset_job(
        user_name=user, user_id=1000, script=req.script, requeue=requeue, time_limit=_minutes(req.time_limit)
    )
    job["account"] = given.get("account", req.project)
    nodes = [d.value for d in directives if d.name == "nodes"]
    if nodes:
        job["min_nodes"] = int(nodes[-1])
    job["qos"] = given.get("qos", req.tier) if console else req.tier
    if console and "partition" in given:
        job["partition"] = given["partition"]
    gres = given.get("gres")
    if gres is None and not req.shards:
        gres = gpu_gres(pool.tables, req.mig, req.gpu_type, req.gpus) or None
    if gres:
        job["tres_per_node"] = "gres:" + gres
    if "checkpoint" in given:
        job["spank_job_env"] = ["SLURM_POOL_CHECKPOINT=1"]
        job["spank_job_env_size"] = 1
    return {k: v for k, v in job.items() if v is not None}


# -- the comparison ----------------------------------------------------------------------
def _lua_rules(out: Any) -> list[str | None]:
    lines = [line for msg in out.user for line in msg.split("\n") if line.startswith("slurm-pool: ")]
    return [rule_of(line, "lua") for line in lines] if out.rc != 0 else []


def _explain_rules(exp: models.Explanation) -> tuple[list[str], list[str]]:
    """The policy rules explain refuses by, and its other refusals (what Slurm itself would refuse)."""
    rules, other = [], []
    for r in exp.refusals:
        name = rule_of(r, "explain")
        (rules if name else other).append(name or r)
    return rules, other


def disagreement(pool: Pool, lua: LuaPolicy, user: str, fields: dict[str, Any]) -> str | None:
    req = _request(fields)
    who = views.viewer(pool.spec, user)
    exp = submitting.explain(pool.spec, pool.tables, who, req)
    mine, slurms = _explain_rules(exp)
    for console in (True, False):
        job = job_desc(pool, user, req, exp.options, console)
        lua.set_jobs([])  # a fresh, empty queue: no job sent into a guarantee before counts
        out = lua.submit(job)
        theirs = _lua_rules(out)
        where = f"{pool.name} {fields} ({'console' if console else 'bare'}): lua {out.rc} {out.user}; explain {exp.refusals}"
        if None in theirs:
            return f"a job_submit.lua refusal of no known rule: {where}"
        if (out.rc == 0) != (not mine):
            return f"accept/refuse differs: {where}"
        if mine:
            if theirs[0] != mine[0] or not set(theirs) <= set(mine):
                return f"refused by other rules (lua {theirs}, explain {mine}): {where}"
            extra = set(mine) - set(theirs)
            # job_submit.lua stops at a job without a route, and checks no GPU limit past a wrong GPU type.
            if extra and not (set(theirs) & FINAL) and not (extra <= {"max_gpus"} and "gpu_type" in theirs):
                return f"explain refuses by more rules ({sorted(extra)}): {where}"
            continue
        got = (out.job.get("partition"), out.job.get("qos"))
        if got != (exp.partition, exp.qos):
            return f"routed to {got}, explain says {(exp.partition, exp.qos)}: {where}"
        if exp.ok == bool(slurms):
            return f"explain's ok does not follow its refusals: {where}"
    return None


def test_at_least_200_descriptions_over_every_tier_kind(pools: dict[str, Pool]) -> None:
    cases = descriptions(pools)
    assert len(cases) >= 200
    kinds = {
        (r.checkpoint, r.require_time, r.max_gpus is not None, r.gpu_shards is not None)
        for p in pools.values()
        for r in p.tables.tiers
    }
    covered = {
        (r.checkpoint, r.require_time, r.max_gpus is not None, r.gpu_shards is not None)
        for name, _, f in cases
        for r in pools[name].tables.tiers
        if r.name == f["tier"]
    }
    assert covered == kinds
    assert any(p.tables.guarantee_partition for p in pools.values()), "no example has floating guarantees"
    assert any(p.tables.shared for p in pools.values()), "no example shares its cluster with a site"
    assert {r.name for r in RULES} >= FINAL


def test_explain_and_job_submit_lua_agree(pools: dict[str, Pool], luas: dict[str, LuaPolicy]) -> None:
    bad = [d for name, user, f in descriptions(pools) if (d := disagreement(pools[name], luas[name], user, f))]
    assert bad == [], f"{len(bad)} disagreements, the first: {bad[:3]}"


def test_every_rule_is_seen_on_both_sides(pools: dict[str, Pool], luas: dict[str, LuaPolicy]) -> None:
    # The descriptions reach every rule: an agreement where no rule ever fires would prove nothing.
    seen: set[str] = set()
    by_lua: set[str | None] = set()
    for name, user, f in descriptions(pools):
        pool, req = pools[name], _request(f)
        exp = submitting.explain(pool.spec, pool.tables, views.viewer(pool.spec, user), req)
        seen.update(_explain_rules(exp)[0])
        luas[name].set_jobs([])
        by_lua.update(_lua_rules(luas[name].submit(job_desc(pool, user, req, exp.options, False))))
    want = {r.name for r in RULES} - {"guarantee"}  # no example's floating project lacks an overflow tier
    assert (seen, by_lua) == (want, want)


def test_guarantee_overflow_and_refusal(pools: dict[str, Pool], luas: dict[str, LuaPolicy]) -> None:
    pool = pools["pool-floating"]
    g = next(p.guarantee for p in pool.tables.projects if p.guarantee is not None)
    project = next(p.name for p in pool.tables.projects if p.guarantee is g)
    user = next(u for u, p in pool.tables.users if p == project)
    beyond = {"tier": g.tier, "project": project, "gpus": 2, "script": "three-nodes"}
    assert g.gpus[0][1] < 6
    if g.gpus[0][0]:
        beyond["gpu_type"] = g.gpus[0][0]
    exp = submitting.explain(pool.spec, pool.tables, views.viewer(pool.spec, user), _request(beyond))
    assert (exp.ok, exp.partition, exp.qos) == (True, g.overflow_partition, g.overflow_tier)
    assert disagreement(pool, luas["pool-floating"], user, beyond) is None
    # The same project without the overflow tier: both refuse by the guarantee rule.
    t = pool.tables
    gone = replace(g, overflow_partition=None)
    projects = tuple(replace(p, guarantee=gone) if p.name == project else p for p in t.projects)
    tables = replace(t, projects=projects)
    data = policy_data(tables, VERSION)
    lua = LuaPolicy.from_data(data, lua="5.4")
    lua.set_jobs([])
    cut = Pool(pool.name, pool.spec, tables, data)
    exp = submitting.explain(cut.spec, tables, views.viewer(cut.spec, user), _request(beyond))
    assert [rule_of(r, "explain") for r in exp.refusals] == ["guarantee"]
    assert disagreement(cut, lua, user, beyond) is None


def test_site_jobs_pass_untouched_and_explain_does_not_submit_them(
    pools: dict[str, Pool], luas: dict[str, LuaPolicy]
) -> None:
    # Coexist pass-through: a site account's job with the site's QOS and partition is the site's.
    for name, pool in pools.items():
        if not pool.tables.shared:
            continue
        for qos, part in (("normal", "cpu"), ("site-high", None), (None, "batch")):
            job = unset_job(
                account="physics",
                user_name="sam",
                **({"qos": qos} if qos else {}),
                **({"partition": part} if part else {}),
            )
            out = luas[name].submit(job)
            assert out.rc == 0 and out.user == [], (name, job, out.user)
            assert {k: out.job.get(k) for k in job} == job
            if qos:  # the console submits the pool's tiers only
                exp = submitting.explain(
                    pool.spec,
                    pool.tables,
                    views.viewer(pool.spec, "sam"),
                    _request({"tier": qos, "project": "physics"}),
                )
                assert [rule_of(r, "explain") for r in exp.refusals] == ["tier"]


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.name)
def test_every_rule_word_is_in_both_policies(rule: Any) -> None:
    # A message reworded on one side only would leave its refusals unrecognised: the words must be there.
    lua = (ROOT / "slurm_pool" / "policy" / "job_submit.lua").read_text()
    rules = (ROOT / "slurm_pool" / "policy" / "rules.py").read_text()
    rules = rules[: rules.index("RULES: tuple")] + rules[rules.index("FINAL = ") :]  # the table itself aside
    python = (ROOT / "slurm_pool" / "web" / "submitting.py").read_text() + rules
    assert [w for w in rule.lua if w not in lua] == []
    assert [w for w in rule.explain if w.replace("'", "") not in python.replace("'", "")] == []
