"""Floating guarantees: a project is promised GPUs anywhere in the pool, not named servers.

A project may own node groups (``owns``: its jobs run in the guaranteed tier on
its own servers), have a ``guarantee`` (GPUs, in total or per GPU type, on any
node of the pool's guaranteed partition), or both.  Each project with a
guarantee gets a QOS of its own (:func:`guarantee_qos`): the guaranteed tier's
priority, preemption list, mode and grace time, with ``GrpTRES`` set to the
guarantee, so Slurm itself caps what the project runs there, and the QOS
preempts the borrowing tiers on every node of the partition.  job_submit.lua
routes a project's job into its guarantee while it fits, and beyond it into the
``overflow`` tier, with a message saying so.

``overcommit`` bounds the sum of the guarantees over the partition's GPUs, per
GPU type: 1.0 promises no more than there is; 1.5 sells half again as much,
trusting that owners do not all burst at once (``slurm-pool simulate --size
--compare`` finds the ratio a site's own history allows).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Annotated

from pydantic import AfterValidator, Field

from slurm_pool.spec.base import Name, Strict

if TYPE_CHECKING:
    from slurm_pool.spec.model import PoolSpec, Project

#: A guarantee's key: every GPU (``gres/gpu``) or GPUs of one GRES type (``gres/gpu:h100``).
GUARANTEE_KEY_RE = re.compile(r"gres/gpu(?::([a-z0-9][a-z0-9._-]{0,62}))?")
#: The most GPUs one guarantee may name (Slurm's TRES counts are 64-bit; no pool is this big).
MAX_GUARANTEE_GPUS = 100_000
#: The most overcommit a spec may ask for.
MAX_OVERCOMMIT = 10.0


def _guarantee(v: dict[str, int]) -> dict[str, int]:
    for key, val in v.items():
        if GUARANTEE_KEY_RE.fullmatch(key) is None:
            raise ValueError(f"{key!r} is not gres/gpu or gres/gpu:<type> (a GPU GRES type, lower case)")
        if not 1 <= val <= MAX_GUARANTEE_GPUS:
            raise ValueError(f"{key}={val} is not between 1 and {MAX_GUARANTEE_GPUS}")
    if "gres/gpu" in v and len(v) > 1:
        raise ValueError("name either gres/gpu (any GPU) or GPU types (gres/gpu:<type>), not both")
    return v


#: ``{gres/gpu: 4}`` or ``{gres/gpu:h100: 4, gres/gpu:a100: 2}``.
Guarantee = Annotated[dict[str, int], AfterValidator(_guarantee)]


class Guarantees(Strict):
    """How floating guarantees are rendered: the tier they take, where they run, what overflows."""

    #: The tier each guarantee's QOS copies (priority, preempt list, preempt mode, grace time, usage factor).
    tier: Name
    #: A partition of that tier over node groups nobody owns: where guaranteed jobs run.
    partition: Name
    #: The tier a project's job beyond its guarantee is routed to (preemptible, pool-wide).
    overflow: Name
    #: Bound on (sum of guarantees) / (GPUs of the partition), per GPU type.
    overcommit: float = Field(default=1.0, gt=0, le=MAX_OVERCOMMIT)


def guarantee_qos(tier: str, project: str) -> str:
    """The QOS of ``project``'s guarantee: ``<tier>-<project>``."""
    return f"{tier}-{project}"


def floating_projects(spec: PoolSpec) -> list[Project]:
    """The projects with a guarantee, in spec order."""
    return [p for p in spec.projects if p.guarantee]


def guarantee_type(key: str) -> str | None:
    """The GPU type a guarantee key names (None: any GPU)."""
    m = GUARANTEE_KEY_RE.fullmatch(key)
    return m.group(1) if m else None
