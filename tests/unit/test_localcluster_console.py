"""The local cluster's console parts: its JWT key, the users' passwords, the service's command line."""

from __future__ import annotations

import json
import os
import pwd
import stat
from pathlib import Path

import pytest

from slurm_pool.adapters.runner import RecordingRunner
from slurm_pool.localcluster import console
from slurm_pool.localcluster.cluster import LocalCluster
from slurm_pool.spec.load import parse_spec

REPO = Path(__file__).resolve().parents[2]
ME = pwd.getpwuid(os.geteuid()).pw_name


def test_the_jwt_key_is_made_once_private_and_random(tmp_path):
    path = tmp_path / "etc" / "jwt_hs256.key"
    console.ensure_jwt_key(path, ME)
    first = path.read_bytes()
    assert len(first) >= 32 and path.stat().st_mode & 0o777 == 0o600 and path.stat().st_uid == os.geteuid()
    console.ensure_jwt_key(path, ME)
    assert path.read_bytes() == first
    other = tmp_path / "other.key"
    console.ensure_jwt_key(other, ME)
    assert other.read_bytes() != first


@pytest.mark.parametrize("kind", ["symlink", "directory"])
def test_a_key_path_that_is_not_a_regular_file_is_refused(tmp_path, kind):
    path = tmp_path / "jwt_hs256.key"
    if kind == "symlink":
        path.symlink_to(tmp_path / "elsewhere")
    else:
        path.mkdir()
    with pytest.raises(console.ConsoleError, match="not a regular file"):
        console.ensure_jwt_key(path, ME)
    assert not (tmp_path / "elsewhere").exists()


def test_passwords_go_to_chpasswd_on_stdin_and_to_a_private_file(tmp_path):
    runner = RecordingRunner()
    got = console.set_passwords(["bob", "alice", "alice"], tmp_path, runner)
    assert sorted(got) == ["alice", "bob"] and all(len(p) >= 16 and p.isalnum() for p in got.values())
    assert runner.calls == [("chpasswd",)]  # nothing secret on the command line
    assert runner.inputs == [f"alice:{got['alice']}\nbob:{got['bob']}\n"]
    f = tmp_path / "console" / "passwords.json"
    assert json.loads(f.read_text()) == got
    assert f.stat().st_mode & 0o777 == 0o600 and f.parent.stat().st_mode & 0o777 == 0o700


def test_a_second_call_keeps_the_passwords(tmp_path):
    first = console.set_passwords(["alice"], tmp_path, RecordingRunner())
    runner = RecordingRunner()
    again = console.set_passwords(["alice", "carol"], tmp_path, runner)
    assert again["alice"] == first["alice"] and again["carol"] != first["alice"]
    assert runner.inputs == [f"alice:{first['alice']}\ncarol:{again['carol']}\n"]
    assert json.loads((tmp_path / "console" / "passwords.json").read_text()) == again


@pytest.mark.parametrize("bad", ["Alice", "a:b", "a\nroot", "", "-x", "a b"], ids=ascii)
def test_a_bad_user_name_is_refused_before_anything_runs(tmp_path, bad):
    runner = RecordingRunner()
    with pytest.raises(ValueError, match="console user"):
        console.set_passwords(["alice", bad], tmp_path, runner)
    assert runner.calls == []


def test_a_failed_chpasswd_is_a_clear_error_without_the_password(tmp_path):
    runner = RecordingRunner()
    runner.fail(["chpasswd"], stderr="chpasswd: (user alice) pam_chauthtok() failed")
    with pytest.raises(console.ConsoleError, match="chpasswd failed") as exc:
        console.set_passwords(["alice"], tmp_path, runner)
    assert runner.inputs[0] is not None
    assert runner.inputs[0].split(":")[1].strip() not in str(exc.value)


@pytest.fixture
def local(tmp_path):
    return LocalCluster(REPO / "examples" / "pool.yaml", state_dir=tmp_path / "st", port_base=20000)


def test_the_cluster_names_its_key_and_console_port(local):
    assert local.jwt_key_path == local.layout.root / "etc" / "jwt_hs256.key"
    assert local.site().jwt_key == str(local.jwt_key_path)
    offsets = {what: local.layout.port(what) - 20000 for what in ("mysql", "proxy_api", "console")}
    assert offsets["console"] < 100 and len(set(offsets.values())) == 3
    assert console.console_url(local) == f"http://127.0.0.1:{local.layout.port('console')}/"


def test_the_service_reads_the_cluster_spec_with_its_key(local):
    spec = parse_spec(console.service_spec(local))
    assert spec.console is not None and spec.console.jwt_key == str(local.jwt_key_path)
    assert spec.checkpoint.base_dir == str(local.layout.root / "checkpoints")
    assert spec.model_copy(update={"console": None}) == local.spec
    argv = console.serve_argv(local, Path("/s/pool.json"))
    assert argv[argv.index("serve") :] == [
        "serve",
        "--spec",
        "/s/pool.json",
        "--listen",
        f"127.0.0.1:{local.layout.port('console')}",
        "--state-dir",
        str(local.layout.root / "node-state"),
        "--key",
        str(local.jwt_key_path),
    ]


def test_console_users_are_every_project_user(local):
    assert console.console_users(local) == sorted({u for p in local.spec.projects for u in p.users})


@pytest.mark.parametrize("mode", [0o600, 0o644, 0o755])
def test_replace_file_gives_exactly_the_mode_and_never_follows_its_staging_link(tmp_path, mode) -> None:
    from slurm_pool.outfiles import replace_file

    target, victim = tmp_path / "slurm.conf", tmp_path / "victim"
    victim.write_text("keep")
    target.write_text("old")
    (tmp_path / ".slurm.conf.tmp").symlink_to(victim)  # planted where the staging file goes
    old_umask = os.umask(0o077)
    try:
        replace_file(target, "new\n", mode)
    finally:
        os.umask(old_umask)
    assert target.read_text() == "new\n" and stat.S_IMODE(target.stat().st_mode) == mode
    assert victim.read_text() == "keep" and not (tmp_path / ".slurm.conf.tmp").exists()


@pytest.mark.parametrize("before", [None, 0o644, 0o600, "link"])
def test_daemon_logs_are_0640_and_never_followed_through_a_link(tmp_path: Path, before: object) -> None:
    from slurm_pool.localcluster.procs import open_log

    log = tmp_path / "console.out"
    target = tmp_path / "elsewhere"
    if before == "link":
        target.write_text("keep\n")
        log.symlink_to(target)
        with pytest.raises(OSError):
            open_log(log)
        assert target.read_text() == "keep\n"
        return
    if isinstance(before, int):
        log.write_text("old\n")
        log.chmod(before)
    with open_log(log) as out:
        out.write(b"new\n")
    assert stat.S_IMODE(log.stat().st_mode) == 0o640
    assert log.read_text().endswith("new\n")
