"""The ASGI service of ``slurm-pool serve``: the REST API under ``/api/v1`` and the console at ``/``.

Every route answers JSON; every error is a :class:`~slurm_pool.web.models.Problem`
(a status, a message, the field it is about), never a traceback.  Who calls is
the :class:`~slurm_pool.web.identity.Authenticator`'s to say; what they see is
filtered by :mod:`slurm_pool.web.views`; what they do runs as them through
:class:`~slurm_pool.web.actions.UserCommands`, after the service's own checks
(``check_access``: off only in a test build, to prove Slurm refuses too).
Every state-changing request passes the CSRF check.  The session's token is handed out only by the
login's answer, never by a GET (a stolen cookie alone can neither read it nor act).
"""

import asyncio
import logging
import threading
import time
import weakref
from pathlib import Path
from typing import Annotated, Any, Callable, Optional

from fastapi import Depends, FastAPI, Request
from fastapi import Path as PathParam
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from slurm_pool import text
from slurm_pool.adapters.records import JobRecord, job_state
from slurm_pool.adapters.slurm import SlurmClient
from slurm_pool.jobid import JobId, JobIdError
from slurm_pool.policy.tables import PolicyTables, build_tables
from slurm_pool.predict.explain import explain, together
from slurm_pool.predict.forward import LiveJob
from slurm_pool.spec.bridge import bridge_of
from slurm_pool.spec.model import PoolSpec
from slurm_pool.versions import SlurmVersion
from slurm_pool.web import actions, models, views
from slurm_pool.web.actions import ActionError, UserCommands
from slurm_pool.web.bodies import Utf8JsonRoute
from slurm_pool.web.guard import Guard
from slurm_pool.web.hosts import AllowedHosts
from slurm_pool.web.identity import Authenticator, AuthError, Caller
from slurm_pool.web.reader import PoolReader, Snapshot

log = logging.getLogger(__name__)

STATIC_DIR = Path(__file__).resolve().parent / "static"
API = "/api/v1"
#: Characters of a bad value quoted back in an error.
MAX_QUOTED = 80
#: Jobs submitted through the service remembered until Slurm's reads have them.
MAX_SUBMITTED = 1000
#: Job-list answers kept per read (distinct callers and filters).
MAX_CACHED = 4096
#: Password checks (PAM) run at once; more logins wait for a turn (PAM may sleep seconds on a failure).
PAM_TURNS = 8
#: Hours of accounting the projects page covers.
PROJECT_HOURS = 24
ERRORS: dict[int | str, dict[str, Any]] = {
    s: {"model": models.Problem} for s in (400, 401, 403, 404, 409, 413, 422, 429, 502, 503)
}


class ApiError(Exception):
    """A refusal of the service itself: a status, a message, maybe the field."""

    def __init__(self, status: int, message: str, field: str | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.field = field


def _json(body: bytes) -> Response:
    """An answer serialized already (from a model of the route's ``response_model``)."""
    return Response(content=body, media_type="application/json")


def _problem(status: int, message: str, field: str | None = None, headers: dict[str, str] | None = None) -> Response:
    body = models.Problem(status=status, message=text.shown_lines(message)[:2000], field=field)  # lines kept
    return JSONResponse(body.model_dump(), status_code=status, headers=headers)


def _quoted(value: Any) -> str:
    """A bad value, short and with its control characters shown (never a huge input echoed back)."""
    if isinstance(value, (bytes, bytearray)):
        value = bytes(value[:MAX_QUOTED]).decode("utf-8", "replace")
    shown = text.shown(repr(value) if not isinstance(value, str) else repr(value[: MAX_QUOTED + 1]))
    return shown if len(shown) <= MAX_QUOTED else shown[:MAX_QUOTED] + "..."


def validation_problem(exc: RequestValidationError) -> Response:
    """422 naming the first bad field (``loc`` joined with '.'); 400 for a body that is not JSON."""
    errors = list(exc.errors())
    if not errors:
        return _problem(422, "the request is not valid")
    err = errors[0]
    loc = [str(p) for p in err.get("loc", ())]
    kind = str(err.get("type", ""))
    if kind in ("json_invalid", "json_type") or (loc[:1] == ["body"] and kind == "model_attributes_type"):
        return _problem(400, "the request body is not a JSON object", "body")
    joined = text.shown(".".join(loc))  # an unknown key is the client's text: shown, and never echoed whole
    field = (joined if len(joined) <= 2 * MAX_QUOTED else joined[: 2 * MAX_QUOTED] + "...") or None
    msg = str(err.get("msg", "is not valid"))
    if len(msg) > 4 * MAX_QUOTED:  # a message that quotes a huge value
        msg = msg[: 4 * MAX_QUOTED] + "..."
    if kind == "missing":
        return _problem(422, f"{field}: is required", field)
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    quotes = kind == "extra_forbidden" or kind.startswith("value_error")  # those messages quote the value
    value = f" (got {_quoted(err.get('input'))})" if "input" in err and not quotes else ""
    if kind == "extra_forbidden":
        msg = "is not a field of this request"
    return _problem(422, f"{field}: {msg}{value}{more}", field)


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


def job_ref(value: str, ranges: bool = False) -> JobId:
    """The path's job id in Slurm's notation (:class:`~slurm_pool.jobid.JobId`); 422 naming the value else."""
    try:
        return JobId.parse(value, "path.job_id", ranges=ranges)
    except JobIdError as exc:
        raise ApiError(422, str(exc), "path.job_id") from None


def create_app(
    spec: PoolSpec,
    *,
    slurm: SlurmClient,
    auth: Authenticator,
    commands: UserCommands,
    state_dir: str | None = None,
    check_access: bool = True,
    clock: Callable[[], float] = time.time,
    hosts: AllowedHosts | None = None,
) -> FastAPI:
    """The service for ``spec``: API, console and their guards (``hosts``: the Host names it answers to,
    None for any)."""
    console = spec.console
    refresh = console.refresh_seconds if console else 10
    lend = bridge_of(spec).partition
    reader = PoolReader(
        slurm, refresh, clock, state_dir=state_dir, lend_partition=lend,
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
    tables_lock = threading.Lock()
    tables_box: dict[str, PolicyTables] = {}
    #: Jobs submitted here that the last read may not have yet: id -> a record of what was asked.
    submitted: dict[int, JobRecord] = {}
    # Answers built from one read, serialized once, for every client polling until the next read.
    pool_cache: dict[bool, tuple[Snapshot, bytes]] = {}  # per role: the read it was built from
    jobs_cache: dict[Any, Any] = {}  # "snap" -> the read; (viewer, filters...) -> the answer
    why_cache: dict[Any, Any] = {}  # "fc" -> the forecast; (job id, alternatives) -> its explanation (any viewer)

    def tables() -> PolicyTables:
        """The policy tables for the running Slurm (its version picks the MIG type names)."""
        with tables_lock:
            if "t" in tables_box:
                return tables_box["t"]
            try:
                built = build_tables(spec, slurm.version())
            except Exception as exc:  # noqa: BLE001 -- Slurm not answering: the oldest release's names for now
                log.warning("asking Slurm its version failed: %s", text.shown(str(exc))[:300])
                return build_tables(spec, SlurmVersion(22, 5))
            tables_box["t"] = built
            return built

    # -- errors -----------------------------------------------------------------
    @app.exception_handler(RequestValidationError)
    async def _invalid(_request: Request, exc: RequestValidationError) -> Response:
        return validation_problem(exc)

    @app.exception_handler(AuthError)
    async def _auth(_request: Request, exc: AuthError) -> Response:
        headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
        return _problem(exc.status, exc.message, headers=headers)

    @app.exception_handler(ApiError)
    async def _api(_request: Request, exc: ApiError) -> Response:
        return _problem(exc.status, exc.message, exc.field)

    @app.exception_handler(ActionError)
    async def _action(_request: Request, exc: ActionError) -> Response:
        return _problem(exc.status, exc.message)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_request: Request, exc: StarletteHTTPException) -> Response:
        message = exc.detail if isinstance(exc.detail, str) else "the request cannot be served"
        if exc.status_code == 400 and message == "There was an error parsing the body":
            return _problem(400, "the request body is not JSON (UTF-8, nested at most a few hundred deep)", "body")
        return _problem(exc.status_code, message, headers=getattr(exc, "headers", None))

    @app.exception_handler(Exception)
    async def _unexpected(_request: Request, exc: Exception) -> Response:
        log.exception("unexpected error")
        return _problem(500, "internal error (logged by the service)")

    # -- who is calling ---------------------------------------------------------
    def caller(request: Request) -> Caller:
        return auth.caller(request.headers, request.cookies, request.client.host if request.client else None)

    def changing(request: Request, who: Annotated[Caller, Depends(caller)]) -> Caller:
        auth.check_csrf(who, request.method, request.headers)
        return who

    Who = Annotated[Caller, Depends(caller)]
    Changing = Annotated[Caller, Depends(changing)]
    PathJob = Annotated[str, PathParam(description="A Slurm job id: 123, an array task 123_4, a het component 123+1")]

    def viewer(who: Caller) -> views.Viewer:
        return views.viewer(spec, who.user, reader.coordinators())

    # -- identity ---------------------------------------------------------------
    public_tls = bool(console and console.public_url and console.public_url.startswith("https://"))
    pam_turns: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore]" = weakref.WeakKeyDictionary()

    def secure(request: Request) -> bool:
        """The browser reaches the service over TLS (its own, or a proxy's that ``public_url`` names)."""
        return request.url.scheme == "https" or public_tls

    @app.get(f"{API}/me", response_model=models.Me, responses=ERRORS, tags=["identity"])
    def get_me(who: Who) -> models.Me:
        return views.me(spec, viewer(who), tables(), None)  # the session's token: only the login's answer has it

    @app.post(f"{API}/login", response_model=models.Me, responses=ERRORS, tags=["identity"])
    async def login(body: models.Login, request: Request, response: Response) -> models.Me:
        """Log in with a system password: a session cookie, and in this answer only, the session's token
        (``csrf_token``), to send as ``X-CSRF-Token`` on every request of the session."""
        auth.check_login_origin(request.headers)
        ticket = auth.begin_login(body.user, request.client.host if request.client else None)
        started = False

        def check() -> Caller:
            nonlocal started
            started = True
            return auth.finish_login(ticket, body.password)  # ends the ticket itself

        try:
            await asyncio.sleep(ticket.delay)
            async with pam_turns.setdefault(asyncio.get_running_loop(), asyncio.Semaphore(PAM_TURNS)):
                who = await run_in_threadpool(check)
        finally:
            if not started:  # the client left before PAM was asked
                auth.throttle.end(ticket, None)
        response.headers["Set-Cookie"] = auth.cookie_header(who, secure(request))
        return await run_in_threadpool(lambda: views.me(spec, viewer(who), tables(), who.csrf))

    @app.post(f"{API}/logout", response_model=models.Me, responses=ERRORS, tags=["identity"])
    def logout(request: Request, response: Response, who: Changing) -> models.Me:
        auth.logout(who)
        response.headers["Set-Cookie"] = auth.clear_cookie_header(secure(request))
        return models.Me(user=who.user)

    # -- the pool ---------------------------------------------------------------
    @app.get(f"{API}/pool", response_model=models.Pool, responses=ERRORS, tags=["pool"])
    def get_pool(who: Who) -> Response:
        me = viewer(who)
        snap = reader.snapshot()
        cached = pool_cache.get(me.operator)
        if cached is None or cached[0] is not snap:
            view = views.pool(
                spec, me, snap.nodes, snap.jobs, now=snap.time, history=list(reader.history), fresh=snap.fresh,
                lend_partition=lend, reclaims=reader.last_reclaims(),
            )  # fmt: skip
            cached = pool_cache[me.operator] = (snap, view.model_dump_json().encode())
        return _json(cached[1])

    @app.get(f"{API}/projects", response_model=list[models.ProjectView], responses=ERRORS, tags=["pool"])
    def get_projects(who: Who) -> list[models.ProjectView]:
        try:
            runs, start, end = reader.accounting(PROJECT_HOURS)
        except Exception as exc:  # noqa: BLE001 -- sacct failing is Slurm's problem, said as such
            raise ApiError(502, f"reading the accounting (sacct) failed: {exc}") from None
        return views.projects(spec, viewer(who), runs, start=start, end=end, hours=PROJECT_HOURS)

    @app.get("/api/v1/stats", include_in_schema=False)
    def get_stats(_who: Who) -> dict[str, Any]:
        """How many Slurm commands the service ran (the load benchmark reads it)."""
        return {"slurm_calls": reader.calls, "refresh_seconds": refresh, "samples": len(reader.history)}

    # -- jobs -------------------------------------------------------------------
    def _word(value: Optional[str], field: str, rule: str) -> Optional[str]:
        if value is not None and not text.matches(rule, value):
            raise ApiError(422, f"{field}: {_quoted(value)} does not match {text.SHAPES[rule]}", field)
        return value or None

    @app.get(f"{API}/jobs", response_model=models.JobList, responses=ERRORS, tags=["jobs"])
    def get_jobs(
        who: Who,
        state: Optional[str] = None,
        user: Optional[str] = None,
        project: Optional[str] = None,
        tier: Optional[str] = None,
        sort: str = "job_id",
    ) -> Response:
        if state is not None and not text.matches(r"[A-Za-z_]{1,32}", state):
            raise ApiError(422, f"query.state: {_quoted(state)} is not a job state such as RUNNING", "query.state")
        if sort.lstrip("-") not in views.SORT_KEYS or len(sort) > 32:
            raise ApiError(422, f"query.sort: {_quoted(sort)} is not one of {', '.join(views.SORT_KEYS)}", "query.sort")
        me = viewer(who)
        snap = reader.snapshot()
        key = (me, state, user, project, tier, sort)
        with tables_lock:
            if jobs_cache.get("snap") is not snap:  # a new read: every answer is built afresh
                jobs_cache.clear()
                jobs_cache["snap"] = snap
            hit = jobs_cache.get(key)
        if hit is None:
            listed = views.job_list(
                me,
                snap.jobs,
                state=state,
                user=_word(user, "query.user", "login"),
                project=_word(project, "query.project", "name"),
                tier=_word(tier, "query.tier", "name"),
                sort=sort,
            )
            hit = listed.model_dump_json().encode()
            with tables_lock:
                if jobs_cache.get("snap") is snap and len(jobs_cache) <= MAX_CACHED:
                    jobs_cache[key] = hit
        return _json(hit)

    @app.get(f"{API}/jobs/history", response_model=models.JobList, responses=ERRORS, tags=["jobs"])
    def get_history(who: Who) -> models.JobList:
        """Jobs that ended in the last two weeks (the accounting's, read at most every ``slow_seconds``)."""
        try:
            runs = reader.runtime_history()
        except Exception as exc:  # noqa: BLE001 -- Slurm failing is Slurm's problem, said as such
            raise ApiError(502, f"reading finished jobs from the accounting (sacct) failed: {exc}") from None
        return views.history(viewer(who), runs)

    def find(ref: JobId, me: views.Viewer) -> tuple[JobRecord, JobRecord | None]:
        """Job ``ref`` (queue first, else accounting) and its queue record; 404, or 403 if ``me`` may not see it
        (or, for an array task or het component, any of the records it names)."""
        if ref.plain:
            current = reader.job(ref.job)
            named = [current] if current is not None else []
        else:
            try:
                named = reader.named(ref)
            except Exception as exc:  # noqa: BLE001
                raise ApiError(502, f"reading the queue (squeue) for job {ref} failed: {exc}") from None
            current = named[0] if named else None
        job = current
        if job is None:
            try:
                runs, _ = reader.detail(ref)
            except Exception as exc:  # noqa: BLE001
                raise ApiError(502, f"reading job {ref} from the accounting (sacct) failed: {exc}") from None
            named = runs[-1:]
            job = runs[-1] if runs else submitted.get(ref.job) if ref.plain else None
        if job is None:
            raise ApiError(404, f"there is no job {ref}", "job_id")
        if check_access and not all(me.sees(r) for r in named or [job]):
            raise ApiError(403, f"{me.user} may not see or act on job {ref}", "job_id")
        return job, current

    @app.get(f"{API}/jobs/{{job_id}}", response_model=models.JobDetail, responses=ERRORS, tags=["jobs"])
    def get_job(job_id: PathJob, who: Who) -> models.JobDetail:
        ref = job_ref(job_id)
        job, current = find(ref, viewer(who))
        try:
            runs, outcomes = reader.detail(ref)
        except Exception as exc:  # noqa: BLE001 -- the queue's record alone still says something
            log.warning("sacct for job %s failed: %s", ref, text.shown(str(exc))[:300])
            runs, outcomes = [], []
        return views.job_detail(job, runs or ([current] if current else []), outcomes, current)

    @app.get(f"{API}/jobs/{{job_id}}/why", response_model=models.Why, responses=ERRORS, tags=["jobs"])
    def get_why(job_id: PathJob, who: Who, alternatives: bool = True) -> models.Why:
        """Why a pending job waits, when the pool's model starts it, and (``alternatives``) what would start it
        sooner: one forward run of the queue shared by every request for ``refresh_seconds``.  A het job's
        waiting components, an array's waiting tasks: each in ``parts``."""
        ref = job_ref(job_id)
        me = viewer(who)
        job, current = find(ref, me)
        try:
            fc = reader.forecast(spec)
        except Exception as exc:  # noqa: BLE001 -- Slurm failing is Slurm's problem, said as such
            raise ApiError(502, f"reading the queue for the forecast failed: {exc}") from None
        ids = fc.named(ref)
        pending = [j for j in ids if fc.jobs[j].state == "pending" and j in fc.predictions]
        if not pending:
            raise ApiError(409, not_waiting(ref, job, current, fc.jobs.get(ids[0]) if ids else None), "job_id")
        records = {j.job_id: j for j in reader.snapshot().jobs}

        def visible(other: int) -> bool:
            rec = records.get(other)
            return rec is not None and me.sees(rec)

        parts = [why_answer(explained(fc, j, alternatives), fc.now, fc.slurm_start.get(j), visible) for j in pending]
        for j, part in zip(pending, parts, strict=True):
            part.name = fc.name(j)
        het = together(fc, pending)
        first = parts[0].model_copy()
        if len(parts) > 1:
            first.parts = [models.WhyPart(**p.model_dump(exclude={"parts", "het_start"})) for p in parts]
        first.het_start = het[1] if het else None
        return first

    def explained(fc: Any, job: int, alternatives: bool) -> dict[str, Any]:
        """``explain``'s answer for ``job``: once per forecast, whoever polls."""
        with tables_lock:
            if why_cache.get("fc") is not fc:  # a new forecast: every explanation is made afresh
                why_cache.clear()
                why_cache["fc"] = fc
            answer = why_cache.get((job, alternatives))
        if answer is None:
            answer = explain(fc, job, alternatives_too=alternatives).as_dict()
            with tables_lock:
                if why_cache.get("fc") is fc and len(why_cache) <= MAX_CACHED:
                    why_cache[(job, alternatives)] = answer
        return answer

    @app.post(f"{API}/jobs/explain", response_model=models.Explanation, responses=ERRORS, tags=["jobs"])
    def post_explain(body: models.SubmitRequest, who: Changing) -> models.Explanation:
        return views.explain(spec, tables(), viewer(who), body, check_access=check_access)

    @app.post(f"{API}/jobs", response_model=models.Submitted, responses=ERRORS, tags=["jobs"])
    def post_job(body: models.SubmitRequest, who: Changing) -> models.Submitted:
        explanation = views.explain(spec, tables(), viewer(who), body, check_access=check_access)
        if check_access and not explanation.ok:
            raise ApiError(400, "the pool's submit policy refuses this job: " + "; ".join(explanation.refusals))
        job_id = actions.submit(commands, who.user, explanation.options, body.script)
        project = next((o.split("=", 1)[1] for o in explanation.options if o.startswith("--account=")), "")
        submitted[job_id] = JobRecord(
            job_id, name=body.name, user=who.user, account=project, partition=explanation.partition,
            qos=body.tier, state=job_state("PENDING"), submit_time=clock(),
        )  # fmt: skip
        with tables_lock:
            while len(submitted) > MAX_SUBMITTED:
                submitted.pop(next(iter(submitted)))
        reader.stale()
        return models.Submitted(job_id=job_id, explanation=explanation)

    @app.post(f"{API}/jobs/{{job_id}}/tier", response_model=models.ActionResult, responses=ERRORS, tags=["jobs"])
    def post_tier(body: models.TierChange, job_id: PathJob, who: Changing) -> models.ActionResult:
        ref = job_ref(job_id)
        me = viewer(who)
        job, _ = find(ref, me) if check_access else (reader.job(ref.job) or JobRecord(ref.job), None)
        try:
            argv = views.tier_change(tables(), me, job, body.tier, check_access=check_access)
        except PermissionError as exc:
            raise ApiError(403, str(exc), "tier") from None
        except ValueError as exc:
            if check_access:
                raise ApiError(400, str(exc), "tier") from None
            argv = ["scontrol", "update", f"JobId={ref}", f"QOS={body.tier}"]
        # Slurm's name for what was asked: an array task still in its array's record is moved alone.
        argv = [f"JobId={ref}" if a.startswith("JobId=") else a for a in argv]
        message = actions.update(commands, who.user, argv)
        reader.stale()
        return models.ActionResult(job_id=str(ref), action="tier", ok=True, message=message)

    @app.post(f"{API}/jobs/{{job_id}}/{{action}}", response_model=models.ActionResult, responses=ERRORS, tags=["jobs"])
    def post_action(action: str, job_id: PathJob, who: Changing) -> models.ActionResult:
        if action not in models.ACTIONS:
            raise ApiError(404, f"action: {_quoted(action)} is not one of {', '.join(models.ACTIONS)}", "action")
        ref = job_ref(job_id, ranges=action in actions.RANGES)
        if check_access:
            find(ref, viewer(who))
        message = actions.job_action(commands, who.user, ref, action)
        reader.stale()
        return models.ActionResult(job_id=str(ref), action=action, ok=True, message=message)

    # -- the console ------------------------------------------------------------
    @app.get("/", include_in_schema=False)
    def index() -> Response:
        page = STATIC_DIR / "index.html"
        if not page.is_file():
            raise ApiError(404, "the console is not installed")
        return FileResponse(page, media_type="text/html; charset=utf-8")

    app.mount("/static", StaticFiles(directory=STATIC_DIR, check_dir=False), name="static")
    app.add_middleware(Guard, hosts=hosts)
    return app
