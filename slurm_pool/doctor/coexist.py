"""``doctor``'s checks for a pool in a site's cluster (the spec's ``coexist``).

* site_script     -- the site's job_submit.lua (``coexist.job_submit.script``)
                     loads as job_submit/lua loads a script
                     (src/lua/slurm_lua.c, ``slurm_lua_loadscript``): it
                     compiles, runs without error, returns SUCCESS (or
                     nothing) and defines ``slurm_job_submit`` and
                     ``slurm_job_modify``.  Broken, the pool's chain keeps the
                     last version that loaded, and slurmctld does not start
                     with it.  Checked with lupa where it is installed (the
                     script runs, with a stub ``slurm`` table, in each Lua
                     release lupa carries; broken means broken in all), else
                     ``luac -p`` (syntax only), else not at all.
* site_partitions -- every partition of the running cluster that is not the
                     pool's and holds a pool node denies every pool QOS
                     (``DenyQos`` naming them all, or an ``AllowQos`` naming
                     none of them); and a partition under a name the spec
                     gives a pool partition holds no site node (else the name
                     is the site's).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field

from slurm_pool.adapters.partitions import PartitionRecord
from slurm_pool.adapters.runner import Runner
from slurm_pool.adapters.slurm import SlurmClient
from slurm_pool.findings import Finding
from slurm_pool.render.required import pool_qos
from slurm_pool.spec.hosts import HostlistError, expand
from slurm_pool.spec.model import PoolSpec
from slurm_pool.text import shown

CHECKS = ("site_script", "site_partitions")
#: lupa's runtimes, in the order job_submit/lua's builds link them (Debian and EL8: 5.1; EL9: 5.4).
LUA_RUNTIMES = ("lupa.lua51", "lupa.lua54", "lupa.lua53")
#: Instructions the site's script may run while it loads before the check gives up on it.
LOAD_BUDGET = 10_000_000

_LOADER = """
local path, text, budget = ...
slurm = { SUCCESS = 0, ERROR = -1, FAILURE = -1, NO_VAL = 4294967294, NO_VAL16 = 65534, NO_VAL8 = 254,
          INFINITE = 4294967295, jobs = {}, reservations = {} }
for _, name in ipairs({ "log_user", "log_info", "log_verbose", "log_debug", "log_debug2", "log_debug3",
                        "log_debug4", "log_debug5", "log_error", "error", "log_warn" }) do
    slurm[name] = function() end
end
local env = setmetatable({}, { __index = _G })
local chunk, err
if setfenv then
    chunk, err = loadstring(text, "@" .. path)
    if chunk then setfenv(chunk, env) end
else
    chunk, err = load(text, "@" .. path, "t", env)
end
if not chunk then return tostring(err) end
debug.sethook(function() error("still running after " .. budget .. " instructions while loading", 0) end, "", budget)
local ok, rc = pcall(chunk)
debug.sethook()
if not ok then return path .. ": " .. tostring(rc) end
rc = tonumber(rc) or 0
if rc ~= 0 then return path .. ": returned " .. tostring(rc) .. " on load" end
local missing = {}
for _, name in ipairs({ "slurm_job_modify", "slurm_job_submit" }) do
    if type(rawget(env, name)) ~= "function" then missing[#missing + 1] = name end
end
if #missing > 0 then return path .. ": missing required function " .. table.concat(missing, ", ") end
return nil
"""


@dataclass
class CoexistFacts:
    """What the coexist checks read."""

    #: Why the site's script does not load (None: it loads, or there is none, or it could not be checked).
    site_script_error: str | None = None
    #: How it was checked ("" when it was not).
    checked_with: str = ""
    #: Every partition of the running cluster (None: not read).
    partitions: list[PartitionRecord] | None = None
    skipped: list[str] = field(default_factory=list)


def lua_load_error(path: str, source: bytes) -> tuple[str | None, str]:
    """Why ``source`` (the file ``path``) would not load in job_submit/lua, and what checked it ("" if nothing could).

    Broken means broken in every Lua release lupa carries: the check cannot
    tell which one slurmctld links.  The first release's error is given.
    """
    errors: list[str] = []
    for module in LUA_RUNTIMES:
        try:
            runtime = importlib.import_module(module)
        except ImportError:
            continue
        lua = runtime.LuaRuntime(encoding=None, unpack_returned_tuples=True, register_eval=False)
        err = lua.execute(_LOADER.encode(), path.encode("utf-8", "surrogateescape"), source, LOAD_BUDGET)
        if err is None:
            return None, module
        errors.append(err.decode("utf-8", "replace") if isinstance(err, bytes) else str(err))
    if errors:
        return errors[0], LUA_RUNTIMES[0]
    return None, ""


def luac_error(path: str, runner: Runner) -> tuple[str | None, str]:
    """``luac -p``'s complaint about ``path`` (syntax only), and "luac" ("" when luac is not there)."""
    res = runner.run(["luac", "-p", path], check=False)
    if res.returncode == 127:
        return None, ""
    if res.ok:
        return None, "luac"
    return (res.stderr or res.stdout).strip().removeprefix("luac: ") or f"luac -p failed ({res.returncode})", "luac"


def site_script_error(path: str, runner: Runner) -> tuple[str | None, str]:
    """Why the site's script at ``path`` would not load, and what checked it."""
    try:
        with open(path, "rb") as f:
            source = f.read()
    except OSError as exc:
        return f"cannot read {path}: {exc.strerror}", "open"
    err, how = lua_load_error(path, source)
    if how:
        return err, how
    return luac_error(path, runner)


def gather(spec: PoolSpec, runner: Runner) -> CoexistFacts | None:
    """Read the site's script and the cluster's partitions (None without ``coexist``)."""
    c = spec.coexist
    if c is None:
        return None
    facts = CoexistFacts()
    if c.job_submit is not None:
        facts.site_script_error, facts.checked_with = site_script_error(c.job_submit.script, runner)
    facts.partitions, facts.skipped = SlurmClient(runner).partitions()
    return facts


def _nodes(hostlist: str, every: set[str]) -> set[str] | None:
    """The nodes of a partition's ``Nodes=`` (None: not a hostlist this check can read)."""
    if hostlist == "ALL":
        return set(every)
    if not hostlist:
        return set()
    try:
        return set(expand(hostlist))
    except HostlistError:
        return None


def findings(spec: PoolSpec, facts: CoexistFacts | None) -> list[Finding]:
    """The coexist checks' findings (none without ``coexist``)."""
    c = spec.coexist
    if c is None or facts is None:
        return []
    out: list[Finding] = []
    if c.job_submit is not None and facts.site_script_error is not None:
        path = c.job_submit.script
        out.append(
            Finding(
                "site_script",
                f"the site's job_submit script {path} does not load: {shown(facts.site_script_error)}. "
                "The pool's job_submit.lua keeps the last version that loaded; a restarted slurmctld would not start",
                f"fix {path} (the line named), then check again: slurm-pool doctor",
            )
        )
    if facts.partitions is None:
        return out
    pool_nodes = {n for g in spec.node_groups for n in expand(g.hosts)}
    mine = {p.name for p in spec.partitions}
    qos = pool_qos(spec)
    every = set(pool_nodes)
    for part in facts.partitions:
        nodes = _nodes(part.nodes, every)
        if part.name in mine:
            foreign = sorted(nodes - pool_nodes) if nodes is not None else []
            if foreign:
                out.append(
                    Finding(
                        "site_partitions",
                        f"the partition {part.name}, a name the spec gives one of the pool's partitions, holds the "
                        f"site's node(s) {', '.join(foreign[:8])}: it is the site's partition, not the pool's",
                        f"rename the spec's partition {part.name} to a name the site's slurm.conf does not use",
                    )
                )
            continue
        if nodes is None:
            out.append(
                Finding(
                    "site_partitions",
                    f"the partition {part.name}'s node list {shown(part.nodes[:120])!r} cannot be read, so whether "
                    "it holds pool nodes is not known",
                    f"check scontrol show partition {part.name}",
                )
            )
            continue
        held = sorted(nodes & pool_nodes)
        if not held:
            continue
        open_to = (
            [q for q in qos if q not in part.deny_qos]
            if part.allow_qos is None
            else [q for q in qos if q in part.allow_qos]
        )
        if not open_to:
            continue
        listed = "" if part.name in c.site_partitions else "; list it in coexist.site_partitions"
        out.append(
            Finding(
                "site_partitions",
                f"the site's partition {part.name} holds pool node(s) {', '.join(held)} and takes the pool's "
                f"QOS {', '.join(open_to)}: jobs there skip the pool's job rules and preempt its jobs",
                f"add DenyQos={','.join(qos)} to the line PartitionName={part.name} in slurm.conf "
                f"(or keep its AllowQos free of them){listed}, then scontrol reconfigure",
            )
        )
    for why in facts.skipped:
        out.append(Finding("site_partitions", f"skipped {why}", "check scontrol show partition -o"))
    return out
