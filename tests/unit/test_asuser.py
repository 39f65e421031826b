"""The root helper ``slurm-pool-as`` and the runner each console action takes as root and not as root."""

from __future__ import annotations

import io
import os
import pwd
from pathlib import Path
from typing import Any, Mapping

import pytest

from slurm_pool.adapters import asuser
from slurm_pool.adapters.runner import RecordingRunner, Result, SubprocessRunner
from slurm_pool.jobid import JobId
from slurm_pool.web import actions

KEY = b"k" * 32
USERS = {"alice": 1001, "root": 0, "daemon": 1, "slurm": 64030, "nobody": 65534, "svc": 999, "big": 70000}


def _pw(name: str) -> pwd.struct_passwd:
    if name not in USERS:
        raise KeyError(name)
    uid = USERS[name]
    return pwd.struct_passwd((name, "x", uid, uid, "", f"/home/{name}", "/bin/sh"))


# -- the helper's checks --------------------------------------------------------------------------------------------
GOOD = [
    (["alice", "sbatch"], ("sbatch",)),
    (["alice", "sbatch", "--parsable", "--qos=guaranteed", "--job-name=a b"], None),
    (["big", "sbatch", "--comment=x=y"], None),
    (["alice", "sbatch", "--gres=gpu:1", "--gpus=1", "--uid-like=1"], None),
    (["nobody", "sbatch", "--parsable"], None),
]


@pytest.mark.parametrize(("args", "argv"), GOOD)
def test_the_helper_takes_an_ordinary_user_and_sbatch_options(args: list[str], argv: tuple[str, ...] | None) -> None:
    req = asuser.parse(args, lookup=_pw, lowest_uid=1000, slurm_uid=64030)
    assert req.user == args[0] and req.uid == USERS[args[0]]
    assert req.argv == (argv or tuple(args[1:]))


BAD = [
    ([], "usage:"),
    (["alice"], "usage:"),
    (["root", "sbatch"], "user: 'root' is root"),
    (["daemon", "sbatch"], "user: 'daemon' has uid 1, a system user's"),
    (["svc", "sbatch"], "user: 'svc' has uid 999"),
    (["slurm", "sbatch"], "user: 'slurm' is SlurmUser"),
    (["nosuch", "sbatch"], "user: 'nosuch' does not exist"),
    (["alice\n", "sbatch"], "user: 'alice\\x0a' is not a user name"),
    (["-u", "sbatch"], "user: '-u' is not a user name"),
    (["../x", "sbatch"], "user: '../x' is not a user name"),
    (["alice", "scancel", "1"], "command: 'scancel' is not one"),
    (["alice", "/usr/bin/sbatch"], "command: '/usr/bin/sbatch' is not one"),
    (["alice", "sh", "-c", "id"], "command: 'sh' is not one"),
    (["alice", "sbatch\x00"], "command: 'sbatch\\x00' is not one"),
    (["alice", "sbatch", "--uid=0"], "option: '--uid=0' is root's own"),
    (["alice", "sbatch", "--uid", "0"], "option: '--uid' is root's own"),
    (["alice", "sbatch", "--gid=0"], "option: '--gid=0' is root's own"),
    (["alice", "sbatch", "--get-user-env"], "option: '--get-user-env' is root's own"),
    (["alice", "sbatch", "--ui=0"], "option: '--ui=0' is root's own"),
    (["alice", "sbatch", "--gi=0"], "option: '--gi=0' is root's own"),
    (["alice", "sbatch", "--get-user=10"], "option: '--get-user=10' is root's own"),
    (["alice", "sbatch", "-Aproj"], "option: '-Aproj' is not --NAME"),
    (["alice", "sbatch", "script.sh"], "option: 'script.sh' is not --NAME"),
    (["alice", "sbatch", "--wrap=id\nid"], "option: '--wrap=id\\x0aid' has a control character"),
    (["alice", "sbatch", "--comment=\x1b[2J"], "has a control character"),
    (["alice", "sbatch", "--comment=" + "x" * 5000], "is longer than 4096"),
    (["alice", "sbatch", *["--hold"] * 300], "options: 300 given"),
]


@pytest.mark.parametrize(("args", "said"), BAD)
def test_the_helper_refuses_naming_the_field(args: list[str], said: str) -> None:
    with pytest.raises(asuser.HelperError) as exc:
        asuser.parse(args, lookup=_pw, lowest_uid=1000, slurm_uid=64030)
    assert said in str(exc.value)
    assert exc.value.exit_code == 2


def _main(args: list[str], *, euid: int = 0, env: Mapping[str, str] | None = None, admin: int | None = 64030,
          stdin: bytes = b"#!/bin/sh\ntrue\n") -> tuple[int, str, str, list[Any]]:  # fmt: skip
    made: list[Any] = []

    def runner_for(user: str, env: Mapping[str, str]) -> RecordingRunner:
        r = RecordingRunner()
        r.on(["sbatch"], "42\n")
        made.append((user, dict(env), r))
        return r

    out, err = io.StringIO(), io.StringIO()
    rc = asuser.main(
        args,
        stdin=io.BytesIO(stdin),
        stdout=out,
        stderr=err,
        environ={"PATH": "/usr/bin:/bin"} if env is None else env,
        euid=lambda: euid,
        runner_for=runner_for,
        lookup=_pw,
        slurm_uid=lambda _r: admin,
    )
    return rc, out.getvalue(), err.getvalue(), made


def test_the_helper_runs_sbatch_as_the_user_with_the_script_on_stdin() -> None:
    rc, out, err, made = _main(["alice", "sbatch", "--parsable", "--qos=guaranteed"])
    assert (rc, out, err) == (0, "42\n", "")
    [(user, env, r)] = made
    assert user == "alice" and env == {"PATH": "/usr/bin:/bin"}
    assert r.calls == [("sbatch", "--parsable", "--qos=guaranteed")] and r.inputs == ["#!/bin/sh\ntrue\n"]


MAIN = [
    # (args, euid, SlurmUser's uid, stdin, exit status, what stderr says)
    (["root", "sbatch"], 0, 64030, b"", 2, "user: 'root' is root"),
    (["alice", "scancel", "1"], 0, 64030, b"", 2, "command: 'scancel'"),
    (["alice", "sbatch", "--uid=root"], 999, 64030, b"", 2, "option: '--uid=root'"),  # bad input first: 2
    (["alice", "sbatch"], 999, 64030, b"", 1, "must run as root"),
    (["alice", "sbatch"], 0, 1001, b"", 2, "user: 'alice' is SlurmUser (uid 1001)"),
    (["alice", "sbatch"], 0, None, b"\xff\xfe", 2, "script: is not UTF-8"),
    (["alice", "sbatch"], 0, None, b"x" * (asuser.MAX_SCRIPT + 1), 2, "script: longer than"),
]


@pytest.mark.parametrize(("args", "euid", "admin", "stdin", "rc", "said"), MAIN)
def test_the_helpers_exit_status(args: list[str], euid: int, admin: int | None, stdin: bytes, rc: int,
                                 said: str) -> None:  # fmt: skip
    got, out, err, made = _main(args, euid=euid, admin=admin, stdin=stdin)
    assert (got, out, made) == (rc, "", [])
    assert said in err and "Traceback" not in err


def test_the_helper_passes_a_safe_slurm_conf_only(tmp_path: Path) -> None:
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=x\n")
    conf.chmod(0o644)
    if os.geteuid() == 0:  # root's file: passed on, nothing else of the environment; group-writable: refused
        given = {"PATH": "/bin", "SLURM_CONF": str(conf), "SLURM_JWT": "t", "LD_PRELOAD": "x"}
        assert asuser.conf_env(given) == {"PATH": "/bin", "SLURM_CONF": str(conf)}
        conf.chmod(0o664)
    with pytest.raises(asuser.HelperError, match="SLURM_CONF: .* only root may write"):
        asuser.conf_env({"SLURM_CONF": str(conf)})
    for bad, said in (("etc/slurm.conf", "not an absolute path"), (str(tmp_path / "none"), "cannot be read"),
                      (str(tmp_path), "not a regular file")):  # fmt: skip
        with pytest.raises(asuser.HelperError, match=f"SLURM_CONF: .*{said}"):
            asuser.conf_env({"SLURM_CONF": bad})


@pytest.mark.parametrize(
    ("text", "uid"),
    [
        ("UID_MIN\t\t 1000\n", 1000),
        ("UID_MIN ²\n", 1000),
        ("# UID_MIN 5\nUID_MIN 500\n", 500),
        ("UID_MAX 60000\n", 1000),
        ("", 1000),
    ],
)
def test_uid_min_from_login_defs(tmp_path: Path, text: str, uid: int) -> None:
    path = tmp_path / "login.defs"
    path.write_text(text)
    assert asuser.min_uid(str(path)) == uid
    assert asuser.min_uid(str(tmp_path / "missing")) == asuser.DEFAULT_MIN_UID


@pytest.mark.parametrize(
    ("value", "uid"), [("slurm(64030)", 64030), ("root(0)", 0), ("slurm", None), ("", None), ("a(b)", None)]
)
def test_slurm_user_id(value: str, uid: int | None) -> None:
    assert asuser.slurm_user_id({"SlurmUser": value}) == uid


def test_the_service_runs_the_helper_through_sudo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The argv the service runs: ``sudo -n -- HELPER USER sbatch ...``; the result names sbatch's argv."""
    helper = tmp_path / "helper"
    helper.write_text('#!/bin/sh\necho "$@"; cat; echo oops >&2; exit 3\n')
    helper.chmod(0o755)
    monkeypatch.setattr(asuser, "SUDO", ())  # the helper itself stands in for sudo and slurm-pool-as
    res = asuser.HelperRunner("alice", str(helper)).run(["sbatch", "--parsable"], check=False, input="#!/bin/sh\n")
    assert res == Result(("sbatch", "--parsable"), 3, "alice sbatch --parsable\n#!/bin/sh\n", "oops\n")


def test_sudo_never_asks_for_a_password() -> None:
    assert asuser.SUDO[:2] == ("sudo", "-n") and asuser.SUDO[-1] == "--"


# -- which runner each action takes -----------------------------------------------------------------------------------
PATHS = [
    # (the service is root, the action, the runner it takes)
    (True, "submit", "as-user"),
    (True, "cancel", "as-user"),
    (True, "hold", "as-user"),
    (True, "release", "as-user"),
    (True, "requeue", "as-user"),
    (True, "tier", "as-user"),
    (False, "submit", "helper"),
    (False, "cancel", "token"),
    (False, "hold", "token"),
    (False, "release", "token"),
    (False, "requeue", "token"),
    (False, "tier", "token"),
]


@pytest.mark.parametrize(("root", "action", "path"), PATHS)
def test_the_runner_an_action_takes(monkeypatch: pytest.MonkeyPatch, root: bool, action: str, path: str) -> None:
    made: list[tuple[str, str, dict[str, str]]] = []

    def recorder(kind: str) -> Any:
        def make(user: str, env: Mapping[str, str], *_rest: Any) -> RecordingRunner:
            made.append((kind, user, dict(env)))
            r = RecordingRunner()
            r.on(["sbatch"], "42\n")
            return r

        return make

    monkeypatch.setattr(actions, "default_runner", recorder("as-user"))
    monkeypatch.setattr(actions, "token_runner", recorder("token"))
    monkeypatch.setattr(actions, "HelperRunner", lambda user, helper, env, _t: recorder("helper")(user, env))
    cmds = actions.UserCommands(KEY, env={"SLURM_CONF": "/etc/slurm/slurm.conf"}, root=root, helper="/x/slurm-pool-as")
    if action == "submit":
        assert actions.submit(cmds, "alice", ["--qos=guaranteed"], "#!/bin/sh\n") == 42
    elif action == "tier":
        actions.move(cmds, "alice", JobId.parse("7"), "scavenger", None)
    else:
        actions.job_action(cmds, "alice", 7, action)
    [(kind, user, env)] = made
    assert (kind, user) == (path, "alice")
    assert ("SLURM_JWT" in env) == (action != "submit")  # a token for all but the submission, as before
    assert env["SLURM_CONF"] == "/etc/slurm/slurm.conf"


def test_the_real_runners(monkeypatch: pytest.MonkeyPatch) -> None:
    """As root the command switches to the user; not root, a token's runs as the service, a submission via sudo."""
    as_user = actions.UserCommands(KEY, root=True).slurm("alice").runner
    assert isinstance(as_user, SubprocessRunner) and as_user.user == "alice"
    token = actions.UserCommands(KEY, root=False).slurm("alice").runner
    assert isinstance(token, SubprocessRunner) and token.user is None and token.env and "SLURM_JWT" in token.env
    helper = actions.UserCommands(KEY, root=False, helper="/x/slurm-pool-as").slurm("alice", token=False).runner
    assert isinstance(helper, asuser.HelperRunner) and (helper.user, helper.helper) == ("alice", "/x/slurm-pool-as")
    assert "SLURM_JWT" not in (helper.env or {})
    assert actions.UserCommands(KEY).root == (os.geteuid() == 0)
    assert actions.UserCommands(KEY).helper == asuser.default_helper()


# -- the key, for a service that is not root ------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("owner", "owners", "ok"),
    [(4242, (), False), (4242, (4242,), True), (4242, (64030,), False), (0, (), True), (0, (64030,), True)],
)
def test_a_key_owned_by_slurm_user_is_taken_when_named(tmp_path: Path, owner: int, owners: tuple[int, ...],
                                                       ok: bool) -> None:  # fmt: skip
    """SlurmUser's key (``chown slurm``, Slurm's own rule in auth_jwt.c) is read by a service that is not root."""
    from slurm_pool.web.identity import KeyFileError, load_key

    if os.geteuid() != 0 and owner != os.geteuid():
        owner = os.geteuid()  # without root no file can be given away: the service's own key stays accepted
        ok = True
    path = tmp_path / "jwt.key"
    path.write_bytes(KEY)
    path.chmod(0o640)
    os.chown(path, owner, -1)
    if ok:
        assert load_key(str(path), owners) == KEY
    else:
        with pytest.raises(KeyFileError, match=f"owned by uid {owner}; it must be owned by root"):
            load_key(str(path), owners)
