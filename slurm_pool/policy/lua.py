"""Render the pool's job_submit.lua from the spec.

The policy logic lives in the Jinja2 template ``conf_templates/job_submit.lua.j2``
and is generic; the spec enters only as Lua data tables at the top of the
rendered file (see :mod:`slurm_pool.policy.tables`).  Rendering is pure and
deterministic: identical specs give byte-identical output.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

import jinja2

from slurm_pool.policy.tables import PolicyTables, build_tables
from slurm_pool.spec.model import PoolSpec
from slurm_pool.versions import SlurmVersion

TEMPLATE = "job_submit.lua.j2"

_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}


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


def lua_value(value: Any) -> str:
    """A Lua literal for ``value``: None, bool, int, str, sequences and mappings of those."""
    if value is None:
        return "nil"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return lua_string(value)
    if isinstance(value, Mapping):
        items = ", ".join(f"[{lua_value(k)}] = {lua_value(v)}" for k, v in value.items())
        return "{ " + items + " }" if items else "{}"
    if isinstance(value, Sequence):
        items = ", ".join(lua_value(v) for v in value)
        return "{ " + items + " }" if items else "{}"
    raise TypeError(f"cannot write {type(value).__name__} as a Lua literal")


def lua_key(name: str) -> str:
    """A table key: ``["name"]``."""
    return f"[{lua_string(name)}]"


def _context(t: PolicyTables, enabled: bool) -> dict[str, Any]:
    """The template's variables: the tables as plain data, in a fixed order."""
    return {
        "enabled": enabled,
        "pool": {
            "cluster": t.cluster,
            "on_error": t.on_error,
            "admin_contact": t.admin_contact,
            "default_tier": t.default_tier,
            "right_size_mig": t.right_size_mig,
            "checkpoint_signal": t.checkpoint_signal,
            "warn_seconds": t.warn_seconds,
            "multiple_qos": t.multiple_qos,
        },
        "tiers": [
            {"name": r.name, "max_gpus": r.max_gpus, "require_time": r.require_time, "checkpoint": r.checkpoint}
            for r in t.tiers
        ],
        "partitions": [
            {
                "name": p.name,
                "tier": p.tier,
                "accounts": {a: True for a in p.accounts} if p.accounts is not None else None,
                "max_time": p.max_time,
                "gpu_types": list(p.gpu_types),
            }
            for p in t.partitions
        ],
        "projects": [
            {
                "name": p.name,
                "tiers": list(p.tiers),
                "default_tier": p.default_tier,
                "route": dict(p.routes),
            }
            for p in t.projects
        ],
        "users": list(t.users),
        "gpu_types": [{"name": g.name, "mem_mb": g.mem_mb, "mig": g.mig, "parents": {p: True for p in g.parents}} for g in t.gpu_types],
        "mig_by_size": list(t.mig_by_size),
    }


def _environment(templates_dir: Path) -> jinja2.Environment:
    from slurm_pool.render.templates import jinja_environment

    env = jinja_environment(templates_dir)
    env.filters["lua"] = lua_value
    env.filters["lua_key"] = lua_key
    return env


def render_job_submit(spec: PoolSpec, version: SlurmVersion, templates_dir: str | Path | None = None) -> str:
    """The text of job_submit.lua for ``spec`` on Slurm ``version`` (pure; same input, same bytes)."""
    from slurm_pool.render.templates import default_templates_dir

    tdir = Path(templates_dir) if templates_dir is not None else default_templates_dir()
    template = _environment(tdir).get_template(TEMPLATE)
    return template.render(**_context(build_tables(spec, version), spec.policy.job_submit))
