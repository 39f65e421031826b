"""Why a pending job waits, in the pool's words, and what would let it start sooner (pure).

Slurm's reason code is read through :data:`REASONS` (the codes are
``job_state_reason_string`` in Slurm's ``src/common/slurm_protocol_defs.c``);
the forward run (:mod:`.forward`) says what the job actually waits for: the
jobs that hold the GPUs it gets (an owner's, a borrower's, a node lent to
Kubernetes), or the borrowers it preempts and their GraceTime.  Each
alternative is placed into the forecast's plan (:mod:`.plan_fit`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from slurm_pool.predict.forward import Forecast, LiveJob, Prediction, dependencies, project_of
from slurm_pool.predict.plan_fit import fit
from slurm_pool.predict.pool import PoolModel
from slurm_pool.sim.engine import GUARANTEED
from slurm_pool.sim.units import compute_slices

#: Slurm's reason codes a pending job shows, in the pool's words.  ``{qos}`` and ``{partition}`` are the job's.
REASONS: dict[str, str] = {
    "None": "the scheduler has not looked at it yet",
    "Priority": "jobs of higher priority are ahead of it",
    "Resources": "it waits for GPUs to come free",
    "Dependency": "it waits for the jobs it depends on",
    "DependencyNeverSatisfied": "a job it depends on ended in a way that never satisfies it: it will not start",
    "BeginTime": "its begin time (--begin) has not come",
    "JobHeldUser": "its user held it: it starts only once released (scontrol release)",
    "JobHeldAdmin": "an administrator held it: it starts only once released",
    "ReqNodeNotAvail": "a node it may run on is down, drained or reserved",
    "NodeDown": "a node it needs is down",
    "PartitionDown": "its partition {partition} is down",
    "PartitionInactive": "its partition {partition} is inactive",
    "PartitionNodeLimit": "it asks for more nodes than partition {partition} allows: it will not start as it is",
    "PartitionTimeLimit": "its time limit is longer than partition {partition} allows: it will not start as it is",
    "QOSGrpGRES": "its tier {qos} has all the GPUs its limit (GrpTRES) allows in use",
    "QOSMaxGRESPerUser": "you have as many GPUs in use in tier {qos} as its per-user limit allows",
    "QOSMaxGRESPerJob": "it asks for more GPUs than tier {qos} allows one job",
    "QOSGrpGRESRunMinutes": "tier {qos} has used up its GPU-minutes limit for now",
    "QOSJobLimit": "tier {qos} runs as many jobs as it allows",
    "QOSResourceLimit": "tier {qos} has reached a resource limit",
    "QOSMaxJobsPerUserLimit": "you run as many jobs in tier {qos} as it allows",
    "AssocGrpGRES": "your account has all the GPUs its limit allows in use",
    "AssocMaxJobsLimit": "your account runs as many jobs as it allows",
    "Reservation": "it waits for its reservation",
    "BadConstraints": "no node has the features it asks for: it will not start as it is",
    "launch failed requeued held": "its launch failed and Slurm held it: it starts only once released",
}


@dataclass(frozen=True, slots=True)
class Cause:
    """One thing the job waits for: ``kind`` (``owner``, ``borrower``, ``lent``, ``preempts``, ``dependency``,
    ``begin``, ``queue``, ``now``), in words, with the jobs and nodes it names."""

    kind: str
    text: str
    jobs: tuple[int, ...] = ()
    nodes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Alternative:
    """Another way to submit the job, how to ask for it, and when the model starts it then."""

    what: str
    how: str
    start: float | None


@dataclass
class Explanation:
    """The answer to "why is my job waiting, and when will it start"."""

    job_id: int
    reason: str
    reason_text: str
    prediction: Prediction
    causes: list[Cause] = field(default_factory=list)
    alternatives: list[Alternative] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON types (``--json``, the REST API)."""
        p = self.prediction
        return {
            "job_id": self.job_id,
            "reason": self.reason,
            "reason_text": self.reason_text,
            "predicted_start": p.start,
            "range": [p.low, p.high],
            "runtime_seconds": p.runtime.seconds,
            "runtime_basis": p.runtime.basis,
            "note": p.note,
            "causes": [
                {"kind": c.kind, "text": c.text, "jobs": list(c.jobs), "nodes": list(c.nodes)} for c in self.causes
            ],
            "alternatives": [{"what": a.what, "how": a.how, "predicted_start": a.start} for a in self.alternatives],
        }


def reason_text(job: LiveJob) -> str:
    """Slurm's reason for ``job`` in the pool's words (its code when unknown)."""
    words = REASONS.get(job.reason)
    if words is None:
        return f"Slurm's reason: {job.reason}" if job.reason else "no reason given"
    return words.format(qos=job.qos or "?", partition=job.partition)


def causes(pool: PoolModel, forecast: Forecast, job: LiveJob) -> list[Cause]:
    """What the forward run says ``job`` waits for."""
    out: list[Cause] = []
    pred = forecast.predictions.get(job.job_id)
    if job.eligible is not None and job.eligible > forecast.now:
        out.append(
            Cause("begin", f"it may not start before its begin time, in {duration(job.eligible - forecast.now)}")
        )
    if job.dependency and job.reason.startswith("Dependency"):
        kinds = sorted({k for k, _ in (dependencies(job.dependency) or ([], True))[0]})
        out.append(Cause("dependency", f"it waits for the jobs it depends on ({', '.join(kinds) or 'see squeue'})"))
    result = forecast.result
    if pred is None or pred.start is None or result is None:
        return out
    mine = [p for p in result.schedule if p.job == str(job.job_id)]
    if not mine:
        return out
    first = min(mine, key=lambda p: p.start)
    at = first.start
    if at <= 0 and first.placed <= 0:
        out.append(Cause("now", "GPUs it fits on are free now: it starts at the scheduler's next pass"))
        return out
    nodes = {n for n, _ in first.nodes}
    victims = [
        p
        for p in result.schedule
        if p.outcome == "preempted" and p.signalled == first.placed and nodes & {n for n, _ in p.nodes}
    ]
    if victims:
        ids = tuple(sorted(int(p.job) for p in victims if _digits(p.job)))
        out.append(
            Cause(
                "preempts",
                f"it preempts {len(victims)} borrowed job(s) on {', '.join(sorted(nodes))} and starts when their "
                f"GraceTime ({pool.grace:g} s) is over",
                ids,
                tuple(sorted(nodes)),
            )
        )
    holders = [
        p
        for p in result.schedule
        if p.job != first.job and p.start < at and abs(p.end - at) <= 1.0 and nodes & {n for n, _ in p.nodes}
    ]
    by_kind: dict[str, list[Any]] = {}
    for p in holders:
        live = forecast.jobs.get(int(p.job)) if _digits(p.job) else None
        if p.outcome == "preempted":
            kind = "preempts"  # signalled already (or by it): gone at the end of their GraceTime
        elif live is not None and live.partition == pool.lend_partition:
            kind = "lent"
        elif p.tier == GUARANTEED:
            kind = "owner"
        else:
            kind = "borrower"
        by_kind.setdefault(kind, []).append((p, live))
    for kind, items in by_kind.items():
        ids = tuple(sorted(int(p.job) for p, _ in items if _digits(p.job)))
        where = tuple(sorted(nodes & {n for p, _ in items for n, _ in p.nodes}))
        queues = [(pool.queues[lj.partition], lj.account) for _, lj in items if lj and lj.partition in pool.queues]
        owners = sorted({pool.project(q, account) or "" for q, account in queues})
        whose = "guaranteed jobs" if any(q.floating for q, _ in queues) else "owners' jobs"
        text = {
            "owner": f"{whose} ({', '.join(o for o in owners if o)}) hold the GPUs it needs on {', '.join(where)}",
            "borrower": f"running jobs hold the GPUs it needs on {', '.join(where)}",
            "lent": f"{', '.join(where)} is lent to Kubernetes until the bridge gives it back",
            "preempts": f"preempted jobs leave {', '.join(where)} at the end of their GraceTime",
        }[kind]
        out.append(Cause(kind, f"{text}; expected free in {duration(at)}", ids, where))
    if not holders and not victims:
        out.append(Cause("queue", f"jobs ahead of it in the queue take the GPUs first; expected in {duration(at)}"))
    return out


def alternatives(pool: PoolModel, forecast: Forecast, job: LiveJob) -> list[Alternative]:
    """Other ways to submit ``job``, each with the start it gets in the forecast's plan (:mod:`.plan_fit`)."""
    est = forecast.predictions.get(job.job_id)
    runtime = est.runtime.seconds if est is not None else 3600.0
    here = pool.queues.get(job.partition.split(",")[0])
    limit = here.limit(job.limit) if here else job.limit
    span = limit if limit is not None else runtime
    owner = project_of(pool, here, job) if here is not None else None
    floats = here is not None and here.floating and owner is not None
    out: list[Alternative] = []

    def add(
        what: str, how: str, gpus: int, profile: str | None, duration: float, where: str | None, floating: bool
    ) -> None:
        start = fit(forecast, job.job_id, gpus, profile, duration, where, pool.grace, floating)
        out.append(Alternative(what, how, start))

    current = pool.rules.get(here.tier if here is not None else job.qos)
    declared = current is not None and current.checkpoint == "reject"  # its tier took it: it checkpoints
    for q in pool.partitions_for(job.account):
        rule = pool.rules.get(q.tier)
        if rule is not None and rule.refuses(q.tier, job.gpus, job.limit, declared):
            continue  # the submit policy would refuse the move: never suggested
        if here is None or q.name != here.name:
            where = pool.project(q, job.account)
            move = f"scontrol update JobId={job.job_id} Partition={q.name} QOS={pool.qos(q, job.account)}"
            add(f"partition {q.name} (tier {q.tier})", move, job.gpus, job.profile, span, where, q.floating)
    if job.gpus > 1:
        for n in sorted({job.gpus // 2, 1}, reverse=True):
            add(
                f"{n} GPU{'s' if n > 1 else ''} instead of {job.gpus}",
                f"resubmit with --gpus={n}",
                n,
                job.profile,
                span,
                owner,
                floats,
            )
    if job.gpus == 1 and job.profile is None and pool.mig.most:
        small = min(pool.mig.most, key=lambda p: (compute_slices(p) or 99, p))
        how = f"resubmit with --gres=gpu:{small}:1 (the GRES type Slurm names it)"
        # a guarantee's MIG instances borrow (the engine's guarantees are whole GPUs)
        add(f"a MIG slice ({small})", how, 1, small, span, None if floats else owner, False)
    if job.limit is not None:
        shorter = math.ceil(runtime * 1.25 / 60) * 60
        if shorter < job.limit:
            what = f"a time limit of {duration(shorter)} instead of {duration(job.limit)}"
            how = f"scontrol update JobId={job.job_id} TimeLimit={shorter // 60}"
            add(what, how, job.gpus, job.profile, float(shorter), owner, floats)
    return out


def explain(forecast: Forecast, job_id: int, alternatives_too: bool = True) -> Explanation:
    """The whole answer for one pending job of ``forecast`` (from :func:`.forward.predict`)."""
    pool, runtimes = forecast.pool, forecast.runtimes
    assert pool is not None and runtimes is not None, "a forecast from predict()"
    job = forecast.jobs[job_id]
    pred = forecast.predictions[job_id]
    ex = Explanation(job_id, job.reason, reason_text(job), pred, causes(pool, forecast, job))
    if alternatives_too and not job.held:
        ex.alternatives = alternatives(pool, forecast, job)
    return ex


def together(forecast: Forecast, ids: list[int]) -> tuple[int, float | None] | None:
    """``ids`` as the waiting components of one heterogeneous job: (its id, when the last of them is predicted
    to start: Slurm starts them together; None: one has no prediction); None when they are not that."""
    named = [forecast.names.get(j) for j in ids]
    comps = [n for n in named if n is not None and n.component is not None]
    if len(ids) < 2 or len(comps) != len(ids) or len({n.job for n in comps}) != 1:
        return None
    starts = [p.start for j in ids if (p := forecast.predictions.get(j)) is not None and p.start is not None]
    return comps[0].job, (max(starts) if len(starts) == len(ids) else None)


def _digits(job_id: str) -> bool:
    """An engine job id that is a Slurm job id (ASCII digits)."""
    return job_id.isascii() and job_id.isdigit()


def duration(seconds: float) -> str:
    s = max(0, round(seconds))
    if s < 120:
        return f"{s} s"
    if s < 7200:
        return f"{s // 60} min"
    if s < 2 * 86400:
        return f"{s // 3600} h {s % 3600 // 60} min"
    return f"{s // 86400} days {s % 86400 // 3600} h"
