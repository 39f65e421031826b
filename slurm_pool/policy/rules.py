"""The submit policy's rules in Python, as job_submit.lua applies them to a new job.  Pure.

The console's ``explain`` (:mod:`slurm_pool.web.views`) asks these, with the same
:class:`~slurm_pool.policy.tables.PolicyTables` the rendered job_submit.lua carries, so that what
the console says of a request is what slurmctld does with it; a table test
(``tests/unit/test_policy_agreement.py``) runs the same requests through both.

:data:`RULES` names every rule that can refuse a job, each with the words of its message in
job_submit.lua and in ``explain``, so that a refusal can be told by its meaning.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping

from slurm_pool.policy.tables import GuaranteeRule, PolicyTables, ProjectRule, TierRule


@dataclass(frozen=True)
class Rule:
    """One rule that can refuse a submission: its name, and words its refusals carry."""

    name: str
    what: str
    lua: tuple[str, ...]  # in job_submit.lua's message
    explain: tuple[str, ...]  # in explain's refusal


RULES: tuple[Rule, ...] = (
    Rule("tier", "the QOS is a tier of the pool", ("is not a tier of this pool",), ("does not exist; tiers",)),
    Rule(
        "account",
        "the job's project is the pool's and may use the tier",
        ("may not use tier", "is not a project of this pool", "cannot tell which project"),
        ("may not use tier", "is not a member of any project"),
    ),
    Rule(
        "guarantee",
        "a job beyond its project's guarantee overflows, if the project may use the overflow tier",
        ("may not use the overflow tier",),
        ("may not use the overflow tier",),
    ),
    Rule(
        "gpu_type",
        "the GPU (or MIG) type exists in the job's partition",
        ("GPU type", "has no GPUs"),
        ("GPU type", "MIG profile", "has no GPUs"),
    ),
    Rule("max_gpus", "the tier's GPUs per job", ("GPU(s) per job",), ("GPU(s) per job",)),
    Rule(
        "time",
        "the tier's required time limit",
        ("requires a time limit", "requires a finite time limit"),
        ("requires a finite time limit",),
    ),
    Rule(
        "checkpoint",
        "a preemptible tier's jobs are requeueable and checkpoint",
        ("is preemptible: its jobs must",),
        ("is preemptible: its jobs must",),
    ),
)
#: Rules after which job_submit.lua looks no further (the job has no route): explain may say more.
FINAL = frozenset({"tier", "account", "guarantee"})


def rule_of(message: str, side: str) -> str | None:
    """The name of the rule a refusal (``side``: ``lua`` or ``explain``) comes from; None when no rule's."""
    for rule in RULES:
        if any(w in message for w in (rule.lua if side == "lua" else rule.explain)):
            return rule.name
    return None


def project_rule(tables: PolicyTables, project: str) -> ProjectRule | None:
    return next((p for p in tables.projects if p.name == project), None)


def tier_rule(tables: PolicyTables, tier: str) -> TierRule | None:
    return next((t for t in tables.tiers if t.name == tier), None)


def guarantee_misfit(
    tables: PolicyTables, account: str, g: GuaranteeRule, total: int, by_type: Mapping[str, int], used: int = 0
) -> str | None:
    """Why a job asking for ``total`` GPUs (``by_type``: GPU type or "" -> count) does not fit ``account``'s
    guarantee with ``used`` GPUs of it taken; None when it fits (job_submit.lua's guarantee_fits)."""
    if total <= 0:
        return None
    here = next((set(p.gpu_types) for p in tables.partitions if p.name == g.partition), set())
    known = {t.name for t in tables.gpu_types}
    for t in sorted(by_type):
        if t and t in known and t not in here:
            return (
                f"partition '{g.partition}' of {account}'s guarantee has no GPUs of type {t}, which this job asks for"
            )
    types = ", ".join(t for t, _ in g.gpus)
    if g.gpus and g.gpus[0][0]:
        if by_type.get("", 0) > 0:
            return f"{account}'s guarantee is for GPUs of type {types} only and this job names no GPU type"
        covered = {t for t, _ in g.gpus}
        for t in sorted(by_type):
            if t not in covered:
                return f"{account}'s guarantee is for GPUs of type {types}, not for type '{t}' that this job asks for"
    for gtype, count in g.gpus:
        want = total if not gtype else by_type.get(gtype, 0)
        if want > 0 and used + want > count:
            what = f" of type {gtype}" if gtype else ""
            return f"{account}'s guarantee is {count} GPU(s){what}; this job asks for {want}"
    return None


def declares_checkpoint(options: Iterable[str]) -> bool:
    """Whether sbatch options (long names, as the SPANK plugin and sbatch take them) declare checkpointing:
    ``--checkpoint``/``--checkpoint-signal``, or ``--signal`` or an abbreviation of it (``--sig``)."""
    for name in options:
        if name in ("checkpoint", "checkpoint-signal") or (len(name) >= 3 and "signal".startswith(name)):
            return True
    return False


def requeue_off(options: Iterable[str]) -> bool:
    """Whether the last of ``--requeue`` and ``--no-requeue`` among sbatch options is ``--no-requeue``."""
    last = None
    for name in options:
        if name in ("requeue", "no-requeue"):
            last = name
    return last == "no-requeue"


@dataclass(frozen=True)
class GuaranteeRoute:
    """Where a new job goes once its project's guarantee had its say, and what to tell its user."""

    partition: str
    qos: str
    tier: TierRule  # the tier whose rules apply (the overflow tier's beyond the guarantee)
    note: str = ""
    refusal: str = ""


def guarantee_route(
    tables: PolicyTables,
    project: str,
    tier: TierRule,
    partition: str,
    total: int,
    by_type: Mapping[str, int],
    used: int = 0,
) -> GuaranteeRoute:
    """A job of ``project`` in ``tier``, routed to ``partition``, as job_submit.lua's route_guarantee sends it.

    A floating project's job in the guarantee tier runs in the project's own QOS while its GPUs fit
    the guarantee (``used`` of it taken), else in the overflow tier; a project that may not use the
    overflow tier has the job refused.  Any other job keeps its route.
    """
    prule = project_rule(tables, project)
    g = prule.guarantee if prule is not None else None
    if g is None or tier.name != g.tier:
        return GuaranteeRoute(partition, tier.name, tier)
    why = guarantee_misfit(tables, project, g, total, by_type, used)
    if why is None:
        note = (
            f"runs in {project}'s guarantee (QOS {g.qos}, partition {g.partition}) while the project's queued and "
            f"running jobs leave room for it; beyond it, in tier {g.overflow_tier!r}"
        )
        return GuaranteeRoute(g.partition, g.qos, tier, note=note)
    overflow = tier_rule(tables, g.overflow_tier)
    if g.overflow_partition is None or overflow is None:
        refusal = (
            f"{why}; project {project!r} may not use the overflow tier {g.overflow_tier!r}, so this job cannot run now"
        )
        return GuaranteeRoute(partition, tier.name, tier, refusal=refusal)
    note = f"{why}, so it runs in tier {g.overflow_tier!r} (partition {g.overflow_partition!r}, preemptible)"
    return GuaranteeRoute(g.overflow_partition, g.overflow_tier, overflow, note=note)


def gpu_gres(tables: PolicyTables, mig: str | None, gpu_type: str | None, gpus: int) -> str:
    """The GPU GRES of a request (``gpu:TYPE:N``, ``gpu:N``; a MIG profile as the pool's type), "" for none."""
    if mig:
        names = [t.name for t in tables.gpu_types if t.mig and (t.name == mig or t.name.endswith("_" + mig))]
        return f"gpu:{names[0] if names else mig}:1"
    if gpus <= 0:
        return ""
    return f"gpu:{gpu_type}:{gpus}" if gpu_type else f"gpu:{gpus}"
