"""Long commands show a progress bar on a terminal's stderr, and nothing under ``--json`` or into a pipe.

``simulate`` and ``mig plan`` run as a user runs it: its stderr a pseudo-terminal, its stdout a pipe (so what the bar writes
and what the command prints stay apart).
"""

from __future__ import annotations

import io
import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest

from slurm_pool.clitypes import Progress

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "examples" / "pool.yaml"
SACCT = ROOT / "tests" / "data" / "slurm" / "22.05" / "sacct-history.json"
#: A terminal's width and kind, so rich draws its bar as on a user's.
TERMINAL = {"TERM": "xterm-256color", "COLUMNS": "120", "LINES": "40"}


def _drain(fd: int) -> bytes:
    out = b""
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # the other end closed (EIO on Linux)
            return out
        if not chunk:
            return out
        out += chunk


def simulate_on_a_terminal(*args: str) -> tuple[int, str, str]:
    """``slurm-pool simulate ARGS`` with stderr on a pseudo-terminal: (exit status, stdout, the terminal's bytes)."""
    return on_a_terminal("simulate", "--spec", str(SPEC), "--sacct", str(SACCT), *args)


def on_a_terminal(*args: str) -> tuple[int, str, str]:
    """``slurm-pool ARGS`` with stderr on a pseudo-terminal: (exit status, stdout, the terminal's bytes)."""
    master, slave = pty.openpty()
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "TERM", "CI")}
    argv = [sys.executable, "-m", "slurm_pool", *args]
    with subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=slave, stdin=subprocess.DEVNULL, env={**env, **TERMINAL}, cwd=ROOT
    ) as proc:
        os.close(slave)
        terminal = _drain(master)
        stdout = proc.stdout.read().decode() if proc.stdout else ""
        code = proc.wait(timeout=300)
    os.close(master)
    return code, stdout, terminal.decode(errors="replace")


@pytest.mark.parametrize(
    "args, bar",
    [
        ((), True),
        (("--nodes", "--compare", "--draws", "2"), True),
        (("--json",), False),
        (("--nodes", "--compare", "--draws", "2", "--json"), False),
    ],
)
def test_simulate_shows_a_bar_on_a_terminal_and_none_under_json(args, bar):
    code, stdout, terminal = simulate_on_a_terminal(*args)
    assert code == 0, (stdout, terminal)
    assert ("reading the sacct records" in terminal) is bar, terminal
    assert ("replaying" in terminal) is bar
    if "--compare" in args:
        assert ("comparing the designs over 2 runtime draws" in terminal) is bar
    # what the command prints is the same either way: the bar never reaches stdout
    assert "reading the sacct" not in stdout and "\x1b[" not in stdout
    if "--json" in args:
        assert stdout.lstrip().startswith("{")


@pytest.mark.parametrize("json_out", [False, True])
def test_mig_plan_shows_a_bar_on_a_terminal(json_out):
    args = ["mig", "plan", "--model", "A30", "--gpus", "64", "--demand", "4g.24gb=20,1g.6gb=40"]
    code, stdout, terminal = on_a_terminal(*args, *(["--json"] if json_out else []))
    assert code == 0, (stdout, terminal)
    assert ("planning the MIG layouts of 64 A30 GPUs" in terminal) is not json_out, terminal
    assert "planning" not in stdout


def test_no_bar_where_stderr_is_not_a_terminal():
    stream = io.StringIO()
    with Progress(stream=stream) as bars:
        tick = bars.step("something long", 10)
        for i in range(10):
            tick(i + 1)
    assert stream.getvalue() == ""


def test_a_bar_counts_what_is_done_and_learns_its_total():
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    stream = Terminal()
    with Progress(stream=stream) as bars:
        tick = bars.step("reading", None)
        tick(5, 10)
        assert bars.steps == [("reading", 5, 10)]
        tick(10)
        assert bars.steps == [("reading", 10, 10)]
    assert "reading" in stream.getvalue()
    with Progress(shown=False, stream=Terminal()) as bars:
        bars.step("reading", 3)(1)
        assert bars.steps == []
