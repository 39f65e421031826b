"""Which borrowers a guaranteed job preempts in the node engine, as preempt/qos picks them (pure).

A guaranteed job that fits no free GPUs of its project takes borrowed GPUs
on ONE of its nodes (or on the whole nodes it needs; a floating project's
nodes are every node of the floating partition): the node with the least
work at risk, and there the borrowers already signalled first, then the
least work at risk (borrowers with no servers before owners' overflow).
Functions of the engine's state (:class:`.nodestate.EngineState`), split from
:mod:`.nodes` for size.

Slurm chooses otherwise (preempt/qos with cons_tres): it orders the
candidates by QOS priority, then node count (``preempt_p_get_prio``: small
jobs first), takes them in that order until the job fits, and with
``PreemptParameters=reorder_count``/``strict_order`` tries to preempt fewer
jobs; it knows neither checkpoints nor work done.  Here a node with free GPUs
and one victim loses to two victims only when those two hold less work.
"""

from __future__ import annotations

from slurm_pool.sim.engine import BORROWED, Job
from slurm_pool.sim.nodestate import EngineState, Run

#: Per node: (node, GPUs it gives from free, [(victim, GPUs taken from it)]).
Plan = list[tuple[int, int, list[tuple[Run, int]]]]


def risk(sim: EngineState, r: Run) -> tuple[bool, float, str]:
    """How much preempting ``r`` costs: owners' overflow last, then work done since its start."""
    return (r.job.project is not None, (sim.now - r.start) * r.w, r.job.id)


def plan_node(sim: EngineState, n: int, need: int) -> tuple[float, list[tuple[Run, int]]] | None:
    """Borrowers on unit ``n`` giving ``need`` GPUs: signalled ones first, then least risk."""
    leaving: list[tuple[Run, int]] = []
    running: list[tuple[Run, int]] = []
    for r in sim.on_node[n].values():
        if r.tier != BORROWED:
            continue
        left = r.alloc[n] - r.claimed.get(n, 0)
        if left > 0:
            (leaving if r.free_at is not None else running).append((r, left))
    leaving.sort(key=lambda e: (e[0].free_at, e[0].job.id))
    running.sort(key=lambda e: risk(sim, e[0]))
    out, total = [], 0.0
    for r, left in leaving + running:
        if need <= 0:
            break
        out.append((r, min(left, need)))
        need -= left
        if r.free_at is None:
            total += risk(sim, r)[1]
    return (total, out) if need <= 0 else None


def plan_victims(sim: EngineState, job: Job, key: tuple[str, str | None]) -> Plan | None:
    """The nodes and victims that make room for guaranteed ``job`` of ``key`` (project, kind); None: none do."""
    gen = sim.fgen.get(sim.home(key), 0)
    if sim.no_victims.get((key, job.gpus)) == gen:
        return None  # none last time, and no free or borrowed GPUs of these nodes changed since
    plans = _plan(sim, job, key)
    if plans is None:
        sim.no_victims[(key, job.gpus)] = gen
    return plans


def _plan(sim: EngineState, job: Job, key: tuple[str, str | None]) -> Plan | None:
    idx = sim.index[key]
    plans: Plan = []
    if job.gpus <= idx.top:
        best: tuple[float, int, list[tuple[Run, int]]] | None = None
        for n in sim.owned[key]:
            if sim.bheld[n] and sim.free[n] + sim.bheld[n] >= job.gpus:
                plan = plan_node(sim, n, job.gpus - sim.free[n])
                if plan is not None and (best is None or (plan[0], n) < (best[0], best[1])):
                    best = (plan[0], n, plan[1])
        if best is None:
            return None
        plans.append((best[1], sim.free[best[1]], best[2]))
        return plans
    assert job.profile is None  # a guaranteed MIG job fits one of its nodes (_tier)
    cands = []
    for n in sim.owned[key]:
        if sim.free[n] + sim.bheld[n] == sim.size[n]:
            plan = plan_node(sim, n, sim.bheld[n])
            assert plan is not None
            cands.append((plan[0], n, plan[1]))
    cands.sort(key=lambda c: (c[0], -sim.size[c[1]], c[1]))
    total = 0
    for _, n, takes in cands:
        if total >= job.gpus:
            break
        plans.append((n, sim.free[n], takes))
        total += sim.size[n]
    return plans if total >= job.gpus else None
