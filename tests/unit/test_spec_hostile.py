"""Every string of the spec, found from the schema, against hostile values (issue 30, classes 1 and 2).

The positions are generated from the pydantic models (:func:`string_positions`),
not listed by hand: a field added to the schema is tried here too, and the
test fails until the base document below holds a value for it.  For each
position:

* a value with a control character (a trailing newline, ``\\r``, ESC, NEL,
  U+2028, NUL, a whole ``KEY=value`` line) is refused, with an issue that
  names the field;
* a value without one (spaces, ``=``, ``#``, quotes, Rich markup, ``$(...)``)
  is refused, or every file rendered from it keeps its shape: each slurm.conf,
  gres.conf and helpers.conf line parses back as one Slurm line of a key the
  baseline has, job_submit.lua compiles, jupyterhub_config.py has the same
  statements and the RBAC YAML the same structure.
"""

from __future__ import annotations

import ast
import copy
import itertools
import json
import re
import types
import typing
from typing import Any, Iterator, Union

import pytest
import yaml
from pydantic import BaseModel

from slurm_pool.errors import SpecError
from slurm_pool.render import Site, SlurmVersion, render_all
from slurm_pool.spec import parse_spec
from slurm_pool.spec.model import PoolSpec
from tests.support.notebooks import notebook_spec

#: Markers in a schema position: any list item, any dict key, any dict value.
ITEM, KEY, VALUE = "[*]", "{key}", "{value}"
#: Both ends; MIG layouts as node features need 24.05, so 22.05 renders the document without them.
OLD, NEW = SlurmVersion.parse("22.05"), SlurmVersion.parse("26.05")


def _base() -> dict[str, Any]:
    """The example with a notebook tier, MIG layouts, and every optional string of the bridge set."""
    doc = notebook_spec()
    group = next(g for g in doc["node_groups"] if g["name"] == "c")
    group["gpus"]["layouts"] = {"mig_mixed": [["3g.20gb", "2g.10gb", "1g.5gb", "1g.5gb"], None]}
    doc["cluster"]["control_host"] = "ctl1"
    doc["tiers"][0]["grp_tres"] = {"gres/gpu": 8}
    doc["partitions"][0]["default_time"] = "01:00:00"
    doc["projects"][0]["description"] = "Project A"
    doc["policy"]["admin_contact"] = "the HPC desk"
    doc["checkpoint"]["base_dir"] = "/var/lib/slurm-pool/checkpoints"
    doc["bridge"].update(
        {
            "qos": "k8s-lend",
            "ignore_pending_reasons": ["JobHeldUser", "BeginTime"],
            "timezone": "UTC",
            "kserve_namespace": "serving",
            "kserve_selector": "app=llm",
            "node_selector": "pool=gpu",
            "gpu_resource": "nvidia.com/gpu",
            "lease_namespace": "default",
            "lease_name": "slurm-pool-rebalance",
            "fence_kubeconfig": "/etc/slurm-pool/fence.kubeconfig",
            "fence_command": "/usr/local/bin/slurm-pool",
            "k8s_user": "slurm-pool-rebalancer",
            "fence_user": "slurm-pool-node:{node}",
            "forecast": {"prometheus_url": "http://127.0.0.1:9090", "inference_query": "sum(x)"},
        }
    )
    doc["tiers"][3]["grace_time"] = 40  # the fence's seconds fit in k8s-lend's grace
    return doc


BASE = _base()


def _unwrap(tp: Any) -> list[Any]:
    """The types a field's annotation allows (Annotated and Optional unwrapped)."""
    origin = typing.get_origin(tp)
    if origin is typing.Annotated:
        return _unwrap(typing.get_args(tp)[0])
    if origin in (Union, types.UnionType):
        return [t for a in typing.get_args(tp) if a is not type(None) for t in _unwrap(a)]
    return [tp]


def _positions(tp: Any, path: tuple[str, ...]) -> Iterator[tuple[str, ...]]:
    for t in _unwrap(tp):
        origin = typing.get_origin(t)
        if t is str:
            yield path
        elif isinstance(t, type) and issubclass(t, BaseModel):
            for name, info in t.model_fields.items():
                yield from _positions(info.annotation, (*path, name))
        elif origin is list:
            yield from _positions(typing.get_args(t)[0], (*path, ITEM))
        elif origin is dict:
            key, value = typing.get_args(t)
            if key is str:
                yield (*path, KEY)
            yield from _positions(value, (*path, VALUE))


def string_positions() -> list[tuple[str, ...]]:
    """Every place a string sits in a spec, from the schema (Literal fields excluded: they take only their words)."""
    return sorted(set(_positions(PoolSpec, ())))


def _concrete(doc: Any, position: tuple[str, ...]) -> tuple[Any, ...] | None:
    """The first path in ``doc`` that fills ``position``'s markers, or None when the document has none."""
    if not position:
        return ()
    head, rest = position[0], position[1:]
    if head == ITEM:
        for i, item in enumerate(doc if isinstance(doc, list) else []):
            tail = _concrete(item, rest)
            if tail is not None:
                return (i, *tail)
        return None
    if head in (KEY, VALUE):
        for k, v in (doc if isinstance(doc, dict) else {}).items():
            if head == KEY:
                return ((KEY, k),)
            tail = _concrete(v, rest)
            if tail is not None:
                return (k, *tail)
        return None
    if isinstance(doc, dict) and head in doc:
        tail = _concrete(doc[head], rest)
        return None if tail is None else (head, *tail)
    return None


def _set(doc: Any, path: tuple[Any, ...], value: str) -> Any:
    out = copy.deepcopy(doc)
    parent = out
    for p in path[:-1]:
        parent = parent[p]
    last = path[-1]
    if isinstance(last, tuple):  # a dict key: rename it, keeping its value
        parent[value] = parent.pop(last[1])
    else:
        parent[last] = value
    return out


def _dotted(path: tuple[Any, ...]) -> str:
    """``partitions[0].tier``: the path an issue names (a renamed key: its dict's path)."""
    out = ""
    for p in path:
        if isinstance(p, tuple):
            break
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


POSITIONS = string_positions()
CONCRETE = {pos: _concrete(BASE, pos) for pos in POSITIONS}
CONTROL_VALUES = [
    "x\n",
    "x\nPrologSlurmctld=/tmp/evil",
    "x\r",
    "\x1b[31mx",
    "x\x85y",
    "x\u2028y",
    "x\x00",
    "x\ty",
    "\u202ex",
]
PLAIN_HOSTILE = ["a b", "a=b", "#x", "a,b", "[/]", "x'y", 'x"y', "$(id)", "a;b", "é", "a\\b", "{node} x"]


def test_the_base_document_is_valid_and_fills_every_string_of_the_schema() -> None:
    parse_spec(BASE)
    missing = [" ".join(pos) for pos, path in CONCRETE.items() if path is None]
    assert missing == [], f"add a value for these schema positions to the base document: {missing}"
    assert len(POSITIONS) >= 50  # the walk sees the nested models, lists and dict keys


def test_the_walk_finds_nested_fields_list_items_and_keys() -> None:
    assert ("cluster", "control_host") in POSITIONS
    assert ("node_groups", ITEM, "features", ITEM) in POSITIONS
    assert ("tiers", ITEM, "grp_tres", KEY) in POSITIONS
    assert ("node_groups", ITEM, "gpus", "layouts", KEY) in POSITIONS
    assert ("bridge", "forecast", "prometheus_url") in POSITIONS
    assert ("notebooks", "gpu", "mig") in POSITIONS


def _ids(pos: tuple[str, ...]) -> str:
    return ".".join(pos)


@pytest.mark.parametrize("position", POSITIONS, ids=_ids)
@pytest.mark.parametrize("value", CONTROL_VALUES, ids=ascii)
def test_a_control_character_in_any_string_is_refused_naming_the_field(position, value) -> None:
    path = CONCRETE[position]
    assert path is not None
    with pytest.raises(SpecError) as exc:
        parse_spec(_set(BASE, path, value))
    field = _dotted(path)
    assert any(i.path.startswith(field) for i in exc.value.issues), (field, [str(i) for i in exc.value.issues])


def _get(doc: Any, path: tuple[Any, ...]) -> str:
    for p in path:
        doc = p[1] if isinstance(p, tuple) else doc[p]
    assert isinstance(doc, str)
    return doc


@pytest.mark.parametrize("position", POSITIONS, ids=_ids)
@pytest.mark.parametrize("tail", ["\n", "\r\n", "\nNodeName=evil Gres=gpu:8"], ids=ascii)
def test_a_valid_value_followed_by_a_line_break_is_refused(position, tail) -> None:
    # `$` matches before a trailing newline: "gres/gpu\n" passed re.match(r"...$") and split the line it reached.
    path = CONCRETE[position]
    assert path is not None
    with pytest.raises(SpecError) as exc:
        parse_spec(_set(BASE, path, _get(BASE, path) + tail))
    field = _dotted(path)
    assert any(i.path.startswith(field) for i in exc.value.issues), (field, [str(i) for i in exc.value.issues])


# A slurm.conf / gres.conf / helpers.conf line: a comment, or KEY=VALUE words (values may be quoted).
CONF_LINE = re.compile(r'#.*|\s*|(?:[A-Za-z][A-Za-z0-9]*=(?:"[^"\n]*"|[^\s"]*)\s*)+')
CONF_FILES = ("slurm.conf", "slurm-pool.conf", "gres.conf", "helpers.conf")


def _keys(files: dict[str, str]) -> set[tuple[str, str]]:
    return {
        (name, line.split("=", 1)[0])
        for name in CONF_FILES
        for line in files.get(name, "").splitlines()
        if "=" in line and not line.startswith("#")
    }


def _shape(doc: Any) -> Any:
    """A YAML/JSON document's structure: its keys and nesting, values left out."""
    if isinstance(doc, dict):
        return {k: _shape(v) for k, v in doc.items()}
    if isinstance(doc, list):
        return [_shape(v) for v in doc]
    return type(doc).__name__


def _statements(source: str) -> list[str]:
    return [type(node).__name__ for node in ast.walk(ast.parse(source)) if isinstance(node, ast.stmt)]


def _for(version: SlurmVersion, doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` as ``version`` can render it (no layouts before 24.05)."""
    if version.has("rebootless_node_features"):
        return doc
    out = copy.deepcopy(doc)
    for group in out["node_groups"]:
        (group.get("gpus") or {}).pop("layouts", None)
    return out


BASELINE = {v: render_all(parse_spec(_for(v, BASE)), Site(), v) for v in (OLD, NEW)}


def _lua_compiles(source: str) -> bool:
    lupa = pytest.importorskip("lupa")
    res = lupa.LuaRuntime().globals().load(source)  # a function, or (nil, message)
    return not isinstance(res, tuple) and res is not None


@pytest.mark.parametrize("position", POSITIONS, ids=_ids)
def test_any_other_value_is_refused_or_keeps_every_rendered_file_in_shape(position) -> None:
    path = CONCRETE[position]
    assert path is not None
    for value, version in itertools.product(PLAIN_HOSTILE, (OLD, NEW)):
        if "layouts" in position and version == OLD:
            continue
        try:
            files = render_all(parse_spec(_for(version, _set(BASE, path, value))), Site(), version)
        except SpecError as exc:
            assert exc.issues and all(str(i) for i in exc.issues)
            continue
        _assert_in_shape(files, BASELINE[version], f"{_dotted(path)}={value!r} on {version}")


def _assert_in_shape(files: dict[str, str], base: dict[str, str], where: str) -> None:
    for name in CONF_FILES:
        for no, line in enumerate(files.get(name, "").splitlines(), 1):
            assert CONF_LINE.fullmatch(line), f"{where}: {name}:{no}: {line!r}"
    assert _keys(files) <= _keys(base), f"{where}: new keys {_keys(files) - _keys(base)}"
    assert _lua_compiles(files["job_submit.lua"]), where
    assert _shape(json.loads(files["accounting.json"])) == _shape(json.loads(base["accounting.json"])), where
    if "k8s-bridge-rbac.yaml" in base:
        new = list(yaml.safe_load_all(files["k8s-bridge-rbac.yaml"]))
        assert _shape(new) == _shape(list(yaml.safe_load_all(base["k8s-bridge-rbac.yaml"]))), where
    if "jupyterhub_config.py" in base:
        assert _statements(files["jupyterhub_config.py"]) == _statements(base["jupyterhub_config.py"]), where
