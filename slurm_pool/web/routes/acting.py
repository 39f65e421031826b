"""Acting on jobs: submit, change a job's tier, cancel, hold, release, requeue; each runs as the caller
(:mod:`slurm_pool.web.actions`), after the service's own checks (:class:`~slurm_pool.web.service.Access`)."""

from __future__ import annotations

from fastapi import APIRouter

from slurm_pool.adapters.records import JobRecord, job_state
from slurm_pool.adapters.slurm import SlurmClient
from slurm_pool.web import actions, models
from slurm_pool.web.bodies import Utf8JsonRoute
from slurm_pool.web.problems import ERRORS, ApiError, quoted
from slurm_pool.web.routes.jobs import PathJob
from slurm_pool.web.service import API, Changing, Checks, Svc, job_ref

router = APIRouter(route_class=Utf8JsonRoute)


@router.post(f"{API}/jobs", response_model=models.Submitted, responses=ERRORS, tags=["jobs"])
def post_job(body: models.SubmitRequest, who: Changing, svc: Svc, access: Checks) -> models.Submitted:
    explanation = access.explain(svc, svc.viewer(who), body)
    access.check_submit(explanation)
    job_id = actions.submit(svc.commands, who.user, explanation.options, body.script)
    project = SlurmClient.submit_option(explanation.options, "account") or ""
    svc.cache.remember(
        JobRecord(
            job_id,
            name=body.name,
            user=who.user,
            account=project,
            partition=explanation.partition,
            qos=body.tier,
            state=job_state("PENDING"),
            submit_time=svc.clock(),
        )  # fmt: skip
    )
    svc.reader.stale()
    return models.Submitted(job_id=job_id, explanation=explanation)


@router.post(f"{API}/jobs/{{job_id}}/tier", response_model=models.ActionResult, responses=ERRORS, tags=["jobs"])
def post_tier(body: models.TierChange, job_id: PathJob, who: Changing, svc: Svc, access: Checks) -> models.ActionResult:
    ref = job_ref(job_id)
    me = svc.viewer(who)
    job = access.job_to_move(svc, ref, me)
    qos, partition = access.tier_move(svc, me, job, body.tier)
    # Slurm's name for what was asked: an array task still in its array's record is moved alone.
    message = actions.move(svc.commands, who.user, ref, qos, partition)
    svc.reader.stale()
    return models.ActionResult(job_id=str(ref), action="tier", ok=True, message=message)


@router.post(f"{API}/jobs/{{job_id}}/{{action}}", response_model=models.ActionResult, responses=ERRORS, tags=["jobs"])
def post_action(action: str, job_id: PathJob, who: Changing, svc: Svc, access: Checks) -> models.ActionResult:
    if action not in models.ACTIONS:
        raise ApiError(404, f"action: {quoted(action)} is not one of {', '.join(models.ACTIONS)}", "action")
    ref = job_ref(job_id, ranges=action in actions.RANGES)
    access.before_action(svc, ref, svc.viewer(who))
    message = actions.job_action(svc.commands, who.user, ref, action)
    svc.reader.stale()
    return models.ActionResult(job_id=str(ref), action=action, ok=True, message=message)
