"""A site's own GRES type names (``gpus.type``, issue 45): validated with paths, and used the same way by the
renders, the job_submit policy, guarantees and the console's fit."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from slurm_pool.doctor.nodes import gres_difference
from slurm_pool.errors import SpecError
from slurm_pool.policy import build_tables, render_job_submit
from slurm_pool.render import SlurmVersion, render_all
from slurm_pool.spec import parse_spec
from slurm_pool.web.fit import shapes
from tests.support.lua_policy import LuaPolicy, unset_job

V2205, V2605 = SlurmVersion(22, 5), SlurmVersion(26, 5)
REPO = Path(__file__).resolve().parents[2]

BASE: dict[str, Any] = {
    "version": 1,
    "cluster": {"name": "t"},
    "node_groups": [
        {"name": "a", "hosts": "a[1-2]", "cpus": 16, "memory_mb": 8000, "gpus": {"model": "A100-80GB", "count": 2}},
        {"name": "b", "hosts": "b1", "cpus": 16, "memory_mb": 8000, "gpus": {"model": "L40S", "count": 4}},
    ],
    "tiers": [{"name": "normal", "priority": 10}],
    "partitions": [{"name": "main", "nodes": ["ALL"], "tier": "normal", "priority_tier": 1, "default": True}],
    "projects": [{"name": "lab", "users": ["alice"], "tiers": ["normal"]}],
}


def _doc(a: dict[str, Any] | None = None, b: dict[str, Any] | None = None) -> dict[str, Any]:
    doc = copy.deepcopy(BASE)
    doc["node_groups"][0]["gpus"].update(a or {})
    doc["node_groups"][1]["gpus"].update(b or {})
    return doc


@pytest.mark.parametrize(
    "a, b, path, words",
    [
        ({"type": "A100"}, {}, "node_groups[0].gpus.type", "lower-case"),
        ({"type": "a100:80"}, {}, "node_groups[0].gpus.type", "GRES type"),
        ({"type": "a100,x"}, {}, "node_groups[0].gpus.type", "GRES type"),
        ({"type": "a100\n"}, {}, "node_groups[0].gpus.type", "GRES type"),
        ({"type": ""}, {}, "node_groups[0].gpus.type", "GRES type"),
        ({"type": "x" * 65}, {}, "node_groups[0].gpus.type", "GRES type"),
        ({"type": 100}, {}, "node_groups[0].gpus.type", "string"),
        # Another model's Type, or a MIG instance's on some release: Slurm would read it as that GPU.
        ({"type": "nvidia_l40s"}, {}, "node_groups[0].gpus.type", "L40S's GRES Type"),
        ({"type": "nvidia_a100_3g.40gb"}, {}, "node_groups[0].gpus.type", "the model's own GRES Type"),
        ({"type": "nvidia_a100_3g.39gb"}, {}, "node_groups[0].gpus.type", "the model's own GRES Type"),
        # One name, one model.
        ({"type": "fast"}, {"type": "fast"}, "node_groups[1].gpus.type", "already names A100-80GB"),
        # MIG groups keep the model's Type (mig apply writes it).
        ({"type": "a100", "mig": [["3g.40gb"], None]}, {}, "node_groups[0].gpus.type", "without MIG"),
        ({"type": "a100", "layouts": {"half": [["3g.40gb"], None]}}, {}, "node_groups[0].gpus.type", "without MIG"),
    ],
)
def test_a_bad_type_is_refused_naming_its_path(a, b, path, words) -> None:
    with pytest.raises(SpecError) as exc:
        parse_spec(_doc(a, b))
    lines = exc.value.lines()
    assert any(path in line and words in line for line in lines), lines


def test_a_model_has_one_name_across_groups() -> None:
    doc = _doc({"type": "a100"})
    doc["node_groups"].append(copy.deepcopy(doc["node_groups"][0]) | {"name": "c", "hosts": "c1"})
    doc["node_groups"][2]["gpus"].pop("type")
    with pytest.raises(SpecError) as exc:
        parse_spec(doc)
    assert any(
        "node_groups[2].gpus.type" in line and "named 'a100' in node group 'a'" in line for line in exc.value.lines()
    )


@pytest.mark.parametrize("type_", [None, "nvidia_a100-sxm4-80gb"])
def test_the_model_own_name_needs_no_type(type_) -> None:
    spec = parse_spec(_doc({"type": type_} if type_ else {}))
    assert spec.node_groups[0].gpus is not None
    assert spec.node_groups[0].gpus.gres_type() == "nvidia_a100-sxm4-80gb"


@pytest.mark.parametrize("version", [V2205, V2605])
def test_every_render_uses_the_site_name(version) -> None:
    spec = parse_spec(_doc({"type": "a100"}))
    files = render_all(spec, version=version)
    conf, gres = files["slurm.conf"] + files["slurm-pool.conf"], files["gres.conf"]
    assert "Gres=gpu:a100:2" in conf and "gpu:nvidia_a100" not in conf
    assert "gres/gpu:a100" in conf  # accounted per type
    assert "Type=a100 " in gres and "Type=nvidia_a100" not in gres
    assert "# a: Type a100 is the site's name for A100-80GB (NVIDIA A100-SXM4-80GB;" in gres
    assert "Type=nvidia_l40s " in gres  # the group without a name keeps the model's
    tables = build_tables(spec, version)
    assert {g.name for g in tables.gpu_types} == {"a100", "nvidia_l40s"}


@pytest.mark.parametrize("lua", ["5.1", "5.4"])
@pytest.mark.parametrize(
    "gres, ok",
    [("gres:gpu:a100:1", True), ("gres/gpu:a100:2", True), ("gres:gpu:nvidia_a100-sxm4-80gb:1", False)],
)
def test_job_submit_knows_the_site_name(lua, gres, ok) -> None:
    policy = LuaPolicy(render_job_submit(parse_spec(_doc({"type": "a100"})), V2605), lua=lua)
    out = policy.submit(unset_job(account="lab", tres_per_node=gres))
    assert (out.rc == 0) == ok, out.message
    if not ok:
        assert "Available types: a100 (80 GB)" in out.message


def _floating(key: str) -> dict[str, Any]:
    """examples/pool-floating.yaml with its H100s named ``h100`` and proje's guarantee under ``key``."""
    doc = yaml.safe_load((REPO / "examples" / "pool-floating.yaml").read_text())
    for group in doc["node_groups"]:
        if (group.get("gpus") or {}).get("model") == "H100-80GB":
            group["gpus"]["type"] = "h100"
    proje = next(p for p in doc["projects"] if p["name"] == "proje")
    proje["guarantee"] = {key: 2}
    return doc


def test_a_guarantee_by_the_site_name() -> None:
    files = render_all(parse_spec(_floating("gres/gpu:h100")), version=V2605)
    assert "gres/gpu:h100=2" in files["accounting.json"]
    with pytest.raises(SpecError) as exc:
        render_all(parse_spec(_floating("gres/gpu:nvidia_h100_80gb_hbm3")), version=V2605)
    assert any("guarantee" in line and "'nvidia_h100_80gb_hbm3'" in line for line in exc.value.lines())


def test_the_console_fit_counts_whole_gpus_by_the_site_name() -> None:
    by_group = {s.group: s.whole for s in shapes(parse_spec(_doc({"type": "a100"})), "main")}
    assert by_group == {"a": {"a100": 2}, "b": {"nvidia_l40s": 4}}


@pytest.mark.parametrize(
    "gres, named",
    [
        ("gpu:a100:2", False),
        ("gpu:a100:2(S:0-1)", False),  # scontrol adds the sockets
        ("gpu:a100:2(S:0,1),shard:8", False),
        ("gpu:nvidia_a100-sxm4-80gb:2", True),  # the site's render is not what slurmctld runs
        ("gpu:a100:1", True),
        (None, True),
    ],
)
def test_doctor_names_a_gres_that_is_not_the_site_name(gres, named) -> None:
    group = parse_spec(_doc({"type": "a100"})).node_groups[0]
    diff = gres_difference(group, {} if gres is None else {"Gres": gres})
    assert bool(diff) == named
    if named:
        assert "the render gpu:a100:2 (a100 is the site's name for A100-80GB" in diff[0]
    assert gres_difference(parse_spec(_doc()).node_groups[0], {"Gres": "gpu:x:1"}) == []  # no name: not compared
