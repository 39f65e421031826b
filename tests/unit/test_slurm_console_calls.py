"""The console's Slurm calls (``SlurmClient``'s console block): the command each runs, and what its result
says, Slurm's quirks included (scancel's error with exit 0, 22.05's "Nothing found")."""

from __future__ import annotations

import json
import time
from typing import Any, Callable

import pytest

from slurm_pool.adapters.records import RecordError
from slurm_pool.adapters.runner import CommandError, RecordingRunner
from slurm_pool.adapters.slurm import SlurmClient

NOTHING = json.dumps({"jobs": [], "errors": [{"error": "Nothing found"}]})
SINCE = 1_700_000_000.0
SINCE_TEXT = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(SINCE))


@pytest.mark.parametrize(
    ("call", "argv", "stdin"),
    [
        (lambda s: s.console_action("cancel", "4_[1-3]"), ("scancel", "4_[1-3]"), None),
        (lambda s: s.console_action("hold", "7"), ("scontrol", "hold", "7"), None),
        (lambda s: s.console_action("release", "7+1"), ("scontrol", "release", "7+1"), None),
        (lambda s: s.console_action("requeue", "7_2"), ("scontrol", "requeue", "7_2"), None),
        (lambda s: s.update_job("4_2", qos="shared", partition="shared", check=False),
         ("scontrol", "update", "JobId=4_2", "Partition=shared", "QOS=shared"), None),
        (lambda s: s.update_job("4", qos="shared", check=False), ("scontrol", "update", "JobId=4", "QOS=shared"), None),
        (lambda s: s.submit_batch(["--qos=a"], "#!/bin/sh\n"), ("sbatch", "--parsable", "--qos=a"), "#!/bin/sh\n"),
        (lambda s: s.submit_batch(["--qos=a", "--parsable"], "x"), ("sbatch", "--qos=a", "--parsable"), "x"),
        (lambda s: s.job_runs("5_1", every_run=True), ("sacct", "--json", "--duplicates", "--jobs", "5_1"), None),
        (lambda s: s.runs_since(SINCE), ("sacct", "--json", "--allusers", "--allocations", "--duplicates", "--starttime", SINCE_TEXT, "--endtime", "now"), None),
        (lambda s: s.account_coordinators(),
         ("sacctmgr", "-n", "-P", "show", "account", "withcoord", "format=Coordinators,Account"), None),
    ],
)  # fmt: skip
def test_each_call_runs_its_command(call: Callable[[SlurmClient], Any], argv: tuple[str, ...], stdin: Any) -> None:
    runner = RecordingRunner()
    runner.on(["sacct"], json.dumps({"jobs": []}))
    call(SlurmClient(runner))
    assert runner.calls == [argv] and runner.inputs == [stdin]


@pytest.mark.parametrize(
    ("rc", "stderr", "ok"),
    [
        (0, "", True),
        (0, "scancel: error: Kill job error on job id 2: Access/permission denied", False),  # exit 0, refused
        (1, "scancel: error: Invalid job id specified", False),
    ],
)
def test_a_cancel_that_printed_an_error_failed(rc: int, stderr: str, ok: bool) -> None:
    runner = RecordingRunner()
    runner.on(["scancel"], "", rc, stderr)
    res = SlurmClient(runner).console_action("cancel", "2")
    assert res.ok is ok and res.stderr == stderr


def test_a_hold_that_printed_an_error_with_exit_0_is_what_slurm_said() -> None:
    runner = RecordingRunner()
    runner.on(["scontrol"], "", 0, "error: only scancel is read this way")
    assert SlurmClient(runner).console_action("hold", "2").ok


@pytest.mark.parametrize(
    ("reply", "rc", "raises"),
    [
        (NOTHING, 0, None),  # 22.05: no such job (yet), or a quiet window
        (json.dumps({"jobs": []}), 0, None),
        (json.dumps({"jobs": [], "errors": [{"error": "Invalid user"}]}), 0, RecordError),
        ("", 1, CommandError),
    ],
)
def test_the_accounting_reads(reply: str, rc: int, raises: type[Exception] | None) -> None:
    for call in (lambda s: s.job_runs("9", every_run=True), lambda s: s.runs_since(SINCE)):
        runner = RecordingRunner()
        runner.on(["sacct"], reply, rc)
        if raises is None:
            assert call(SlurmClient(runner)) == []
        else:
            with pytest.raises(raises):
                call(SlurmClient(runner))


@pytest.mark.parametrize(
    ("stdout", "job"),
    [("42\n", 42), ("42;pool\n", 42), ("warning: x\n43\n", 43), ("", None), ("job 42\n", None), ("4x\n", None)],
)
def test_the_submitted_id(stdout: str, job: int | None) -> None:
    assert SlurmClient.submitted_id(stdout) == job


@pytest.mark.parametrize(
    ("options", "name", "value"),
    [
        (["--qos=a", "--account=proja", "--account=b"], "account", "proja"),
        (["--qos=a"], "account", None),
        (["--accounting=x"], "account", None),
    ],
)
def test_submit_option(options: list[str], name: str, value: str | None) -> None:
    assert SlurmClient.submit_option(options, name) == value


def test_coordinators_as_slurm_prints_them() -> None:
    runner = RecordingRunner()
    runner.on(["sacctmgr"], "carol,dave|projb\n|proja\n")
    assert SlurmClient(runner).account_coordinators() == [("projb", "carol,dave"), ("proja", "")]
