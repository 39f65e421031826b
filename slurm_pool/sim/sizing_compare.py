"""Dedicated servers, owned nodes and floating guarantees, sized on the same history (issue 28).

Three designs of the same servers, on the node engine (:mod:`.nodes`):

* **dedicated**: each owner on its own servers, borrowers nowhere (the
  baseline: its GPUs are the dedicated GPUs, ratio 1);
* **owned**: the pool as :mod:`.sizing` sizes it: owners own nodes, servers
  are taken away from the owner that keeps the largest share, down to each
  owner's floor;
* **floating**: nobody owns a node; each owner is guaranteed its dedicated
  GPUs (what it paid for), capped at the pool's GPUs, on any node
  (``NodePolicy.guarantees``).  Servers are taken away largest first (ties:
  the owned design's order with no floors), down to the last pool that holds
  the biggest job and every MIG job.  Overcommit = the sum of the guarantees
  over the pool's GPUs.

Pooled sizes pass as in :mod:`.sizing`: owners' p95 wait under the bar, no
owner job unfinished, and at least ``(1 - tol)`` of the
borrower jobs done inside the window that the owned design's full pool gets
(what the pool does today; ``tol`` 1 % by default, so that one job ending a
second late does not decide a size).

Beside busy, each size has its *offered load*: the GPU time of the jobs that
could run in it inside the window (each job's GPUs x its runtime, cut at the
window's end; the dedicated design's owners only) over the size's GPU time.
Slurm's busy cannot pass it, so it says whether a busy target was reachable.

The bar is the owners' p95 wait as a site states it (issue 48): the
dedicated servers' p95 on the same draw plus ``slack`` seconds (the CLI's
``--owner-slack``, by default one GraceTime: what a preempted borrower may
keep an owner waiting), or an absolute ``owner_p95`` (``--owner-p95``).  Until
issue 48 the slack was 0 and a size had to pass on every draw.

Not hinging on chance: each *draw* (a seed) gives every job a runtime drawn
from the history's own runtime distribution, keyed by seed and job id
(:func:`redraw`; seed 0 is the history as given).  Every draw has its own
baseline and bar, judged on its own.  A size passes *at confidence c* when it
passes on at least ``ceil(c x draws)`` of the draws (:func:`draws_needed`:
0.9 over 10 draws is 9 of them; over 3 draws, all 3); ``confidence=1`` is the
old rule, every draw.  The answer is the smallest size that passes with every
larger size tried passing too (monotone: a pass below a failure does not
count).  Beside it, each draw's smallest passing size, whose range shows how
much one draw could mislead, each size's share of draws that pass, owners'
p95 per project (one project's burst can decide a size), and the lower bound
of :mod:`.bound` for each draw: the fewest GPUs on which any schedule could
keep that draw's bar.  The answer's bound is the ``ceil(c x draws)``-th
smallest of them (a size that passes on that many draws is at least each of
their bounds).
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, replace
from typing import Any, Callable, Sequence

from slurm_pool.sim.bound import lower_bound
from slurm_pool.sim.engine import Job, Policy, Result, quantile
from slurm_pool.sim.lendrule import LendRule
from slurm_pool.sim.nodes import Node, NodePolicy, NodeResult, simulate_nodes
from slurm_pool.sim.sizing import (
    BORROWER_TOLERANCE,
    Sizing,
    Trial,
    borrowers_done_in_window,
    check_tolerance,
    judge,
    nested_pools,
    pool_sizes,
    removal_order,
)
from slurm_pool.sim.units import compute_slices

DESIGNS = ("dedicated", "owned", "floating")


def check_confidence(c: float) -> float:
    """``c`` if it is a share above 0, at most 1, else ValueError."""
    if isinstance(c, bool) or not (isinstance(c, (int, float)) and math.isfinite(c) and 0 < c <= 1):
        raise ValueError(f"confidence: {c!r} is not a share above 0, at most 1")
    return float(c)


def draws_needed(draws: int, confidence: float) -> int:
    """The fewest of ``draws`` draws a size must pass at ``confidence``: ``ceil(confidence x draws)`` (rounded
    to 9 places first, so that 0.9 x 10 is 9), at least 1."""
    return max(1, math.ceil(round(draws * confidence, 9)))


def check_seconds(name: str, v: float | None) -> float | None:
    """``v`` if it is None or a finite number of seconds at least 0, else ValueError naming ``name``."""
    if v is not None and (isinstance(v, bool) or not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0)):
        raise ValueError(f"{name}: {v!r} is not a number of seconds at least 0")
    return None if v is None else float(v)


def project_p95(r: Result) -> dict[str, float]:
    """Owners' p95 wait per project."""
    by: dict[str, list[float]] = {}
    for p, w in zip(r.owner_projects, r.owner_waits, strict=True):
        by.setdefault(p, []).append(w)
    return {p: quantile(ws, 0.95) for p, ws in sorted(by.items())}


def redraw(jobs: Sequence[Job], seed: int, runtimes: Sequence[float]) -> list[Job]:
    """``jobs`` with each runtime drawn from ``runtimes`` by a hash of ``seed`` and the job's id
    (seed 0: the jobs as given)."""
    if seed == 0:
        return list(jobs)
    if not runtimes:
        raise ValueError("runtimes: empty")
    values = sorted(runtimes)
    out = []
    for j in jobs:
        u = int.from_bytes(hashlib.sha256(f"{seed}:{j.id}".encode()).digest()[:8], "big") / 2.0**64
        out.append(replace(j, work=values[min(len(values) - 1, int(u * len(values)))]))
    return out


def dedicated_guarantees(nodes: Sequence[Node]) -> dict[str, int]:
    """Each owner's GPUs on its dedicated servers (MIG-partitioned ones too): the guarantee it paid for."""
    out: dict[str, int] = {}
    for n in nodes:
        if n.owner is not None:
            out[n.owner] = out.get(n.owner, 0) + n.gpus
    return out


def capped(paid: dict[str, int], pool: Sequence[Node]) -> tuple[tuple[str, int], ...]:
    """The guarantees on ``pool``: each owner's paid GPUs, at most the pool's GPUs."""
    cap = sum(n.gpus for n in pool)
    return tuple((o, min(g, cap)) for o, g in sorted(paid.items()))


def overcommit(paid: dict[str, int], pool: Sequence[Node]) -> float:
    """The guarantees on ``pool`` summed, over its GPUs."""
    gpus = sum(n.gpus for n in pool)
    return sum(g for _, g in capped(paid, pool)) / gpus if gpus else 0.0


def floating_sizes(nodes: Sequence[Node], jobs: Sequence[Job], max_sizes: int = 64) -> list[tuple[Node, ...]]:
    """The floating design's nested pools, largest first: ``nodes`` owned by nobody, servers taken away
    largest first (ties: the owned design's order without floors)."""
    free = [replace(n, owner=None) for n in nodes]
    rank = {n.name: k for k, n in enumerate(removal_order(nodes, {}))}
    gone = sorted(free, key=lambda n: (-n.gpus, rank[n.name]))
    return nested_pools(free, gone, jobs, max_sizes)


def offered_gpu_seconds(jobs: Sequence[Job], window: float, slices_per_gpu: int = Node.slices_per_gpu) -> float:
    """GPU-seconds the jobs ask inside the window: GPUs x runtime from arrival, cut at the window's end
    (a MIG job counts its compute slices over ``slices_per_gpu`` per instance)."""
    total = 0.0
    for j in jobs:
        share = 1.0 if j.profile is None else (compute_slices(j.profile) or slices_per_gpu) / slices_per_gpu
        total += j.gpus * share * max(0.0, min(j.work, window - j.arrival))
    return total


def busy(r: Result) -> float:
    """Slurm's useful GPU time plus GPU time lent to the inference tier, over capacity."""
    lent = r.lending.lent_gpu_seconds if isinstance(r, NodeResult) and r.lending is not None else 0.0
    return r.utilization + (lent / (r.capacity * r.window) if r.capacity and r.window else 0.0)


@dataclass(frozen=True)
class Design:
    """One design's sizes (largest first) replayed on every draw: ``trials[draw][size]``."""

    name: str
    dedicated_gpus: int
    trials: tuple[tuple[Trial, ...], ...]
    floor: str  # why no smaller size was tried
    paid: dict[str, int] | None = None  # floating: each owner's guarantee before the cap
    #: GPU-seconds its jobs ask inside the window, per draw (:func:`offered_gpu_seconds`).
    offered: tuple[float, ...] = ()
    #: The share of draws a size must pass (:func:`draws_needed`); 1: every draw.
    confidence: float = 1.0

    def offered_load(self, i: int) -> float | None:
        """The mean over draws of the offered GPU-seconds over size ``i``'s GPU-seconds (None: not known)."""
        r = self.trials[0][i].result
        if not self.offered or not r.window or not self.gpus[i]:
            return None
        return sum(self.offered) / len(self.offered) / (self.gpus[i] * r.window)

    @property
    def gpus(self) -> list[int]:
        return [t.gpus for t in self.trials[0]]

    def passing_share(self, i: int) -> float:
        """The share of draws on which size ``i`` passes."""
        return sum(d[i].passes for d in self.trials) / len(self.trials)

    def passes(self, i: int) -> bool:
        """Size ``i`` passes on at least :func:`draws_needed` of the draws."""
        return sum(d[i].passes for d in self.trials) >= draws_needed(len(self.trials), self.confidence)

    @property
    def chosen(self) -> int | None:
        """The index of the smallest size that passes, every larger one passing too (None: all fail)."""
        best = None
        for i in range(len(self.gpus)):
            if not self.passes(i):
                break
            best = i
        return best

    @property
    def per_draw(self) -> list[int | None]:
        """Each draw's smallest passing size, in GPUs (None: none passes on it)."""
        return [min((t.gpus for t in d if t.passes), default=None) for d in self.trials]

    def ratio(self, gpus: int | None) -> float | None:
        return gpus / self.dedicated_gpus if gpus is not None and self.dedicated_gpus else None

    @property
    def ratio_range(self) -> tuple[float, float] | None:
        """The lowest and highest of the draws' smallest passing sizes, over the dedicated GPUs."""
        got = [g for g in self.per_draw if g is not None]
        if len(got) < len(self.per_draw) or not got:
            return None
        lo, hi = self.ratio(min(got)), self.ratio(max(got))
        assert lo is not None and hi is not None
        return lo, hi

    def overcommit(self, i: int) -> float | None:
        return overcommit(self.paid, self.trials[0][i].nodes) if self.paid is not None else None

    @property
    def limit(self) -> str:
        """What stops a smaller pool: the floor, or why the next smaller size fails (on which draw)."""
        best = self.chosen
        if best is None:
            i = 0
        elif best + 1 >= len(self.gpus):
            return self.floor
        else:
            i = best + 1
        for k, d in enumerate(self.trials):
            if d[i].failures and self.confidence < 1:
                where = f" (draw {k}; passes on {self.passing_share(i):.0%} of the draws)"
                return f"at {d[i].gpus} GPUs{where}: " + "; ".join(d[i].failures)
            if d[i].failures:
                where = f" (draw {k})" if len(self.trials) > 1 else ""
                return f"at {d[i].gpus} GPUs{where}: " + "; ".join(d[i].failures)
        return self.floor

    def figures(self, i: int) -> dict[str, Any]:
        """Size ``i`` over the draws: owners' worst p95, and the means of the rest."""
        rs = [d[i].result for d in self.trials]
        n = len(rs)
        per = [project_p95(r) for r in rs]
        return {
            "gpus": self.gpus[i],
            "ratio_to_dedicated": round(self.gpus[i] / self.dedicated_gpus, 3),
            "overcommit": None if self.overcommit(i) is None else round(self.overcommit(i) or 0.0, 3),
            "owner_wait_p95_seconds": round(max(r.wait_quantile(0.95) for r in rs), 1),
            "owner_wait_p95_seconds_per_draw": [round(r.wait_quantile(0.95), 1) for r in rs],
            "owner_wait_p95_seconds_per_project": {
                p: round(max(got.get(p, 0.0) for got in per), 1) for p in sorted({p for got in per for p in got})
            },
            "draws_passing_share": round(self.passing_share(i), 3),
            "utilization": round(sum(r.utilization for r in rs) / n, 4),
            "busy_with_lent": round(sum(busy(r) for r in rs) / n, 4),
            "offered_load": None if self.offered_load(i) is None else round(self.offered_load(i) or 0.0, 4),
            "preemptions": round(sum(r.preemptions for r in rs) / n, 1),
            "owner_jobs_preempted": round(sum(r.owner_jobs_preempted for r in rs) / n, 1),
            "lost_gpu_hours": round(sum(r.lost_gpu_seconds for r in rs) / n / 3600, 2),
            "grace_and_restart_gpu_hours": round(
                sum(r.grace_gpu_seconds + r.restart_gpu_seconds for r in rs) / n / 3600, 2
            ),
            "passes": self.passes(i),
        }


@dataclass(frozen=True)
class Comparison:
    """The three designs on the same history and draws."""

    draws: int
    baselines: tuple[Result, ...]  # dedicated, per draw
    needs: tuple[int, ...]  # borrower jobs done in the window on the owned design's full pool, per draw
    designs: tuple[Design, ...]
    tolerance: float = BORROWER_TOLERANCE  # the share of a need a size may fall short by
    targets: tuple[float, ...] = ()  # the owners' p95 bar, per draw
    slack: float = 0.0  # seconds over the dedicated p95 (unused with owner_p95)
    owner_p95: float | None = None  # an absolute bar instead
    confidence: float = 1.0  # the share of draws a size must pass
    #: The fewest GPUs on which any schedule keeps the draw's bar (:func:`.bound.lower_bound`), per draw.
    bounds: tuple[int, ...] = ()

    @property
    def bound(self) -> int | None:
        """The fewest GPUs a size passing on :func:`draws_needed` draws can have: that many-th smallest bound."""
        if not self.bounds:
            return None
        return sorted(self.bounds)[draws_needed(len(self.bounds), self.confidence) - 1]

    def bar(self) -> str:
        """The bar in words."""
        if self.owner_p95 is not None:
            return f"owners' p95 wait <= {self.owner_p95:,.0f} s"
        return f"owners' p95 wait <= dedicated servers' p95 + {self.slack:,.0f} s"

    def design(self, name: str) -> Design:
        return next(d for d in self.designs if d.name == name)

    def sizing(self, draw: int = 0) -> Sizing:
        """The owned design on one draw, as :func:`.sizing.size_pool` gives it (for the report)."""
        owned = self.design("owned")
        base = self.baselines[draw]
        target = self.targets[draw] if self.targets else base.wait_quantile(0.95)
        return Sizing(base, owned.dedicated_gpus, target, self.needs[draw], owned.trials[draw], self.tolerance)


def compare(
    nodes: Sequence[Node],
    jobs: Sequence[Job],
    policy: Policy,
    window: float,
    draws: int = 1,
    runtimes: Sequence[float] | None = None,
    lend: LendRule | None = None,
    max_sizes: int = 64,
    tol: float = BORROWER_TOLERANCE,
    progress: Callable[[int, int], None] | None = None,
    slack: float | None = None,
    owner_p95: float | None = None,
    confidence: float = 1.0,
) -> Comparison:
    """Size the three designs of ``nodes`` under pooled ``policy`` over ``draws`` runtime draws (drawn
    from ``runtimes``, by default the jobs' own), each replay lending idle nodes by ``lend``; a size's
    borrowers may fall short of the bar by ``tol`` (a share, 0 to 0.2).  Owners' p95 bar: the dedicated
    p95 plus ``slack`` seconds (default 0), or ``owner_p95``; a size passes on ``confidence`` of the draws.
    ``progress(replays done, of)`` after each replay."""
    check_tolerance(tol)
    check_confidence(confidence)
    slack, owner_p95 = check_seconds("owner_slack", slack), check_seconds("owner_p95", owner_p95)
    if slack is not None and owner_p95 is not None:
        raise ValueError("owner_slack and owner_p95: give one bar, not both")
    if draws < 1:
        raise ValueError(f"draws: {draws} is less than 1")
    paid = dedicated_guarantees(nodes)
    if not paid:
        raise ValueError("nodes: no server has an owner, so there are no dedicated servers to size against")
    if not policy.pooled:
        raise ValueError(f"policy: {policy.name!r} is not pooled; sizing compares a pool with dedicated servers")
    base_pol = replace(policy, lend=lend) if isinstance(policy, NodePolicy) else NodePolicy(**vars(policy), lend=lend)
    pool_of = {"owned": pool_sizes(nodes, jobs, max_sizes), "floating": floating_sizes(nodes, jobs, max_sizes)}
    values = list(runtimes) if runtimes is not None else [j.work for j in jobs]
    dedicated_gpus = sum(n.gpus for n in nodes)
    baselines, needs = [], []
    per: dict[str, list[tuple[Trial, ...]]] = {name: [] for name in DESIGNS}
    slices = min((n.slices_per_gpu for n in nodes if n.mig), default=Node.slices_per_gpu)
    most_slices = max((n.slices_per_gpu for n in nodes if n.mig), default=Node.slices_per_gpu)
    targets, bounds = [], []
    offered: dict[str, list[float]] = {"dedicated": [], "pooled": []}
    replays, done = draws * (1 + sum(map(len, pool_of.values()))), 0

    def replayed() -> None:
        nonlocal done
        done += 1
        if progress is not None:
            progress(done, replays)

    for seed in range(draws):
        these = redraw(jobs, seed, values)
        offered["dedicated"].append(offered_gpu_seconds([j for j in these if j.project is not None], window, slices))
        offered["pooled"].append(offered_gpu_seconds(these, window, slices))
        base = simulate_nodes(nodes, these, replace(base_pol, name="dedicated", pooled=False), window)
        replayed()
        target = owner_p95 if owner_p95 is not None else base.wait_quantile(0.95) + (slack or 0.0)
        targets.append(target)
        bounds.append(lower_bound(these, target, 0.95, most_slices))
        baselines.append(base)
        per["dedicated"].append((Trial(tuple(nodes), base, judge(base, target, 0, tol)),))
        need: int | None = None
        for name in ("owned", "floating"):
            trials = []
            for pool in pool_of[name]:
                pol = base_pol if name == "owned" else replace(base_pol, guarantees=capped(paid, pool))
                r = simulate_nodes(pool, these, pol, window)
                replayed()
                need = borrowers_done_in_window(r) if need is None else need
                trials.append(Trial(pool, r, judge(r, target, need, tol)))
            per[name].append(tuple(trials))
        needs.append(need or 0)
    floors = {
        "dedicated": "the baseline: every owner on its own servers",
        "owned": "floors: every owner keeps one server, or as many as its biggest job needs",
        "floating": "floor: the fewest servers that hold the biggest job (and every MIG job)",
    }
    designs = tuple(
        Design(
            name,
            dedicated_gpus,
            tuple(per[name]),
            floors[name],
            paid if name == "floating" else None,
            tuple(offered["dedicated" if name == "dedicated" else "pooled"]),
            confidence,
        )
        for name in DESIGNS
    )
    return Comparison(
        draws,
        tuple(baselines),
        tuple(needs),
        designs,
        tol,
        tuple(targets),
        slack or 0.0,
        owner_p95,
        confidence,
        tuple(bounds),
    )


def design_summary(d: Design, bound: int | None = None) -> dict[str, Any]:
    """One design's answer beside the lower ``bound`` and every size tried (JSON-ready)."""
    best = d.chosen
    rr = d.ratio_range
    return {
        "design": d.name,
        "gpus_needed": d.gpus[best] if best is not None else None,
        "lower_bound_gpus": bound,
        "ratio_to_bound": round(d.gpus[best] / bound, 3) if best is not None and bound else None,
        "ratio_to_dedicated": round(d.gpus[best] / d.dedicated_gpus, 3) if best is not None else None,
        "ratio_range_over_draws": [round(rr[0], 3), round(rr[1], 3)] if rr is not None else None,
        "per_draw_smallest_passing_gpus": d.per_draw,
        "at_size": d.figures(best) if best is not None else None,
        "limited_by": d.limit,
        "sizes": [d.figures(i) for i in range(len(d.gpus))],
    }


def summary(c: Comparison) -> dict[str, Any]:
    """The comparison (JSON-ready)."""
    return {
        "draws": c.draws,
        "dedicated_gpus": c.designs[0].dedicated_gpus,
        "dedicated_owner_wait_p95_seconds": [round(b.wait_quantile(0.95), 1) for b in c.baselines],
        "borrower_jobs_needed": list(c.needs),
        "borrower_tolerance": c.tolerance,
        "owner_bar": {
            "slack_seconds": None if c.owner_p95 is not None else c.slack,
            "owner_p95_seconds": c.owner_p95,
            "confidence": c.confidence,
            "draws_needed": draws_needed(c.draws, c.confidence),
            "targets_seconds": [round(t, 1) for t in c.targets],
        },
        "lower_bound_gpus_per_draw": list(c.bounds),
        "lower_bound_gpus": c.bound,
        "designs": [design_summary(d, c.bound) for d in c.designs],
    }
