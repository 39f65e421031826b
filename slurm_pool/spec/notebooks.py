"""The notebook tier of the spec: JupyterHub servers as Slurm jobs.

A notebook server is one batch job in ``partition`` (its tier is the
partition's, and its QOS), holding one MIG slice, some GPU shards or no GPU,
for at most ``time_limit``; the hub's idle culler ends it after
``idle_timeout`` seconds without activity.  It is preemptible only where the
spec says so (``preemptible``), which must agree with the tiers' preemption.
The rules that relate these fields to the rest of the spec live in
:mod:`slurm_pool.spec.rules`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from pydantic import Field, field_validator, model_validator

from slurm_pool.spec.base import MigProfile, Name, Strict
from slurm_pool.spec.ranges import time_seconds

if TYPE_CHECKING:
    from slurm_pool.spec.model import PoolSpec

#: The culler's timeout: from a minute (it checks a few times per timeout) to a week.
MIN_IDLE_TIMEOUT = 60
MAX_IDLE_TIMEOUT = 7 * 86400


def limit_seconds(text: str) -> Optional[int]:
    """Seconds of a Slurm time limit; None for UNLIMITED/INFINITE (raises ValueError when malformed)."""
    return time_seconds(text)


class NotebookGpu(Strict):
    """What one notebook server holds: a MIG slice (a profile such as ``1g.10gb``) or shards, not both."""

    mig: Optional[MigProfile] = None
    shards: Optional[int] = Field(default=None, ge=1, le=1024)

    @model_validator(mode="after")
    def _one_kind(self) -> "NotebookGpu":
        if (self.mig is None) == (self.shards is None):
            raise ValueError("name exactly one of mig (a MIG profile, e.g. 1g.10gb) or shards (a count)")
        return self


class Notebooks(Strict):
    """JupyterHub's notebook servers, one Slurm job each (``slurm-pool render`` emits jupyterhub_config.py)."""

    partition: Name
    gpu: Optional[NotebookGpu] = None
    #: Whether a higher tier may preempt a server (it then ends; a notebook cannot be requeued).
    preemptible: bool = False
    time_limit: str = "08:00:00"
    idle_timeout: int = Field(default=3600, ge=MIN_IDLE_TIMEOUT, le=MAX_IDLE_TIMEOUT)
    cpus: int = Field(default=1, ge=1, le=256)
    memory_mb: int = Field(default=4096, ge=64, le=2**30)

    @field_validator("time_limit")
    @classmethod
    def _limit(cls, v: str) -> str:
        seconds = limit_seconds(v)
        if seconds is None:
            raise ValueError(f"{v!r}: a notebook server needs a finite time limit")
        if seconds < 60:
            raise ValueError(f"{v!r} is under a minute")
        return v


def notebook_users(spec: "PoolSpec", tier: str) -> list[str]:
    """The users who may start notebook servers in ``tier``: those of every project that may use it, sorted."""
    return sorted({u for p in spec.projects if tier in p.tiers for u in p.users})
