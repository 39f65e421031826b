"""The job's checkpoint directory, as root: create it safely, read it safely.

Layout (see ``slurm_pool.checkpoint.store``)::

    <dir>/ckpt-000000001200/MANIFEST.json   committed checkpoints
    <dir>/.slurm-pool/outcome.json          written by ``slurm-pool run``

The default directory is ``<checkpoint_base_dir>/<user>/<job id>``: the job id
survives requeues, so a resumed run finds its checkpoints.  ``base`` is
root-owned; ``<user>`` and ``<job id>`` belong to the job's user (mode 0700).
Every step walks directory file descriptors with ``O_NOFOLLOW``, so a symlink
planted by the user is never followed by root.  A directory named by the user
(``--checkpoint-dir`` through the SPANK plugin) is only created here when it
lies under ``<base>/<user>/``; anywhere else the job creates it itself, as the
user.
"""

from __future__ import annotations

import json
import os
import pwd
import re
import stat
from typing import Any, Callable

from slurm_pool.errors import PoolError
from slurm_pool.jobid import JobIdError, own_id
from slurm_pool.text import RULES

#: A user name as a directory name (matched in full: ``re.fullmatch``); ``slurm-pool run`` uses the same rule.
NAME_RE = RULES["login"]
#: A committed checkpoint's directory name (matched in full).
CKPT_RE = re.compile(r"ckpt-([0-9]{12})")
#: A job id as Slurm writes it: ASCII digits only (``str.isdigit`` also takes "²"), matched in full.
JOB_ID_RE = RULES["job-id"]
_UID_RE = re.compile(r"[0-9]{1,10}")
OUTCOME_MAX = 65536
#: Open a directory, never through a symlink (every root-side walk uses these).
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
#: Open a file the job's user could have planted: never through a symlink, never blocking on a FIFO.
FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC

#: Where the root-side readers say why they ignored a file (the hooks pass their log).
Say = Callable[[str], None]


def _quiet(_msg: str) -> None:
    return None


class JobDirError(PoolError, RuntimeError):
    """The checkpoint directory could not be prepared safely."""


#: A user name's uid on this node (None: no such user); the hooks may pass another (tests).
Users = Callable[[str], int | None]


def uid_of(user: str) -> int | None:
    """``user``'s uid in this node's user database, or None."""
    try:
        return pwd.getpwnam(user).pw_uid
    except KeyError:
        return None


def _job_and_user(env: dict[str, str]) -> tuple[str, str]:
    job = env.get("SLURM_JOB_ID", "")
    user = env.get("SLURM_JOB_USER", "")
    try:
        own_id(job)
    except JobIdError as exc:
        raise JobDirError(str(exc)) from None
    if not NAME_RE.fullmatch(user) or user in (".", ".."):
        raise JobDirError(f"SLURM_JOB_USER {user!r} is not a user name")
    return job, user


def job_identity(env: dict[str, str], users: Users = uid_of) -> tuple[str, str, int, int]:
    """``(job id, user, uid, gid)`` from slurmd's variables, validated.

    The uid is Slurm's word for who runs the job; the name only chooses a
    directory, so it must be that uid's name on this node.  A name and a uid
    that disagree are refused: root would otherwise hand one user's
    ``<base>/<user>`` to another.
    """
    job, user = _job_and_user(env)
    uid, gid = env.get("SLURM_JOB_UID", ""), env.get("SLURM_JOB_GID", "")
    if not _UID_RE.fullmatch(uid):
        raise JobDirError(f"SLURM_JOB_UID {uid!r} is not a uid")
    known = users(user)
    if known is None:
        raise JobDirError(f"SLURM_JOB_USER {user!r} is not a user on this node (SLURM_JOB_UID {uid}); refused")
    if known != int(uid):
        raise JobDirError(f"SLURM_JOB_USER {user!r} is uid {known}, not SLURM_JOB_UID {uid}; refused")
    return job, user, int(uid), int(gid) if _UID_RE.fullmatch(gid) else -1


def checkpoint_dir(base: str, env: dict[str, str]) -> tuple[str, bool]:
    """``(path, user_chosen)``: the SPANK option's directory or the default.

    Resolved exactly as the SPANK plugin resolves it for the job
    (``pool_checkpoint_path`` in ``spank/pool_opts.c``): an absolute DIR as
    given, a relative one under ``<base>/<user>/``, repeated and trailing
    ``/`` dropped, nothing stripped (the plugin keeps spaces, so this does).
    """
    chosen = env.get("SPANK_SLURM_POOL_CHECKPOINT_DIR", "")
    if chosen.startswith("/"):
        return "/" + "/".join(_components(chosen)), True
    job, user = _job_and_user(env)
    if not chosen:
        return "/" + "/".join(_components(base) + [user, job]), False
    rel = [p for p in chosen.split("/") if p]
    if not rel or any(p in (".", "..") for p in rel):
        raise JobDirError(f"{chosen!r} names no directory or contains . or ..")
    return "/" + "/".join(_components(base) + [user, *rel]), True


def _components(path: str) -> list[str]:
    if not os.path.isabs(path):
        raise JobDirError(f"{path!r} is not absolute")
    parts = [p for p in path.split("/") if p]
    if any(p in (".", "..") for p in parts):
        raise JobDirError(f"{path!r} contains . or ..")
    return parts


def _open_under(base_fd: int, names: list[str]) -> int:
    fd = os.dup(base_fd)
    for name in names:
        try:
            nfd = os.open(name, DIR_FLAGS, dir_fd=fd)
        finally:
            os.close(fd)
        fd = nfd
    return fd


def _mkdir_owned(parent_fd: int, name: str, uid: int, gid: int, mode: int = 0o700) -> int:
    """Create (or reuse) ``name`` under ``parent_fd``, owned by uid:gid; returns its fd."""
    try:
        os.mkdir(name, mode, dir_fd=parent_fd)
    except FileExistsError:
        pass
    fd = os.open(name, DIR_FLAGS, dir_fd=parent_fd)  # ELOOP if it is a symlink
    try:
        st = os.fstat(fd)
        if st.st_uid not in (0, uid):
            raise JobDirError(f"{name}: owned by uid {st.st_uid}, not by the job's user")
        if st.st_uid != uid or (gid >= 0 and st.st_gid != gid):
            os.fchown(fd, uid, gid)
    except BaseException:
        os.close(fd)
        raise
    return fd


def prepare(base: str, path: str, user: str, uid: int, gid: int) -> str:
    """Create ``path`` for the job's user when it is ``<base>/<user>/...``.

    Returns what happened (``created``, ``left to the job``); raises
    :class:`JobDirError` on anything unsafe.
    """
    base_parts = _components(base)
    parts = _components(path)
    if parts[: len(base_parts) + 1] != base_parts + [user]:
        return "left to the job"
    os.makedirs(base, 0o755, exist_ok=True)  # base comes from root-owned node.conf
    fd = os.open(base, DIR_FLAGS)
    try:
        bst = os.fstat(fd)
        if bst.st_uid != 0 and bst.st_uid != os.geteuid():
            raise JobDirError(f"{base}: owned by uid {bst.st_uid}, not root")
        if bst.st_mode & 0o022:
            raise JobDirError(f"{base}: writable by group or others")
        for name in parts[len(base_parts) :]:
            nfd = _mkdir_owned(fd, name, uid, gid)
            os.close(fd)
            fd = nfd
    finally:
        os.close(fd)
    return "created"


def _open_dir(path: str, uid: int | None = None, say: Say = _quiet) -> int | None:
    """An ``O_NOFOLLOW`` descriptor of ``path``; None if unsafe, or not owned by ``uid`` when given.

    Root reads only what the job's user owns: a checkpoint directory pointed at
    someone else's private directory is not read for them.
    """
    try:
        parts = _components(path)
        root = os.open("/", DIR_FLAGS)
        try:
            fd = _open_under(root, parts)
        finally:
            os.close(root)
    except FileNotFoundError:
        return None
    except (OSError, JobDirError) as exc:
        say(f"{path}: not read ({exc})")
        return None
    why = _not_theirs(os.fstat(fd), uid)
    if why:
        os.close(fd)
        say(f"{path}: not read ({why})")
        return None
    return fd


def _not_theirs(st: os.stat_result, uid: int | None, *, file: bool = False) -> str:
    """Why root must not read what ``st`` describes for ``uid``'s job ('' if it may).

    Place is no proof: a hard link in the user's directory may be anyone's
    file.  A file must be a regular file with one link; both must be ``uid``'s.
    """
    if file and not stat.S_ISREG(st.st_mode):
        return "not a regular file"
    if uid is not None and st.st_uid != uid:
        return f"owned by uid {st.st_uid}, not by the job's user (uid {uid})"
    if file and st.st_nlink != 1:
        return f"{st.st_nlink} hard links"
    return ""


def newest_checkpoint(path: str, uid: int | None = None, say: Say = _quiet) -> tuple[int, float] | None:
    """``(step, mtime of its manifest)`` of the newest committed checkpoint.

    Only ``lstat``-style reads through ``O_NOFOLLOW`` descriptors: root never
    opens a file the user could have swapped for a FIFO or a link, and a
    ``ckpt-N`` that is a symlink is not followed.  With ``uid``, ``path``, the
    ``ckpt-N`` directory and its manifest must be that user's (the manifest a
    regular file with one link); what is not is skipped, and ``say`` told why.
    """
    fd = _open_dir(path, uid, say)
    if fd is None:
        return None
    try:
        steps = sorted((int(m.group(1)), e) for e in os.listdir(fd) if (m := CKPT_RE.fullmatch(e)))
        for step, name in reversed(steps):
            try:
                cfd = os.open(name, DIR_FLAGS, dir_fd=fd)  # ELOOP on a symlinked ckpt-N
            except OSError:
                continue
            try:
                why = _not_theirs(os.fstat(cfd), uid)
                st = None if why else os.stat("MANIFEST.json", dir_fd=cfd, follow_symlinks=False)
            except OSError:
                continue
            finally:
                os.close(cfd)
            if st is None:
                say(f"{path}/{name}: ignored ({why})")
                continue
            why = _not_theirs(st, uid, file=True)
            if why:
                say(f"{path}/{name}/MANIFEST.json: ignored ({why})")
                continue
            return step, st.st_mtime
        return None
    finally:
        os.close(fd)


def read_outcome(path: str, uid: int | None = None, say: Say = _quiet) -> dict[str, Any] | None:
    """``.slurm-pool/outcome.json`` as written by ``slurm-pool run`` (untrusted data; ``uid``'s only).

    Opened with ``O_NOFOLLOW | O_NONBLOCK`` and checked on the open descriptor
    before a byte is read: a regular file, with one link, owned by ``uid``
    when given, at most ``OUTCOME_MAX`` bytes.  Anything else is ignored and
    ``say`` told why.
    """
    top = _open_dir(path, uid, say)  # the checkpoint directory itself must be the user's, not only its control dir
    if top is None:
        return None
    try:
        fd = os.open(".slurm-pool", DIR_FLAGS, dir_fd=top)
    except FileNotFoundError:
        return None
    except OSError as exc:
        say(f"{path}/.slurm-pool: not read ({exc.strerror or exc})")
        return None
    finally:
        os.close(top)
    where = f"{path}/.slurm-pool/outcome.json"
    try:
        why = _not_theirs(os.fstat(fd), uid)
        if why:
            say(f"{path}/.slurm-pool: not read ({why})")
            return None
        try:
            ffd = os.open("outcome.json", FILE_FLAGS, dir_fd=fd)
        except FileNotFoundError:
            return None
        except OSError as exc:  # ELOOP: a symlink
            say(f"{where}: ignored ({exc.strerror or exc})")
            return None
    finally:
        os.close(fd)
    try:
        st = os.fstat(ffd)
        why = _not_theirs(st, uid, file=True) or (f"{st.st_size} bytes" if st.st_size > OUTCOME_MAX else "")
        if why:
            say(f"{where}: ignored ({why})")
            return None
        data = json.loads(os.read(ffd, OUTCOME_MAX).decode("utf-8", errors="replace"))
        return data if isinstance(data, dict) else None
    except (ValueError, RecursionError):  # the user wrote it: bad JSON, huge numbers or deep nesting
        say(f"{where}: ignored (not a JSON object)")
        return None
    finally:
        os.close(ffd)
