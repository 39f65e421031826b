"""Write the pool's job_submit.lua: the spec's policy data, then the static code.

The code is ``slurm_pool/policy/job_submit.lua``, shipped with the package and
written out unchanged.  The spec and the target Slurm release enter only as
one Lua table literal, ``SLURM_POOL``, in front of it (built from
:mod:`slurm_pool.policy.tables`).  Slurm loads a single file, so both go into
one.  Pure and deterministic: identical specs give byte-identical output.
"""

from __future__ import annotations

import re
from importlib import resources
from typing import Any, Mapping, Sequence

from slurm_pool.policy.tables import PolicyTables, ProjectRule, build_tables
from slurm_pool.spec.model import PoolSpec
from slurm_pool.versions import SlurmVersion

CODE_FILE = "job_submit.lua"

_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}
_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
# Lua 5.1-5.4 reserved words: never bare keys.
_KEYWORDS = frozenset(
    "and break do else elseif end false for function goto if in local nil not or repeat return then true until while".split()
)


def lua_string(text: str) -> str:
    """A double-quoted Lua 5.1 string literal for ``text`` (any characters)."""
    out = []
    for ch in text:
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif ch.isascii() and ch.isprintable():
            out.append(ch)
        else:
            out.extend(f"\\{b:03d}" for b in ch.encode("utf-8"))
    return '"' + "".join(out) + '"'


def _key(name: Any) -> str:
    if isinstance(name, str) and _NAME_RE.match(name) and name not in _KEYWORDS:
        return name
    return f"[{lua_value(name)}]"


def lua_value(value: Any, multiline: int = 0, indent: str = "") -> str:
    """A Lua literal for ``value``: None, bool, int, str, and sequences and mappings of those.

    The outer ``multiline`` levels of tables are written one entry per line
    (tab-indented from ``indent``), so two specs' data diff line by line;
    tables nested deeper stay on one line.
    """
    if value is None:
        return "nil"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return lua_string(value)
    if isinstance(value, Mapping):
        items = [(_key(k), v) for k, v in value.items()]
    elif isinstance(value, Sequence):
        items = [("", v) for v in value]
    else:
        raise TypeError(f"cannot write {type(value).__name__} as a Lua literal")
    if not items:
        return "{}"
    inner = indent + "\t"
    parts = [(f"{k} = " if k else "") + lua_value(v, multiline - 1, inner) for k, v in items]
    if multiline <= 0:
        return "{ " + ", ".join(parts) + " }"
    return "{\n" + "".join(f"{inner}{p},\n" for p in parts) + indent + "}"


def _project_data(p: ProjectRule) -> dict[str, Any]:
    """One project's entry; ``guarantee`` only for a floating project."""
    out: dict[str, Any] = {"tiers": list(p.tiers), "default_tier": p.default_tier, "route": dict(p.routes)}
    g = p.guarantee
    if g is not None:
        out["guarantee"] = {
            "qos": g.qos,
            "tier": g.tier,
            "partition": g.partition,
            "overflow": g.overflow_tier,
            "overflow_partition": g.overflow_partition,
            "gpus": [{"type": gtype, "count": n} for gtype, n in g.gpus],
        }
    return out


def policy_data(t: PolicyTables, version: SlurmVersion, enabled: bool = True) -> dict[str, Any]:
    """The ``SLURM_POOL`` table as plain data, in a fixed order (what job_submit.lua reads).

    ``scope`` is there only for a pool that shares its cluster (the spec's ``coexist``): the site's
    script, each user's projects and the adopted accounts;
    ``guarantees`` (the floating partition, guarantee QOS -> project) and a
    project's ``guarantee`` only where the spec has floating guarantees.
    """
    data: dict[str, Any] = {
        "enabled": enabled,
        "slurm": {"release": f"{version.major:02d}.{version.minor:02d}", "multiple_qos": t.multiple_qos},
        "pool": {
            "cluster": t.cluster,
            "on_error": t.on_error,
            "admin_contact": t.admin_contact,
            "default_tier": t.default_tier,
            "right_size_mig": t.right_size_mig,
            "checkpoint_signal": t.checkpoint_signal,
            "warn_seconds": t.warn_seconds,
        },
        "tiers": {
            r.name: {
                "max_gpus": r.max_gpus,
                "require_time": r.require_time,
                "checkpoint": r.checkpoint,
                "gpu_shards": r.gpu_shards,
            }
            for r in t.tiers
        },
        "partitions": {
            p.name: {
                "tier": p.tier,
                "accounts": {a: True for a in p.accounts} if p.accounts is not None else None,
                "max_time": p.max_time,
                "gpu_types": list(p.gpu_types),
            }
            for p in t.partitions
        },
        "projects": {p.name: _project_data(p) for p in t.projects},
        "project_order": [p.name for p in t.projects],
        "user_project": dict(t.users),
        "gpu_types": {
            g.name: {"mem_mb": g.mem_mb, "mig": g.mig, "parents": {p: True for p in g.parents}} for g in t.gpu_types
        },
        "gpu_type_order": [g.name for g in t.gpu_types],
        "mig_by_size": list(t.mig_by_size),
    }
    if t.guarantee_partition is not None:
        data["guarantees"] = {
            "partition": t.guarantee_partition,
            "qos": {p.guarantee.qos: p.name for p in t.projects if p.guarantee is not None},
        }
    if t.shared:
        data["scope"] = {
            "shared": True,
            "site_script": t.site_script,
            "site_order": t.site_order,
            "user_projects": {u: list(ps) for u, ps in t.user_projects},
            "adopted_accounts": {a: True for a in t.adopted_accounts},
        }
    return data


def policy_code() -> str:
    """The static policy code (``slurm_pool/policy/job_submit.lua``)."""
    return resources.files("slurm_pool.policy").joinpath(CODE_FILE).read_text(encoding="utf-8")


def data_chunk(data: Mapping[str, Any]) -> str:
    """The head of job_submit.lua: a comment and ``local SLURM_POOL = <data>``."""
    pool = data.get("pool") or {}
    slurm = data.get("slurm") or {}
    head = (
        f"-- job_submit.lua of the slurm-pool cluster {pool.get('cluster', '?')}, for Slurm {slurm.get('release', '?')}.\n"
        "-- Written by `slurm-pool render`; do not edit: change the pool spec and render again.\n"
        "-- SLURM_POOL is the policy data from the spec; the code after it is slurm-pool's\n"
        "-- policy/job_submit.lua, unchanged.\n\n"
    )
    return head + "local SLURM_POOL = " + lua_value(data, multiline=2) + "\n\n"


def assemble(data: Mapping[str, Any]) -> str:
    """One job_submit.lua from policy data (as :func:`policy_data` builds it) and the static code."""
    return data_chunk(data) + policy_code()


def render_job_submit(spec: PoolSpec, version: SlurmVersion) -> str:
    """The text of job_submit.lua for ``spec`` on Slurm ``version`` (pure; same input, same bytes)."""
    return assemble(policy_data(build_tables(spec, version), version, enabled=spec.policy.job_submit))
