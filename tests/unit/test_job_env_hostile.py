"""``run`` and the prolog under a hostile job environment (class 8 of issue 49's hostile input).

* A checkpoint directory ``slurm-pool run`` cannot use (a file, a symlink loop, a dangling link, a
  path through a file) never stops the job: its command starts, with one warning that it runs
  without checkpoints, and no traceback.
* The prolog trusts ``SLURM_JOB_UID`` and refuses a ``SLURM_JOB_USER`` that is not that uid's name:
  no directory is created or handed over; the job's GPUs are still checked.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Callable

import pytest

from slurm_pool.adapters.runner import RecordingRunner
from slurm_pool.checkpoint.settings import resolve
from slurm_pool.checkpoint.supervisor import Supervisor
from slurm_pool.node import jobdir
from slurm_pool.text import control_chars
from tests.unit.test_node_hooks import UID, Node

ROOT = Path(__file__).resolve().parents[2]


def _file(tmp: Path) -> Path:
    (tmp / "ck").write_text("not a directory\n")
    return tmp / "ck"


def _loop(tmp: Path) -> Path:
    (tmp / "a").symlink_to(tmp / "b")
    (tmp / "b").symlink_to(tmp / "a")
    return tmp / "a"


def _dangling(tmp: Path) -> Path:
    (tmp / "ck").symlink_to(tmp / "nowhere" / "ck")
    return tmp / "ck"


def _under_a_file(tmp: Path) -> Path:
    (tmp / "f").write_text("")
    return tmp / "f" / "ck"


def _loop_above(tmp: Path) -> Path:
    return _loop(tmp) / "42"


UNUSABLE: list[tuple[str, Callable[[Path], Path], str]] = [
    ("a file", _file, "a file, not a directory"),
    ("a symlink loop", _loop, "a symbolic link that cannot be followed: Too many levels of symbolic links"),
    ("a dangling symlink", _dangling, "a symbolic link that cannot be followed: No such file or directory"),
    ("under a file", _under_a_file, "Not a directory"),
    ("under a symlink loop", _loop_above, "Too many levels of symbolic links"),
]


@pytest.mark.parametrize(("make", "why"), [c[1:] for c in UNUSABLE], ids=[c[0] for c in UNUSABLE])
def test_run_starts_the_command_without_checkpoints(tmp_path: Path, make, why: str) -> None:
    ck = make(tmp_path)
    marker = tmp_path / "started"
    lines: list[str] = []
    st = resolve({"SLURM_POOL_NODE_CONF": "/nonexistent"}, checkpoint_dir=str(ck))
    sup = Supervisor(["sh", "-c", f"touch {marker}; exit 3"], st, env={}, runner=RecordingRunner(), log=lines.append)
    assert sup.run() == 3  # the command's own status
    assert marker.exists()
    warned = [line for line in lines if "warning:" in line]
    assert len(warned) == 1 and why in warned[0] and "without checkpoints" in warned[0], lines
    assert "will not resume" in warned[0] and str(ck) in warned[0]
    assert not sup.checkpointing


@pytest.mark.parametrize(("make", "why"), [c[1:] for c in UNUSABLE[:2]], ids=[c[0] for c in UNUSABLE[:2]])
def test_a_signal_without_a_usable_directory_still_reaches_the_command(tmp_path: Path, make, why: str) -> None:
    lines: list[str] = []
    st = resolve({"SLURM_POOL_NODE_CONF": "/nonexistent"}, checkpoint_dir=str(make(tmp_path)))
    sup = Supervisor(["true"], st, env={}, runner=RecordingRunner(), log=lines.append)
    sup.checkpointing = sup.usable_dir()
    forwarded: list[int] = []
    sup.forward = forwarded.append  # type: ignore[method-assign]
    sup.trigger("USR1", st.warn_signal)  # would write request.json into the directory
    assert forwarded == [st.warn_signal]
    assert any("cannot write the request" in line for line in lines), lines


@pytest.mark.parametrize("entry", [["-m", "slurm_pool", "run"], ["-m", "slurm_pool.checkpoint"]])
@pytest.mark.parametrize(("make", "why"), [c[1:] for c in UNUSABLE[:2]], ids=[c[0] for c in UNUSABLE[:2]])
def test_the_commands_start_the_job_and_print_no_traceback(tmp_path: Path, entry, make, why: str) -> None:
    ck = make(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SPANK_"))}
    env["SLURM_POOL_NODE_CONF"] = str(tmp_path / "absent.conf")
    res = subprocess.run(
        [sys.executable, *entry, "--checkpoint-dir", str(ck), "--", "sh", "-c", "echo started"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout == "started\n"
    assert "Traceback" not in res.stderr and "without checkpoints" in res.stderr and why in res.stderr
    assert not control_chars(res.stderr.replace("\n", ""))


# -- the prolog: SLURM_JOB_USER must be SLURM_JOB_UID's name -------------------------------------------


PROLOG = [
    ("name and uid agree", {}, "created"),
    ("bob's name with alice's uid", {"SLURM_JOB_USER": "bob"}, "SLURM_JOB_USER 'bob' is uid 65535, not SLURM_JOB_UID"),
    ("alice's name with bob's uid", {"SLURM_JOB_UID": str(UID + 1)}, "SLURM_JOB_USER 'alice' is uid 65534"),
    ("a name this node does not know", {"SLURM_JOB_USER": "mallory"}, "'mallory' is not a user on this node"),
    ("root's uid", {"SLURM_JOB_UID": "0"}, "not SLURM_JOB_UID 0"),
]


@pytest.mark.parametrize(("env", "said"), [c[1:] for c in PROLOG], ids=[c[0] for c in PROLOG])
def test_the_prolog_trusts_the_uid_and_checks_the_name(tmp_path: Path, env: dict[str, str], said: str) -> None:
    n = Node(tmp_path, "h100x8_healthy.json")
    assert n.hooks(**env).prolog() == 0  # the job runs; only its directory is refused
    user = env.get("SLURM_JOB_USER", "alice")
    made = tmp_path / "ckpt" / user / "42"
    if said == "created":
        assert made.is_dir() and made.stat().st_uid == UID
        return
    assert not (tmp_path / "ckpt" / user).exists()  # nothing created, nothing handed over
    assert any(said in line and "checkpoint dir not prepared" in line for line in n.log.lines), n.log.lines


def test_the_epilog_reads_nothing_for_a_mismatched_user(tmp_path: Path) -> None:
    n = Node(tmp_path, "h100x8_healthy.json")
    assert n.hooks().prolog() == 0  # alice's directory exists, hers
    assert n.hooks(SLURM_JOB_UID=str(UID + 1)).epilog() == 0
    assert any("outcome not recorded" in line and "is uid 65534" in line for line in n.log.lines), n.log.lines


@pytest.mark.parametrize(
    ("users", "env", "ok"),
    [
        ({"alice": 1000}, {"SLURM_JOB_USER": "alice", "SLURM_JOB_UID": "1000"}, True),
        ({"alice": 1000}, {"SLURM_JOB_USER": "alice", "SLURM_JOB_UID": "1001"}, False),
        ({}, {"SLURM_JOB_USER": "alice", "SLURM_JOB_UID": "1000"}, False),
        ({"alice": 0}, {"SLURM_JOB_USER": "alice", "SLURM_JOB_UID": "0"}, True),
    ],
)
def test_job_identity_matches_name_and_uid(users: dict[str, int], env: dict[str, str], ok: bool) -> None:
    env = {"SLURM_JOB_ID": "42", **env}
    if ok:
        assert jobdir.job_identity(env, users.get)[1:3] == (env["SLURM_JOB_USER"], int(env["SLURM_JOB_UID"]))
    else:
        with pytest.raises(jobdir.JobDirError, match="refused"):
            jobdir.job_identity(env, users.get)


def test_the_node_user_database_is_the_default() -> None:
    import pwd

    me = pwd.getpwuid(os.geteuid())
    env = {"SLURM_JOB_ID": "1", "SLURM_JOB_USER": me.pw_name, "SLURM_JOB_UID": str(me.pw_uid)}
    assert jobdir.job_identity(env)[2] == me.pw_uid
    with pytest.raises(jobdir.JobDirError, match="refused"):
        jobdir.job_identity({**env, "SLURM_JOB_UID": str(me.pw_uid + 12345)})


def test_a_symlinked_user_directory_is_not_followed_by_the_prolog(tmp_path: Path) -> None:
    n = Node(tmp_path, "h100x8_healthy.json")
    (tmp_path / "ckpt").mkdir(mode=0o755)
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "ckpt" / "alice").symlink_to(tmp_path / "elsewhere")
    assert n.hooks().prolog() == 0
    assert list((tmp_path / "elsewhere").iterdir()) == []
    assert any("checkpoint dir not prepared" in line for line in n.log.lines), n.log.lines
