"""What ``doctor``'s checks report: one problem and what to do about it.

Top-level, not in ``doctor/``: the ``guarantees`` check (:mod:`slurm_pool.guarantees.check`)
reports it too, and ``doctor`` runs that check, so the type sits below both packages.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Finding:
    """One problem, and what to do about it."""

    check: str
    problem: str
    fix: str
