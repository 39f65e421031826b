"""What ``doctor``'s checks report: one problem and what to do about it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Finding:
    """One problem, and what to do about it."""

    check: str
    problem: str
    fix: str
