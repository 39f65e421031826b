"""Remove the checkpoint directories of jobs that are gone (``slurm-pool checkpoints prune``).

Default checkpoint directories are ``<checkpoint_base_dir>/<user>/<job id>``
and outlive every requeue on purpose; once a job has left the queue for good
they only take space.  The rule, computed by the pure :func:`plan`:

* a job still in ``squeue`` (pending, running, requeued, held, suspended)
  keeps its directory, however old;
* otherwise the directory goes once nothing in it has changed for
  ``keep_days`` (the user may still want the final checkpoint for a while).

Assert, then apply: the queue is read first, and if it cannot be read nothing
is removed.  Removal runs as root inside directories the users own, so it
walks with ``O_NOFOLLOW`` descriptors and :func:`shutil.rmtree` with
``dir_fd`` (which never follows a symlink); anything that is not a plain
directory named like a job id is left alone.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
from dataclasses import dataclass
from typing import Iterable

from slurm_pool.node.jobdir import DIR_FLAGS as _DIR
from slurm_pool.node.jobdir import NAME_RE

#: Directories looked at below a job directory to date it (a bound on a user-built tree).
MAX_ENTRIES = 100_000
#: A job id as Slurm writes it: ASCII digits only (``str.isdigit`` also takes "²", which ``int`` refuses).
JOB_ID_RE = re.compile(r"[0-9]{1,20}\Z")


@dataclass(frozen=True)
class Entry:
    """One ``<base>/<user>/<job id>`` directory, dated by its newest entry."""

    user: str
    job_id: str
    newest: float

    @property
    def rel(self) -> str:
        """``<user>/<job id>``, relative to the base."""
        return f"{self.user}/{self.job_id}"


@dataclass(frozen=True)
class Decision:
    entry: Entry
    remove: bool
    why: str


def plan(entries: Iterable[Entry], queued: set[str], now: float, keep_days: float) -> list[Decision]:
    """What to do with each directory (pure)."""
    out = []
    for e in sorted(entries, key=lambda e: (e.user, int(e.job_id))):
        age = (now - e.newest) / 86400.0
        if e.job_id in queued:
            out.append(Decision(e, False, "job still in the queue"))
        elif age < keep_days:
            out.append(Decision(e, False, f"last written {age:.1f} days ago (keep {keep_days:g})"))
        else:
            out.append(Decision(e, True, f"job gone, last written {age:.1f} days ago"))
    return out


def _newest(fd: int) -> float:
    """Newest mtime of the directory behind ``fd`` and everything below it (no links followed)."""
    newest = os.fstat(fd).st_mtime
    stack, seen = [os.dup(fd)], 0
    try:
        while stack:
            d = stack.pop()
            try:
                for name in os.listdir(d):
                    seen += 1
                    if seen > MAX_ENTRIES:
                        return newest
                    try:
                        st = os.stat(name, dir_fd=d, follow_symlinks=False)
                    except OSError:
                        continue
                    newest = max(newest, st.st_mtime)
                    if stat.S_ISDIR(st.st_mode):
                        try:
                            stack.append(os.open(name, _DIR, dir_fd=d))
                        except OSError:
                            pass
            except OSError:
                continue  # an unreadable directory dates nothing; the walk goes on
            finally:
                os.close(d)
    finally:
        for d in stack:  # returned early: the queued descriptors are closed too
            os.close(d)
    return newest


def scan(base: str) -> list[Entry]:
    """Every ``<user>/<job id>`` directory under ``base`` (symlinks and odd names skipped)."""
    try:
        bfd = os.open(base, _DIR)
    except FileNotFoundError:
        return []
    out = []
    try:
        for user in sorted(os.listdir(bfd)):
            if not NAME_RE.match(user):
                continue
            try:
                ufd = os.open(user, _DIR, dir_fd=bfd)
            except OSError:
                continue
            try:
                jobs = os.listdir(ufd)
            except OSError:
                jobs = []
            try:
                for job in jobs:  # one bad entry is skipped; it never stops the scan
                    if not JOB_ID_RE.match(job):
                        continue
                    try:
                        jfd = os.open(job, _DIR, dir_fd=ufd)
                    except OSError:
                        continue
                    try:
                        out.append(Entry(user, job, _newest(jfd)))
                    except OSError:
                        continue
                    finally:
                        os.close(jfd)
            finally:
                os.close(ufd)
    finally:
        os.close(bfd)
    return out


def remove(base: str, entry: Entry) -> None:
    """Delete ``<base>/<user>/<job id>`` without following any link on the way."""
    if not shutil.rmtree.avoids_symlink_attacks:
        raise OSError("this platform's rmtree can follow symlinks; refusing to delete as root")
    bfd = os.open(base, _DIR)
    try:
        ufd = os.open(entry.user, _DIR, dir_fd=bfd)
        try:
            shutil.rmtree(entry.job_id, dir_fd=ufd)
        finally:
            os.close(ufd)
    finally:
        os.close(bfd)
