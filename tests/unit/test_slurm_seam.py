"""Only the adapters know Slurm: its command names and flags, its environment and its release quirks.

The structure test walks every module of ``slurm_pool`` with :mod:`ast` and fails on a Slurm command
line built outside ``slurm_pool/adapters/`` (and ``slurm_pool/localcluster/``, which starts the
daemons): a command name as an argv element or program, or a Slurm flag in a command line.  Text
that mentions a command (a message, a docstring, a config key) is not a command line.
"""

from __future__ import annotations

import ast
import json
import os
import sys
from pathlib import Path
from typing import Iterator

import pytest

from slurm_pool.adapters import quirks
from slurm_pool.adapters.runner import (
    RecordingRunner,
    Result,
    SubprocessRunner,
    slurm_clean,
)
from slurm_pool.adapters.slurmcalls import BatchJob, SlurmCalls, batch_argv
from tests.support.imports import PKG, modules

#: Slurm's user commands (26.05.3 doc/man/man1).
COMMANDS = frozenset(
    {
        "sacct",
        "sacctmgr",
        "salloc",
        "sattach",
        "sbatch",
        "sbcast",
        "scancel",
        "scontrol",
        "scrontab",
        "sdiag",
        "sinfo",
        "sprio",
        "squeue",
        "sreport",
        "srun",
        "sshare",
        "sstat",
        "strigger",
    }
)
#: Options only Slurm's commands take (none of slurm-pool's own): a list of them is a Slurm command line.
SLURM_OPTIONS = frozenset(
    {
        "--parsable",
        "--allusers",
        "--allocations",
        "--duplicates",
        "--starttime",
        "--endtime",
        "--dependency",
        "--no-requeue",
        "--exclusive",
        "--uid",
        "--qos",
        "--account",
        "--partition",
        "--nodelist",
        "--signal",
        "--gres",
        "--comment",
        "--chdir",
        "--job-name",
        "--noheader",
    }
)
#: Where Slurm's commands may be named.
SEAM = ("slurm_pool/adapters/", "slurm_pool/localcluster/")
#: TEMPORARY: modules that still build Slurm command lines on main while their own part of the work moves
#: them behind the adapters (the top-level modules into their packages, the web app into routers).  This
#: list only shrinks, and goes once that work is merged: nothing may be added to it.
EXEMPT: frozenset[str] = frozenset()
#: What the code calls the Slurm adapter (``slurm.accounting_jobs(...)``, ``self.client.run(...)``).
_SLURM_OBJECTS = frozenset({"slurm", "client"})
#: Calls whose first argument is a key, not a program (``conf.get("scontrol")``).
_LOOKUPS = frozenset({"get", "pop", "setdefault", "getenv"})


def _name(node: ast.AST) -> str | None:
    """The name a program is held in (``scontrol``, ``self.st.scontrol``)."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _flag(node: ast.AST) -> str | None:
    """The option a flag literal spells (``--jobs``, ``-h``, ``--job-name`` of ``f"--job-name={n}"``), else None."""
    text = None
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        text = node.value
    elif isinstance(node, ast.JoinedStr) and node.values and isinstance(node.values[0], ast.Constant):
        if any(isinstance(v, ast.Constant) and " " in str(v.value) for v in node.values):
            return None  # a message that starts with an option ("--nodelist=x is not a host list")
        text = str(node.values[0].value)
    if text and " " not in text and text.startswith("-") and len(text) > 1 and (text[1].isalpha() or text[1] == "-"):
        return text.split("=", 1)[0]
    return None


def _command(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value in COMMANDS


def slurm_literals(source: str) -> list[tuple[int, str]]:
    """``(line, what)`` of each Slurm command name or flag ``source`` puts into a command line."""
    found: dict[tuple[int, int], str] = {}

    def hit(node: ast.AST, what: str) -> None:
        found[(node.lineno, node.col_offset)] = what  # type: ignore[attr-defined]

    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.List, ast.Tuple)) and node.elts:
            head = node.elts[0]
            if _command(head) or _name(head) in COMMANDS:
                hit(head, f"command line of {ast.unparse(head)}")
                for e in node.elts[1:]:
                    if _flag(e):
                        hit(e, f"flag {_flag(e)}")
            for e in node.elts:
                if _flag(e) in SLURM_OPTIONS:
                    hit(e, f"Slurm option {_flag(e)}")
        elif isinstance(node, ast.Call):
            lookup = isinstance(node.func, ast.Attribute) and node.func.attr in _LOOKUPS
            # slurm.accounting_jobs("--allusers", ...): flags handed to the adapter to pass on
            to_slurm = isinstance(node.func, ast.Attribute) and _name(node.func.value) in _SLURM_OBJECTS
            for a in node.args:
                if _command(a) and not lookup:
                    hit(a, f"program {a.value}")  # type: ignore[attr-defined]
                elif _flag(a) and (to_slurm or _flag(a) in SLURM_OPTIONS):
                    hit(a, f"flag {_flag(a)} passed to Slurm")
        elif isinstance(node, ast.Compare):
            for c in (node.left, *node.comparators):
                if _command(c):
                    hit(c, f"compared with {c.value}")  # type: ignore[attr-defined]
    return sorted((line, what) for (line, _col), what in found.items())


@pytest.mark.parametrize(
    "source,hits",
    [
        ('runner.run(["squeue", "--json"])', 2),  # the command and its flag
        ('runner.run(["sacct", "--json", "-a", "-X", "-S", since])', 5),
        ('argv = [scontrol, "update", f"JobId={j}"]', 1),  # a program held in a variable named for it
        ('self.runner.run([self.st.scontrol, "--version"])', 2),
        ('opts = ["--parsable", f"--job-name={n}"]', 2),  # sbatch's options without the command
        ('slurm.accounting_jobs("--allusers", "--starttime", since)', 2),  # flags handed to the adapter
        ('self.slurm.accounting_jobs("-D", "-j", key)', 2),
        ('opts.append(f"--qos={tier}")', 1),
        ('check_free_text(value, "--lend-partition")', 0),  # our own option, named in a message
        ('problems.append(f"--nodelist={x} is not a host list")', 0),
        ('raise E("--qos is required")', 0),
        ("slurm.accounting(since, all_users=True)", 0),
        ('shutil.which("sinfo")', 1),
        ('ok = os.path.basename(argv[0]) != "sbatch"', 1),
        ('ACTIONS = {"cancel": ("scancel",), "hold": ("scontrol", "hold")}', 2),
        ('"""Runs `squeue --json` and reads it."""', 0),
        ('raise E("scontrol reconfigure failed: run it by hand")', 0),
        ('scontrol = conf.get("scontrol")', 0),  # a configuration key
        ('DEFAULTS = {"scontrol": "scontrol"}', 0),
        ('KEYS = frozenset({"state_dir", "scontrol"})', 0),
        ('click.option("--json", is_flag=True)', 0),
        ('def read(path, name="sacct"): ...', 0),  # a label for messages
        ('run([*ssh, "nvidia-smi", "--query-gpu=index"])', 0),
        ('argv = ["torchrun", "--nnodes=2:4", "--rdzv-backend=c10d"]', 0),
        ('line = f"srun --ntasks-per-node=1 {cmd}"', 0),  # batch script text
    ],
)
def test_the_literal_finder(source: str, hits: int) -> None:
    assert len(slurm_literals(source)) == hits, slurm_literals(source)


def _outside_the_seam() -> Iterator[tuple[str, Path]]:
    for path in modules().values():
        rel = path.relative_to(PKG.parent).as_posix()
        if not rel.startswith(SEAM):
            yield rel, path


def test_no_slurm_command_line_outside_the_adapters() -> None:
    bad = [
        f"{rel}:{line}: {what}"
        for rel, path in _outside_the_seam()
        if rel not in EXEMPT
        for line, what in slurm_literals(path.read_text())
    ]
    assert bad == [], "build Slurm command lines in slurm_pool/adapters/ (SlurmCalls), not here"


def test_the_exemptions_are_still_needed() -> None:
    # An exempted module that no longer builds a command line leaves the list (it only shrinks).
    files = dict(_outside_the_seam())
    stale = sorted(rel for rel in EXEMPT if rel not in files or not slurm_literals(files[rel].read_text()))
    assert stale == []


# -- the runner's environment -------------------------------------------------------------------


@pytest.mark.parametrize(
    "name,passed",
    [
        ("SQUEUE_PARTITION", False),  # squeue would list one partition's jobs
        ("SQUEUE_STATES", False),
        ("SQUEUE_FORMAT", False),
        ("SINFO_PARTITION", False),
        ("SACCT_FEDERATION", False),
        ("SACCTMGR_X", False),
        ("SCONTROL_FEDERATION", False),
        ("SCANCEL_USER", False),  # scancel would cancel only that user's jobs of those named
        ("SPRIO_FORMAT", False),
        ("SSHARE_X", False),
        ("SREPORT_CLUSTER", False),
        ("SLURM_TIME_FORMAT", False),  # times would print as "Tomorr 12:00"
        ("SLURM_CLUSTERS", False),
        ("SLURM_BITSTR_LEN", False),
        ("SLURM_JSON", False),
        ("SBATCH_PARTITION", False),  # a placeholder would be submitted elsewhere
        ("SALLOC_ACCOUNT", False),
        ("SRUN_CPUS_PER_TASK", False),
        ("SLURM_CONF", True),  # which cluster: kept
        ("SLURM_DEBUG_FLAGS", True),
        ("PATH", True),
        ("SQUEUEX", True),  # not a prefix of Slurm's
    ],
)
def test_slurm_clean(name: str, passed: bool) -> None:
    assert (name in slurm_clean({name: "x"})) == passed


def test_job_defaults_pass_only_where_asked() -> None:
    env = {"SBATCH_ACCOUNT": "proja", "SRUN_X": "1", "SALLOC_Y": "2", "SQUEUE_USERS": "bob"}
    assert slurm_clean(env, keep_job_defaults=True) == {"SBATCH_ACCOUNT": "proja", "SRUN_X": "1", "SALLOC_Y": "2"}


def _seen(runner: SubprocessRunner, stream: bool) -> dict[str, str]:
    """The environment a command run by ``runner`` gets (a Python that prints its own)."""
    argv = [sys.executable, "-c", "import json, os; print(json.dumps(dict(os.environ)))"]
    if stream:
        with runner.stream(argv) as out:
            return json.loads(out.read())
    return json.loads(runner.run(argv).stdout)


@pytest.mark.parametrize("stream", [False, True])
def test_a_slurm_filter_in_the_service_environment_does_not_reach_the_command(
    monkeypatch: pytest.MonkeyPatch, stream: bool
) -> None:
    monkeypatch.setenv("SQUEUE_PARTITION", "gpu")
    monkeypatch.setenv("SACCT_FEDERATION", "1")
    monkeypatch.setenv("SLURM_TIME_FORMAT", "relative")
    monkeypatch.setenv("SBATCH_PARTITION", "debug")
    monkeypatch.setenv("SLURM_CONF", "/etc/slurm/pool.conf")
    env = _seen(SubprocessRunner(), stream)
    assert not {"SQUEUE_PARTITION", "SACCT_FEDERATION", "SLURM_TIME_FORMAT", "SBATCH_PARTITION"} & set(env)
    assert env["SLURM_CONF"] == "/etc/slurm/pool.conf" and env["PATH"] == os.environ["PATH"]
    # What the caller sets itself stays; a user's own submission keeps its sbatch defaults.
    assert _seen(SubprocessRunner(env={"SLURM_TIME_FORMAT": "standard"}), stream)["SLURM_TIME_FORMAT"] == "standard"
    kept = _seen(SubprocessRunner(keep_job_defaults=True), stream)
    assert kept["SBATCH_PARTITION"] == "debug" and "SQUEUE_PARTITION" not in kept


# -- the calls ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "call,argv",
    [
        (
            lambda s: s.accounting("now-7days", "now", all_users=True),
            ("sacct", "--json", "--allusers", "--starttime", "now-7days", "--endtime", "now"),
        ),
        (
            lambda s: s.accounting("2026-01-01T00:00:00", all_users=True, allocations=True, duplicates=True),
            ("sacct", "--json", "--allusers", "--allocations", "--duplicates", "--starttime", "2026-01-01T00:00:00"),
        ),
        (lambda s: s.job_runs("4_2"), ("sacct", "--json", "--jobs", "4_2")),
        (lambda s: s.job_runs("5", every_run=True), ("sacct", "--json", "--duplicates", "--jobs", "5")),
        (lambda s: s.queue_objects(), ("squeue", "--json")),
        (lambda s: s.job_state(7), ("squeue", "-h", "-j", "7", "-o", "%T|%r")),
        (lambda s: s.jobs_on_node("a-gpu1"), ("squeue", "-h", "-w", "a-gpu1", "-o", "%i %T")),
        (lambda s: s.command_version(), ("scontrol", "--version")),
        (lambda s: s.update_job(5, qos="g", partition="f"), ("scontrol", "update", "JobId=5", "Partition=f", "QOS=g")),
        (lambda s: s.update_job("6", comment="c=1"), ("scontrol", "update", "JobId=6", "Comment=c=1")),
        (lambda s: s.update_job(7, admin_comment=""), ("scontrol", "update", "JobId=7", "AdminComment=")),
        (
            lambda s: s.update_node("n1", "DRAIN", "slurm-pool: bad"),
            ("scontrol", "update", "NodeName=n1", "State=DRAIN", "Reason=slurm-pool: bad"),
        ),
        (lambda s: s.update_node("n1", "UNDRAIN"), ("scontrol", "update", "NodeName=n1", "State=UNDRAIN")),
        (lambda s: s.requeue(8), ("scontrol", "requeue", "8")),
        (lambda s: s.cancel([9, "10_1"]), ("scancel", "9", "10_1")),
        (lambda s: s.reconfigure(), ("scontrol", "reconfigure")),
    ],
)
def test_each_call_is_one_command_line(call, argv: tuple[str, ...]) -> None:
    r = RecordingRunner()
    r.on(["sacct"], '{"jobs": []}')
    r.on(["squeue", "--json"], '{"jobs": []}')
    call(SlurmCalls(r))
    assert r.calls == [argv]


def test_programs_live_beside_the_configured_scontrol() -> None:
    r = RecordingRunner()
    slurm = SlurmCalls(r, "/opt/slurm/bin/scontrol")
    slurm.cancel([1])
    slurm.requeue(1)
    slurm.cancel([])  # nothing to cancel: no command
    assert r.calls == [("/opt/slurm/bin/scancel", "1"), ("/opt/slurm/bin/scontrol", "requeue", "1")]


NOTHING = json.dumps({"jobs": [], "errors": [{"error": "Nothing found", "error_number": 9003}]})
OTHER = json.dumps({"jobs": [], "errors": [{"error": "Unable to connect to database"}]})


@pytest.mark.parametrize(
    "stdout,want",
    [
        ('{"jobs": []}', []),  # 23.02 and later
        (NOTHING, []),  # 22.05: the same empty accounting
        (OTHER, quirks.NOTHING_FOUND),  # any other error is one
    ],
)
@pytest.mark.parametrize("read", ["accounting", "job_runs", "stream"])
def test_nothing_found_is_an_empty_accounting_on_every_read(stdout: str, want: object, read: str) -> None:
    r = RecordingRunner()
    r.on(["sacct"], stdout)
    slurm = SlurmCalls(r)

    def go() -> list:
        if read == "accounting":
            return slurm.accounting("now-1days", "now", all_users=True)
        if read == "job_runs":
            return slurm.job_runs("5", every_run=True)
        with slurm.accounting_stream("now-1days", "now", all_users=True, allocations=True) as jobs:
            return list(jobs)

    if want is quirks.NOTHING_FOUND:
        with pytest.raises(ValueError, match="Unable to connect"):
            go()
    else:
        assert go() == want


def test_the_quirk_is_data_with_its_source() -> None:
    for q in quirks.QUIRKS:
        assert q.text and q.source and q.before > (22, 5, 99)
    assert quirks.says("sacct --json: Slurm reported errors: Nothing found", quirks.NOTHING_FOUND)
    assert not quirks.says("sacct --json: Slurm reported errors: Nothing found yet", quirks.NOTHING_FOUND)


@pytest.mark.parametrize(
    "job,options",
    [
        (BatchJob(), ["--parsable"]),
        (BatchJob(options=("-p", "shared", "--gres=gpu:1")), ["--parsable", "-p", "shared", "--gres=gpu:1"]),
        (
            BatchJob(name="elastic-42-ext", after=42, requeue=True, signal="B:TERM@30", options=("-t", "5")),
            [
                "--parsable",
                "--job-name=elastic-42-ext",
                "--dependency=after:42",
                "--requeue",
                "--signal=B:TERM@30",
                "-t",
                "5",
            ],
        ),  # fmt: skip
        (
            BatchJob(submit_as="pool", partition="lend", nodes=1, exclusive=True, mem_mb=0, chdir="/", requeue=False),
            [
                "--parsable",
                "--uid=pool",
                "--partition=lend",
                "--nodes=1",
                "--exclusive",
                "--mem=0",
                "--chdir=/",
                "--no-requeue",
            ],
        ),  # fmt: skip
    ],
)
def test_batch_options(job: BatchJob, options: list[str]) -> None:
    assert batch_argv(job) == ["sbatch", *options]


@pytest.mark.parametrize(
    "stdout,rc,want",
    [
        ("42\n", 0, 42),
        ("43;cluster\n", 0, 43),
        ("", 0, "CommandError"),  # it ran, but said no job id
        ("0\n", 0, "CommandError"),
        ("", 1, "CommandError"),  # refused
    ],
)
def test_submit(stdout: str, rc: int, want: object) -> None:
    from slurm_pool.adapters.runner import CommandError

    r = RecordingRunner()
    r.respond(["sbatch"], lambda argv, _in: Result(argv, rc, stdout, "sbatch: error: no" if rc else ""))
    slurm = SlurmCalls(r)
    if want == "CommandError":
        with pytest.raises(CommandError):
            slurm.submit(BatchJob(name="x"), "#!/bin/sh\n")
    else:
        assert slurm.submit(BatchJob(name="x"), "#!/bin/sh\n") == want
    assert r.calls == [("sbatch", "--parsable", "--job-name=x")] and r.inputs == ["#!/bin/sh\n"]


@pytest.mark.parametrize(
    "stdout,jobs",
    [
        ("12 CONFIGURING\n13 RUNNING\n", [("12", "CONFIGURING"), ("13", "RUNNING")]),
        ("\n  \n", []),
        ("14\n", [("14", "")]),  # no state printed: the job, without one
    ],
)
def test_jobs_on_node(stdout: str, jobs: list[tuple[str, str]]) -> None:
    r = RecordingRunner()
    r.on(["squeue"], stdout)
    assert SlurmCalls(r).jobs_on_node("a-gpu1") == jobs
