"""Seeding the node engine with the jobs already running, to run it forward from a live state (pure).

:func:`.nodes.forward_nodes` starts the engine at time 0 not from an empty
pool but with the live jobs on their nodes: each :class:`Seed` is placed on
exactly the GPUs (or MIG instances) it holds, in its tier, as if it had
started at 0 with ``job.work`` seconds of work left and ``job.limit`` seconds
of its time limit left.  A seed already signalled (``free_at``) holds them
until then and is requeued like a preempted run.  Functions of the engine's
state (:class:`.nodestate.EngineState`), split from :mod:`.nodes` for size.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable

from slurm_pool.sim.engine import BORROWED, GUARANTEED, Job
from slurm_pool.sim.nodestate import EngineState


@dataclass(frozen=True)
class Seed:
    """A job already running (or signalled and leaving) when the forward run starts, at time 0.

    ``job.work``: its remaining useful seconds from 0 (signalled: the work its next run needs);
    ``job.limit``: its remaining time limit from 0 (None: the policy's; 0: already past it), and the
    limit of any later run too; ``job.arrival`` is ignored.
    """

    job: Job
    tier: str  # GUARANTEED or BORROWED
    nodes: tuple[tuple[str, int], ...]  # (node name, GPUs -- or MIG instances of job.profile -- held there)
    free_at: float | None = None  # already signalled (preempted, in its grace): gone at this time


def seed_alloc(sim: EngineState, seed: Seed, unit_of: dict[tuple[str, str | None], int]) -> dict[int, int]:
    """The units ``seed`` holds (unit -> GPUs or instances; ``unit_of``: by node name and kind); ValueError
    naming the job and the field when it cannot hold them now."""
    job = seed.job
    where = f"running job {job.id!r}"
    if seed.tier not in (GUARANTEED, BORROWED):
        raise ValueError(f"{where}: tier {seed.tier!r} is not {GUARANTEED!r} or {BORROWED!r}")
    if seed.tier == GUARANTEED and (job.project is None or (job.project, None) not in sim.share):
        raise ValueError(f"{where}: tier {seed.tier!r}: project {job.project!r} owns no nodes and has no guarantee")
    if seed.free_at is not None and not (math.isfinite(seed.free_at) and seed.free_at >= 0):
        raise ValueError(f"{where}: free_at {seed.free_at} is not a time from 0 on")
    alloc: dict[int, int] = {}
    for name, count in seed.nodes:
        u = unit_of.get((name, job.profile))
        if u is None:
            what = "unknown node" if (name, None) not in unit_of else f"no {job.profile} instances on node"
            raise ValueError(f"{where}: nodes: {what} {name!r}")
        if u in alloc:
            raise ValueError(f"{where}: nodes: node {name!r} given twice")
        if not 1 <= count <= sim.free[u]:
            raise ValueError(f"{where}: nodes: {count} on node {name!r}, outside 1..{sim.free[u]} (free there)")
        alloc[u] = count
    if sum(alloc.values()) != job.gpus:
        raise ValueError(f"{where}: nodes: {sum(alloc.values())} held in all, not its gpus {job.gpus}")
    return alloc


def place_seeds(sim: EngineState, seeds: Iterable[Seed]) -> None:
    """Place each seed at time 0 on its nodes, in its tier (its job already checked, as the engine checks
    jobs): it ends at ``job.work``, or (signalled) leaves at ``free_at`` and is requeued at the front of its
    queue."""
    unit_of = {(sim.nodes[n].name, k): u for u, (n, k) in enumerate(zip(sim.units.node, sim.units.kind, strict=True))}
    for seed in seeds:
        alloc = seed_alloc(sim, seed, unit_of)
        sim.launch(seed.job, seed.tier, alloc, alloc, 0.0, seed.free_at)
