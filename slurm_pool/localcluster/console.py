"""The local cluster's web console: Slurm's JWT key, the users' passwords, ``slurm-pool serve``.

``cluster up`` always turns on Slurm's ``auth/jwt`` with a key of its own
(:func:`ensure_jwt_key`); ``cluster up --with-console`` also gives every user
of the spec's projects a random password (:func:`set_passwords`, through
``chpasswd``, so PAM logins work) and starts the service on the cluster's
``console`` port (:func:`start_console`).
"""

from __future__ import annotations

import fcntl
import json
import os
import pwd
import secrets
import socket
import sys
from pathlib import Path
from typing import Iterable, Protocol

from slurm_pool.adapters.runner import Runner, SubprocessRunner
from slurm_pool.errors import PoolError
from slurm_pool.localcluster.layout import Layout
from slurm_pool.localcluster.procs import ProcTable, wait_for
from slurm_pool.outfiles import replace_file
from slurm_pool.spec.model import PoolSpec
from slurm_pool.text import check

#: Name of the tracked process (``procs.ProcTable``) and of the port offset.
PROC = "console"
#: Bytes of an HS256 key: Slurm wants at least 256 bits.
KEY_BYTES = 64
PASSWORDS = Path("console") / "passwords.json"


class ConsoleError(PoolError, RuntimeError):
    pass


class ConsoleHost(Protocol):
    """What the console needs of a local cluster (``LocalCluster`` is one)."""

    @property
    def spec(self) -> PoolSpec: ...

    @property
    def layout(self) -> Layout: ...

    @property
    def jwt_key_path(self) -> Path: ...

    @property
    def procs(self) -> ProcTable: ...


def ensure_jwt_key(path: Path, owner: str) -> Path:
    """Create ``path`` once: random bytes, mode 0600, owned by ``owner`` (the SlurmUser); keep an existing one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        if path.is_symlink() or not path.is_file():
            raise ConsoleError(f"{path} exists and is not a regular file") from None
        return path
    try:
        os.write(fd, secrets.token_bytes(KEY_BYTES))
        ent = pwd.getpwnam(owner)
        os.fchown(fd, ent.pw_uid, ent.pw_gid)
        os.fchmod(fd, 0o600)
    finally:
        os.close(fd)
    return path


def passwords_file(state_dir: str | Path) -> Path:
    return Path(state_dir) / PASSWORDS


def _saved(path: Path) -> dict[str, str]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {u: p for u, p in data.items() if isinstance(u, str) and isinstance(p, str) and p.isalnum()}


def set_passwords(users: Iterable[str], state_dir: str | Path, runner: Runner | None = None) -> dict[str, str]:
    """Give each user a random password (kept from an earlier call), set with ``chpasswd``; user -> password.

    The passwords go to ``chpasswd`` on stdin, never on a command line, and are
    saved as JSON, mode 0600, in ``<state>/console/passwords.json``.
    """
    wanted = sorted({check("user", u, "console user") for u in users})
    path = passwords_file(state_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.parent.chmod(0o700)
    # Two clusters sharing a state directory's passwords (the test suite's streams do) set them one at a
    # time: each reads what the other saved, so neither changes a password the other's users log in with.
    fd = os.open(path.with_suffix(".lock"), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        saved = _saved(path)
        out = {u: saved.get(u) or secrets.token_hex(12) for u in wanted}
        if out:
            runner = runner or SubprocessRunner()
            res = runner.run(["chpasswd"], input="".join(f"{u}:{p}\n" for u, p in out.items()), check=False)
            if not res.ok:
                # chpasswd's own message names the user, never the password.
                raise ConsoleError(
                    f"chpasswd failed (exit {res.returncode}): {(res.stderr or res.stdout).strip()[:300]}"
                )
        replace_file(path, json.dumps({**saved, **out}, indent=2, sort_keys=True) + "\n", 0o600)
    finally:
        os.close(fd)
    return out


def console_users(cluster: ConsoleHost) -> list[str]:
    """Every user of the spec's projects, sorted."""
    return sorted({u for p in cluster.spec.projects for u in p.users})


def console_url(cluster: ConsoleHost) -> str:
    return f"http://127.0.0.1:{cluster.layout.port(PROC)}/"


def service_spec(cluster: ConsoleHost) -> dict:
    """The spec the service reads: the cluster's own (checkpoints in the state directory), with a console
    section naming the cluster's JWT key when the spec has none."""
    data = cluster.spec.model_dump(mode="json", exclude_unset=True)
    data.setdefault("console", {})
    data["console"]["jwt_key"] = str(cluster.jwt_key_path)
    return data


def serve_argv(cluster: ConsoleHost, spec_file: Path) -> list[str]:
    """``slurm-pool serve`` for this cluster: ``spec_file``, loopback on the console port, its JWT key."""
    root = cluster.layout.root
    return [
        sys.executable,
        "-m",
        "slurm_pool",
        "serve",
        "--spec",
        str(spec_file),
        "--listen",
        f"127.0.0.1:{cluster.layout.port(PROC)}",
        "--state-dir",
        str(root / "node-state"),
        "--key",
        str(cluster.jwt_key_path),
    ]


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


def start_console(cluster: ConsoleHost, timeout: float = 60.0) -> str:
    """Start ``slurm-pool serve`` as a tracked daemon (unless it runs already); its URL."""
    L = cluster.layout
    port = L.port(PROC)
    if not cluster.procs.running(PROC):
        spec_file = L.root / "console" / "pool.json"
        spec_file.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        replace_file(spec_file, json.dumps(service_spec(cluster), indent=2) + "\n", 0o600)
        cluster.procs.start(PROC, serve_argv(cluster, spec_file), L.log / "console.out", env=L.env())

    def ready() -> bool:
        if not cluster.procs.running(PROC):
            raise ConsoleError(f"slurm-pool serve exited; see {L.log / 'console.out'}")
        return _listening(port)

    wait_for(ready, timeout, f"the console on port {port}")
    return console_url(cluster)


def stop_console(cluster: ConsoleHost) -> bool:
    """Stop the service; True if it was running."""
    return cluster.procs.stop(PROC)
