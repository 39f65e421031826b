"""The reads and the one write that doctor, diff, guarantees reconcile and spank build ask of the Slurm adapter.

Each call through the recording runner: the command it runs, what it makes of
Slurm's answer, and whether a failure raises or is handed back.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import pytest

from slurm_pool.adapters.runner import CommandError, RecordingRunner
from slurm_pool.adapters.slurm import SlurmClient

CONFIG = (
    "Configuration data as of 2026-01-01T00:00:00\nClusterName             = pool\nSLURM_VERSION           = 22.05.8\n"
)
PARTITIONS = "PartitionName=a Nodes=n1 State=UP\nPartitionName=b Nodes=n2 State=UP\n"

Call = Callable[[SlurmClient], Any]


@pytest.mark.parametrize(
    "call,argv,stdout,want",
    [
        (lambda s: s.config()["ClusterName"], ("scontrol", "show", "config"), CONFIG, "pool"),
        (lambda s: s.partitions_text(), ("scontrol", "show", "partition", "-o"), PARTITIONS, PARTITIONS),
        (lambda s: s.submit_help().stdout, ("sbatch", "--help"), "  --checkpoint\n", "  --checkpoint\n"),
        (
            lambda s: s.update_job(5, partition="floating", qos="guaranteed-projd", admin_comment="", check=False).ok,
            ("scontrol", "update", "JobId=5", "Partition=floating", "QOS=guaranteed-projd", "AdminComment="),
            "",
            True,
        ),
    ],
)
def test_each_call_runs_one_command(call: Call, argv: tuple[str, ...], stdout: str, want: Any) -> None:
    r = RecordingRunner()
    r.on(argv, stdout)
    assert call(SlurmClient(r)) == want
    assert r.calls == [argv]


@pytest.mark.parametrize(
    "call,raises",
    [
        (lambda s: s.config(), True),  # slurmctld cannot be asked: doctor and diff say so
        (lambda s: s.partitions_text(), True),
        (lambda s: s.submit_help().returncode, False),  # a plugin that breaks sbatch is a finding, not a crash
        (
            lambda s: s.update_job("6", partition="floating", qos="q", check=False).returncode,
            False,
        ),  # Slurm's refusal is reported per job
    ],
)
def test_a_failure_raises_or_is_handed_back(call: Call, raises: bool) -> None:
    r = RecordingRunner()
    r.fail(())
    if raises:
        with pytest.raises(CommandError):
            call(SlurmClient(r))
    else:
        assert call(SlurmClient(r)) == 1


@pytest.mark.parametrize("linked", [False, True])
def test_the_install_prefix_is_where_scontrol_really_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, linked: bool
) -> None:
    prefix = tmp_path / "opt" / "slurm"
    (prefix / "bin").mkdir(parents=True)
    scontrol = prefix / "bin" / "scontrol"
    scontrol.write_text("#!/bin/sh\n")
    scontrol.chmod(0o755)
    path = prefix / "bin"
    if linked:  # /usr/local/bin/scontrol -> the install's: the prefix is the install's
        path = tmp_path / "usr" / "local" / "bin"
        path.mkdir(parents=True)
        (path / "scontrol").symlink_to(scontrol)
    monkeypatch.setenv("PATH", str(path))
    assert SlurmClient.install_prefix() == str(prefix.resolve())
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert SlurmClient.install_prefix() is None
