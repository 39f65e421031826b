"""Who calls: ``/me``, and a browser's session (``/login``, ``/logout``)."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Request, Response
from starlette.concurrency import run_in_threadpool

from slurm_pool.web import models, views
from slurm_pool.web.bodies import Utf8JsonRoute
from slurm_pool.web.identity import Caller
from slurm_pool.web.problems import ERRORS
from slurm_pool.web.service import API, Changing, Svc, Who

router = APIRouter(route_class=Utf8JsonRoute)


@router.get(f"{API}/me", response_model=models.Me, responses=ERRORS, tags=["identity"])
def get_me(who: Who, svc: Svc) -> models.Me:
    return views.me(svc.spec, svc.viewer(who), svc.tables(), None)  # the session's token: only the login's answer


@router.post(f"{API}/login", response_model=models.Me, responses=ERRORS, tags=["identity"])
async def login(body: models.Login, request: Request, response: Response, svc: Svc) -> models.Me:
    """Log in with a system password: a session cookie, and in this answer only, the session's token
    (``csrf_token``), to send as ``X-CSRF-Token`` on every request of the session."""
    auth = svc.auth
    auth.check_login_origin(request.headers)
    ticket = auth.begin_login(body.user, request.client.host if request.client else None)
    started = False

    def check() -> Caller:
        nonlocal started
        started = True
        return auth.finish_login(ticket, body.password)  # ends the ticket itself

    try:
        await asyncio.sleep(ticket.delay)
        async with svc.pam_turn():
            who = await run_in_threadpool(check)
    finally:
        if not started:  # the client left before PAM was asked
            auth.throttle.end(ticket, None)
    response.headers["Set-Cookie"] = auth.cookie_header(who, svc.secure(request))
    return await run_in_threadpool(lambda: views.me(svc.spec, svc.viewer(who), svc.tables(), who.csrf))


@router.post(f"{API}/logout", response_model=models.Me, responses=ERRORS, tags=["identity"])
def logout(request: Request, response: Response, who: Changing, svc: Svc) -> models.Me:
    svc.auth.logout(who)
    response.headers["Set-Cookie"] = svc.auth.clear_cookie_header(svc.secure(request))
    return models.Me(user=who.user)
