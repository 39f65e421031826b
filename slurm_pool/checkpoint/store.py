"""Checkpoints on disk: atomic commits, torn-write detection, retention.

One checkpoint is one directory ``ckpt-<step, 12 digits>`` holding the user's
files and a ``MANIFEST.json`` that lists each file's size and SHA-256 and
carries a checksum of itself.  A save writes everything into a temporary
directory (``.tmp-...``), fsyncs each file, the manifest and the directory,
renames the directory into place and fsyncs the parent: a reader sees the
whole checkpoint or none of it.  :func:`latest` still validates what it
finds (manifest checksum, file sizes; with ``verify=True`` every file's hash),
so a checkpoint damaged after the fact is skipped in favour of an older one,
and :func:`load` always checks the hash of what it returns.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import shutil
import socket
import time
from typing import Any, BinaryIO, Callable, Mapping, NamedTuple, Union

from slurm_pool.text import strict_float, strict_int

MANIFEST = "MANIFEST.json"
FORMAT = "slurm-pool-checkpoint"
VERSION = 1
DEFAULT_FILE = "state"
STEP_MAX = 10**12 - 1

#: A committed checkpoint's directory and a file name in it; both matched in full (``re.fullmatch``), ASCII only.
_CKPT_RE = re.compile(r"ckpt-([0-9]{12})")
_NAME_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]{0,127}")

Payload = Union[bytes, bytearray, memoryview, Callable[[BinaryIO], Any]]


class CorruptCheckpoint(ValueError):
    """A checkpoint's contents do not match its manifest."""


class CheckpointInfo(NamedTuple):
    """A committed checkpoint."""

    step: int
    path: str
    time: float
    files: dict[str, dict[str, Any]]
    meta: dict[str, Any]

    def file(self, name: str = DEFAULT_FILE) -> str:
        """Path of one of its files."""
        if name not in self.files:
            raise KeyError(f"checkpoint step {self.step} has no file {name!r} (has {', '.join(self.files)})")
        return os.path.join(self.path, name)


def ckpt_name(step: int) -> str:
    if not 0 <= step <= STEP_MAX:
        raise ValueError(f"step {step} out of range 0..{STEP_MAX}")
    return f"ckpt-{step:012d}"


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: str, data: bytes, mode: int = 0o644) -> None:
    """Write a small file atomically: temp file, fsync, rename, fsync the directory."""
    directory = os.path.dirname(os.path.abspath(path))
    tmp = os.path.join(directory, f".tmp-{os.path.basename(path)}-{os.getpid()}-{secrets.token_hex(4)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        os.unlink(tmp)
        raise
    os.close(fd)
    try:
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    fsync_dir(directory)


def _digest(path: str) -> tuple[int, str]:
    with open(path, "rb") as fh:
        h = hashlib.file_digest(fh, "sha256")
        return fh.tell(), h.hexdigest()


def _canonical(body: dict[str, Any]) -> bytes:
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


def _manifest_bytes(body: dict[str, Any]) -> bytes:
    doc = dict(body, checksum=hashlib.sha256(_canonical(body)).hexdigest())
    return json.dumps(doc, sort_keys=True, indent=1).encode() + b"\n"


def read_manifest(path: str) -> CheckpointInfo | None:
    """The checkpoint in directory ``path`` if its manifest is intact and every
    file has the recorded size; None otherwise."""
    m = _CKPT_RE.fullmatch(os.path.basename(path.rstrip("/")))
    if not m:
        return None
    try:
        with open(os.path.join(path, MANIFEST), "rb") as fh:
            doc = json.loads(fh.read(1 << 20))
        body = {k: v for k, v in doc.items() if k != "checksum"}
        if doc.get("checksum") != hashlib.sha256(_canonical(body)).hexdigest():
            return None
        step = body.get("step")
        if body.get("format") != FORMAT or type(step) is not int or step != int(m.group(1)):
            return None
        files = body["files"]
        for name, rec in files.items():
            size = rec["size"]
            if not _NAME_RE.fullmatch(name) or type(size) is not int or not isinstance(rec["sha256"], str):
                return None
            if os.stat(os.path.join(path, name)).st_size != size:
                return None
        saved = strict_float(body.get("time", 0.0), "time")
    except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError):
        return None
    return CheckpointInfo(step, path, saved, files, body.get("meta") or {})


def verify(info: CheckpointInfo) -> bool:
    """Whether every file still hashes to its manifest entry."""
    try:
        for name, rec in info.files.items():
            if _digest(os.path.join(info.path, name)) != (rec["size"], rec["sha256"]):
                return False
    except OSError:
        return False
    return True


def steps(directory: str) -> list[int]:
    """Steps of the committed (renamed-into-place) checkpoints, ascending; no validation."""
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    return sorted(int(m.group(1)) for n in names if (m := _CKPT_RE.fullmatch(n)))


def list_checkpoints(directory: str, *, verify_data: bool = False) -> list[CheckpointInfo]:
    """Valid checkpoints, newest first."""
    out = []
    for step in reversed(steps(directory)):
        info = read_manifest(os.path.join(directory, ckpt_name(step)))
        if info is not None and (not verify_data or verify(info)):
            out.append(info)
    return out


def latest(directory: str, *, verify_data: bool = False) -> CheckpointInfo | None:
    """The newest complete checkpoint (torn or damaged ones are skipped)."""
    for step in reversed(steps(directory)):
        info = read_manifest(os.path.join(directory, ckpt_name(step)))
        if info is not None and (not verify_data or verify(info)):
            return info
    return None


def load(info: CheckpointInfo, name: str = DEFAULT_FILE) -> bytes:
    """One file's bytes, checked against the manifest's hash."""
    rec = info.files.get(name)
    if rec is None:
        raise KeyError(f"checkpoint step {info.step} has no file {name!r}")
    with open(os.path.join(info.path, name), "rb") as fh:
        data = fh.read()
    if len(data) != rec["size"] or hashlib.sha256(data).hexdigest() != rec["sha256"]:
        raise CorruptCheckpoint(f"{info.path}/{name} does not match its manifest")
    return data


def _restart_count() -> int | None:
    """``SLURM_RESTART_COUNT`` (0 outside Slurm); None if it is not a whole number."""
    try:
        return strict_int(os.environ.get("SLURM_RESTART_COUNT") or "0", "SLURM_RESTART_COUNT")
    except ValueError:
        return None


def _write_file(path: str, payload: Payload) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        if callable(payload):
            payload(fh)
        else:
            fh.write(payload)
        fh.flush()
        os.fsync(fh.fileno())


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove_tree(directory: str, name: str) -> None:
    """Rename out of the way first, so nobody sees a half-deleted checkpoint."""
    trash = os.path.join(directory, f".trash-{name}-{secrets.token_hex(4)}")
    try:
        os.rename(os.path.join(directory, name), trash)
    except OSError:
        return
    shutil.rmtree(trash, ignore_errors=True)


def clean_temporaries(directory: str, *, max_age: float = 86400.0) -> None:
    """Remove temp/trash dirs left by writers that died (this host's) or old ones."""
    host = socket.gethostname().split(".")[0].replace("-", "_")
    now = time.time()
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return
    for e in entries:
        if not (e.name.startswith(".tmp-ckpt-") or e.name.startswith(".trash-")):
            continue
        parts = e.name.split("-")
        stale = e.name.startswith(".trash-")
        # .tmp-ckpt-<step>-<host>-<pid>-<random>
        if not stale and len(parts) >= 6 and parts[3] == host and parts[4].isascii() and parts[4].isdigit():
            stale = not _pid_alive(int(parts[4]))
        try:
            stale = stale or now - e.stat(follow_symlinks=False).st_mtime > max_age
        except OSError:
            continue
        if stale:
            shutil.rmtree(e.path, ignore_errors=True)


def prune(directory: str, keep: int) -> None:
    """Keep the newest ``keep`` complete checkpoints and everything newer (``keep <= 0``: keep all).

    Only intact checkpoints count towards ``keep``: a torn or damaged one never
    pushes out a good one.  What goes is what is older than the oldest kept
    checkpoint; with no complete checkpoint at all nothing goes.
    """
    if keep <= 0:
        return
    committed = steps(directory)
    complete = [s for s in committed if read_manifest(os.path.join(directory, ckpt_name(s))) is not None]
    if not complete:
        return
    oldest_kept = complete[-keep:][0]
    for step in committed:
        if step < oldest_kept:
            _remove_tree(directory, ckpt_name(step))


def write(
    directory: str, step: int, files: Mapping[str, Payload], *, meta: Mapping[str, Any] | None = None, keep: int = 3
) -> CheckpointInfo:
    """Commit one checkpoint atomically and return it.

    ``files`` maps file names to bytes or to a callable that writes into an
    open binary file (e.g. ``lambda f: torch.save(state, f)``).  Saving a step
    that is already committed and intact is a no-op.
    """
    final_name = ckpt_name(step)
    if not files:
        raise ValueError("a checkpoint needs at least one file")
    for name in files:
        if not _NAME_RE.fullmatch(name) or name == MANIFEST:
            raise ValueError(f"bad checkpoint file name {name!r}")
    os.makedirs(directory, 0o700, exist_ok=True)
    final = os.path.join(directory, final_name)
    existing = read_manifest(final)
    if existing is not None and verify(existing):
        return existing
    host = socket.gethostname().split(".")[0].replace("-", "_")
    tmp = os.path.join(directory, f".tmp-ckpt-{step}-{host}-{os.getpid()}-{secrets.token_hex(4)}")
    os.mkdir(tmp, 0o700)
    try:
        records = {}
        for name, payload in files.items():
            p = os.path.join(tmp, name)
            _write_file(p, payload)
            size, sha = _digest(p)
            records[name] = {"size": size, "sha256": sha}
        body = {
            "format": FORMAT,
            "version": VERSION,
            "step": step,
            "time": time.time(),
            "files": records,
            "meta": dict(meta or {}),
            "job_id": os.environ.get("SLURM_JOB_ID"),
            "restart_count": _restart_count(),
        }
        _write_file(os.path.join(tmp, MANIFEST), _manifest_bytes(body))
        fsync_dir(tmp)
        try:
            os.rename(tmp, final)
        except OSError:  # the step exists but is damaged (or a racing writer won)
            won = read_manifest(final)
            if won is not None and verify(won):
                shutil.rmtree(tmp, ignore_errors=True)
                return won
            _remove_tree(directory, final_name)
            os.rename(tmp, final)
        fsync_dir(directory)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    info = read_manifest(final)
    if info is None:  # pragma: no cover - only if the filesystem lies
        raise CorruptCheckpoint(f"{final} unreadable right after commit")
    prune(directory, keep)
    clean_temporaries(directory)
    return info
