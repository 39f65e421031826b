"""The commands meant for cron: every non-zero exit says why in one line on stderr; reports stay on stdout.

Each case runs a command through the CLI against fakes (Slurm's commands, Kubernetes) in one failure
mode and checks: the exit status, exactly one ``error:`` line on stderr naming the reason, no
traceback, no raw control character, and (for ``--json``) a report on stdout that still parses.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import pytest
import yaml
from click.testing import CliRunner

from slurm_pool.adapters.runner import RecordingRunner, Result
from slurm_pool.bridge.k8s import K8sError
from slurm_pool.cli import cli
from slurm_pool.cronexit import TRACEBACK_ENV, fail, for_cron, one_line
from slurm_pool.text import control_chars
from tests.unit.test_bridge_plan import EXAMPLE_SPEC, World, world

pytestmark = pytest.mark.usefixtures("narrow_from_json")  # the fakes answer Slurm's JSON reads

ROOT = Path(__file__).resolve().parents[2]
FLOATING = ROOT / "examples" / "pool-floating.yaml"
NOW = "2026-01-07T02:00:00Z"
UNREACHABLE = "slurm_load_jobs error: Unable to contact slurm controller (connect failure)\n\x1b[2J"


def _check(res: Any, code: int, said: str, json_out: bool = False) -> None:
    """The one-line contract: status, one ``error:`` line on stderr, no traceback or controls."""
    assert res.exit_code == code, res.output
    err = res.stderr.splitlines()
    assert len(err) == 1 and err[0].startswith("error: "), res.stderr
    assert said in err[0], err[0]
    assert "Traceback" not in res.output and not control_chars(res.stderr.rstrip("\n"))
    if json_out:
        json.loads(res.stdout)  # the report is still whole on stdout


# -- rebalance ---------------------------------------------------------------------------------


def _world() -> World:
    w = world(4)
    w.k8s.close = lambda: None  # type: ignore[attr-defined]
    return w


def _slurm_down(w: World) -> None:
    for cmd in ("sinfo", "squeue", "sacct", "sbatch"):
        w.runner.fail([cmd], 1, UNREACHABLE)


def _k8s_down(w: World) -> None:
    def down(*a: Any, **kw: Any) -> Any:
        raise K8sError(0, "cannot reach the API server: connection refused")

    for name in ("list_nodes", "list_pods", "list_isvcs", "list_inference_services", "get_lease"):
        if hasattr(w.k8s, name):
            setattr(w.k8s, name, down)


def _sbatch_fails(w: World) -> None:
    """The run's plan lends nodes, and Slurm refuses one placeholder."""
    w.runner.respond(
        ["sbatch"],
        lambda a, i: (
            Result(a, 1, "", "sbatch: error: Batch job submission failed\n") if "--nodelist=a-gpu1" in a else None
        ),
    )


def _bad_bridge(tmp: Path) -> str:
    doc = yaml.safe_load(Path(EXAMPLE_SPEC).read_text())
    doc["bridge"]["max_lent_nodes"] = -3
    path = tmp / "pool.yaml"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


REBALANCE: list[tuple[str, Callable[[World], None], bool, int, str]] = [
    ("slurm unreachable", _slurm_down, False, 1, "Unable to contact slurm controller"),
    ("kubernetes unreachable", _k8s_down, False, 1, "connection refused"),
    ("a plan step fails", _sbatch_fails, False, 1, "rebalance: 1 of 4 step(s) failed, first submit on a-gpu1: sbatch"),
    ("a plan step fails, --json", _sbatch_fails, True, 1, "Batch job submission failed"),
    ("a bad spec", lambda w: None, False, 2, "bridge.max_lent_nodes"),
]


@pytest.mark.parametrize(
    ("spoil", "as_json", "code", "said"), [c[1:] for c in REBALANCE], ids=[c[0] for c in REBALANCE]
)
def test_rebalance_says_why_it_failed_on_stderr(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, spoil, as_json: bool, code: int, said: str
) -> None:
    from slurm_pool.adapters import runner as runner_mod
    from slurm_pool.bridge import k8s as k8s_mod

    w = _world()
    spoil(w)
    monkeypatch.setattr(runner_mod, "SubprocessRunner", lambda *a, **kw: w.runner)
    monkeypatch.setattr(k8s_mod.KubernetesAPI, "connect", classmethod(lambda cls, config, kubeconfig=None: w.k8s))
    spec = _bad_bridge(tmp_path) if code == 2 else EXAMPLE_SPEC
    res = CliRunner().invoke(cli, ["rebalance", "--spec", spec, "--now", NOW, *(["--json"] if as_json else [])])
    _check(res, code, said, json_out=as_json)
    if as_json:
        assert json.loads(res.stdout)["errors"], res.stdout  # the JSON report keeps its reasons too


def test_a_successful_rebalance_writes_nothing_on_stderr(monkeypatch: pytest.MonkeyPatch) -> None:
    from slurm_pool.adapters import runner as runner_mod
    from slurm_pool.bridge import k8s as k8s_mod

    w = _world()
    monkeypatch.setattr(runner_mod, "SubprocessRunner", lambda *a, **kw: w.runner)
    monkeypatch.setattr(k8s_mod.KubernetesAPI, "connect", classmethod(lambda cls, config, kubeconfig=None: w.k8s))
    res = CliRunner().invoke(cli, ["rebalance", "--spec", EXAMPLE_SPEC, "--now", NOW, "--json"])
    assert res.exit_code == 0 and res.stderr == "", res.output
    assert json.loads(res.stdout)["ok"]


# -- guarantees reconcile, checkpoints prune, doctor -------------------------------------------


def _runner(monkeypatch: pytest.MonkeyPatch, setup: Callable[[RecordingRunner], None]) -> RecordingRunner:
    r = RecordingRunner()
    setup(r)
    for where in ("slurm_pool.adapters.runner.SubprocessRunner", "slurm_pool.adapters.slurm.SubprocessRunner"):
        monkeypatch.setattr(where, lambda *a, **kw: r)
    return r


def _down(r: RecordingRunner) -> None:
    for cmd in ("squeue", "sinfo", "scontrol", "sacctmgr", "sacct"):
        r.fail([cmd], 1, UNREACHABLE)


def _broken_spec(tmp: Path) -> str:
    doc = yaml.safe_load(FLOATING.read_text())
    doc["guarantees"]["tier"] = "Not A Name!"
    path = tmp / "pool.yaml"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def _planner_bug(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*a: Any, **kw: Any) -> Any:
        raise KeyError("partition\nsecond line\x1b[2J")

    monkeypatch.setattr("slurm_pool.guarantees.cli.plan_moves", boom)


OTHERS: list[tuple[str, list[str], Any, int, str]] = [
    ("reconcile: slurm unreachable", ["guarantees", "reconcile", "--spec", str(FLOATING)], _down, 1, "squeue"),
    (
        "reconcile: slurm unreachable, --json",
        ["guarantees", "reconcile", "--spec", str(FLOATING), "--json"],
        _down,
        1,
        "Unable to contact slurm controller",
    ),
    ("reconcile: bad spec", ["guarantees", "reconcile", "--spec", "BROKEN"], None, 2, "guarantees.tier"),
    (
        "reconcile: spec without guarantees",
        ["guarantees", "reconcile", "--spec", str(ROOT / "examples" / "pool.yaml")],
        None,
        2,
        "guarantees: the spec has no guarantees section",
    ),
    (
        "reconcile: an unexpected error",
        ["guarantees", "reconcile", "--spec", str(FLOATING)],
        "BUG",
        1,
        "unexpected KeyError",
    ),
    ("reconcile: missing spec", ["guarantees", "reconcile", "--spec", "/nonexistent/pool.yaml"], None, 2, "pool.yaml"),
    ("prune: slurm unreachable", ["checkpoints", "prune", "--base", "BASE"], _down, 1, "cannot read the queue"),
    ("prune: base is a file", ["checkpoints", "prune", "--base", "BASEFILE"], _down, 1, "cannot list the checkpoint"),
    ("doctor: slurm unreachable", ["doctor", "--spec", str(FLOATING)], _down, 1, "doctor: 1 problem(s) found"),
    ("doctor: bad spec", ["doctor", "--spec", "BROKEN"], _down, 2, "guarantees.tier"),
]


@pytest.mark.parametrize(("argv", "setup", "code", "said"), [c[1:] for c in OTHERS], ids=[c[0] for c in OTHERS])
def test_cron_commands_say_why_they_failed_on_stderr(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, argv: list[str], setup: Any, code: int, said: str
) -> None:
    r = _runner(monkeypatch, setup if callable(setup) else (lambda r: None))
    r.on(["squeue", "--json"], json.dumps({"jobs": []})) if setup is None or setup == "BUG" else None
    if setup == "BUG":
        _planner_bug(monkeypatch)
    (tmp_path / "base").mkdir()
    (tmp_path / "file").write_text("")
    named = {"BASE": str(tmp_path / "base"), "BASEFILE": str(tmp_path / "file")}
    argv = [_broken_spec(tmp_path) if a == "BROKEN" else named.get(a, a) for a in argv]
    res = CliRunner().invoke(cli, argv)
    _check(res, code, said)


def test_a_directory_prune_cannot_remove_is_summed_up_on_stderr(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import os
    import time

    base = tmp_path / "base"
    for rel in ("alice/101", "bob/103"):
        (base / rel).mkdir(parents=True)
        old = time.time() - 30 * 86400
        os.utime(base / rel, (old, old))
    _runner(monkeypatch, lambda r: r.on(["squeue", "--json"], json.dumps({"jobs": []})))

    def refuse(base: str, entry: Any) -> None:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr("slurm_pool.node.prune.remove", refuse)
    res = CliRunner().invoke(cli, ["checkpoints", "prune", "--base", str(base)])
    assert res.exit_code == 1, res.output
    err = res.stderr.splitlines()
    assert err[-1] == "error: checkpoints prune: 2 directories could not be removed", err
    assert len(err) == 3 and all(e.startswith("error: ") for e in err)  # one per directory, then the sum
    assert "0 removed, 0 kept, 2 failed" in res.stdout


# -- the wrapper itself ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raised", "code", "line"),
    [
        (RuntimeError("a\nb\x1b[2J"), 1, "error: unexpected RuntimeError: a; b\\x1b[2J"),
        (ValueError(""), 1, "error: unexpected ValueError:"),
        (__import__("slurm_pool.errors").errors.InputError("bad --x\nsecond"), 2, "error: bad --x; second"),
        (__import__("click").BadParameter("no", param_hint="--now"), 2, "error: Invalid value for --now: no"),
    ],
)
def test_for_cron_turns_any_error_into_one_line(raised: Exception, code: int, line: str) -> None:
    import click

    @click.command()
    @for_cron
    def cmd() -> None:
        raise raised

    res = CliRunner().invoke(cmd, [])
    assert res.exit_code == code and res.stderr.rstrip("\n") == line.rstrip(), res.stderr


def test_the_traceback_comes_back_on_request(monkeypatch: pytest.MonkeyPatch) -> None:
    import click

    @click.command()
    @for_cron
    def cmd() -> None:
        raise RuntimeError("bug")

    monkeypatch.setenv(TRACEBACK_ENV, "1")
    res = CliRunner().invoke(cmd, [])
    assert isinstance(res.exception, RuntimeError)


@pytest.mark.parametrize(
    ("text", "line"),
    [("a\n\n b \r\n", "a; b"), ("", "failed"), ("x\x1b[31m\u202e", "x\\x1b[31m\\u202e"), ("x\r y", "x; y")],
)
def test_one_line(text: str, line: str) -> None:
    assert one_line(text) == line


def test_fail_exits_with_its_code() -> None:
    import click

    @click.command()
    def cmd() -> None:
        fail("nope\nreally", 3)

    res = CliRunner().invoke(cmd, [])
    assert (res.exit_code, res.stderr) == (3, "error: nope; really\n")
