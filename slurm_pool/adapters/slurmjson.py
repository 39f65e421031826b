"""Small, stdlib-only helpers for the shapes of Slurm's JSON output.

The base of the vocabulary layer (:mod:`slurm_pool.adapters.records`,
:mod:`slurm_pool.adapters.gres`), which the node hooks and job wrapper use
too: they must import little.  Slurm writes states as a list (``["IDLE", "DRAIN"]``) or a
``+``-joined string, and numbers as plain values or, from 23.02 on, as
``{"set": bool, "infinite": bool, "number": n}``.
"""

from __future__ import annotations

from typing import Any

#: Slurm's NO_VAL-style sentinels: anything this large means "unset/infinite".
INFINITE = 0xFFFFFFFE
#: The largest id or count a 32-bit field of Slurm holds that is not one of its sentinels (NO_VAL, INFINITE).
UINT32_MAX = INFINITE - 1
#: Likewise for 64-bit fields (GRES and TRES counts: NO_VAL64 is 2**64 - 2).
UINT64_MAX = 2**64 - 3
#: Prefix of every node reason (and job comment) slurm-pool writes; a drain without it is a human's.
REASON_PREFIX = "slurm-pool:"


def states(value: Any) -> tuple[str, ...]:
    """Upper-cased state words, in order, from a list or a ``+``/``,``-joined string."""
    if isinstance(value, list):
        return tuple(str(v).upper() for v in value)
    if isinstance(value, str):
        return tuple(s for s in value.upper().replace("+", " ").replace(",", " ").split() if s)
    return ()


def parse_duration(v: str) -> float | None:
    """Slurm's ``[days-]hours:minutes:seconds`` (None for UNLIMITED and the like)."""
    days, _, rest = v.rpartition("-")
    parts = rest.split(":")
    if (
        not all((p.isascii() and p.isdigit()) for p in parts)
        or not 1 <= len(parts) <= 3
        or (days and not (days.isascii() and days.isdigit()))
    ):
        return None
    nums = [int(p) for p in parts]
    while len(nums) < 3:
        nums.insert(0, 0)
    return float((int(days or 0) * 24 + nums[0]) * 3600 + nums[1] * 60 + nums[2])


def number(value: Any) -> int | None:
    """A Slurm number; None when unset, infinite or not a number."""
    if isinstance(value, dict):
        if not value.get("set", True) or value.get("infinite"):
            return None
        value = value.get("number")
    if isinstance(value, bool):  # not a count: JSON's true is no 1
        return None
    if isinstance(value, (int, float)):
        return None if value >= INFINITE else int(value)
    if isinstance(value, str) and value.strip().isascii() and value.strip().isdigit():
        return int(value)
    return None


class Unusable(ValueError):
    """An id or a count that is none: a record holding one is reported and skipped, never read as 0."""


def whole(value: Any, what: str, *, least: int = 0, most: int = UINT32_MAX) -> int:
    """An id or a count of Slurm's JSON or text, in ``least..most``; :class:`Unusable` otherwise.

    An int (not a bool, not a float: Slurm prints none), ASCII digits, or 23.02+'s
    ``{"set": true, "number": n}``; unset, infinite, negative, fractional, boolean
    or past what Slurm's field holds is no id and no count.
    """
    n = value
    if isinstance(n, dict) and n.get("set", True) is True and n.get("infinite", False) is False:
        n = n.get("number")
    if isinstance(n, str) and n.isascii() and n.isdigit() and len(n) <= 20:
        n = int(n)
    if isinstance(n, bool) or not isinstance(n, int) or not least <= n <= most:
        shown = repr(value)
        cut = f"{shown[:64]}..." if len(shown) > 64 else shown
        raise Unusable(f"{what} {cut} is not a whole number from {least} to {most}")
    return n
