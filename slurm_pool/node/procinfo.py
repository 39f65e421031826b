"""Processes as /proc shows them (standard library only: the prolog imports this on its fast path)."""

from __future__ import annotations

import os


def ancestors(pid: int | None = None) -> set[int]:
    """``pid`` (default: this process) and every process above it."""
    out, cur = set(), pid or os.getpid()
    while cur > 1 and cur not in out:
        out.add(cur)
        try:
            with open(f"/proc/{cur}/stat", encoding="ascii", errors="replace") as fh:
                cur = int(fh.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
    return out


def alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False
