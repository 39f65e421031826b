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
from typing import Any

import pytest
import yaml

from slurm_pool.errors import SpecError
from slurm_pool.render import Site, SlurmVersion, render_all
from slurm_pool.spec import parse_spec
from tests.support.spec_positions import BASE, CONCRETE, ITEM, KEY, POSITIONS, dotted, owned, value_at, with_value

#: Both ends; MIG layouts as node features need 24.05, so 22.05 renders the document without them.
OLD, NEW = SlurmVersion.parse("22.05"), SlurmVersion.parse("26.05")
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
        parse_spec(with_value(BASE, path, value))
    field = dotted(path)
    assert any(i.path.startswith(field) for i in exc.value.issues), (field, [str(i) for i in exc.value.issues])


@pytest.mark.parametrize("position", POSITIONS, ids=_ids)
@pytest.mark.parametrize("tail", ["\n", "\r\n", "\nNodeName=evil Gres=gpu:8"], ids=ascii)
def test_a_valid_value_followed_by_a_line_break_is_refused(position, tail) -> None:
    # `$` matches before a trailing newline: "gres/gpu\n" passed re.match(r"...$") and split the line it reached.
    path = CONCRETE[position]
    assert path is not None
    with pytest.raises(SpecError) as exc:
        parse_spec(with_value(BASE, path, value_at(BASE, path) + tail))
    field = dotted(path)
    assert any(i.path.startswith(field) for i in exc.value.issues), (field, [str(i) for i in exc.value.issues])


@pytest.mark.parametrize("position", POSITIONS, ids=_ids)
@pytest.mark.parametrize("value", [7, 1.5, True, [], {}, ["x"], {"a": "b"}], ids=ascii)
def test_a_wrong_type_in_any_string_is_refused_naming_the_field(position, value) -> None:
    path = CONCRETE[position]
    assert path is not None
    if isinstance(path[-1], tuple):  # a dict key: YAML keys of other types are refused too
        doc = with_value(BASE, path, "placeholder")
        parent = doc
        for p in path[:-1]:
            parent = parent[p]
        parent[value if isinstance(value, (int, float, bool)) else 7] = parent.pop("placeholder")
    else:
        doc = with_value(BASE, path, value)
    with pytest.raises(SpecError) as exc:
        parse_spec(doc)
    field = dotted(path)
    assert any(i.path.startswith(field) for i in exc.value.issues), (field, [str(i) for i in exc.value.issues])


# A slurm.conf / gres.conf / helpers.conf line: a comment, or KEY=VALUE words (values may be quoted).
CONF_LINE = re.compile(r'#.*|\s*|(?:[A-Za-z][A-Za-z0-9]*=(?:"[^"\n]*"|[^\s"]*)\s*)+')
CONF_FILES = ("slurm.conf", "slurm-pool.conf", "gres.conf", "helpers.conf", "site-settings.conf") + tuple(
    f"gres-{g}.conf" for g in ("a", "b", "c")
)


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


#: BASE renders as a shared cluster (coexist: fragments) and, without that section, as one the pool owns.
MODES = {"shared": lambda doc: doc, "owned": owned}
BASELINE = {(v, m): render_all(parse_spec(MODES[m](_for(v, BASE))), Site(), v) for v in (OLD, NEW) for m in MODES}


def _lua_compiles(source: str) -> bool:
    lupa = pytest.importorskip("lupa")
    res = lupa.LuaRuntime().globals().load(source)  # a function, or (nil, message)
    return not isinstance(res, tuple) and res is not None


@pytest.mark.parametrize("position", POSITIONS, ids=_ids)
def test_any_other_value_is_refused_or_keeps_every_rendered_file_in_shape(position) -> None:
    path = CONCRETE[position]
    assert path is not None
    for value, version, mode in itertools.product(PLAIN_HOSTILE, (OLD, NEW), MODES):
        if "layouts" in position and version == OLD:
            continue
        try:
            files = render_all(parse_spec(MODES[mode](_for(version, with_value(BASE, path, value)))), Site(), version)
        except SpecError as exc:
            assert exc.issues and all(str(i) for i in exc.issues)
            continue
        _assert_in_shape(files, BASELINE[version, mode], f"{dotted(path)}={value!r} on {version}, {mode}")


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
