"""The spec as the predictor sees it: nodes, partitions as the node engine's queues, tiers (pure).

A partition whose nodes are exactly one project's owned groups is that owner's
guaranteed queue (its jobs run only there, and preempt borrowers); the spec's
``guarantees.partition`` is the floating guaranteed queue, whose jobs belong to
their account's project (a floating project: the engine runs them guaranteed
on the nodes nobody owns while within its guarantee, :attr:`PoolModel.guarantees`);
every other partition is a borrowed queue over its nodes.  The engine models
the pool wide borrowed tier (:mod:`slurm_pool.sim.nodes`): a borrowed partition
over fewer nodes is modelled over the whole pool, which the explanation says,
and the floating partition over every node nobody owns.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from slurm_pool.adapters.slurmjson import parse_duration
from slurm_pool.sim.engine import BORROWED, GUARANTEED
from slurm_pool.sim.history import MigNodes, mig_nodes
from slurm_pool.sim.nodes import Node, guarantees_from_spec, nodes_from_spec
from slurm_pool.spec.bridge import Bridge, bridge_of, lend_preemptors
from slurm_pool.spec.guarantees import guarantee_qos
from slurm_pool.spec.rules import partition_groups


@dataclass(frozen=True, slots=True)
class Queue:
    """One partition: its tier (QOS), engine tier and owner, order among partitions, and time limits
    (``floating``: the guarantees' partition, whose jobs belong to their accounts; its owner is None)."""

    name: str
    tier: str
    engine_tier: str  # GUARANTEED (an owner's partition) or BORROWED
    owner: str | None
    priority_tier: int
    max_time: float | None
    default_time: float | None
    grace: float
    whole_pool: bool  # its nodes are every node of the pool
    floating: bool = False

    def limit(self, asked: float | None) -> float | None:
        """A job's time limit here: what it asked for, else the partition's DefaultTime, else its MaxTime."""
        return asked if asked is not None else (self.default_time or self.max_time)


@dataclass(frozen=True, slots=True)
class TierRule:
    """What the submit policy (job_submit.lua) demands of a job in one tier (spec ``tiers[].policy``)."""

    max_gpus: int | None = None
    require_time: bool = False
    checkpoint: str = "none"  # "reject": its jobs must declare checkpointing

    def refuses(self, tier: str, gpus: int, limit: float | None, declared: bool) -> str:
        """Why a job of ``gpus`` GPUs and time ``limit`` (None: none) is refused here ("" if it is not);
        ``declared``: the job is known to declare checkpointing."""
        if self.max_gpus is not None and gpus > self.max_gpus:
            return f"tier {tier} allows at most {self.max_gpus} GPU(s) per job"
        if self.require_time and limit is None:
            return f"tier {tier} requires a time limit"
        if self.checkpoint == "reject" and not declared:
            return f"tier {tier} takes only jobs that checkpoint"
        return ""


@dataclass(frozen=True)
class PoolModel:
    """What a forward run needs from the spec."""

    nodes: tuple[Node, ...]
    queues: dict[str, Queue]
    #: Tier -> the tiers its jobs preempt (spec ``tiers[].preempt``).
    preempts: dict[str, frozenset[str]]
    #: Project -> the tiers its jobs may use.
    project_tiers: dict[str, tuple[str, ...]]
    #: Partitions each account may use (None: any account).
    allowed: dict[str, frozenset[str] | None]
    lend_partition: str | None
    lend_preemptors: frozenset[str]
    bf_interval: float
    mig: MigNodes
    #: Seconds between SIGTERM and SIGKILL (slurm.conf KillWait): a victim that ignores SIGTERM holds its GPUs
    #: that much past GraceTime.
    kill_wait: float = 0.0
    #: The bridge's settings (its off-peak windows say when lent nodes come back); None: no lending.
    bridge: Bridge | None = None
    #: Floating projects and their guaranteed whole GPUs (:attr:`~slurm_pool.sim.nodes.NodePolicy.guarantees`).
    guarantees: tuple[tuple[str, int], ...] = ()
    #: The tier the guarantees' QOS copy (None: no guarantees section).
    guarantee_tier: str | None = None
    #: Each tier's submit policy (a tier not named: none).
    rules: dict[str, TierRule] = field(default_factory=dict)

    @classmethod
    def from_spec(cls, spec: Any) -> "PoolModel":
        """The model of ``spec`` (a validated :class:`~slurm_pool.spec.model.PoolSpec`)."""
        owned = {p.name: frozenset(p.owns) for p in spec.projects if p.owns and not p.guarantee}
        floating = spec.guarantees.partition if spec.guarantees is not None else None
        every = frozenset(g.name for g in spec.node_groups if g.gpus is not None and g.gpus.count > 0)
        queues: dict[str, Queue] = {}
        for part in spec.partitions:
            groups = frozenset(partition_groups(spec, part.nodes)) & every
            owner = None if part.name == floating else next((p for p, gs in owned.items() if gs == groups), None)
            tier = spec.tier(part.tier)
            grace = part.grace_time if part.grace_time is not None else tier.grace_time
            queues[part.name] = Queue(
                name=part.name,
                tier=part.tier,
                engine_tier=GUARANTEED if owner is not None or part.name == floating else BORROWED,
                owner=owner,
                priority_tier=part.priority_tier,
                max_time=parse_duration(part.max_time),
                default_time=parse_duration(part.default_time) if part.default_time else None,
                grace=float(grace),
                whole_pool=groups == every,
                floating=part.name == floating,
            )
        bridge = bridge_of(spec)
        lend = bridge.partition if bridge.partition in queues else None
        return cls(
            nodes=tuple(nodes_from_spec(spec)),
            queues=queues,
            preempts={t.name: frozenset(t.preempt) for t in spec.tiers},
            project_tiers={p.name: tuple(p.tiers) for p in spec.projects},
            allowed={
                p.name: frozenset(p.allow_accounts) if p.allow_accounts is not None else None for p in spec.partitions
            },
            lend_partition=lend,
            lend_preemptors=lend_preemptors(spec, bridge) if lend is not None else frozenset(),
            bf_interval=float(spec.scheduler.bf_interval),
            kill_wait=float(spec.scheduler.kill_wait),
            mig=mig_nodes(spec),
            bridge=bridge if lend is not None else None,
            guarantees=guarantees_from_spec(spec),
            guarantee_tier=spec.guarantees.tier if spec.guarantees is not None else None,
            rules={
                t.name: TierRule(t.policy.max_gpus_per_job, t.policy.require_time_limit, t.policy.checkpoint)
                for t in spec.tiers
            },
        )

    @property
    def grace(self) -> float:
        """The GraceTime an owner's preemptor waits for its victims: the longest of the borrowed partitions'."""
        return max((q.grace for q in self.queues.values() if q.engine_tier == BORROWED), default=0.0)

    def project(self, q: Queue, account: str) -> str | None:
        """The engine project of ``account``'s job in ``q``: the owner (an owner's partition), the account
        (the floating partition, a floating project's), else None (a borrower)."""
        if q.floating:
            return account if any(p == account for p, _ in self.guarantees) else None
        return q.owner if q.engine_tier == GUARANTEED else None

    def qos(self, q: Queue, account: str) -> str:
        """The QOS ``account``'s job in ``q`` runs with: its guarantee's in the floating partition, else the
        partition's tier."""
        if q.floating and self.guarantee_tier is not None:
            return guarantee_qos(self.guarantee_tier, account)
        return q.tier

    def partitions_for(self, account: str) -> list[Queue]:
        """The partitions ``account`` may submit to whose tier its project may use, best first (the floating
        partition: a floating project's only)."""
        tiers = set(self.project_tiers.get(account, ()))
        out = [
            q
            for q in self.queues.values()
            if q.tier in tiers
            and q.owner in (None, account)
            and (not q.floating or self.project(q, account) is not None)
            and (self.allowed.get(q.name) is None or account in (self.allowed[q.name] or ()))
            and q.name != self.lend_partition
        ]
        return sorted(out, key=lambda q: (-q.priority_tier, q.name))
