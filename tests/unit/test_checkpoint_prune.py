"""``slurm-pool checkpoints prune``: the rule, the safe walk, and the command with a fake squeue."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurm_pool.adapters.runner import RecordingRunner
from slurm_pool.cli import cli
from slurm_pool.node import prune

DAY = 86400.0
NOW = 1_800_000_000.0


@pytest.mark.parametrize(
    "job,queued,age_days,keep,remove,why",
    [
        ("10", {"10"}, 30, 7, False, "job still in the queue"),
        ("11", set(), 30, 7, True, "job gone, last written 30.0 days ago"),
        ("12", set(), 2, 7, False, "last written 2.0 days ago (keep 7)"),
        ("13", set(), 0, 0, True, "job gone, last written 0.0 days ago"),
        ("14", {"99"}, 8, 7.5, True, "job gone, last written 8.0 days ago"),
    ],
)
def test_plan(job, queued, age_days, keep, remove, why):
    (d,) = prune.plan([prune.Entry("alice", job, NOW - age_days * DAY)], queued, NOW, keep)
    assert (d.remove, d.why) == (remove, why)


def _old(path: Path, days: float) -> None:
    t = time.time() - days * DAY
    for p in [*path.rglob("*"), path]:
        os.utime(p, (t, t), follow_symlinks=False)


@pytest.fixture
def base(tmp_path):
    b = tmp_path / "ckpt"
    (b / "alice" / "101" / "ckpt-000000000100").mkdir(parents=True)
    (b / "alice" / "101" / "ckpt-000000000100" / "MANIFEST.json").write_text("{}")
    (b / "alice" / "102").mkdir()
    (b / "bob" / "103").mkdir(parents=True)
    (b / "bob" / "notes").mkdir()  # not a job id: never touched
    outside = tmp_path / "precious"
    outside.mkdir()
    (outside / "data").write_text("keep me")
    (b / "bob" / "104").symlink_to(outside)  # a job dir that is a link: skipped
    (b / "bob" / "103" / "escape").symlink_to(outside)  # a link inside: removed as a link only
    for d in (b / "alice" / "101", b / "alice" / "102", b / "bob" / "103", b / "bob" / "notes"):
        _old(d, 30)
    return b


def test_scan_dates_each_job_dir_by_its_newest_entry(base):
    (base / "alice" / "102" / "fresh").write_text("x")  # written just now
    got = {e.rel: (time.time() - e.newest) / DAY for e in prune.scan(str(base))}
    assert set(got) == {"alice/101", "alice/102", "bob/103"}
    assert got["alice/101"] > 29 and got["bob/103"] > 29 and got["alice/102"] < 1


def test_remove_never_follows_links(base, tmp_path):
    (entry,) = [e for e in prune.scan(str(base)) if e.rel == "bob/103"]
    prune.remove(str(base), entry)
    assert not (base / "bob" / "103").exists()
    assert (tmp_path / "precious" / "data").read_text() == "keep me"
    assert (base / "bob" / "104").is_symlink() and (base / "bob" / "notes").is_dir()


def test_scan_of_a_missing_base_is_empty(tmp_path):
    assert prune.scan(str(tmp_path / "nope")) == []


def _squeue(tmp_path: Path, jobs: list[dict] | None) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "squeue"
    if jobs is None:
        fake.write_text("#!/bin/sh\necho 'squeue: error: Unable to contact slurm controller' >&2\nexit 1\n")
    else:
        fake.write_text(f"#!/bin/sh\ncat <<'EOF'\n{json.dumps({'jobs': jobs})}\nEOF\n")
    fake.chmod(0o755)
    env = dict(os.environ)
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
    return env


def _cli(env, *args):
    return subprocess.run(
        [sys.executable, "-m", "slurm_pool", "checkpoints", "prune", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_command_removes_only_gone_and_old_jobs(base, tmp_path):
    env = _squeue(tmp_path, [{"job_id": 102, "name": "x", "job_state": "PENDING", "array_job_id": 0}])
    dry = _cli(env, "--base", str(base), "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert f"remove {base}/alice/101: job gone" in dry.stdout
    assert f"keep   {base}/alice/102: job still in the queue" in dry.stdout
    assert (base / "alice" / "101").is_dir()  # a dry run changes nothing
    res = _cli(env, "--base", str(base))
    assert res.returncode == 0, res.stderr
    assert not (base / "alice" / "101").exists() and not (base / "bob" / "103").exists()
    assert (base / "alice" / "102").is_dir()
    assert res.stdout.strip().endswith("2 removed, 1 kept, 0 failed")
    again = _cli(env, "--base", str(base))  # idempotent
    assert again.stdout.strip().endswith("0 removed, 1 kept, 0 failed")


def test_array_tasks_keep_their_parents_directory(base, tmp_path):
    env = _squeue(tmp_path, [{"job_id": 200, "name": "x", "job_state": "PENDING", "array_job_id": 101}])
    res = _cli(env, "--base", str(base))
    assert (base / "alice" / "101").is_dir(), res.stdout


def test_no_queue_no_removal(base, tmp_path):
    res = _cli(_squeue(tmp_path, None), "--base", str(base))
    assert res.returncode == 1
    assert "cannot read the queue, nothing removed" in res.stderr
    assert (base / "alice" / "101").is_dir() and (base / "bob" / "103").is_dir()


@pytest.mark.parametrize("name", ["²", "١٢", "12²", "0x10", " 12", "12\n", "1" * 21])
def test_a_job_dir_name_that_is_not_ascii_digits_is_skipped_and_the_rest_is_pruned(base, tmp_path, name):
    # Issue 11, defect 1: "²" passes str.isdigit() but not int(); one user's directory stopped prune for all.
    odd = base / "alice" / name
    odd.mkdir()
    _old(odd, 30)
    assert {e.rel for e in prune.scan(str(base))} == {"alice/101", "alice/102", "bob/103"}
    res = _cli(_squeue(tmp_path, []), "--base", str(base))
    assert res.returncode == 0, res.stderr
    assert not (base / "alice" / "101").exists() and odd.is_dir()


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_dating_a_big_tree_leaks_no_descriptor(tmp_path, monkeypatch):
    # Issue 11, defect 1: an early return (MAX_ENTRIES) left the queued directory descriptors open.
    job = tmp_path / "job"
    for i in range(40):
        (job / f"d{i}" / "sub").mkdir(parents=True)
    monkeypatch.setattr(prune, "MAX_ENTRIES", 10)
    before = _open_fds()
    fd = os.open(job, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(20):
            prune._newest(fd)
    finally:
        os.close(fd)
    assert _open_fds() == before


# -- issue 30: an answer that is not the whole queue removes nothing ---------------------------------

_JOB = {"job_id": 102, "name": "x", "job_state": "PENDING"}


def _answer_with(monkeypatch, runner: RecordingRunner) -> None:
    """Every Runner the command makes is ``runner`` (wherever it is imported from)."""
    for where in ("slurm_pool.adapters.runner.SubprocessRunner", "slurm_pool.adapters.slurm.SubprocessRunner"):
        monkeypatch.setattr(where, lambda *a, **kw: runner)


def _answer(doc) -> str:
    return doc if isinstance(doc, str) else json.dumps(doc)


@pytest.mark.parametrize(
    "stdout,rc,said",
    [
        ({"jobs": [], "errors": [{"error": "Unable to contact slurm controller"}]}, 2, "Slurm reported errors"),
        ({"jobs": [_JOB], "errors": [{"description": "partial"}]}, 2, "Slurm reported errors"),
        ({"jobs": ["102"]}, 2, "jobs[0] is str, not an object"),
        ({"jobs": [_JOB, 7]}, 2, "jobs[1] is int, not an object"),
        ({"jobs": [_JOB, None]}, 2, "jobs[1] is NoneType"),
        ({"jobs": {"102": _JOB}}, 2, "no 'jobs' list"),
        ({"jobs": None}, 2, "no 'jobs' list"),
        ({}, 2, "no 'jobs' list"),
        ([_JOB], 2, "not a JSON object"),
        (_JOB, 2, "no 'jobs' list"),
        ({"jobs": [{**_JOB, "job_id": "102x"}]}, 2, "jobs[0].job_id: '102x' is not a job id"),
        ({"jobs": [{**_JOB, "job_id": "١٠٢"}]}, 2, "is not a job id"),
        ({"jobs": [{**_JOB, "job_id": "1_02"}]}, 2, "is not a job id"),
        ({"jobs": [{**_JOB, "job_id": "102\n"}]}, 2, "is not a job id"),
        ({"jobs": [{**_JOB, "job_id": " 102"}]}, 2, "is not a job id"),
        ({"jobs": [{**_JOB, "job_id": True}]}, 2, "jobs[0].job_id: True is not a job id"),
        ({"jobs": [{**_JOB, "job_id": 102.5}]}, 2, "jobs[0].job_id: 102.5 is not a job id"),
        ({"jobs": [{**_JOB, "job_id": -102}]}, 2, "is not a job id"),
        ({"jobs": [{**_JOB, "job_id": 10**21}]}, 2, "is not a job id"),
        ({"jobs": [{**_JOB, "job_id": 0}]}, 2, "0 is not a job id"),
        ({"jobs": [{"name": "no id", "job_state": "PENDING"}]}, 2, "jobs[0].job_id: None is not a job id"),
        ({"jobs": [{**_JOB, "job_id": {"set": True, "number": "x"}}]}, 2, "is not a job id"),
        ({"jobs": [{**_JOB, "array_job_id": "101x"}]}, 2, "jobs[0].array_job_id: '101x' is not a job id"),
        ({"jobs": [{**_JOB, "array_job_id": {"set": True, "infinite": True}}]}, 2, "array_job_id"),
        ({"jobs": [{**_JOB, "het_job_id": False}]}, 2, "jobs[0].het_job_id: False is not a job id"),
        ('{"jobs": [{"job_id": NaN}]}', 2, "not JSON"),
        ("", 2, "squeue --json"),
        ("   \n", 2, "squeue --json"),
        ("null", 2, "squeue --json"),
        ("squeue: error: Invalid user", 2, "not JSON"),
    ],
)
def test_an_answer_that_is_not_the_whole_queue_removes_nothing(base, monkeypatch, stdout, rc, said):
    # Issue 30, defect 1: Slurm's errors, non-object entries or odd job ids read as an empty queue,
    # and root removed the directory of a job still queued (102) -- and of every other gone job.
    runner = RecordingRunner()
    runner.on(["squeue", "--json"], _answer(stdout))
    _answer_with(monkeypatch, runner)
    res = CliRunner().invoke(cli, ["checkpoints", "prune", "--base", str(base)])
    assert res.exit_code == rc, res.output
    assert "error: cannot read the queue, nothing removed: squeue --json" in res.output and said in res.output
    assert "\x1b" not in res.output and "Traceback" not in res.output
    for kept in ("alice/101", "alice/102", "bob/103"):
        assert (base / kept).is_dir(), kept
    assert runner.commands("squeue") == [("squeue", "--json")]


@pytest.mark.parametrize(
    "returncode,stderr",
    [(1, "squeue: error: Unable to contact slurm controller (connect failure)"), (127, "\x1b[2Jno squeue"), (124, "")],
)
def test_a_failed_squeue_removes_nothing_and_exits_1(base, monkeypatch, returncode, stderr):
    runner = RecordingRunner()
    runner.fail(["squeue"], returncode, stderr)
    _answer_with(monkeypatch, runner)
    res = CliRunner().invoke(cli, ["checkpoints", "prune", "--base", str(base)])
    assert res.exit_code == 1, res.output
    assert f"error: cannot read the queue, nothing removed: squeue --json exited {returncode}" in res.output
    assert "\x1b" not in res.output  # squeue's own words are shown, never obeyed by the terminal
    assert all((base / kept).is_dir() for kept in ("alice/101", "alice/102", "bob/103"))


@pytest.mark.parametrize(
    "job",
    [
        {**_JOB, "job_id": 102},
        {**_JOB, "job_id": "102"},
        {**_JOB, "job_id": 200, "array_job_id": 102},
        {**_JOB, "job_id": 200, "array_job_id": {"set": True, "infinite": False, "number": 102}},
        {**_JOB, "job_id": 200, "het_job_id": 102},
        {**_JOB, "job_id": 200, "array_job_id": {"set": False, "infinite": False, "number": 0}, "het_job_id": 102},
    ],
)
def test_every_id_of_a_queued_job_keeps_its_directory(base, monkeypatch, job):
    runner = RecordingRunner()
    runner.on(["squeue", "--json"], json.dumps({"jobs": [job], "errors": [], "warnings": []}))
    _answer_with(monkeypatch, runner)
    res = CliRunner().invoke(cli, ["checkpoints", "prune", "--base", str(base)])
    assert res.exit_code == 0, res.output
    assert (base / "alice" / "102").is_dir() and not (base / "alice" / "101").exists()
