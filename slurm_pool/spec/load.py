"""Load a pool spec from YAML: parse, validate the schema, check the rules."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from slurm_pool.errors import Issue, SpecError, fmt_path
from slurm_pool.spec.base import NestedValueError
from slurm_pool.spec.model import PoolSpec
from slurm_pool.spec.rules import check as check_rules

SUPPORTED_VERSIONS = (1,)

_MESSAGES = {
    "extra_forbidden": "unknown key",
    "missing": "is required",
}


def _describe(err: dict[str, Any]) -> Issue:
    loc = err.get("loc", ())
    kind = err.get("type", "")
    value = err.get("input")
    ctx = err.get("ctx") or {}
    path = fmt_path(loc)
    if kind == "extra_forbidden":
        return Issue(path, f"unknown key {str(loc[-1])!r}")
    if kind == "missing":
        return Issue(path, "is required")
    if kind in ("greater_than_equal", "greater_than") and isinstance(value, (int, float)):
        bound = ctx.get("ge", ctx.get("gt"))
        if bound == 0 and value < 0:
            return Issue(path, f"{value!r} is negative")
        return Issue(path, f"{value!r} is too small (minimum {bound})")
    if kind in ("less_than_equal", "less_than"):
        return Issue(path, f"{value!r} is too large (maximum {ctx.get('le', ctx.get('lt'))})")
    if kind == "string_pattern_mismatch":
        return Issue(path, f"{value!r} does not match {ctx.get('pattern')}")
    if kind == "literal_error":
        return Issue(path, f"{value!r} is not one of {ctx.get('expected')}")
    msg = err.get("msg", "is invalid")
    if isinstance(ctx.get("error"), NestedValueError):  # a value inside a list or dict: name its place
        return Issue(fmt_path((*loc, *ctx["error"].loc)), str(ctx["error"]))
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
        return Issue(path, msg)
    return Issue(path, f"{value!r}: {msg}" if not isinstance(value, (dict, list)) else msg)


def parse_spec(data: Any) -> PoolSpec:
    """Validate already-parsed data; raise :class:`SpecError` naming each bad path."""
    if data is None:
        raise SpecError([Issue("", "the spec is empty")])
    if not isinstance(data, dict):
        raise SpecError([Issue("", f"the spec must be a mapping, not {type(data).__name__}")])
    version = data.get("version")
    if type(version) is not int or version not in SUPPORTED_VERSIONS:  # `true` equals 1 in Python
        raise SpecError(
            [
                Issue(
                    "version",
                    f"{version!r} is not a supported spec version (supported: {', '.join(map(str, SUPPORTED_VERSIONS))})",
                )
            ]
        )
    try:
        spec = PoolSpec.model_validate(data)
    except ValidationError as exc:
        raise SpecError([_describe(e) for e in exc.errors()]) from None  # type: ignore[arg-type]
    problems = check_rules(spec)
    if problems:
        raise SpecError(problems)
    return spec


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML's safe loader, except that a key given twice in one mapping is an error (not "the last wins")."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, (str, int, float, bool)) and key in seen:
                raise yaml.constructor.ConstructorError(
                    "while reading a mapping", node.start_mark, f"key {key!r} is given twice", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def load_spec_text(text: str, source: str = "<spec>") -> PoolSpec:
    """Parse YAML text and validate it."""
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 -- a SafeLoader
    except RecursionError:
        raise SpecError([Issue("", f"{source}: YAML nested too deeply")]) from None
    except ValueError as exc:  # e.g. an integer of more digits than Python converts
        raise SpecError([Issue("", f"{source}: {exc}")]) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise SpecError([Issue("", f"{source}: broken YAML{where}: {getattr(exc, 'problem', exc)}")]) from None
    return parse_spec(data)


def load_spec(path: str | Path) -> PoolSpec:
    """Read and validate a spec file."""
    return load_spec_hashed(path)[0]


def load_spec_hashed(path: str | Path) -> tuple[PoolSpec, str]:
    """Read and validate a spec file; the spec and the sha256 (hex) of the very bytes parsed."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise SpecError([Issue("", f"cannot read {p}: {exc.strerror}")]) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SpecError([Issue("", f"{p}: not UTF-8 text (byte {exc.start})")]) from None
    return load_spec_text(text, str(p)), hashlib.sha256(raw).hexdigest()
