"""Lending whole idle nodes to the inference tier, inside the node engine (pure).

The bridge (``slurm-pool rebalance``, from cron) holds each lent node with a
placeholder job in the lowest tier (``k8s-lend``).  Here a lent node is taken
from Slurm's jobs whole, as that placeholder takes it:

* Every ``period`` seconds (a cron tick, after the scheduler's pass at that
  moment), while ``window`` allows lending, the rebalancer lends whole idle
  nodes (no job on them, none reserved for a waiting job by backfill),
  nobody's nodes first, then by index, until the lent GPUs cover
  ``demand`` (no demand given: every such node) or ``max_nodes`` are lent.
  Beyond the demand it gives back the newest lends; when the window closes,
  all of them.
* A job whose class is in ``preemptors`` (its tier, :data:`OVERFLOW` for an
  owner's job beyond its share) and that fits no free GPUs preempts
  placeholders before any other job (they are the lowest tier): it takes the
  best-fitting lent node in its scope (or lent whole nodes beside free ones,
  for a job bigger than a node) and starts ``grace`` seconds later, the
  placeholder's GraceTime plus the fence.  A job of another tier (a spot tier
  that does not preempt ``k8s-lend``) waits for the rebalancer.

Simplified against the bridge: no forecast, no minimum lease and no cost
model (nodes are taken in a fixed order), and the rest of a reclaimed node
is free for other jobs at once, not after the placeholder's grace.
"""

from __future__ import annotations

import math

from slurm_pool.sim.engine import Job
from slurm_pool.sim.lendrule import CLASSES, OVERFLOW, LendRule, LendStats, job_class
from slurm_pool.sim.nodestate import EngineState

__all__ = ["CLASSES", "OVERFLOW", "LendRule", "LendStats", "Lender", "job_class"]


class Lender:
    """The lent nodes of one replay, changed by cron ticks and by reclaims.

    A node is lent whole: every unit of it (its whole GPUs and its MIG instances,
    :mod:`.units`) is taken from Slurm's jobs while it is lent.
    """

    def __init__(self, sim: EngineState, rule: LendRule):
        self.sim = sim
        self.rule = rule
        self.lent = sim.lent  # node -> lent at (insertion order: oldest first), shared with the state
        self.stats = LendStats()
        self.since = 0.0  # last time the integrals were brought up to date
        self.wanted = 0.0  # demand at the last tick
        self.units_of: list[list[int]] = [[] for _ in sim.nodes]
        for u, n in enumerate(sim.units.node):
            if sim.size[u]:
                self.units_of[n].append(u)

    # -- integrals ---------------------------------------------------------------
    def lent_gpus(self) -> int:
        """Physical GPUs lent (what the inference tier gets)."""
        return sum(self.sim.nodes[n].gpus for n in self.lent)

    def lent_eq(self) -> int:
        """What lent units hold, in the engine's 1/den GPUs (neither idle nor busy to Slurm)."""
        sim = self.sim
        return sum(sim.size[u] * sim.units.cost[u] for n in self.lent for u in self.units_of[n])

    def _flush(self, until: float | None = None) -> None:
        now = min(self.sim.now if until is None else until, self.sim.window)
        dt = max(0.0, now - self.since)
        if dt:
            lent = self.lent_gpus()
            self.stats.lent_gpu_seconds += lent * dt
            self.stats.served_gpu_seconds += (lent if self.rule.demand is None else min(lent, self.wanted)) * dt
            self.stats.demand_gpu_seconds += (lent if self.rule.demand is None else self.wanted) * dt
        self.since = max(self.since, now)

    def ticks(self) -> list[float]:
        return [k * self.rule.period for k in range(math.ceil(self.sim.window / self.rule.period))]

    # -- the rebalancer ----------------------------------------------------------
    def _idle(self, n: int) -> bool:
        sim = self.sim
        return all(sim.free[u] == sim.size[u] and not sim.on_node[u] for u in self.units_of[n])

    def tick(self) -> None:
        """One cron run: lend or give back toward the demand, inside the window."""
        sim, rule = self.sim, self.rule
        self._flush()
        allowed = rule.window is None or rule.window(sim.now)
        self.wanted = rule.demand(sim.now) if rule.demand is not None else math.inf
        if not allowed:
            for n in list(self.lent):
                self._give_back(n)
            return
        while self.lent:  # beyond the demand: the newest lend goes back first
            newest = next(reversed(self.lent))
            if self.lent_gpus() - sim.nodes[newest].gpus < self.wanted:
                break
            self._give_back(newest)
        reserved = {  # the nodes of backfill's reservations for the queue heads still waiting
            sim.units.node[u]
            for key, entry in sim.resv.items()
            if sim.queues[key] and sim.queues[key][0].id == entry[0]
            for u in entry[3]
        }
        order = sorted(range(len(sim.nodes)), key=lambda n: (sim.nodes[n].owner is not None, n))
        for n in order:
            if self.lent_gpus() >= self.wanted or (rule.max_nodes is not None and len(self.lent) >= rule.max_nodes):
                break
            if n not in self.lent and n not in reserved and self.units_of[n] and self._idle(n):
                self.lent[n] = sim.now
                self.stats.lends += 1
                for u in self.units_of[n]:
                    sim.set_free(u, 0)

    def _give_back(self, n: int) -> None:
        self._end(n, "given back")
        self.stats.given_back += 1

    def _end(self, n: int, how: str) -> None:
        sim = self.sim
        self.stats.leases.append((sim.nodes[n].name, self.lent.pop(n), sim.now, how))
        for u in self.units_of[n]:
            sim.set_free(u, sim.size[u])

    # -- Slurm's side --------------------------------------------------------------
    def reclaims(self, job: Job, tier: str) -> bool:
        """Whether ``job``, in ``tier``, preempts placeholders."""
        return job_class(job, tier) in self.rule.preemptors

    def reclaim(self, job: Job, tier: str, scope: str) -> tuple[dict[int, int], float] | None:
        """Preempt placeholders so ``job`` fits in ``scope``: its allocation and start, or None."""
        gpus = job.gpus
        if not self.lent or not self.reclaims(job, tier):
            return None
        sim = self.sim
        idx = sim.index[(scope, job.profile)]
        lent = [u for u in idx.members if sim.units.node[u] in self.lent]  # units of its kind, on lent nodes
        if not lent:
            return None
        if gpus <= idx.top:
            fits = [u for u in lent if sim.size[u] >= gpus]
            if not fits:
                return None
            chosen = [min(fits, key=lambda u: (sim.size[u], u))]
        elif job.profile is not None:
            return None  # MIG instances on one node only
        else:
            have = sum(sim.size[u] for u in idx.members if sim.free[u] == sim.size[u])
            chosen = []
            for u in sorted(lent, key=lambda u: (-sim.size[u], u)):
                if have >= gpus:
                    break
                chosen.append(u)
                have += sim.size[u]
            if have < gpus:
                return None
        self._flush()
        for u in chosen:
            self._end(sim.units.node[u], "reclaimed")
            self.stats.reclaims += 1
        alloc = sim.fit(job, scope)
        assert alloc is not None, "a reclaimed node must make the job fit"
        return alloc, sim.now + self.rule.grace

    def close(self) -> None:
        """The replay ended: integrals up to the window's end (or later), where open leases end, "lent"."""
        end = max(self.sim.now, self.sim.window)
        self._flush(end)
        for n, since in self.lent.items():
            self.stats.leases.append((self.sim.nodes[n].name, since, end, "lent"))
