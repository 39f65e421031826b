"""``slurm-pool serve`` as its own system user, with the grants docs/security.md lists, for a daemon test.

The service user (``slurm-pool``, created once with ``useradd --system`` as the
local cluster creates its users) reads the JWT key through its group, checks
passwords through PAM with the ``shadow`` group, and submits through sudo and
``slurm-pool-as`` (this checkout's, behind a root-owned wrapper) with a sudoers
drop-in of the test's own name, removed afterwards.
"""

from __future__ import annotations

import grp
import json
import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from slurm_pool.localcluster.console import service_spec
from tests.support.patience import wait_for
from tests.support.slurm_cluster import ClusterHandle

SERVICE_USER = "slurm-pool"
SHADOW = "shadow"
REPO = Path(__file__).resolve().parents[2]
#: CapabilityBoundingSet of docs/systemd/slurm-pool-serve.service, in setpriv's words.
BOUNDING = "+setuid,+setgid,+audit_write"


def ensure_service_user(name: str = SERVICE_USER) -> pwd.struct_passwd:
    """The system user ``name``, created (no home, no shell, a group of its own) when missing."""
    try:
        return pwd.getpwnam(name)
    except KeyError:
        subprocess.run(
            ["useradd", "--system", "--user-group", "--no-create-home", "--home-dir", "/nonexistent",
             "--shell", "/usr/sbin/nologin", name],
            check=True,
        )  # fmt: skip
        return pwd.getpwnam(name)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


@dataclass
class ServedAs:
    url: str
    pid: int
    log: Path


@contextmanager
def serve_as_service_user(handle: ClusterHandle) -> Iterator[ServedAs]:
    """``slurm-pool serve`` for ``handle``'s cluster as :data:`SERVICE_USER` until the block ends."""
    user = ensure_service_user()
    gid = user.pw_gid
    work = Path(tempfile.mkdtemp(prefix="slurm-pool-privilege-", dir="/tmp"))
    work.chmod(0o755)  # root's, nobody else may write: the sudo rule names a file in it
    sudoers = Path(f"/etc/sudoers.d/slurm-pool-test-{os.getpid()}")
    proc: subprocess.Popen[bytes] | None = None
    try:
        key = work / "jwt_hs256.key"
        shutil.copyfile(handle.cluster.jwt_key_path, key)
        os.chown(key, 0, gid)
        key.chmod(0o640)  # the service reads it through its group
        spec = work / "pool.json"
        spec.write_text(json.dumps(service_spec(handle.cluster), indent=2) + "\n")
        spec.chmod(0o644)
        helper = work / "slurm-pool-as"
        entry = f"import sys; sys.path.insert(0, {str(REPO)!r}); from slurm_pool.adapters.asuser import main; sys.exit(main())"
        helper.write_text(f'#!/bin/sh\nexec {sys.executable} -I -c {_sh(entry)} "$@"\n')
        helper.chmod(0o755)
        env = handle.env
        rule = [f'Defaults!{helper} env_keep += "SLURM_CONF"']
        if "PATH" in env:  # a built Slurm's commands first, as root's sudo would find the site's
            rule.append(f'Defaults:{SERVICE_USER} secure_path="{env["PATH"]}"')
        rule.append(f"{SERVICE_USER} ALL=(root) NOPASSWD: {helper}")
        draft = work / "sudoers"
        draft.write_text("\n".join(rule) + "\n")
        subprocess.run(["visudo", "-c", "-q", "-f", str(draft)], check=True)
        draft.chmod(0o440)
        shutil.move(draft, sudoers)
        port = _free_port()
        log = work / "serve.log"
        argv = [sys.executable, "-m", "slurm_pool", "serve", "--spec", str(spec), "--listen", f"127.0.0.1:{port}",
                "--state-dir", "", "--key", str(key), "--helper", str(helper)]  # fmt: skip
        service_env = {"PATH": env.get("PATH", os.environ.get("PATH", os.defpath)), "SLURM_CONF": env["SLURM_CONF"],
                       "PYTHONPATH": str(REPO), "HOME": str(work), "LANG": "C.UTF-8"}  # fmt: skip
        # as the unit runs it: its user, its group and shadow, and the unit's capability bounding set
        setpriv = ["setpriv", f"--reuid={user.pw_uid}", f"--regid={gid}",
                   f"--groups={gid},{grp.getgrnam(SHADOW).gr_gid}", f"--bounding-set=-all,{BOUNDING}",
                   "--inh-caps=-all", "--"]  # fmt: skip
        with open(log, "wb") as out:
            proc = subprocess.Popen(setpriv + argv, cwd=work, env=service_env, stdout=out, stderr=subprocess.STDOUT)
        wait_for(lambda: _listening(port) or proc.poll() is not None, 60, "the console to listen")
        assert proc.poll() is None, f"slurm-pool serve stopped:\n{log.read_text(errors='replace')}"
        yield ServedAs(f"http://127.0.0.1:{port}", proc.pid, log)
    finally:
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        sudoers.unlink(missing_ok=True)
        shutil.rmtree(work, ignore_errors=True)


def _sh(word: str) -> str:
    """``word`` quoted for sh."""
    import shlex

    return shlex.quote(word)


@contextmanager
def exporter_as_nobody(handle: ClusterHandle) -> Iterator[ServedAs]:
    """``slurm-pool exporter`` for ``handle``'s cluster as its unit's ``DynamicUser`` would run it: a uid with no
    groups of note (``nobody``), no capabilities, ``NoNewPrivileges``."""
    nobody = pwd.getpwnam("nobody")
    port = _free_port()
    env = handle.env
    service_env = {"PATH": env.get("PATH", os.environ.get("PATH", os.defpath)), "SLURM_CONF": env["SLURM_CONF"],
                   "PYTHONPATH": str(REPO), "HOME": "/nonexistent", "LANG": "C.UTF-8"}  # fmt: skip
    argv = ["setpriv", f"--reuid={nobody.pw_uid}", f"--regid={nobody.pw_gid}", "--clear-groups", "--no-new-privs",
            "--bounding-set=-all", "--inh-caps=-all", "--", sys.executable, "-m", "slurm_pool", "exporter",
            "--listen", f"127.0.0.1:{port}", "--state-dir", ""]  # fmt: skip
    with tempfile.NamedTemporaryFile(prefix="slurm-pool-exporter-", suffix=".log") as log:
        proc = subprocess.Popen(argv, cwd="/", env=service_env, stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_for(lambda: _listening(port) or proc.poll() is not None, 60, "the exporter to listen")
            assert proc.poll() is None, f"slurm-pool exporter stopped:\n{Path(log.name).read_text(errors='replace')}"
            yield ServedAs(f"http://127.0.0.1:{port}", proc.pid, Path(log.name))
        finally:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
