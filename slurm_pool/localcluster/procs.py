"""Start, track and stop daemons by pid, and only the ones we started.

Each started process gets a record ``<run>/procs/<name>.json`` holding its pid
and kernel start time, so a recycled pid is never mistaken for ours.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Callable, Mapping, Sequence


def _start_time(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # Field 22 (starttime) follows the parenthesised comm, which may hold spaces.
    fields = stat.rsplit(")", 1)[1].split()
    if fields[0] == "Z":
        return None
    return int(fields[19])


#: Mode of the daemons' logs: an access log or a daemon's error may hold what other users must not read.
LOG_MODE = 0o640


def open_log(path: Path) -> BinaryIO:
    """``path`` opened for appending: created 0640, an existing one narrowed to 0640, never through a link."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, LOG_MODE)
    try:
        os.fchmod(fd, LOG_MODE)
    except OSError:
        os.close(fd)
        raise
    return os.fdopen(fd, "ab")


@dataclass(frozen=True)
class Proc:
    name: str
    pid: int
    start: int

    def alive(self) -> bool:
        return _start_time(self.pid) == self.start


class ProcTable:
    """The processes one state directory owns."""

    def __init__(self, run_dir: Path):
        self.dir = run_dir / "procs"
        self.dir.mkdir(parents=True, exist_ok=True)

    def get(self, name: str) -> Proc | None:
        try:
            rec = json.loads((self.dir / f"{name}.json").read_text())
        except (OSError, ValueError):
            return None
        return Proc(rec["name"], rec["pid"], rec["start"])

    def all(self) -> list[Proc]:
        out = []
        for f in sorted(self.dir.glob("*.json")):
            p = self.get(f.stem)
            if p:
                out.append(p)
        return out

    def running(self, name: str) -> bool:
        p = self.get(name)
        return bool(p and p.alive())

    def start(
        self, name: str, argv: Sequence[str], log: Path, env: Mapping[str, str] | None = None, cwd: Path | None = None
    ) -> Proc:
        """Start ``argv`` in its own session with output to ``log`` (in ``cwd``, default this one)."""
        full_env = dict(os.environ)
        if env:
            full_env.update(env)
        with open_log(log) as out:
            child = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=full_env,
                cwd=cwd,
                start_new_session=True,
                close_fds=True,
            )
        start = None
        for _ in range(50):
            start = _start_time(child.pid)
            if start is not None:
                break
            time.sleep(0.01)
        proc = Proc(name, child.pid, start or 0)
        (self.dir / f"{name}.json").write_text(json.dumps(proc.__dict__))
        return proc

    def stop(self, name: str, timeout: float = 15.0) -> bool:
        """SIGTERM, then SIGKILL after ``timeout``; True if it was running."""
        proc = self.get(name)
        rec = self.dir / f"{name}.json"
        if proc is None or not proc.alive():
            rec.unlink(missing_ok=True)
            return False
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        deadline = time.monotonic() + timeout
        while proc.alive() and time.monotonic() < deadline:
            _reap(proc.pid)
            time.sleep(0.1)
        if proc.alive():
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            while proc.alive():
                _reap(proc.pid)
                time.sleep(0.05)
        rec.unlink(missing_ok=True)
        return True


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def wait_for(
    check: Callable[[], Any],
    timeout: float,
    what: str,
    interval: float = 0.25,
    ignore: tuple[type[BaseException], ...] = (),
) -> Any:
    """Poll ``check`` until it returns something truthy, and return that.

    Exceptions of the ``ignore`` types count as "not yet" (a daemon still
    starting).  On timeout the error names ``what`` and the last answer.
    """
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except ignore as exc:
            last = exc
        else:
            if last:
                return last
        time.sleep(interval)
    seen = "" if last is None or last is False else f" (last: {last!r})"
    raise TimeoutError(f"timed out after {timeout:g}s waiting for {what}{seen}")
