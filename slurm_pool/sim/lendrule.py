"""How the rebalancer lends whole idle nodes, for the node engine (pure): the rule and what it did.

:mod:`.nodelend` runs the lending; these are its inputs and outputs, apart so
that the engine's state (:mod:`.nodestate`) and the policy can name them
without importing the lender.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from slurm_pool.sim.engine import BORROWED, GUARANTEED, Job

#: An owner's job beyond its share: borrowed tier, but often a higher QOS than borrowers' (``shared``).
OVERFLOW = "overflow"
CLASSES = frozenset({GUARANTEED, OVERFLOW, BORROWED})


def job_class(job: Job, tier: str) -> str:
    """Who preempts placeholders is decided per class: guaranteed, an owner's overflow, or a borrower."""
    return OVERFLOW if tier == BORROWED and job.project is not None else tier


@dataclass(frozen=True)
class LendRule:
    """How the rebalancer lends, for :class:`~.nodes.NodePolicy.lend`."""

    period: float = 300.0
    #: Lending allowed at this time (None: always).
    window: Callable[[float], bool] | None = None
    #: GPUs the inference tier wants at this time (None: every idle node is wanted).
    demand: Callable[[float], float] | None = None
    max_nodes: int | None = None
    #: Seconds from a reclaim until the preemptor holds the node (placeholder's GraceTime + fence).
    grace: float = 10.0
    #: Job classes (:func:`job_class`) that preempt placeholders (``spec.bridge.lend_preemptors``).
    preemptors: frozenset[str] = CLASSES

    def __post_init__(self) -> None:
        if not self.period > 0:
            raise ValueError(f"lend.period: {self.period} is not positive")
        if not self.grace >= 0:
            raise ValueError(f"lend.grace: {self.grace} is negative")
        if self.max_nodes is not None and self.max_nodes < 0:
            raise ValueError(f"lend.max_nodes: {self.max_nodes} is negative")
        unknown = self.preemptors - CLASSES
        if unknown:
            raise ValueError(f"lend.preemptors: {sorted(unknown)} are not job classes ({', '.join(sorted(CLASSES))})")


@dataclass
class LendStats:
    """What lending did in one replay (inside the window)."""

    lent_gpu_seconds: float = 0.0
    #: Inference demand met by lent GPUs (``min(demand, lent)`` over time; no demand: all lent time).
    served_gpu_seconds: float = 0.0
    demand_gpu_seconds: float = 0.0
    lends: int = 0
    reclaims: int = 0  # placeholders Slurm's jobs preempted
    given_back: int = 0  # nodes the rebalancer returned (demand fell, window closed)
    #: Each lease: node, lent at, ended at, and how it ended ("reclaimed", "given back" or "lent").
    leases: list[tuple[str, float, float, str]] = field(default_factory=list)
