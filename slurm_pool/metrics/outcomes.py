"""Counters from the epilog's per-run outcome records.

The epilog appends one JSON object per finished job run to
``<state_dir>/<node>/outcomes.jsonl`` (see :mod:`slurm_pool.node.outcome`).
:class:`OutcomeTally` reads those files incrementally -- only the bytes
appended since the last scrape, and only whole lines -- and keeps running
totals, so counters stay monotonic across scrapes.  A file that is replaced
or truncated (log rotation) is read again from its start; its earlier counts
are kept.  The node label comes from the directory name, not from the
record.
"""

from __future__ import annotations

import json
import math
import os
import stat
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping

from slurm_pool.checkpoint.slurmjob import REASONS
from slurm_pool.text import matches

FILE_NAME = "outcomes.jsonl"
#: Upper bounds (seconds) of the checkpoint-age histogram: work lost at an event.
AGE_BUCKETS = (1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, 7200.0)
#: Longest line taken as a record; longer ones are counted as bad and skipped.
MAX_LINE = 64 * 1024
#: Most bytes read from one file per scrape (the rest waits for the next one).
MAX_READ = 8 * 1024 * 1024
#: Bytes read from the end of each node's outcome file for the latest records (status, the console).
TAIL_BYTES = 256 * 1024


@dataclass
class _FileState:
    ident: tuple[int, int]
    offset: int = 0


@dataclass
class Histogram:
    """Cumulative bucket counts, sum and count of observations."""

    counts: list[int] = field(default_factory=lambda: [0] * (len(AGE_BUCKETS) + 1))
    total: float = 0.0

    def observe(self, value: float) -> None:
        for i, bound in enumerate(AGE_BUCKETS):
            if value <= bound:
                self.counts[i] += 1
        self.counts[-1] += 1
        self.total += value

    def buckets(self) -> list[tuple[str, float]]:
        bounds = [repr(b) for b in AGE_BUCKETS] + ["+Inf"]
        return [(b, float(c)) for b, c in zip(bounds, self.counts, strict=False)]


@dataclass
class OutcomeTally:
    """Running totals over every node's ``outcomes.jsonl`` under ``state_dir``."""

    state_dir: str
    runs: dict[tuple[str, str], int] = field(default_factory=dict)
    preemptions: dict[tuple[str, str], int] = field(default_factory=dict)
    ages: dict[str, Histogram] = field(default_factory=dict)
    bad_records: int = 0
    _files: dict[str, _FileState] = field(default_factory=dict)

    def refresh(self) -> int:
        """Read what was appended since the last call; return the number of read errors."""
        errors = 0
        try:
            files = outcome_files(self.state_dir)
        except FileNotFoundError:
            return 0
        except OSError:
            return 1
        for node, path in files:
            try:
                self._read(node, path)
            except (FileNotFoundError, NotADirectoryError):
                continue
            except OSError:
                errors += 1
        return errors

    def _read(self, node: str, path: str) -> None:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise OSError(f"{path}: not a regular file")
            ident = (st.st_dev, st.st_ino)
            state = self._files.get(path)
            if state is None or state.ident != ident or st.st_size < state.offset:
                state = self._files[path] = _FileState(ident)
            if st.st_size == state.offset:
                return
            os.lseek(fd, state.offset, os.SEEK_SET)
            data = os.read(fd, min(MAX_READ, st.st_size - state.offset))
        finally:
            os.close(fd)
        end = data.rfind(b"\n")
        if end < 0:
            if len(data) >= MAX_READ:  # one giant line: skip it
                state.offset += len(data)
                self.bad_records += 1
            return
        state.offset += end + 1
        for line in data[: end + 1].splitlines():
            if line.strip():
                self.add(node, line)

    def add(self, node: str, line: bytes | str) -> None:
        """Count one record line of ``node``."""
        rec = parse_record(line)
        if rec is None:
            self.bad_records += 1
            return
        reason = rec["reason"] or "none"
        self.runs[(node, reason)] = self.runs.get((node, reason), 0) + 1
        if rec["preempted"]:
            key = (node, "true" if rec["checkpointed"] else "false")
            self.preemptions[key] = self.preemptions.get(key, 0) + 1
        age = rec["checkpoint_age_s"]
        if age is not None and reason != "none":
            self.ages.setdefault(reason, Histogram()).observe(age)


def outcome_files(state_dir: str) -> list[tuple[str, str]]:
    """``(node, path)`` of every ``<state_dir>/<node>/outcomes.jsonl`` that may exist; OSError if unlistable."""
    return [
        (node, os.path.join(state_dir, node, FILE_NAME))
        for node in sorted(os.listdir(state_dir))
        if matches("node", node)
    ]


def tail_lines(state_dir: str, size: int = TAIL_BYTES) -> Iterator[tuple[str, bytes]]:
    """``(node, line)`` for each whole, non-blank line in the last ``size`` bytes of every node's outcome file.

    Files are opened without following a symlink, and only regular files are read; unreadable ones
    (and an unlistable ``state_dir``) are skipped.
    """
    try:
        files = outcome_files(state_dir)
    except OSError:
        return
    for node, path in files:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                continue
            start = max(0, st.st_size - size)
            os.lseek(fd, start, os.SEEK_SET)
            data = os.read(fd, st.st_size - start)
        except OSError:
            continue
        finally:
            os.close(fd)
        lines = data.split(b"\n")
        if start > 0:
            lines = lines[1:]  # began mid-line
        for line in lines[:-1]:  # the last piece has no newline yet (or is empty)
            if line.strip():
                yield node, line


def load_record(line: bytes | str) -> dict[str, Any] | None:
    """One outcome line as the epilog wrote it (a version-1 object), or None if it is not one."""
    if len(line) > MAX_LINE:
        return None
    try:
        rec = json.loads(line)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    return rec if isinstance(rec, dict) and rec.get("v") == 1 else None


def parse_record(line: bytes | str) -> dict[str, Any] | None:
    """The fields the exporter uses from one outcome line, or None if it is not one."""
    rec = load_record(line)
    return None if rec is None else record_fields(rec)


def record_fields(rec: Mapping[str, Any]) -> dict[str, Any]:
    """The fields the exporter uses from a loaded outcome record, each checked."""
    reason = rec.get("reason")
    age = rec.get("checkpoint_age_s")
    if isinstance(age, bool) or not isinstance(age, (int, float)) or not math.isfinite(age) or age < 0:
        age = None
    return {
        "reason": reason if reason in REASONS else None,
        "preempted": rec.get("preempted") is True,
        "checkpointed": rec.get("checkpointed") is True,
        "checkpoint_age_s": float(age) if age is not None else None,
    }
