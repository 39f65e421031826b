"""Remove the checkpoint directories of jobs that are gone (``slurm-pool checkpoints prune``).

Default checkpoint directories are ``<checkpoint_base_dir>/<user>/<job id>``
and outlive every requeue on purpose; once a job has left the queue for good
they only take space.  The rule, computed by the pure :func:`plan`:

* a job still in ``squeue`` (pending, running, requeued, held, suspended)
  keeps its directory, however old;
* otherwise the directory goes once nothing in it has changed for
  ``keep_days`` (the user may still want the final checkpoint for a while).

Assert, then apply: the queue is read before anything is removed
(:func:`queued`), and if it cannot be read -- squeue failed, or its answer is
not a clean list of jobs with ASCII-digit ids -- nothing is removed.  Removal
runs as root inside directories the users own, so it walks with
``O_NOFOLLOW`` descriptors and :func:`shutil.rmtree` with ``dir_fd`` (which
never follows a symlink); anything that is not a plain directory named like a
job id is left alone.
"""

from __future__ import annotations

import os
import shutil
import stat
from dataclasses import dataclass
from typing import Any, Iterable

from slurm_pool.adapters.records import RecordError
from slurm_pool.adapters.runner import Runner
from slurm_pool.adapters.slurmcalls import SlurmCalls
from slurm_pool.adapters.slurmjson import UINT32_MAX
from slurm_pool.node.jobdir import DIR_FLAGS as _DIR
from slurm_pool.node.jobdir import JOB_ID_RE, NAME_RE
from slurm_pool.text import shown

#: Directories looked at below a job directory to date it (a bound on a user-built tree).
MAX_ENTRIES = 100_000
#: The ids of a job that name checkpoint directories: its own, its array's and its heterogeneous job's.
QUEUE_IDS = ("job_id", "array_job_id", "het_job_id")


class QueueError(RecordError):
    """``squeue --json`` answered, but not with a queue that can be trusted (exit 2)."""


def queued(runner: Runner) -> set[str]:
    """Every job id the queue holds; raises rather than answer with less than the whole queue.

    :class:`~slurm_pool.adapters.runner.CommandError` when squeue fails;
    :class:`~slurm_pool.adapters.records.RecordError` when its answer is not a
    clean list of job objects (empty, not JSON, Slurm's own ``errors``, an
    entry that is not an object) or a job's id is not ASCII digits.
    """
    out = set()
    for i, job in enumerate(SlurmCalls(runner).queue_objects(timeout=120)):  # every job: none skipped
        for key in QUEUE_IDS:
            required = key == "job_id"
            if required or key in job:
                value = job_id(job.get(key), f"squeue --json: jobs[{i}].{key}", required=required)
                if value is not None:
                    out.add(value)
    return out


def job_id(value: Any, what: str, *, required: bool = True) -> str | None:
    """A job id from Slurm's JSON: an int or ASCII digits, plain or as ``{"set", "infinite", "number"}``.

    None for an unset (or 0) optional id; anything else raises :class:`QueueError`.
    """
    raw = value
    if isinstance(value, dict):  # 23.02+: {"set": true, "infinite": false, "number": 42}
        if value.get("set") is False and not required:
            return None
        value = None if value.get("infinite") is True else value.get("number")
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        value = str(value)
    if not isinstance(value, str) or not JOB_ID_RE.fullmatch(value) or int(value) > UINT32_MAX:
        raise QueueError(f"{what}: {shown(repr(raw))[:200]} is not a job id (ASCII digits, at most {UINT32_MAX})")
    if int(value) == 0:
        if required:
            raise QueueError(f"{what}: 0 is not a job id")
        return None
    return value


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
            if not NAME_RE.fullmatch(user):
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
                    if not JOB_ID_RE.fullmatch(job):
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
