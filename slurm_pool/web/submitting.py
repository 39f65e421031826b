"""What the pool's submit policy makes of a console request, and the sbatch options it becomes.  Pure.

:func:`explain` applies the rules the generated job_submit.lua applies
(:mod:`slurm_pool.policy.tables`, :mod:`slurm_pool.policy.rules`; the two are held
to agree by tests/unit/test_policy_agreement.py) and turns a
:class:`~slurm_pool.web.models.SubmitRequest` into sbatch options.  Whether the
user belongs to the project is the service's check (:func:`not_a_member`).
"""

from __future__ import annotations

from typing import Sequence

from slurm_pool import text
from slurm_pool.adapters import sbatchopts
from slurm_pool.adapters.sbatchopts import HeaderError, header
from slurm_pool.policy.rules import declares_checkpoint, gpu_gres, guarantee_route, requeue_off
from slurm_pool.policy.tables import PolicyTables, TierRule
from slurm_pool.spec.model import PoolSpec
from slurm_pool.spec.ranges import no_time_limit
from slurm_pool.web import fit, models
from slurm_pool.web.views import Viewer, project_routes


def _mig_type(tables: PolicyTables, profile: str, allowed: Sequence[str]) -> str | None:
    """The pool's MIG GRES type for ``profile`` (``nvidia_a100_3g.40gb`` or the bare profile), among ``allowed``."""
    for t in tables.gpu_types:
        if t.mig and t.name in allowed and (t.name == profile or t.name.endswith("_" + profile)):
            return t.name
    return None


def project_of(tables: PolicyTables, who: Viewer, req: models.SubmitRequest) -> str | None:
    """The project ``req`` is charged to: the one it names, else ``who``'s first that may use its tier."""
    return req.project or next(
        (p for p in who.projects if req.tier in project_routes(tables, p)), who.projects[0] if who.projects else None
    )


def not_a_member(who: Viewer, project: str) -> str | None:
    """The service's own refusal of a project ``who`` is not a member of (Slurm's associations refuse it too)."""
    if project in who.projects or who.operator:
        return None
    return f"{who.user} is not a member of project {project!r}; your projects: {', '.join(who.projects)}"


def explain(spec: PoolSpec, tables: PolicyTables, who: Viewer, req: models.SubmitRequest) -> models.Explanation:
    """What the pool's submit policy makes of ``req`` from ``who``, and the sbatch options it becomes.

    Membership of the project is the service's check (:func:`not_a_member`), not the policy's."""
    notes: list[str] = []
    refusals: list[str] = []
    tiers = {t.name: t for t in tables.tiers}
    rule = tiers.get(req.tier)
    if rule is None:
        return models.Explanation(
            ok=False, tier=req.tier, refusals=[f"tier {req.tier!r} does not exist; tiers: {', '.join(tiers)}"]
        )
    project = project_of(tables, who, req)
    if project is None:
        return models.Explanation(
            ok=False, tier=req.tier, qos=req.tier, refusals=[f"{who.user} is not a member of any project of this pool"]
        )
    routes = project_routes(tables, project)
    partition = routes.get(req.tier, "")
    qos = req.tier
    if not partition:
        refusals.append(f"project {project!r} may not use tier {req.tier!r}; its tiers: {', '.join(routes) or 'none'}")
    else:
        partition, qos, rule = _guarantee_route(tables, project, req, rule, partition, notes, refusals)
    part_rule = next((p for p in tables.partitions if p.name == partition), None)
    types = part_rule.gpu_types if part_rule else ()
    gres: str | None = None
    chosen = [k for k, v in (("gpu_type", req.gpu_type), ("mig", req.mig), ("shards", req.shards)) if v]
    if len(chosen) > 1:
        refusals.append(f"ask for one of a GPU type, a MIG profile or shards, not {' and '.join(chosen)}")
    elif req.mig:
        gtype = _mig_type(tables, req.mig, types)
        if gtype is None:
            have = [t.name for t in tables.gpu_types if t.mig and t.name in types]
            refusals.append(
                f"MIG profile {req.mig!r} is not available in partition {partition!r}; "
                f"MIG types there: {', '.join(have) or 'none'}"
            )
        else:
            gres = f"gpu:{gtype}:1"
            notes.append(f"one MIG slice {gtype} (a slice counts as one GPU)")
    elif req.shards:
        if not any(g.gpus and g.gpus.shards for g in spec.node_groups):
            refusals.append("this pool shares no GPU as shards (no node group sets gpus.shards)")
        gres = f"shard:{req.shards}"
        notes.append(f"{req.shards} shard(s) of one shared GPU")
    elif req.gpus:
        if req.gpu_type:
            if req.gpu_type not in types:
                refusals.append(
                    f"GPU type {req.gpu_type!r} is not available in partition {partition!r}; "
                    f"types there: {', '.join(t for t in types) or 'none'}"
                )
            gres = f"gpu:{req.gpu_type}:{req.gpus}"
        elif partition and not types:
            refusals.append(f"partition {partition!r} has no GPUs; ask for none, or use another tier")
            gres = f"gpu:{req.gpus}"
        else:
            gres = f"gpu:{req.gpus}"
            if rule.gpu_shards and req.gpus == 1:
                notes.append(f"tier {rule.name!r} shares GPUs: one GPU of no type becomes {rule.gpu_shards} shard(s)")
    opts = sbatchopts.form_options(
        partition=partition,
        qos=qos,
        account=project,
        time=req.time_limit,
        name=req.name,
        gres=gres,
        nodelist=req.nodes or None,
    )
    asked = fit.ask(opts, req.script)  # the script's #SBATCH lines add what the form does not pass
    notes += asked.notes
    refusals += asked.problems
    if not req.mig:  # a MIG slice is one unit of its own type
        refusals += fit.refusals(asked, partition, fit.shapes(spec, partition))
    units = asked.total
    if rule.max_gpus is not None and units > rule.max_gpus:
        refusals.append(f"tier {rule.name!r} allows at most {rule.max_gpus} GPU(s) per job; this job asks for {units}")
    if rule.require_time and no_time_limit(req.time_limit):  # 0 is no limit too (sbatch(1)), as job_submit.lua reads it
        refusals.append(
            f"tier {rule.name!r} requires a finite time limit, not {req.time_limit} ([days-]hours:minutes:seconds)"
        )
    elif rule.require_time:
        notes.append(f"tier {rule.name!r} requires a time limit: {req.time_limit}")
    directives = _header_options(req.script)
    if req.checkpoint:
        # The SPANK plugin's --checkpoint marks the job; --signal is what wakes `slurm-pool run` when
        # Slurm preempts it (its grace time moves the end time closer than the warning).
        opts += sbatchopts.checkpoint_options(tables.checkpoint_signal, tables.warn_seconds)
        notes.append(
            f"checkpoint: the job gets SIG{tables.checkpoint_signal} {tables.warn_seconds} s before it is "
            "preempted, saves its state and is requeued"
        )
    elif rule.checkpoint == "reject" and (requeue_off(directives) or not declares_checkpoint(directives)):
        missing = "checkpoint their work (tick checkpoint)"
        if declares_checkpoint(directives):
            missing = "be requeueable, and the script's #SBATCH --no-requeue turns requeue off (tick checkpoint)"
        refusals.append(f"tier {rule.name!r} is preemptible: its jobs must {missing}" + _other_tiers(tables, project))
    elif rule.checkpoint == "reject":
        notes.append(
            f"tier {rule.name!r} is preemptible: the script's #SBATCH --signal declares checkpointing, "
            "and the job is requeued if preempted"
        )
    elif rule.checkpoint == "add_requeue":
        notes.append(
            f"tier {rule.name!r} is preemptible: the job is requeued if preempted and, without checkpoint, "
            "starts again from the beginning"
        )
    for o in opts:  # every option is one word the model checked; refuse anything else outright
        if text.has_control(o) or "\n" in o:
            refusals.append("an option holds a control character")
            break
    return models.Explanation(
        ok=not refusals,
        tier=rule.name,
        partition=partition,
        qos=qos,
        options=opts,
        notes=notes,
        refusals=refusals,
        output=asked.output,
    )


def _header_options(script: str) -> list[str]:
    """The long names of the script's ``#SBATCH`` options, in order ([] when sbatch cannot read the header)."""
    try:
        return [d.name for d in header(script)]
    except HeaderError:
        return []


def _guarantee_route(
    tables: PolicyTables,
    project: str,
    req: models.SubmitRequest,
    rule: TierRule,
    partition: str,
    notes: list[str],
    refusals: list[str],
) -> tuple[str, str, TierRule]:
    """Partition, QOS and tier rule once the project's floating guarantee had its say (:func:`guarantee_route`)."""
    gres = gpu_gres(tables, req.mig, req.gpu_type, 0 if req.shards else req.gpus)
    asked = fit.ask(sbatchopts.gres_options(gres), req.script)
    total = 0 if req.shards else asked.total
    route = guarantee_route(tables, project, rule, partition, total, {asked.gpu_type or "": total} if total else {})
    notes.extend(n for n in (route.note,) if n)
    refusals.extend(r for r in (route.refusal,) if r)
    return route.partition, route.qos, route.tier


def _other_tiers(tables: PolicyTables, project: str) -> str:
    tiers = {t.name: t for t in tables.tiers}
    others = [t for t in project_routes(tables, project) if tiers[t].checkpoint == "none"]
    return f"; tiers without this rule you may use: {', '.join(others)}" if others else ""
