"""The pool as a whole: its GPUs and nodes, the projects' use, the service's own counts."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response
from starlette.concurrency import run_in_threadpool

from slurm_pool.web import models, views
from slurm_pool.web.bodies import Utf8JsonRoute
from slurm_pool.web.problems import ERRORS, ApiError
from slurm_pool.web.service import API, Svc, Who

#: Hours of accounting the projects page covers.
PROJECT_HOURS = 24

router = APIRouter(route_class=Utf8JsonRoute)


@router.get(f"{API}/pool", response_model=models.Pool, responses=ERRORS, tags=["pool"])
async def get_pool(request: Request, who: Who, svc: Svc) -> Response:
    # built once per read, before requests see it: answered on the event loop when it is at hand, else in a
    # thread (the first read, the coordinators, an answer still to build); no docstring: the schema's text
    body = svc.pool_answer_now(who)
    if body is None:
        body = await run_in_threadpool(svc.pool_answer, who)
    return body.response(request)


@router.get(f"{API}/projects", response_model=list[models.ProjectView], responses=ERRORS, tags=["pool"])
def get_projects(who: Who, svc: Svc) -> list[models.ProjectView]:
    try:
        runs, start, end = svc.reader.accounting(PROJECT_HOURS)
    except Exception as exc:  # noqa: BLE001 -- sacct failing is Slurm's problem, said as such
        raise ApiError(502, f"reading the accounting (sacct) failed: {exc}") from None
    return views.projects(svc.spec, svc.viewer(who), runs, start=start, end=end, hours=PROJECT_HOURS)


@router.get(f"{API}/stats", include_in_schema=False)
def get_stats(_who: Who, svc: Svc) -> dict[str, Any]:
    """How many Slurm commands the service ran (the load benchmark reads it)."""
    reader = svc.reader
    return {"slurm_calls": reader.calls, "refresh_seconds": svc.refresh, "samples": len(reader.history)}
