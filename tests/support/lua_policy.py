"""Run job_submit.lua in-process, as slurmctld's job_submit/lua would.

For tests and benchmarks (not installed).  ``LuaPolicy(source)`` loads a
rendered file; ``LuaPolicy.from_data(data)`` runs the static policy code on
data given directly (the ``SLURM_POOL`` table, as
:func:`slurm_pool.policy.lua.policy_data` builds it).  Needs ``lupa``, which
carries Lua 5.1 (what Debian's Slurm links), 5.3 (what SchedMD's own packages
link) and 5.4 runtimes; the policy must behave the same on each.  The ``slurm`` table is a stub that mirrors 22.05: SUCCESS,
ERROR, the ESLURM_* names 22.05 exposes, NO_VAL*, and log functions that take
a format string and record what they print.  ``slurm.jobs`` mirrors slurmctld's
job table as job_submit/lua builds it (job id string -> an empty table whose
fields are read through ``__index``): empty until :meth:`LuaPolicy.set_jobs`.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from slurm_pool.policy.lua import assemble

# The ESLURM_* names (and values, from slurm/slurm_errno.h) that 22.05's
# job_submit/lua exposes; the policy must fall back for every other code.
SLURM_2205_CODES = {
    "ESLURM_ACCESS_DENIED": 2002,
    "ESLURM_ACCOUNTING_POLICY": 2050,
    "ESLURM_INVALID_ACCOUNT": 2045,
    "ESLURM_INVALID_LICENSES": 2048,
    "ESLURM_INVALID_NODE_COUNT": 2006,
    "ESLURM_INVALID_TIME_LIMIT": 2051,
    "ESLURM_MISSING_TIME_LIMIT": 8000,
    "ESLURM_JOB_MISSING_SIZE_SPECIFICATION": 2008,
}

NO_VAL = 4294967294
NO_VAL16 = 65534
INFINITE = 4294967295

_STUB = """
LOG = { user = {}, info = {}, error = {} }
slurm = { SUCCESS = 0, ERROR = -1, FAILURE = -1,
          NO_VAL = 4294967294, NO_VAL16 = 65534, NO_VAL8 = 254, INFINITE = 4294967295 }
local function recorder(kind)
    return function(fmt, ...) table.insert(LOG[kind], string.format(fmt, ...)) end
end
slurm.log_user = recorder("user")
slurm.log_info = recorder("info")
slurm.log_verbose = recorder("info")
slurm.log_debug = recorder("info")
slurm.log_error = recorder("error")
slurm.error = recorder("error")
function reset_log() LOG = { user = {}, info = {}, error = {} } end
slurm.jobs = {}
-- slurm.jobs as job_submit/lua builds it: job id (a string) -> a record read through __index.
function job_records(list)
    local jobs = {}
    for i, fields in ipairs(list) do
        local rec = setmetatable({}, { __index = function(_, k) return fields[k] end })
        local id = fields.job_id
        if type(id) ~= "number" or id ~= math.floor(id) or id < 0 or id >= 2^32 then id = i end
        jobs[string.format("%d", id)] = rec
    end
    return jobs
end
function zero_based(list)
    local t = {}
    for i, v in ipairs(list) do t[i - 1] = v end
    return t
end
"""


@dataclass
class Outcome:
    """What one call did: its return code, messages, and the job fields after."""

    rc: Any
    user: list[str] = field(default_factory=list)
    info: list[str] = field(default_factory=list)
    error: list[str] = field(default_factory=list)
    job: dict[str, Any] = field(default_factory=dict)

    @property
    def message(self) -> str:
        return "\n".join(self.user)


#: Lua releases job_submit/lua is linked against, as lupa names its runtimes.
LUA_VERSIONS = ("5.1", "5.3", "5.4")


class LuaPolicy:
    """A job_submit.lua loaded into a fresh Lua state (5.1 by default) with the stub ``slurm``."""

    def __init__(self, source: str, codes: Mapping[str, int] | None = None, lua: str = "5.1"):
        import importlib

        if lua not in LUA_VERSIONS:
            raise ValueError(f"lua: {lua!r} is not one of {', '.join(LUA_VERSIONS)}")
        runtime = importlib.import_module("lupa.lua" + lua.replace(".", ""))
        self.version = lua
        self.lua = runtime.LuaRuntime(unpack_returned_tuples=True, register_eval=False)
        self.lua.execute(_STUB)
        slurm = self.lua.globals().slurm
        for name, value in (SLURM_2205_CODES if codes is None else codes).items():
            slurm[name] = value
        self.load_rc = self.lua.execute(source)
        self._zero_based = self.lua.globals().zero_based
        self._reset = self.lua.globals().reset_log

    @classmethod
    def from_data(cls, data: Mapping[str, Any], codes: Mapping[str, int] | None = None, lua: str = "5.1") -> LuaPolicy:
        """The static policy code run on ``data`` instead of data rendered from a spec."""
        return cls(assemble(data), codes=codes, lua=lua)

    def table(self, data: Mapping[str, Any]) -> Any:
        """A Lua table from a mapping; ``spank_job_env`` lists become 0-indexed like Slurm's."""
        t = self.lua.table()
        for key, value in data.items():
            t[key] = self._value(key, value)
        return t

    def _value(self, key: str, value: Any) -> Any:
        if isinstance(value, (list, tuple)):
            items = self.lua.table(*[self._value("", v) for v in value])
            return self._zero_based(items) if key == "spank_job_env" else items
        if isinstance(value, Mapping):
            return self.table(value)
        return value

    def _outcome(self, rc: Any, job: Any) -> Outcome:
        log = self.lua.globals().LOG
        out = Outcome(rc=rc)
        for kind in ("user", "info", "error"):
            getattr(out, kind).extend(str(v) for v in log[kind].values())
        if job is not None and self.lua.eval("type")(job) == "table":
            out.job = {str(k): v for k, v in job.items() if isinstance(k, (str, bytes))}
        return out

    def set_jobs(self, records: Sequence[Mapping[str, Any]] | None) -> None:
        """Set ``slurm.jobs`` to these job records (their fields as slurmctld names them); None removes it."""
        slurm = self.lua.globals().slurm
        if records is None:
            slurm.jobs = None
            return
        slurm.jobs = self.lua.globals().job_records(self.lua.table(*[self.table(r) for r in records]))

    def submit(self, job: Mapping[str, Any] | Any, submit_uid: Any = 1000) -> Outcome:
        """Call ``slurm_job_submit`` with ``job`` (a mapping, or any Lua value for fuzzing)."""
        self._reset()
        desc = self.table(job) if isinstance(job, Mapping) else job
        rc = self.lua.globals().slurm_job_submit(desc, self.lua.table(), submit_uid)
        return self._outcome(rc, desc)

    def modify(self, job: Mapping[str, Any] | Any, rec: Mapping[str, Any] | Any, modify_uid: Any = 1000) -> Outcome:
        """Call ``slurm_job_modify`` with a modify request and the job's record."""
        self._reset()
        desc = self.table(job) if isinstance(job, Mapping) else job
        record = self.table(rec) if isinstance(rec, Mapping) else rec
        rc = self.lua.globals().slurm_job_modify(desc, record, self.lua.table(), modify_uid)
        return self._outcome(rc, desc)


def unset_job(**fields: Any) -> dict[str, Any]:
    """A job_desc as slurmctld 22.05 presents a plain ``sbatch --wrap`` (numbers unset), plus ``fields``."""
    base: dict[str, Any] = {
        "user_id": 1000,
        "requeue": NO_VAL16,
        "time_limit": NO_VAL,
        "min_nodes": NO_VAL,
        "max_nodes": NO_VAL,
        "num_tasks": NO_VAL,
        "ntasks_per_node": NO_VAL16,
        "sockets_per_node": NO_VAL16,
        "spank_job_env_size": 0,
        "script": "#!/bin/sh\n# This script was created by sbatch --wrap.\n\ntrue\n",
    }
    base.update(fields)
    return base


# --------------------------------------------------------------------------
# Random job descriptions for fuzzing: missing fields, wrong types, NaN,
# huge strings, format specifiers, nested tables.
# --------------------------------------------------------------------------

FUZZ_FIELDS = [
    "account",
    "default_account",
    "user_name",
    "user_id",
    "qos",
    "partition",
    "tres_per_job",
    "tres_per_node",
    "tres_per_task",
    "tres_per_socket",
    "gres",
    "time_limit",
    "requeue",
    "min_nodes",
    "max_nodes",
    "num_tasks",
    "ntasks_per_node",
    "sockets_per_node",
    "script",
    "spank_job_env",
    "spank_job_env_size",
    "comment",
    "job_id",
]
FUZZ_WORDS = [
    "proja",
    "projb",
    "projc",
    "k8s-bridge",
    "alice",
    "guaranteed",
    "shared",
    "scavenger",
    "k8s-lend",
    "a-owner",
    "b-owner",
    "shared,scavenger",
    "gres:gpu:1",
    "gres:gpu:2",
    "gres:gpu",
    "gres/gpu:x:1",
    "gres:gpu:a:b:c",
    "gres:gpu:nvidia_a100_1g.5gb:1",
    "gres:gpu:-1",
    "gres:gpu:1e9",
    "gres:gpu:nan",
    "gres:gpu::",
    ",,,",
    "%s%d%n%%",
    "SLURM_POOL_GPU_MEM_MB=5000",
    "SLURM_POOL_CHECKPOINT=1",
    "SPANK_SLURM_POOL_SIGNAL=1",
    "SLURM_POOL_GPU_MEM_MB=-5",
    "SLURM_POOL_GPU_MEM_MB=inf",
    "=",
    "#!/bin/sh\n#SBATCH --signal=USR1\n",
    "#!/bin/sh\n#SBATCH --sig\n" * 3,
]


def junk(rng: random.Random, depth: int = 0) -> Any:
    """A random value of any kind a Lua field could hold (strings, numbers, NaN, tables)."""
    kind = rng.randrange(12)
    if kind == 0:
        return rng.choice(FUZZ_WORDS)
    if kind == 1:
        return "".join(chr(rng.randrange(0, 256)) for _ in range(rng.randrange(0, 40)))
    if kind == 2:
        return rng.choice(FUZZ_WORDS) * rng.choice([1000, 20000])  # huge strings
    if kind == 3:
        return rng.choice([0, 1, -1, 2, NO_VAL, NO_VAL16, INFINITE, 2**53, -(2**63), 1e308, 0.5])
    if kind == 4:
        return rng.choice([float("nan"), float("inf"), float("-inf")])
    if kind == 5:
        return rng.choice([True, False])
    if kind == 6 and depth < 2:
        return [junk(rng, depth + 1) for _ in range(rng.randrange(0, 5))]
    if kind == 7 and depth < 2:
        return {rng.choice(FUZZ_FIELDS): junk(rng, depth + 1) for _ in range(rng.randrange(0, 3))}
    if kind == 8:
        return ",".join(rng.choice(FUZZ_WORDS) for _ in range(rng.randrange(1, 6)))
    if kind == 9:
        return rng.randrange(-10, 10)
    return (
        "gres:gpu:" + rng.choice(["", "1", "7", "x", "nvidia_a100_3g.20gb", "0"]) + rng.choice(["", ":1", ":2", ":x"])
    )


def random_job(rng: random.Random) -> dict[str, Any]:
    """A random job_desc (or job record) mapping for :meth:`LuaPolicy.submit`/``modify``."""
    job: dict[str, Any] = {}
    for name in FUZZ_FIELDS:
        if rng.random() < 0.5:
            job[name] = junk(rng)
    if rng.random() < 0.3:
        env = [w for w in FUZZ_WORDS if "=" in w and "\n" not in w]
        job["spank_job_env"] = [rng.choice(env) if rng.random() < 0.7 else junk(rng) for _ in range(rng.randrange(4))]
    return job
