"""Issue 30 in the MIG area: hostile plans, needs, options, Slurm and nvidia-smi output.

Nothing from a plan, a needs file, an option or a command's output may write a
config line, reach a terminal raw or be read as Rich markup; bad input exits 2
naming the field and the value, and ``mig apply`` checks every file it will
edit before it changes anything.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
import types
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurm_pool.adapters.runner import RecordingRunner, Result
from slurm_pool.cli import cli
from slurm_pool.errors import InputError
from slurm_pool.mig import features
from slurm_pool.mig.apply import ApplyError, NvidiaSmiBackend, apply_plan
from slurm_pool.mig.confedit import ConfEditError, replace_node_gres_conf, set_node_gres
from slurm_pool.mig.demand import is_mig_type, parse_needs
from slurm_pool.mig.emit import gres_conf_explicit, parse_mig_minors
from slurm_pool.mig.planner import Gpu, PlanError, parse_demand, plan, plan_from_dict
from slurm_pool.mig.remote import RemoteNodeControl, RemoteSettings
from slurm_pool.versions import SlurmVersion

#: What must never reach a terminal or a config line raw.
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029]")
HOSTILE = ["n1\n", "n1\r", "n1\x1b[31m", "n1\x85", "n1\u2028", "[/]", "[bold]n1", "", "-n1", "n 1", "n1,n2"]
WRONG_TYPES = [5, None, True, ["n1"], {"n": 1}, 1.5]


def run(*args: str) -> tuple[int, str]:
    # color=True: click would strip ANSI sequences from a non-terminal, hiding what a terminal gets.
    res = CliRunner().invoke(cli, ["mig", *args], color=True)
    return res.exit_code, res.output


def _clean(code: int, out: str, expect: int = 2) -> None:
    assert code == expect, out
    assert "Traceback" not in out, out
    assert not RAW.search(out), repr(out)


def _doc() -> dict:
    gpus = [Gpu("n1", 0, ()), Gpu("n1", 1, ()), Gpu("n2", 0, ())]
    return plan_from_dict(plan("A30", gpus, {"1g.6gb": 12}).to_dict()).to_dict()


def _write(tmp_path: Path, doc: object, name: str = "plan.json") -> str:
    f = tmp_path / name
    f.write_text(json.dumps(doc))
    return str(f)


# -- plan files (defect 1) -----------------------------------------------------------------


def _set(field: str, value: object):  # noqa: ANN202
    def edit(d: dict) -> None:
        if field in ("node", "index", "busy", "current", "layout"):
            d["gpus"][0][field] = value
        elif field == "demand-key":
            d["demand"] = {value: 1}
        else:
            d[field] = value

    return edit


PLAN_CASES = (
    [(f"node={v!r}", _set("node", v), "gpus[0].node") for v in HOSTILE + WRONG_TYPES]
    + [(f"layout={v!r}", _set("layout", [v]), "gpus[0].layout") for v in ["1g.6gb\n", "1g.6gb\x85", "[/]", 5, None]]
    + [(f"current={v!r}", _set("current", [v]), "gpus[0].current") for v in ["1g.6gb\r", "\u20281g.6gb"]]
    + [(f"model={v!r}", _set("model", v), "model") for v in ["A30\n", "a30", "A30\x1b", 30, None]]
    + [(f"demand key {v!r}", _set("demand-key", v), "demand") for v in ["1g.6gb\n", "\x1b[31m", "[/]"]]
    + [(f"method={v!r}", _set("method", v), "method") for v in ["milp\n", "\x1b[2J", ["milp"], 1]]
)


@pytest.mark.parametrize("edit,field", [(e, f) for _, e, f in PLAN_CASES], ids=[i for i, _, _ in PLAN_CASES])
def test_plan_files_refuse_hostile_fields_naming_them(edit, field) -> None:
    doc = _doc()
    edit(doc)
    with pytest.raises(PlanError) as err:
        plan_from_dict(doc)
    assert field in str(err.value) and not RAW.search(str(err.value)), str(err.value)


@pytest.mark.parametrize("node", ["n1\n", "n1\r", "n1\x85", "n1\u2028"])
@pytest.mark.parametrize("what", ["gres", "commands", "mig-parted"])
def test_emit_never_writes_a_line_for_a_hostile_node(tmp_path, node, what) -> None:
    doc = _doc()
    doc["gpus"][0]["node"] = node
    code, out = run("emit", "--plan", _write(tmp_path, doc), what)
    _clean(code, out)
    assert "gpus[0].node" in out and "Gres=" not in out


def test_a_plan_file_node_never_reaches_gres_conf_in_apply() -> None:
    # apply_plan checks the nodes of a Plan built in code too, before touching anything.
    p = plan("A30", [Gpu("n1", 0, ())], {"1g.6gb": 1})
    p.gpus[0] = Gpu("n1\n", 0, ())
    with pytest.raises(InputError, match="node"):
        apply_plan(p, _Never(), _Never())  # type: ignore[arg-type]


class _Never:
    def __getattr__(self, name: str):  # noqa: ANN204
        raise AssertionError(f"{name} called before the plan was checked")


# -- option values that reach files (defect 2) ----------------------------------------------


@pytest.fixture()
def fakes(monkeypatch: pytest.MonkeyPatch) -> types.SimpleNamespace:
    """A ``--controls`` factory (the fakes of test_mig_apply) whose nodes the test can set up."""
    spec = importlib.util.spec_from_file_location("_mig_hostile_fakes", Path(__file__).with_name("test_mig_apply.py"))
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "_mig_hostile_fakes", mod)
    spec.loader.exec_module(mod)
    ns = types.SimpleNamespace(nodes=mod.FakeNodes(), backend=None)

    def make_controls(p):  # type: ignore[no-untyped-def]
        state: dict[str, dict[int, object]] = {}
        for g in p.gpus:
            state.setdefault(g.node, {})[g.index] = g.current
        ns.backend = mod.FakeBackend(state)
        return ns.nodes, ns.backend

    factory = types.ModuleType("mig_hostile_controls")
    factory.make_controls = make_controls  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "mig_hostile_controls", factory)
    return ns


CONTROLS = ["--controls", "mig_hostile_controls:make_controls"]
BAD_PATHS = ["/dev\nNodeName=x", "/dev\r", "/dev/\x1b[31m", "/dev x", "/dev,/etc", "dev", "/dev/../etc", "/dev=1", ""]


@pytest.mark.parametrize("value", BAD_PATHS)
def test_dev_dir_is_checked_before_anything_changes(tmp_path, fakes, value) -> None:
    code, out = run("apply", "--plan", _write(tmp_path, _doc()), *CONTROLS, "--dev-dir", value)
    _clean(code, out)
    assert "--dev-dir" in out and fakes.nodes.calls == [], out


def test_dev_dir_with_the_node_placeholder_still_works(tmp_path, fakes) -> None:
    code, out = run("apply", "--plan", _write(tmp_path, _doc()), *CONTROLS, "--dev-dir", "/srv/dev/{node}", "--json")
    assert code == 0, out
    assert all("/srv/dev/n1/" in ln for ln in fakes.nodes.written["n1"][0])


SSH_OPTIONS = [("--gres-conf", v) for v in BAD_PATHS] + [
    ("--slurm-conf", "/etc/slurm/slurm.conf\n"),
    ("--slurm-conf", "relative.conf"),
    ("--nvidia-smi", "nvidia-smi\n"),
    ("--nvidia-smi", "nvidia-smi; rm -rf /"),
    ("--nvidia-smi", "-oProxyCommand=x"),
    ("--controller", "ctl\n"),
    ("--controller", "-oProxyCommand=x"),
    ("--controller", "root@ctl;x"),
    ("--restart-slurmd", "systemctl restart 'slurmd"),
    ("--restart-slurmd", "systemctl restart slurmd\nreboot"),
    ("--restart-slurmctld", 'systemctl "restart'),
    ("--ssh-options", "-o BatchMode=yes\x1b[31m"),
    ("--timeout", "nan"),
    ("--timeout", "inf"),
    ("--timeout", "-1"),
    ("--timeout", "0"),
]


@pytest.mark.parametrize("option,value", SSH_OPTIONS)
def test_ssh_options_are_checked_before_any_node_is_reached(tmp_path, monkeypatch, option, value) -> None:
    import slurm_pool.mig.remote as remote

    def no_ssh(*a, **k):  # noqa: ANN002, ANN003, ANN202
        raise AssertionError("ssh_controls reached with a bad option")

    monkeypatch.setattr(remote, "ssh_controls", no_ssh)
    code, out = run("apply", "--plan", _write(tmp_path, _doc()), "--controls", "ssh", option, value)
    _clean(code, out)
    assert option in out, out


# -- the report: never markup, never raw controls (defect 3) ---------------------------------

REASONS = ["[/]", "[bold]admin[/bold] \x1b[31mred", "maint\x85x", "line\u2028two", "a\rb", "[link=http://x]y"]


@pytest.mark.parametrize("reason", REASONS)
def test_an_admins_drain_reason_is_shown_as_text(tmp_path, fakes, reason) -> None:
    fakes.nodes.drained["n1"] = reason
    code, out = run("apply", "--plan", _write(tmp_path, _doc()), *CONTROLS)
    _clean(code, out, 0)
    assert "n1: skipped" in out and "n2: applied" in out
    visible = reason.split("\x1b")[0].split("\x85")[0].split("\u2028")[0].split("\r")[0]
    assert visible in out, out


@pytest.mark.parametrize("error", ["disk [/] full", "\x1b]0;pwned\x07", "out\nNodeName=x Gres=y", "[red]x\u2028"])
def test_a_failing_steps_message_is_shown_as_text(tmp_path, fakes, error) -> None:
    fakes.nodes.fail["write_gres"] = error
    code, out = run("apply", "--plan", _write(tmp_path, _doc()), *CONTROLS)
    _clean(code, out, 1)
    assert "failed" in out and not re.search(r"^\s*NodeName=", out, re.MULTILINE), out
    # the drain reason set on the node carries no control characters either
    reasons = [c[2] for c in fakes.nodes.calls if c[0] == "drain" and "failed" in c[2]]
    assert reasons and not any(RAW.search(r) or "\n" in r for r in reasons), reasons


# -- needs files and demand (defect 4) ----------------------------------------------------------

NEEDS = [
    ('[{"gpu_mem_gb": "inf"}]', "gpu_mem_gb"),
    ('[{"gpu_mem_gb": "nan"}]', "gpu_mem_gb"),
    ('[{"gpu_mem_gb": 1e400}]', "gpu_mem_gb"),
    ('[{"gpu_mem_gb": "1e400"}]', "gpu_mem_gb"),
    ('[{"gpu_mem_gb": [1]}]', "gpu_mem_gb"),
    ('[{"gpu_mem_gb": {"a": 1}}]', "gpu_mem_gb"),
    ('[{"gpu_mem_gb": "abc"}]', "gpu_mem_gb"),
    ('[{"gpu_mem_gb": true}]', "gpu_mem_gb"),
    ('[{"gpu_mem_gb": -4}]', "gpu_mem_gb"),
    ('[{"gpu_mem_gb": "\\u0665"}]', "gpu_mem_gb"),
    ('[{"gpu_mem_gb": 5, "count": true}]', "count"),
    ('[{"gpu_mem_gb": 5, "count": false}]', "count"),
    ('[{"gpu_mem_gb": 5, "count": "1_0"}]', "count"),
    ('[{"gpu_mem_gb": 5, "count": 2.5}]', "count"),
    ('[{"gpu_mem_gb": 5, "count": -3}]', "count"),
    ('[{"gpu_mem_gb": 5, "count": 10000000000}]', "count"),
    ('[{"gpu_mem_gb": 5, "count": "\\u0661"}]', "count"),
    ('[{"gpu_mem_gb": 5, "compute": "inf"}]', "compute"),
    ('[{"gpu_mem_gb": 5, "compute": false}]', "compute"),
    ('[{"gpu_mem_gb": 5, "compute": 2}]', "compute"),
    ('[{"gpu_mem_gb": 5, "compute": [0.5]}]', "compute"),
    ("[1]", "needs row 1"),
    ("[null]", "needs row 1"),
    ('{"needs": 5}', "needs"),
    ('{"needs": {"gpu_mem_gb": 5}}', "needs"),
    ('"x"', "needs"),
    ("gpu_mem_gb,count\n5,1_0\n", "count"),
    ("gpu_mem_gb,count\ninf,1\n", "gpu_mem_gb"),
    ("gpu_mem_gb,compute\n5,NaN\n", "compute"),
    ("gpu_mem_gb\n\u0665\n", "gpu_mem_gb"),
    ("gpu_mem_gb,count\n5,true\n", "count"),
]


@pytest.mark.parametrize("text,field", NEEDS)
def test_needs_numbers_are_strict(text, field) -> None:
    with pytest.raises(PlanError) as err:
        parse_needs(text)
    assert field in str(err.value), str(err.value)


@pytest.mark.parametrize("text,field", NEEDS)
def test_plan_needs_exits_2_naming_the_field(tmp_path, text, field) -> None:
    f = tmp_path / "needs.txt"
    f.write_text(text)
    code, out = run("plan", "--model", "A30", "--gpus", "1", "--needs", str(f))
    _clean(code, out)
    assert field in out, out


@pytest.mark.parametrize(
    "text", ["1g.6gb=1_0", "1g.6gb=\u0661", "1g.6gb=10000000000", "1g.6gb=1.0", "1g.6gb=true", "1g.6gb=\x1b[31m"]
)
def test_demand_counts_are_strict(text) -> None:
    with pytest.raises(PlanError) as err:
        parse_demand("A30", text)
    assert not RAW.search(str(err.value))


@pytest.mark.parametrize(
    "args",
    [
        ["--demand", "1g.6gb=1_0"],
        ["--demand", "\x1b[31m=1"],
        ["--demand", "1g.6gb\u2028=1"],
        ["--busy", "n1\x1b[31m:0", "--demand", "1g.6gb=1"],
        ["--busy", "gpu\n:0", "--demand", "1g.6gb=1"],
        ["--model", "A30\x1b[2J", "--demand", "1g.6gb=1"],
    ],
)
def test_plan_options_exit_2_without_raw_controls(args) -> None:
    if "--model" not in args:
        args = ["--model", "A30", *args]
    code, out = run("plan", "--gpus", "1", *args)
    _clean(code, out)
    assert out.count("\n") == 1, out


def test_check_shows_a_hostile_layout_escaped() -> None:
    code, out = run("check", "--model", "A30", "1g.6gb\x1b[31m,[/]\u2028")
    _clean(code, out)
    assert "\\x1b" in out


def test_plan_notes_show_sacct_types_escaped(tmp_path) -> None:
    sacct = {
        "jobs": [{"job_id": 1, "tres": {"allocated": [{"type": "gres", "name": "gpu:\x1b[31mred\x85", "count": 2}]}}]
    }
    f = tmp_path / "sacct.json"
    f.write_text(json.dumps(sacct))
    code, out = run("plan", "--model", "A30", "--gpus", "1", "--sacct", str(f))
    _clean(code, out, 0)
    assert "not MIG requests" in out and "\\x1b[31mred\\x85=2" in out, out


@pytest.mark.parametrize(
    "sacct,needle",
    [
        ({"errors": [{"description": "slurmdbd down \x1b[31m"}], "jobs": []}, "Slurm reported errors"),
        ({"jobs": "x"}, "no 'jobs' list"),
        ({"meta": {}}, "no 'jobs' list"),
        ({"jobs": [1]}, "jobs[0]"),
        ("x", "no 'jobs' list"),
    ],
)
def test_plan_sacct_refuses_what_is_not_a_whole_answer(tmp_path, sacct, needle) -> None:
    f = tmp_path / "sacct.json"
    f.write_text(json.dumps(sacct))
    code, out = run("plan", "--model", "A30", "--gpus", "1", "--sacct", str(f))
    _clean(code, out)
    assert needle in out, out


@pytest.mark.parametrize("where", ["missing/dir/plan.json", "."])
def test_plan_out_that_cannot_be_written_exits_2_and_writes_nothing(tmp_path, where) -> None:
    target = tmp_path / where
    code, out = run("plan", "--model", "A30", "--gpus", "1", "--demand", "1g.6gb=1", "--out", str(target))
    _clean(code, out)
    assert "--out" in out
    assert not list(tmp_path.rglob("*.json"))


def test_plan_out_is_written_whole(tmp_path) -> None:
    target = tmp_path / "plan.json"
    target.write_text("old")
    code, out = run("plan", "--model", "A30", "--gpus", "1", "--demand", "1g.6gb=1", "--out", str(target))
    assert code == 0, out
    assert json.loads(target.read_text())["model"] == "A30"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan.json"]  # no temporary file left


# -- apply edits nothing until every file checks out (defect 5) -------------------------------

SLURM_CONF = "NodeName=n1 CPUs=4 Gres=gpu:old:1\n"
GRES_CONF = "NodeName=n1 Name=gpu File=/dev/nvidia0\n"


def _remote(slurm_conf: str = SLURM_CONF, gres_conf: str = GRES_CONF, **settings: object):
    local = RecordingRunner()
    remote: dict[str, RecordingRunner] = {}

    def on_node(node: str) -> RecordingRunner:
        r = remote.setdefault(node, RecordingRunner())
        r.on(["cat", "--", "/etc/slurm/gres.conf"], gres_conf)
        return r

    local.on(["cat", "--", "/etc/slurm/slurm.conf"], slurm_conf)
    slurm = types.SimpleNamespace(runner=local)
    ctl = RemoteNodeControl(slurm, on_node, SlurmVersion.parse("26.05"), RemoteSettings(**settings))  # type: ignore[arg-type]
    return ctl, local, on_node


def _writes(runner: RecordingRunner) -> list[tuple[str, ...]]:
    return [c for c in runner.calls if c[:2] == ("sh", "-c") and "mv" in c[2]]


@pytest.mark.parametrize(
    "slurm_conf,needle",
    [
        ("NodeName=other CPUs=4\n", "no NodeName line for n1"),
        ("NodeName=n1 CPUs=4\nNodeName=n1 CPUs=8\n", "second NodeName line"),
        ("NodeName=n[1-2] NodeAddr=a,b\n", "per-node values"),
        ("# c\x85NodeName=n1 Gres=evil\nNodeName=other\n", "no NodeName line for n1"),
    ],
)
def test_write_gres_writes_no_file_when_one_cannot_be_edited(slurm_conf, needle) -> None:
    ctl, local, on_node = _remote(slurm_conf)
    with pytest.raises(ConfEditError, match=needle):
        ctl.write_gres("n1", ["NodeName=n1 Name=gpu Type=t File=/dev/nvidia0"], "gpu:t:1")
    assert _writes(on_node("n1")) == [] and _writes(local) == []


def test_write_gres_puts_the_first_file_back_when_a_later_write_fails() -> None:
    ctl, local, on_node = _remote(slurm_confs=("/etc/slurm/slurm.conf", "/etc/slurm/nodes.conf"))
    local.on(["cat", "--", "/etc/slurm/nodes.conf"], "# no nodes here\n")
    with pytest.raises(ConfEditError, match="no NodeName line"):
        ctl.write_gres("n1", ["NodeName=n1 Name=gpu Type=t File=/dev/nvidia0"], "gpu:t:1")
    assert _writes(on_node("n1")) == []  # checked before the first write
    ctl, local, on_node = _remote()
    local.fail(["sh", "-c"], stderr="disk full")
    with pytest.raises(Exception, match="disk full"):
        ctl.write_gres("n1", ["NodeName=n1 Name=gpu Type=t File=/dev/nvidia0"], "gpu:t:1")
    node = on_node("n1")
    assert len(_writes(node)) == 2 and node.inputs[-1] == GRES_CONF  # written, then put back


@pytest.mark.parametrize(
    "slurm_conf,gres_conf,fail,needle",
    [
        ("NodeName=other CPUs=4\n", GRES_CONF, None, "no NodeName line for n1"),
        (SLURM_CONF, "NodeName=n[1- Name=gpu\n", None, "not a valid hostlist"),
        (SLURM_CONF, GRES_CONF, "node", "/etc/slurm/gres.conf on n1"),
        (SLURM_CONF, GRES_CONF, "local", "/etc/slurm/slurm.conf on this host"),
    ],
)
def test_apply_checks_every_file_before_draining(slurm_conf, gres_conf, fail, needle) -> None:
    ctl, local, on_node = _remote(slurm_conf, gres_conf)
    if fail:
        unwritable = (on_node("n1") if fail == "node" else local).respond
        unwritable(["sh", "-c"], lambda argv, _in: None if "mv" in argv[2] else Result(argv, 1, "", "denied"))
    p = plan("A30", [Gpu("n1", 0, ())], {"1g.6gb": 1})
    with pytest.raises((InputError, ApplyError), match=re.escape(needle)):
        apply_plan(p, ctl, _Never())  # type: ignore[arg-type]
    assert _writes(on_node("n1")) == [] and _writes(local) == []
    assert not [c for c in local.calls if c[0] == "scontrol"]  # not drained


# -- config text, layout tables and command output ----------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "# comment\x85NodeName=n1 Gres=evil\nNodeName=n1 CPUs=4\n",
        "# comment\u2028NodeName=n1 Gres=evil\nNodeName=n1 CPUs=4\n",
        "# comment\x0cNodeName=n1 Gres=evil\nNodeName=n1 CPUs=4\n",
        "# comment\x1cNodeName=n1 Gres=evil\nNodeName=n1 CPUs=4\n",
    ],
)
def test_config_edits_split_lines_only_where_slurm_does(text) -> None:
    out = set_node_gres(text, "n1", "gpu:t:1")
    assert out.split("\n")[0] == text.split("\n")[0]  # the comment is kept byte for byte
    assert out.split("\n")[1] == "NodeName=n1 CPUs=4 Gres=gpu:t:1"
    assert replace_node_gres_conf(text, "n2", ["NodeName=n2 Name=gpu File=/dev/nvidia0"]).startswith(
        text.split("\n")[0] + "\n"
    )


@pytest.mark.parametrize(
    "call",
    [
        lambda: set_node_gres(SLURM_CONF, "n1\n", "gpu:t:1"),
        lambda: set_node_gres(SLURM_CONF, "n1", "gpu:t:1\nNodeName=x"),
        lambda: set_node_gres(SLURM_CONF, "n1", "gpu:t:1 Weight=1"),
        lambda: replace_node_gres_conf(GRES_CONF, "n1\r", []),
        lambda: replace_node_gres_conf(GRES_CONF, "n1", ["NodeName=n1 Name=gpu\nNodeName=x"]),
        lambda: replace_node_gres_conf(GRES_CONF, "n1", ["NodeName=n1 Name=gpu\x85x"]),
        lambda: gres_conf_explicit("n1\n", "A30", [], SlurmVersion.parse("26.05"), [(0, 0)]),
        lambda: gres_conf_explicit("n1", "A30", [], SlurmVersion.parse("26.05"), [(0, 0)], dev_dir="/dev x"),
    ],
)
def test_config_writers_refuse_hostile_values(call) -> None:
    with pytest.raises(ValueError):
        call()


@pytest.mark.parametrize(
    "table,needle",
    [
        ({"nodes": {"n1\n": {"model": "A30", "layouts": {}}}}, "nodes"),
        ({"nodes": {"n1": {"model": "A30", "layouts": {"a\n": [None]}}}}, "layouts"),
        ({"nodes": {"n1": {"model": "A30", "layouts": {"a-b": [None]}}}}, "layouts"),
        ({"nodes": {"n1": {"model": "A30", "layouts": {"[/]": [None]}}}}, "layouts"),
    ],
)
def test_layout_tables_refuse_names_slurmd_would_misread(table, needle) -> None:
    problem = features.table_error(table)
    assert problem is not None and needle in problem and not RAW.search(problem), problem


@pytest.mark.parametrize("name", ["mig_a\n", "mig_a\r", "mig\x85", "a-b", "", "9a"])
def test_layout_feature_names_match_in_full(name) -> None:
    assert re.match(features.LAYOUT_FEATURE_RE, name) is None
    assert re.fullmatch(features.LAYOUT_FEATURE_RE, name) is None


@pytest.mark.parametrize(
    "entry",
    [
        ("n1", ["a\n"], "/usr/bin/h"),
        ("n1\nx", ["a"], "/usr/bin/h"),
        ("n1", ["a"], "/usr/bin/h x"),
        ("n1", ["a-b"], "/h"),
    ],
)
def test_helpers_conf_lines_refuse_hostile_entries(entry) -> None:
    with pytest.raises(ValueError):
        features.helpers_conf_lines([entry])


@pytest.mark.parametrize(
    "text,want",
    [("ExecTime=\u0663\u0660", features.SLURM_DEFAULT_EXEC_TIME), ("ExecTime=1_0", 10), ("ExecTime=30\n", 30)],
)
def test_exec_time_is_read_in_ascii_digits_only(text, want) -> None:
    assert features.parse_exec_time(text) == want


@pytest.mark.parametrize("gres_type", ["gpu:1g.5gb\n", "nvidia_a100_1g.5gb\r", "a_\u0661g.5gb"])
def test_mig_types_match_in_full(gres_type) -> None:
    assert not is_mig_type(gres_type)


@pytest.mark.parametrize(
    "text,want", [("gpu0/gi1/access \u0661\u0662", {}), ("gpu0/gi1/access 12\n", {"gpu0/gi1/access": 12})]
)
def test_mig_minors_are_ascii(text, want) -> None:
    assert parse_mig_minors(text) == want


LGI = """\
| GPU   Name             Profile  Instance   Placement  |
|   0  MIG 1g.6gb,File=/x  14        1          0:1     |
"""


def test_nvidia_smi_output_with_unknown_profiles_is_refused() -> None:
    runner = RecordingRunner()
    runner.on(["nvidia-smi", "--query-gpu=index,mig.mode.current"], "0, Enabled\n")
    runner.on(["nvidia-smi", "mig", "-lgi"], LGI)
    backend = NvidiaSmiBackend(runner, "A30")
    with pytest.raises(ApplyError, match="nvidia-smi"):
        backend.layouts("n1")
    with pytest.raises(ApplyError, match="nvidia-smi"):
        backend.devices("n1")


@pytest.mark.parametrize("node", ["n1\n", "n1\x1b[31m", "[/]", "-n"])
def test_helper_refuses_a_hostile_node_name(tmp_path, node) -> None:
    table = tmp_path / "t.json"
    table.write_text(json.dumps({"version": 1, "nodes": {}}))
    code, out = run("helper", "--node", node, "--layouts", str(table))
    _clean(code, out)
    assert "--node" in out or "node" in out


def test_helper_output_is_shown_escaped(tmp_path, monkeypatch) -> None:
    table = features.node_table([(["n1"], "A30", 1, {"mig_a": [["4g.24gb"]]})])
    f = tmp_path / "t.json"
    f.write_text(json.dumps(table))

    class Broken:
        def layouts(self, node: str):  # noqa: ANN202
            raise RuntimeError("nvidia-smi: \x1b[31mboom\x85[/]")

        def apply(self, *a: object) -> None: ...

    mod = types.ModuleType("mig_hostile_helper")
    mod.device = lambda node: features.HelperDevice(Broken(), lambda n: [])  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "mig_hostile_helper", mod)
    code, out = run("helper", "--node", "n1", "--layouts", str(f), "--backend", "mig_hostile_helper:device")
    _clean(code, out, 1)
    assert "\\x1b[31mboom\\x85[/]" in out, out
