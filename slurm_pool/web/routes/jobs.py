"""Reading jobs: the queue as the caller may see it, finished jobs, one job, why it waits, what a job
would become."""

from __future__ import annotations

import logging
from typing import Annotated, Any, Callable, Optional

from fastapi import APIRouter, Request, Response
from fastapi import Path as PathParam
from starlette.concurrency import run_in_threadpool

from slurm_pool import text
from slurm_pool.adapters.records import JobRecord
from slurm_pool.jobid import JobId
from slurm_pool.predict.explain import explain, together
from slurm_pool.predict.forward import LiveJob
from slurm_pool.web import models, views
from slurm_pool.web.bodies import Utf8JsonRoute
from slurm_pool.web.problems import ERRORS, ApiError, quoted
from slurm_pool.web.service import API, Changing, Checks, Service, Svc, Who, find, job_ref

log = logging.getLogger(__name__)

PathJob = Annotated[str, PathParam(description="A Slurm job id: 123, an array task 123_4, a het component 123+1")]

router = APIRouter(route_class=Utf8JsonRoute)


def why_answer(
    answer: dict[str, Any], now: float, slurm_estimate: float | None, visible: Callable[[int], bool]
) -> models.Why:
    """:meth:`Explanation.as_dict`'s answer as the API's :class:`~slurm_pool.web.models.Why`: the causes name
    only the jobs ``visible`` keeps, and every text has its control characters shown."""
    return models.Why(
        job_id=answer["job_id"],
        now=now,
        reason=text.shown(answer["reason"]),
        reason_text=text.shown(answer["reason_text"]),
        predicted_start=answer["predicted_start"],
        range=(answer["range"][0], answer["range"][1]),
        runtime_seconds=answer["runtime_seconds"],
        runtime_basis=text.shown(answer["runtime_basis"]),
        note=text.shown(answer["note"]),
        slurm_estimate=slurm_estimate,
        causes=[
            models.WhyCause(
                kind=text.shown(c["kind"]),
                text=text.shown(c["text"]),
                jobs=[j for j in c["jobs"] if visible(j)],
                nodes=[text.shown(n) for n in c["nodes"]],
            )
            for c in answer["causes"]
        ],
        alternatives=[
            models.WhyAlternative(
                what=text.shown(a["what"]), how=text.shown(a["how"]), predicted_start=a["predicted_start"]
            )
            for a in answer["alternatives"]
        ],
    )


def not_waiting(ref: JobId, job: JobRecord, current: JobRecord | None, live: LiveJob | None) -> str:
    """Why job ``ref`` (``job``) has no answer to "why is it waiting": it runs, is leaving its nodes, or has ended."""
    if live is not None and live.state == "running":
        return f"job {ref} is running, not waiting"
    if live is not None:
        return f"job {ref} is leaving its nodes (preempted or completing), not waiting"
    if current is None:
        return f"job {ref} has ended ({job.state.base.lower() or 'in no state'}), not waiting"
    if current.waiting:
        return f"job {ref} is no longer waiting (it left the queue or started since the last read)"
    return f"job {ref} is {current.state.base.lower() or 'in no state'}, not waiting"


def _word(value: Optional[str], field: str, rule: str) -> Optional[str]:
    if value is not None and not text.matches(rule, value):
        raise ApiError(422, f"{field}: {quoted(value)} does not match {text.SHAPES[rule]}", field)
    return value or None


@router.get(f"{API}/jobs", response_model=models.JobList, responses=ERRORS, tags=["jobs"])
async def get_jobs(
    request: Request,
    who: Who,
    svc: Svc,
    state: Optional[str] = None,
    user: Optional[str] = None,
    project: Optional[str] = None,
    tier: Optional[str] = None,
    sort: str = "job_id",
) -> Response:
    if state is not None and not text.matches(r"[A-Za-z_]{1,32}", state):
        raise ApiError(422, f"query.state: {quoted(state)} is not a job state such as RUNNING", "query.state")
    if sort.lstrip("-") not in views.SORT_KEYS or len(sort) > 32:
        raise ApiError(422, f"query.sort: {quoted(sort)} is not one of {', '.join(views.SORT_KEYS)}", "query.sort")
    query = (
        state,
        _word(user, "query.user", "login"),
        _word(project, "query.project", "name"),
        _word(tier, "query.tier", "name"),
        sort,
    )
    body = svc.jobs_answer_now(who, query)  # at hand: answered on the event loop
    if body is None:
        body = await run_in_threadpool(svc.jobs_answer, who, query)
    return body.response(request)


@router.get(f"{API}/jobs/history", response_model=models.JobList, responses=ERRORS, tags=["jobs"])
def get_history(who: Who, svc: Svc) -> models.JobList:
    """Jobs that ended in the last two weeks (the accounting's, read at most every ``slow_seconds``)."""
    try:
        runs = svc.reader.runtime_history()
    except Exception as exc:  # noqa: BLE001 -- Slurm failing is Slurm's problem, said as such
        raise ApiError(502, f"reading finished jobs from the accounting (sacct) failed: {exc}") from None
    return views.history(svc.viewer(who), runs)


@router.get(f"{API}/jobs/{{job_id}}", response_model=models.JobDetail, responses=ERRORS, tags=["jobs"])
def get_job(job_id: PathJob, who: Who, svc: Svc, access: Checks) -> models.JobDetail:
    ref = job_ref(job_id)
    job, current = find(svc, access, ref, svc.viewer(who))
    try:
        runs, outcomes = svc.reader.detail(ref)
    except Exception as exc:  # noqa: BLE001 -- the queue's record alone still says something
        log.warning("sacct for job %s failed: %s", ref, text.shown(str(exc))[:300])
        runs, outcomes = [], []
    return views.job_detail(job, runs or ([current] if current else []), outcomes, current)


@router.get(f"{API}/jobs/{{job_id}}/why", response_model=models.Why, responses=ERRORS, tags=["jobs"])
def get_why(job_id: PathJob, who: Who, svc: Svc, access: Checks, alternatives: bool = True) -> models.Why:
    """Why a pending job waits, when the pool's model starts it, and (``alternatives``) what would start it
    sooner: one forward run of the queue shared by every request for ``refresh_seconds``.  A het job's
    waiting components, an array's waiting tasks: each in ``parts``."""
    ref = job_ref(job_id)
    me = svc.viewer(who)
    job, current = find(svc, access, ref, me)
    try:
        fc = svc.reader.forecast(svc.spec)
    except Exception as exc:  # noqa: BLE001 -- Slurm failing is Slurm's problem, said as such
        raise ApiError(502, f"reading the queue for the forecast failed: {exc}") from None
    ids = fc.named(ref)
    pending = [j for j in ids if fc.jobs[j].state == "pending" and j in fc.predictions]
    if not pending:
        raise ApiError(409, not_waiting(ref, job, current, fc.jobs.get(ids[0]) if ids else None), "job_id")
    records = {j.job_id: j for j in svc.reader.snapshot().jobs}

    def visible(other: int) -> bool:
        rec = records.get(other)
        return rec is not None and me.sees(rec)

    parts = [why_answer(explained(svc, fc, j, alternatives), fc.now, fc.slurm_start.get(j), visible) for j in pending]
    for j, part in zip(pending, parts, strict=True):
        part.name = fc.name(j)
    het = together(fc, pending)
    first = parts[0].model_copy()
    if len(parts) > 1:
        first.parts = [models.WhyPart(**p.model_dump(exclude={"parts", "het_start"})) for p in parts]
    first.het_start = het[1] if het else None
    return first


def explained(svc: Service, fc: Any, job: int, alternatives: bool) -> dict[str, Any]:
    """``explain``'s answer for ``job``: once per forecast, whoever polls."""
    return svc.cache.explained(
        fc, (job, alternatives), lambda: explain(fc, job, alternatives_too=alternatives).as_dict()
    )


@router.post(f"{API}/jobs/explain", response_model=models.Explanation, responses=ERRORS, tags=["jobs"])
def post_explain(body: models.SubmitRequest, who: Changing, svc: Svc, access: Checks) -> models.Explanation:
    return access.explain(svc, svc.viewer(who), body)
