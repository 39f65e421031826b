"""How many GPUs does the pool need?  The smallest pool that keeps owners' promise.

A *pool size* is a subset of the servers: servers are taken away one at a time,
always from the owner that has kept the largest share of its own servers (ties:
more servers kept, then the owner's name).  Every owner keeps at least one, and
enough for its biggest job (both engines run an owner's job only if it fits the
owner's share).  Each smaller pool is a subset of the one before, so the sizes
form one nested line from all servers down to those floors.  Servers of nobody
may all go.

A size **passes** when, replayed under the pool's policy,

* the owners' p95 wait is no worse than on their dedicated servers (all of
  them, the ``dedicated`` policy: the baseline),
* no owner job is left unfinished, and
* the borrowers get at least ``(1 - tol)`` of the jobs done inside the window
  that they get on all the servers pooled (what the pool does today, so the
  full size never fails on this; ``tol`` is :data:`BORROWER_TOLERANCE`, 1 %,
  by default).

Borrowers queue behind each other, so even all the servers pooled rarely
finish every borrower job that arrives inside the window: a job that comes
late, or waits, ends after it.  The count on the full pool is the bar; the
tolerance keeps a size from failing on one borrower job that ends a second
after the window (chance, not capacity).

The answer is the smallest size that passes, as GPUs and as a ratio to the
dedicated GPUs; every size tried is kept for the plot of GPUs against p95.
:mod:`.sizing_compare` sizes floating guarantees beside owned nodes, over
several runtime draws, with the same bar (:func:`judge`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Callable, Sequence

from slurm_pool.sim.engine import Job, Policy, Result, simulate
from slurm_pool.sim.lendrule import LendRule
from slurm_pool.sim.nodes import Node, NodePolicy, simulate_nodes
from slurm_pool.sim.units import mig_counts

#: Replays ``jobs`` on a pool of servers under a policy (either engine).
Replay = Callable[[Sequence[Node], Policy], Result]
#: The GPU engine's name for servers nobody owns (a project with no jobs).
NOBODY = "(nobody)"
#: The share of the bar's borrower jobs a size may fall short by and still pass (1 %).
BORROWER_TOLERANCE = 0.01
#: The largest tolerance accepted (a fifth of the borrowers' jobs).
MAX_BORROWER_TOLERANCE = 0.2


@dataclass(frozen=True)
class Trial:
    """One pool size replayed: its servers, what happened, and why it fails (empty: it passes)."""

    nodes: tuple[Node, ...]
    result: Result
    failures: tuple[str, ...]

    @property
    def gpus(self) -> int:
        return sum(n.gpus for n in self.nodes)

    @property
    def passes(self) -> bool:
        return not self.failures


@dataclass(frozen=True)
class Sizing:
    """The baseline on dedicated servers and every pool size tried, largest first."""

    baseline: Result
    dedicated_gpus: int
    target_p95: float
    borrowers_needed: int  # borrower jobs done inside the window on all the servers pooled
    trials: tuple[Trial, ...]
    tolerance: float = BORROWER_TOLERANCE  # the share of borrowers_needed a size may fall short by

    @property
    def borrowers_floor(self) -> int:
        """The fewest borrower jobs done inside the window that pass."""
        return borrower_floor(self.borrowers_needed, self.tolerance)

    @property
    def best(self) -> Trial | None:
        """The smallest size that passes (None: not even all the servers do)."""
        passing = [t for t in self.trials if t.passes]
        return min(passing, key=lambda t: (t.gpus, len(t.nodes))) if passing else None

    @property
    def limit(self) -> str:
        """What stops a smaller pool: the floors (no smaller size), or why the next smaller size fails."""
        best = self.best
        if best is None:
            return "nothing passes"
        smaller = [t for t in self.trials if t.gpus < best.gpus]
        if not smaller:
            return "floors: every owner keeps one server, or as many as its biggest job needs"
        return "; ".join(max(smaller, key=lambda t: t.gpus).failures)

    @property
    def ratio(self) -> float | None:
        """GPUs needed over the dedicated GPUs."""
        best = self.best
        return best.gpus / self.dedicated_gpus if best is not None and self.dedicated_gpus else None


def _groups(nodes: Sequence[Node]) -> dict[str | None, list[Node]]:
    groups: dict[str | None, list[Node]] = {}
    for n in nodes:
        groups.setdefault(n.owner, []).append(n)
    return groups


def floors(nodes: Sequence[Node], jobs: Sequence[Job]) -> dict[str | None, int]:
    """The servers each owner keeps at least: one, and its first ones enough for its biggest job
    (of whole GPUs: MIG jobs are kept placeable by :func:`pool_sizes`)."""
    biggest: dict[str | None, int] = {}
    for j in jobs:
        if j.project is not None and j.profile is None:
            biggest[j.project] = max(biggest.get(j.project, 0), j.gpus)
    out: dict[str | None, int] = {}
    for owner, group in _groups(nodes).items():
        if owner is None:
            out[owner] = 0
            continue
        k, have = 1, group[0].gpus - len(group[0].mig)
        while k < len(group) and have < biggest.get(owner, 1):
            have += group[k].gpus - len(group[k].mig)
            k += 1
        out[owner] = k
    return out


def removal_order(nodes: Sequence[Node], keep: dict[str | None, int]) -> list[Node]:
    """The servers in the order sizing takes them away (each owner's last ones first, down to ``keep``)."""
    groups = _groups(nodes)
    kept = {o: len(g) for o, g in groups.items()}
    out: list[Node] = []
    while True:
        cands = [o for o in groups if kept[o] > keep.get(o, 0)]
        if not cands:
            return out
        o = max(cands, key=lambda o: (kept[o] / len(groups[o]), kept[o], "" if o is None else o))
        kept[o] -= 1
        out.append(groups[o][kept[o]])


def pool_sizes(nodes: Sequence[Node], jobs: Sequence[Job], max_sizes: int = 64) -> list[tuple[Node, ...]]:
    """The nested pools tried, largest first: all of them, or ``max_sizes`` evenly spread, down to the
    last one where every MIG job still finds a node with as many instances of its profile."""
    return nested_pools(nodes, removal_order(nodes, floors(nodes, jobs)), jobs, max_sizes)


def nested_pools(
    nodes: Sequence[Node], gone: Sequence[Node], jobs: Sequence[Job], max_sizes: int = 64
) -> list[tuple[Node, ...]]:
    """``nodes`` less the first k of ``gone``, largest first (``max_sizes`` of them evenly spread), down
    to the last pool that still holds every whole-GPU job and finds every MIG job its instances."""
    if max_sizes < 2:
        raise ValueError(f"max_sizes: {max_sizes} is less than 2")
    counts = list(range(len(gone) + 1))  # servers taken away
    if len(counts) > max_sizes:
        step = len(gone) / (max_sizes - 1)
        counts = sorted({round(i * step) for i in range(max_sizes)})
    asked: dict[str, int] = {}  # profile -> the most instances a job asks
    for j in jobs:
        if j.profile is not None:
            asked[j.profile] = max(asked.get(j.profile, 0), j.gpus)
    biggest = max((j.gpus for j in jobs if j.profile is None), default=1)
    out = []
    for k in counts:
        away = {n.name for n in gone[:k]}
        pool = tuple(n for n in nodes if n.name not in away)
        if not pool or sum(n.gpus - len(n.mig) for n in pool) < biggest:
            break
        if any(all(mig_counts(n)[p] < c for n in pool) for p, c in asked.items()):
            break  # smaller pools are subsets: they lack it too
        out.append(pool)
    return out


def borrowers_done_in_window(r: Result) -> int:
    """Borrower jobs the replay finished inside its window."""
    return sum(1 for t in r.borrower_ends if t <= r.window)


def check_tolerance(tol: float) -> float:
    """``tol`` if it is a number from 0 to :data:`MAX_BORROWER_TOLERANCE`, else ValueError."""
    if isinstance(tol, bool) or not (
        isinstance(tol, (int, float)) and math.isfinite(tol) and 0 <= tol <= MAX_BORROWER_TOLERANCE
    ):
        raise ValueError(f"borrower_tolerance: {tol!r} is not a number from 0 to {MAX_BORROWER_TOLERANCE:g}")
    return float(tol)


def borrower_floor(need: int, tol: float) -> int:
    """The fewest borrower jobs done that pass a bar of ``need`` with tolerance ``tol``: ``(1 - tol) x need``
    rounded up (rounded to 9 places first, so that 0.99 x 100 is 99)."""
    return math.ceil(round(need * (1 - tol), 9))


def size_pool(
    nodes: Sequence[Node],
    jobs: Sequence[Job],
    policy: Policy,
    window: float,
    replay: Replay,
    max_sizes: int = 64,
    tol: float = BORROWER_TOLERANCE,
) -> Sizing:
    """Replay ``policy`` on each nested pool size; the baseline is ``dedicated`` on all ``nodes``; a size's
    borrowers may fall short of the full pool's by ``tol`` (a share, 0 to 0.2)."""
    check_tolerance(tol)
    if not any(n.owner is not None for n in nodes):
        raise ValueError("nodes: no server has an owner, so there are no dedicated servers to size against")
    if not policy.pooled:
        raise ValueError(f"policy: {policy.name!r} is not pooled; sizing compares a pool with dedicated servers")
    baseline = replay(nodes, replace(policy, name="dedicated", pooled=False))
    target = baseline.wait_quantile(0.95)
    need: int | None = None
    trials = []
    for pool in pool_sizes(nodes, jobs, max_sizes):  # all the servers first
        r = replay(pool, policy)
        need = borrowers_done_in_window(r) if need is None else need
        trials.append(Trial(pool, r, judge(r, target, need, tol)))
    return Sizing(baseline, sum(n.gpus for n in nodes), target, need or 0, tuple(trials), tol)


def judge(r: Result, target: float, need: int, tol: float = BORROWER_TOLERANCE) -> tuple[str, ...]:
    """Why replay ``r`` of a pool size fails the bar (empty: it passes): owners' p95 wait over ``target``,
    an owner job unfinished, fewer than ``(1 - tol) x need`` borrower jobs done inside the window."""
    failures = []
    if r.wait_quantile(0.95) > target:
        failures.append(f"owner wait p95 {r.wait_quantile(0.95):,.0f} s > {target:,.0f} s on dedicated servers")
    if r.unfinished_owner_jobs:
        failures.append(f"{r.unfinished_owner_jobs} owner jobs unfinished")
    done = borrowers_done_in_window(r)
    if done < borrower_floor(need, tol):
        failures.append(
            f"{need - done} fewer borrower jobs done inside the window than the {need} on all servers "
            f"(tolerance {tol * 100:g} %: at least {borrower_floor(need, tol)})"
        )
    return tuple(failures)


def gpu_replay(jobs: Sequence[Job], window: float) -> Replay:
    """Replays on :mod:`.engine` (GPUs interchangeable per owner; nobody's servers as one more owner)."""

    def run(nodes: Sequence[Node], policy: Policy) -> Result:
        capacity: dict[str, int] = {}
        for n in nodes:
            key = n.owner if n.owner is not None else NOBODY
            capacity[key] = capacity.get(key, 0) + n.gpus
        return simulate(capacity, jobs, policy, window)

    return run


def node_replay(jobs: Sequence[Job], window: float, lend: LendRule | None = None) -> Replay:
    """Replays on :mod:`.nodes` (best fit, whole nodes, backfill), lending idle nodes by ``lend`` (None: not)."""

    def run(nodes: Sequence[Node], policy: Policy) -> Result:
        if lend is not None:
            policy = (
                replace(policy, lend=lend) if isinstance(policy, NodePolicy) else NodePolicy(**vars(policy), lend=lend)
            )
        return simulate_nodes(nodes, jobs, policy, window)

    return run


def trial_summary(t: Trial) -> dict[str, Any]:
    """One pool size's figures (JSON-ready)."""
    r = t.result
    return {
        "gpus": t.gpus,
        "nodes": len(t.nodes),
        "utilization": round(r.utilization, 4),
        "owner_wait_p95_seconds": round(r.wait_quantile(0.95), 1),
        "preemptions": r.preemptions,
        "lost_gpu_hours": round(r.lost_gpu_seconds / 3600, 2),
        "grace_and_restart_gpu_hours": round((r.grace_gpu_seconds + r.restart_gpu_seconds) / 3600, 2),
        "borrower_jobs_done_in_window": borrowers_done_in_window(r),
        "passes": t.passes,
        "failures": list(t.failures),
    }


def summary(sz: Sizing) -> dict[str, Any]:
    """The answer and every size tried (JSON-ready)."""
    best = sz.best
    return {
        "dedicated_gpus": sz.dedicated_gpus,
        "dedicated_utilization": round(sz.baseline.utilization, 4),
        "dedicated_owner_wait_p95_seconds": round(sz.target_p95, 1),
        "borrower_jobs_needed": sz.borrowers_needed,
        "borrower_tolerance": sz.tolerance,
        "borrower_jobs_floor": sz.borrowers_floor,
        "gpus_needed": best.gpus if best is not None else None,
        "ratio_to_dedicated": round(sz.ratio, 3) if sz.ratio is not None else None,
        "utilization_at_size": round(best.result.utilization, 4) if best is not None else None,
        "limited_by": sz.limit,
        "trials": [trial_summary(t) for t in sz.trials],
    }
