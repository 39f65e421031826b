"""Issue 33, check 2: ``mig apply --config-managed`` writes nothing; config management applies its change.

On the session cluster, over the real sshd of the ssh path (see
``test_mig_ssh_e2e``): the first run leaves every file under the cluster's
``etc/`` as it was (bytes and modification times), drains nothing and prints
the change as unified diffs.  The test then applies those diffs with
``patch``, as a site's config management would, and runs the command again:
it drains, repartitions, makes Slurm read the files (reconfigure on 26.05,
restarts on 22.05), checks the new GRES registered and resumes, still writing
no file.  A third run has nothing to do.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.integration.test_mig_ssh_e2e import NODE, _apply_argv, _env, _layouts, _plan, restore, sshd  # noqa: F401

pytestmark = pytest.mark.slurm


def _snapshot(etc: Path) -> dict[str, tuple[bytes, int]]:
    """Every file under ``etc``: its bytes and its modification time (ns)."""
    return {
        str(p.relative_to(etc)): (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(etc.rglob("*")) if p.is_file()
    }


def _diffs(out: str) -> list[tuple[str, str]]:
    """(path, unified diff) of each file in the printed change."""
    text = out.split("one unified diff per file", 1)[1].split("\n", 1)[1]
    chunks = ["--- " + c for c in text.split("\n--- ") if c.strip()]
    chunks[0] = chunks[0].removeprefix("--- ")
    return [(c.split("\n", 1)[0].split(":", 1)[1], c.rstrip("\n") + "\n") for c in chunks]


def _run(cluster, argv: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, env=_env(cluster), timeout=600)


def test_config_managed_apply_prints_the_change_then_drives_it(cluster, sshd, tmp_path, restore):  # noqa: F811
    tmp_path.chmod(0o777)
    for parent in list(tmp_path.parents)[:3]:
        parent.chmod(parent.stat().st_mode | 0o011)
    etc = cluster.cluster.layout.etc
    plan = _plan(cluster, tmp_path)
    argv = [*_apply_argv(cluster, sshd, plan), "--config-managed"]
    before, layouts, gres = _snapshot(etc), _layouts(cluster), cluster.slurm.node(NODE).gres

    first = _run(cluster, argv)
    assert first.returncode == 3, first.stdout + first.stderr
    assert f"{NODE}: waiting for config management" in first.stdout, first.stdout
    assert _snapshot(etc) == before  # no file changed, not even touched
    node = cluster.slurm.node(NODE)
    assert not node.drained and node.gres == gres and _layouts(cluster) == layouts, node
    diffs = _diffs(first.stdout)
    assert sorted(p for p, _ in diffs) == sorted([str(etc / "gres.conf"), str(etc / "slurm.conf")]), diffs
    assert all("\n+NodeName=c-gpu1 " in d for _, d in diffs), diffs

    for path, diff in diffs:  # config management: the printed change, applied to the site's files
        done = subprocess.run(
            ["patch", "--no-backup-if-mismatch", "-u", path], input=diff, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stdout + done.stderr
    managed = _snapshot(etc)

    second = _run(cluster, argv)
    assert second.returncode == 0, second.stdout + second.stderr
    assert f"{NODE}: applied" in second.stdout and "check gres.conf and slurm.conf carry" in second.stdout
    assert _snapshot(etc) == managed  # driven without writing a file
    node = cluster.slurm.node(NODE)
    assert not node.drained, node
    small = [p for p in node.gres.split(",") if "1g.5gb" in p]
    assert small and int(small[0].split(":")[2].split("(")[0]) >= 7, node.gres
    assert _layouts(cluster) != layouts

    third = _run(cluster, argv)
    assert third.returncode == 0, third.stdout + third.stderr
    assert f"{NODE}: nothing to do" in third.stdout, third.stdout
