"""``slurm-pool elastic`` (issue 14): the batch scripts, torchrun's arguments, and submitting all or nothing."""

from __future__ import annotations

import json
import shlex

import pytest
from click.testing import CliRunner

from slurm_pool.adapters.runner import RecordingRunner, Result
from slurm_pool.cli import cli
from slurm_pool.elastic.plan import (
    ElasticJob,
    core_script,
    extension_sbatch_args,
    extension_script,
    rdzv_port,
    torchrun_argv,
)

JOB = ElasticJob(
    min_nodes=2,
    max_nodes=5,
    command=("train.py", "--steps", "10 000"),
    core_sbatch=("-p", "a-owner"),
    extension_sbatch=("-p", "scavenger"),
    common_sbatch=("--gres=gpu:1",),
    torchrun="/opt/torch/bin/torchrun",
    leave_seconds=30,
    slurm_pool=("/venv/bin/python", "-m", "slurm_pool.cli"),
)


def test_the_core_runs_one_agent_per_node_then_cancels_its_extensions() -> None:
    script = core_script(JOB)
    lines = script.splitlines()
    assert lines[:3] == ["#!/bin/bash", "#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=1"]
    srun = next(line for line in lines if line.startswith("srun "))
    argv = shlex.split(srun)
    assert argv[:3] == ["srun", "--ntasks-per-node=1", "--kill-on-bad-exit=0"]
    assert '--core "$SLURM_JOB_ID"' in srun  # the shell fills in the core's own id
    assert argv[argv.index("--") + 1 :] == ["train.py", "--steps", "10 000"]
    assert 'scancel --name="elastic-$SLURM_JOB_ID-ext"' in script and lines[-1] == "exit $rc"


def test_an_extension_execs_its_agent_so_the_leave_signal_reaches_torchrun() -> None:
    script = extension_script(JOB, 42)
    exec_line = script.splitlines()[-1]
    argv = shlex.split(exec_line)
    assert argv[0] == "exec" and argv[1:4] == ["/venv/bin/python", "-m", "slurm_pool.cli"]
    assert argv[argv.index("--core") + 1] == "42" and argv[argv.index("--max") + 1] == "5"
    args = extension_sbatch_args(JOB, 42)
    assert "--dependency=after:42" in args and "--requeue" in args and "--signal=B:TERM@30" in args
    assert "--job-name=elastic-42-ext" in args
    assert args[-3:] == ["--gres=gpu:1", "-p", "scavenger"]


@pytest.mark.parametrize("is_host", [True, False])
def test_torchrun_joins_the_cores_c10d_rendezvous(is_host: bool) -> None:
    argv = torchrun_argv(JOB, 42, "10.0.0.5", is_host)
    assert argv[0] == "/opt/torch/bin/torchrun"
    assert "--nnodes=2:5" in argv and "--rdzv-backend=c10d" in argv and "--rdzv-id=elastic-42" in argv
    assert f"--rdzv-endpoint=10.0.0.5:{rdzv_port(42)}" in argv
    assert f"--rdzv-conf=is_host={'true' if is_host else 'false'},last_call_timeout=3" in argv
    assert "--max-restarts=100" in argv and argv[-3:] == ["train.py", "--steps", "10 000"]


def test_rendezvous_ports_differ_between_jobs_and_stay_unprivileged() -> None:
    ports = {rdzv_port(j) for j in range(1, 2000)}
    assert len(ports) == 1999 and min(ports) > 1024 and max(ports) < 65536


def _submit(*args: str):
    return CliRunner().invoke(cli, ["elastic", "submit", *args])


@pytest.mark.parametrize(
    "args,words",
    [
        (["--min", "3", "--max", "2", "--", "t.py"], "Invalid value for --max: 2 is less than --min 3"),
        (["--min", "0", "--max", "2", "--", "t.py"], "'--min'"),
        (["--min", "1", "--max", "2"], "Missing argument 'COMMAND"),
        (["--min", "1", "--max", "2", "--core", "-p 'unclosed", "--", "t.py"], "--core"),
    ],
)
def test_bad_input_exits_2_naming_the_option(args, words) -> None:
    res = _submit(*args)
    assert res.exit_code == 2 and words in res.output, res.output
    assert "Traceback" not in res.output


def test_dry_run_prints_both_scripts_and_submits_nothing(monkeypatch) -> None:
    rec = RecordingRunner()
    monkeypatch.setattr("slurm_pool.adapters.runner.SubprocessRunner", lambda **kw: rec)
    res = _submit("--min", "1", "--max", "3", "--dry-run", "--", "t.py")
    assert res.exit_code == 0, res.output
    assert "# core: sbatch --parsable" in res.output and "# 2 x extension: sbatch" in res.output
    assert rec.calls == []


def test_submit_prints_the_ids(monkeypatch) -> None:
    rec = RecordingRunner()
    ids = iter(["7\n", "8\n", "9\n"])
    rec.respond(["sbatch"], lambda argv, _in: Result(argv, 0, next(ids), ""))
    monkeypatch.setattr("slurm_pool.adapters.runner.SubprocessRunner", lambda **kw: rec)
    res = _submit("--min", "1", "--max", "3", "--core", "-p a-owner", "--", "t.py")
    assert res.exit_code == 0, res.output
    assert json.loads(res.output) == {"core": 7, "extensions": [8, 9], "extension_name": "elastic-7-ext"}
    sbatches = [c for c in rec.calls if c[0] == "sbatch"]
    assert "-p" in sbatches[0] and "--dependency=after:7" in sbatches[1] and "--dependency=after:7" in sbatches[2]


def test_a_failed_extension_submit_cancels_everything_submitted(monkeypatch) -> None:
    rec = RecordingRunner()
    replies = iter([(0, "7\n", ""), (0, "8\n", ""), (1, "", "sbatch: error: QOSMaxSubmitJobPerUserLimit")])
    rec.respond(["sbatch"], lambda argv, _in: Result(argv, *next(replies)))
    monkeypatch.setattr("slurm_pool.adapters.runner.SubprocessRunner", lambda **kw: rec)
    res = _submit("--min", "1", "--max", "3", "--", "t.py")
    assert res.exit_code == 1 and "QOSMaxSubmitJobPerUserLimit" in res.output, res.output
    assert "cancelled job 7 and its extensions" in res.output
    assert list(rec.calls[-1]) == ["scancel", "7", "8"]


# -- the job's words reach the job unchanged (issue 49) ------------------------------------------------

#: Words a shell would change if the script let it: only the tool's own --core "$SLURM_JOB_ID" is expanded.
WORDS = [
    ("the job id variable", ["--tag", "$SLURM_JOB_ID"]),
    ("the job id in braces", ["${SLURM_JOB_ID}", "run-$SLURM_JOB_ID"]),
    ("command substitution", ["$(touch pwned)", "`touch pwned`"]),
    ("quotes and backslashes", ["it's", 'say "hi"', "a\\b", "\\"]),
    ("globs and tilde", ["*", "~", "?", "[a]"]),
    ("a newline and an #SBATCH line", ["x\n#SBATCH --uid=0", "\n"]),
    ("separators", [";", "&&", "|", ">out", "--", "-"]),
    ("history and percent", ["!!", "%j", "$HOME", "$"]),
]

_ECHO = "import json, sys; print(json.dumps(sys.argv[1:]))"


def _run_script(script: str, tmp_path) -> list[str]:
    """Run a generated batch script in bash with srun and scancel faked; the node command prints its argv."""
    import subprocess

    prelude = 'srun() { shift 2; "$@"; }\nscancel() { :; }\n'
    res = subprocess.run(
        ["bash", "-c", prelude + script],
        env={"PATH": "/usr/bin:/bin", "SLURM_JOB_ID": "77", "HOME": str(tmp_path)},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout.splitlines()[0])


@pytest.mark.parametrize("words", [w for _, w in WORDS], ids=[i for i, _ in WORDS])
@pytest.mark.parametrize("which", ["core", "extension"])
def test_the_jobs_words_reach_the_job_unchanged(tmp_path, words: list[str], which: str) -> None:
    import sys

    job = ElasticJob(
        min_nodes=1,
        max_nodes=2,
        command=("train.py", *words),
        torchrun="$SLURM_JOB_ID/torchrun",  # a user's word too
        slurm_pool=(sys.executable, "-c", _ECHO),
    )
    script = core_script(job) if which == "core" else extension_script(job, 42)
    argv = _run_script(script, tmp_path)
    assert argv[argv.index("--") + 1 :] == ["train.py", *words]
    assert argv[argv.index("--torchrun") + 1] == "$SLURM_JOB_ID/torchrun"
    assert argv[argv.index("--core") + 1] == ("77" if which == "core" else "42")  # the tool's own word
    assert not (tmp_path / "pwned").exists()


def test_submit_passes_the_words_to_sbatch_unchanged(monkeypatch) -> None:
    runner = RecordingRunner()
    runner.on(["sbatch"], "101\n")
    monkeypatch.setattr("slurm_pool.adapters.runner.SubprocessRunner", lambda *a, **kw: runner)
    res = _submit("--min", "1", "--max", "1", "--", "train.py", "--tag", "$SLURM_JOB_ID")
    assert res.exit_code == 0, res.output
    (script,) = [i for i in runner.inputs if i]
    srun = next(line for line in script.splitlines() if line.startswith("srun "))
    assert shlex.split(srun)[-2:] == ["--tag", "$SLURM_JOB_ID"]
    assert srun.endswith("-- train.py --tag '$SLURM_JOB_ID'")
