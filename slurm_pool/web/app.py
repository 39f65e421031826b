"""The ASGI service of ``slurm-pool serve``: the REST API under ``/api/v1`` and the console at ``/``.

Every route answers JSON; every error is a :class:`~slurm_pool.web.models.Problem`
(:mod:`slurm_pool.web.problems`), never a traceback.  The routes are one router per
resource (:mod:`slurm_pool.web.routes`); what they share is the
:class:`~slurm_pool.web.service.Service` and its dependencies: who calls (the
:class:`~slurm_pool.web.identity.Authenticator`'s to say), what they see (filtered by
:mod:`slurm_pool.web.views`), the service's own checks
(:class:`~slurm_pool.web.service.Access`), and what they do, run as them through
:class:`~slurm_pool.web.actions.UserCommands` so that Slurm checks too.
Every state-changing request passes the CSRF check.  The session's token is handed out only by the
login's answer, never by a GET (a stolen cookie alone can neither read it nor act).
"""

from __future__ import annotations

import time
from typing import Callable

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from slurm_pool.adapters.slurm import SlurmClient
from slurm_pool.spec.model import PoolSpec
from slurm_pool.web import models, problems
from slurm_pool.web.actions import UserCommands
from slurm_pool.web.bodies import Utf8JsonRoute
from slurm_pool.web.guard import Guard
from slurm_pool.web.hosts import AllowedHosts
from slurm_pool.web.identity import Authenticator
from slurm_pool.web.reader import PoolReader
from slurm_pool.web.routes import acting, identity, jobs, pages, pool
from slurm_pool.web.routes.pages import STATIC_DIR
from slurm_pool.web.service import API, Service

ROUTERS = (identity.router, pool.router, jobs.router, acting.router, pages.router)


def create_app(
    spec: PoolSpec,
    *,
    slurm: SlurmClient,
    auth: Authenticator,
    commands: UserCommands,
    state_dir: str | None = None,
    clock: Callable[[], float] = time.time,
    hosts: AllowedHosts | None = None,
) -> FastAPI:
    """The service for ``spec``: API, console and their guards (``hosts``: the Host names it answers to,
    None for any)."""
    console = spec.console
    refresh = console.refresh_seconds if console else 10
    reader = PoolReader(
        slurm, refresh, clock, state_dir=state_dir, lend_partition=Service.lend_partition_of(spec),
        prometheus_url=console.prometheus_url if console else None,
    )  # fmt: skip
    app = FastAPI(
        title="slurm-pool",
        version=models.API_VERSION,
        description="The pool's REST API: what Slurm lets each user see and do.",
        openapi_url=f"{API}/openapi.json",
        docs_url=None,
        redoc_url=None,
    )
    app.router.route_class = Utf8JsonRoute  # JSON bodies in UTF-8 only
    app.state.reader = reader
    app.state.service = Service(spec, reader, auth, commands, clock)
    problems.install(app)
    for router in ROUTERS:
        app.include_router(router)
    app.mount("/static", StaticFiles(directory=STATIC_DIR, check_dir=False), name="static")
    app.add_middleware(Guard, hosts=hosts)
    return app
