"""``slurm-pool mig`` command line: exit codes and messages."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from slurm_pool.cli import cli

ROOT = Path(__file__).resolve().parents[2]
SPEC = str(ROOT / "examples" / "pool.yaml")
DATA = Path(__file__).resolve().parents[1] / "data" / "mig"


def run(*args: str) -> tuple[int, str]:
    res = CliRunner().invoke(cli, ["mig", *args])
    return res.exit_code, res.output


def test_check_valid_prints_placement() -> None:
    code, out = run("check", "--model", "H100-80GB", "3g.40gb,2g.20gb,1g.10gb")
    assert code == 0
    assert "3g.40gb at memory slot 4" in out and "2g.20gb at memory slot 0" in out


@pytest.mark.parametrize(
    "model,layout,needle",
    [
        ("A100-40GB", "4g.20gb,3g.20gb,1g.5gb", "compute total"),
        ("A100-40GB", "3g.20gb,3g.20gb,1g.5gb", "overlap"),
        ("A100-40GB", "2g.10gb,2g.10gb,2g.10gb,2g.10gb", "count: 4 x 2g.10gb"),
        ("A100-40GB", "3g.20gb@2", "start position: 3g.20gb starts only at 0, 4"),
        ("A100-40GB", "3g.20gb@0,2g.10gb@2", "overlap"),
        ("A100-40GB", "3g.40gb", "unknown profile '3g.40gb'"),
        ("V100", "1g.5gb", "unknown MIG-capable GPU model 'V100'"),
        ("A100-40GB", "3g.20gb@x", "bad start 'x'"),
        ("A100-40GB", "3g.20gb@0,1g.5gb", "for every item"),
    ],
)
def test_check_rejects_with_exit_2(model: str, layout: str, needle: str) -> None:
    code, out = run("check", "--model", model, layout)
    assert code == 2 and needle in out


def test_plan_json_is_an_apply_plan(tmp_path: Path) -> None:
    out_file = tmp_path / "plan.json"
    code, out = run(
        "plan",
        "--model",
        "A100-40GB",
        "--gpus",
        "3",
        "--demand",
        "1g.5gb=9,3g.20gb=1",
        "--json",
        "--out",
        str(out_file),
    )
    assert code == 0
    doc = json.loads(out)
    assert doc == json.loads(out_file.read_text())
    assert doc["unmet"] == {} and doc["outputs"]["mig_parted"]["version"] == "v1"
    code, out = run("emit", "--plan", str(out_file), "mig-parted")
    assert code == 0 and yaml.safe_load(out)["mig-configs"]
    code, out = run("emit", "--plan", str(out_file), "commands")
    assert code == 0 and "-cgi" in out
    code, out = run("emit", "--plan", str(out_file), "gres")
    assert code == 0 and out.startswith("NodeName=gpu Gres=gpu:nvidia_a100_1g.5gb:9")
    code, out = run("apply", "--plan", str(out_file), "--dry-run")
    assert code == 0 and "would run: nvidia-smi mig -i 0" in out


def test_plan_from_spec_with_busy_gpu() -> None:
    code, out = run("plan", "--spec", SPEC, "--model", "A100-40GB", "--busy", "c-gpu1:0", "--demand", "1g.5gb=6")
    assert code == 0
    assert "c-gpu1:0  busy" in out and "c-gpu1:1  CHANGE  MIG off ->" in out


def test_plan_reports_unmet_demand() -> None:
    code, out = run("plan", "--model", "A30", "--gpus", "1", "--demand", "4g.24gb=2")
    assert code == 0 and "UNMET 1" in out and "unmet demand: 4g.24gb=1" in out


def test_plan_from_sacct_and_needs() -> None:
    code, out = run(
        "plan",
        "--model",
        "A100-40GB",
        "--gpus",
        "2",
        "--sacct",
        str(DATA / "sacct_a100.json"),
        "--needs",
        str(DATA / "needs.csv"),
        "--json",
    )
    assert code == 0
    doc = json.loads(out)
    assert doc["demand"] == {"1g.5gb": 8, "3g.20gb": 2, "2g.10gb": 1, "1g.10gb": 2}
    assert any("not MIG requests" in n for n in doc["notes"]) and any("need more than" in n for n in doc["notes"])


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--model", "A100-40GB", "--gpus", "2", "--demand", "3g.40gb=1"], "unknown profile '3g.40gb'"),
        (["--model", "A100-40GB", "--gpus", "2", "--demand", "1g.5gb"], "bad demand entry '1g.5gb'"),
        (["--model", "A100-40GB", "--gpus", "2"], "give the demand"),
        (["--model", "A100-40GB", "--demand", "1g.5gb=1"], "exactly one of --gpus N and --spec"),
        (["--model", "B100", "--gpus", "2", "--demand", "1g.5gb=1"], "unknown MIG-capable GPU model 'B100'"),
        (["--spec", SPEC, "--demand", "1g.5gb=1"], "pass --model"),
        (["--spec", SPEC, "--model", "A100-40GB", "--busy", "zz:0", "--demand", "1g.5gb=1"], "--busy names zz:0"),
        (
            ["--spec", SPEC, "--model", "A100-40GB", "--busy", "c-gpu1", "--demand", "1g.5gb=1"],
            "bad --busy entry 'c-gpu1'",
        ),
        (
            ["--spec", "/nonexistent/pool.yaml", "--model", "A30", "--demand", "1g.6gb=1"],
            "cannot read /nonexistent/pool.yaml",
        ),
        (["--spec", SPEC, "--model", "A30", "--demand", "1g.6gb=1"], "the spec has no A30 GPUs"),
        (["--model", "A100-40GB", "--gpus", "1", "--needs", "/nonexistent.csv"], "/nonexistent.csv: No such file"),
    ],
)
def test_plan_bad_input_exit_2(args: list[str], needle: str) -> None:
    code, out = run("plan", *args)
    assert code == 2, out
    assert needle in out


def test_apply_without_controls_or_with_bad_plan(tmp_path: Path) -> None:
    plan_file = tmp_path / "p.json"
    run("plan", "--model", "A30", "--gpus", "1", "--demand", "1g.6gb=1", "--out", str(plan_file))
    code, out = run("apply", "--plan", str(plan_file))
    assert code == 2 and "no node control configured" in out
    bad = json.loads(plan_file.read_text())
    bad["gpus"][0]["layout"] = ["4g.24gb", "1g.6gb"]
    plan_file.write_text(json.dumps(bad))
    code, out = run("apply", "--plan", str(plan_file), "--dry-run")
    assert code == 2 and "not a valid A30 layout" in out
    plan_file.write_text("{")
    code, out = run("apply", "--plan", str(plan_file), "--dry-run")
    assert code == 2


def test_apply_with_controls_factory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests_unit_mig_fakes import make_controls  # type: ignore[import-not-found]

    plan_file = tmp_path / "p.json"
    run("plan", "--model", "A30", "--gpus", "2", "--demand", "2g.12gb=3", "--out", str(plan_file))
    code, out = run("apply", "--plan", str(plan_file), "--controls", "tests_unit_mig_fakes:make_controls", "--json")
    assert code == 0, out
    report = json.loads(out)
    assert report["ok"] and {n["status"] for n in report["nodes"]} == {"applied"}
    assert make_controls.last_nodes.drained == {}
    code, out = run("apply", "--plan", str(plan_file), "--controls", "nope.module:x")
    assert code == 2 and "cannot load --controls" in out


@pytest.fixture(autouse=True)
def _fake_controls_module(monkeypatch: pytest.MonkeyPatch) -> None:
    """A tiny importable module whose factory builds the fakes of test_mig_apply."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("_mig_apply_fakes", Path(__file__).with_name("test_mig_apply.py"))
    assert spec is not None and spec.loader is not None
    fakes = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "_mig_apply_fakes", fakes)
    spec.loader.exec_module(fakes)
    FakeBackend, FakeNodes = fakes.FakeBackend, fakes.FakeNodes

    def make_controls(plan):  # type: ignore[no-untyped-def]
        state: dict[str, dict[int, object]] = {}
        for g in plan.gpus:
            state.setdefault(g.node, {})[g.index] = g.current
        make_controls.last_nodes = FakeNodes()  # type: ignore[attr-defined]
        return make_controls.last_nodes, FakeBackend(state)  # type: ignore[attr-defined,arg-type]

    mod = types.ModuleType("tests_unit_mig_fakes")
    mod.make_controls = make_controls  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "tests_unit_mig_fakes", mod)


def _plan_doc() -> dict:
    code, out = run("plan", "--spec", SPEC, "--model", "A100-40GB", "--demand", "1g.5gb=4", "--json")
    assert code == 0, out
    return json.loads(out)


def _with(edit):
    doc = _plan_doc()
    edit(doc)
    return json.dumps(doc)


BAD_PLANS = [
    (
        "infinity-index",
        lambda: _with(lambda d: d["gpus"][0].update(index=10**400)).replace("1" + "0" * 400, "Infinity"),
        "Infinity is not a JSON number",
    ),
    ("negative-index", lambda: _with(lambda d: d["gpus"][0].update(index=-3)), "gpus[0].index: -3"),
    ("huge-index", lambda: _with(lambda d: d["gpus"][0].update(index=10**12)), "is not a GPU index"),
    ("bool-index", lambda: _with(lambda d: d["gpus"][0].update(index=True)), "is not a GPU index"),
    ("duplicate-row", lambda: _with(lambda d: d["gpus"].append(d["gpus"][0])), "is listed twice"),
    ("negative-demand", lambda: _with(lambda d: d.update(demand={"1g.5gb": -1})), "demand.1g.5gb: -1"),
    ("unknown-demand", lambda: _with(lambda d: d.update(demand={"9g.99gb": 1})), "unknown profile"),
    ("unknown-model", lambda: _with(lambda d: d.update(model="V100")), "model: 'V100'"),
    ("node-with-space", lambda: _with(lambda d: d["gpus"][0].update(node="a b")), "is not a node name"),
    ("layout-not-list", lambda: _with(lambda d: d["gpus"][0].update(layout="1g.5gb")), "not a list of profile names"),
    ("not-an-object", lambda: "[1, 2]", "a plan is a JSON object"),
    ("deep", lambda: "[" * 20_000 + "]" * 20_000, "nested too deeply"),
]


@pytest.mark.parametrize("text_fn,needle", [(f, n) for _, f, n in BAD_PLANS], ids=[c for c, _, _ in BAD_PLANS])
@pytest.mark.parametrize("command", [["apply", "--dry-run"], ["emit", "commands"]])
def test_bad_plan_files_exit_2_with_the_field_named(tmp_path, text_fn, needle, command):
    # Issue 11, defect 11: tracebacks on an Infinity index or deep files; bad rows accepted.
    f = tmp_path / "plan.json"
    f.write_text(text_fn())
    code, out = run(*command, "--plan", str(f))
    assert code == 2 and needle in out and "Traceback" not in out, out


def test_a_plan_file_that_is_not_utf8_exits_2(tmp_path):
    f = tmp_path / "plan.json"
    f.write_bytes(b'{"version": 1, "x": "\xff\xfe"}')
    code, out = run("apply", "--dry-run", "--plan", str(f))
    assert code == 2 and "not UTF-8" in out, out
