"""What every route of ``slurm-pool serve`` depends on, as FastAPI dependencies.

* :class:`Service`: the spec, Slurm (one shared read, :class:`~slurm_pool.web.reader.PoolReader`; actions
  run as the caller, :class:`~slurm_pool.web.actions.UserCommands`), who calls, the policy tables;
* :class:`AnswerCache`: answers built from one read, serialized once for every client polling;
* :class:`Access`: the service's own checks before Slurm's (which run anyway: an action runs as its caller);
* :func:`caller` and :func:`changing`: who calls, and for a state-changing request, the CSRF check.

``create_app`` keeps the service in ``app.state.service``; a test replaces a dependency through
``app.dependency_overrides``.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import weakref
from typing import Annotated, Any, Callable, Hashable, Sequence

from fastapi import Depends, Request

from slurm_pool import text
from slurm_pool.adapters.records import JobRecord
from slurm_pool.jobid import JobId, JobIdError
from slurm_pool.policy.tables import PolicyTables, build_tables
from slurm_pool.spec.bridge import bridge_of
from slurm_pool.spec.model import PoolSpec
from slurm_pool.versions import DEFAULT_VERSION
from slurm_pool.web import models, submitting, views
from slurm_pool.web.actions import UserCommands
from slurm_pool.web.identity import Authenticator, Caller
from slurm_pool.web.problems import ApiError
from slurm_pool.web.reader import PoolReader, Snapshot

log = logging.getLogger(__name__)

API = "/api/v1"
#: Jobs submitted through the service remembered until Slurm's reads have them.
MAX_SUBMITTED = 1000
#: Answers kept per read (distinct callers and filters; explanations per forecast).
MAX_CACHED = 4096
#: Password checks (PAM) run at once; more logins wait for a turn (PAM may sleep seconds on a failure).
PAM_TURNS = 8


class AnswerCache:
    """Answers built from one read (or forecast), kept until the next: per role for the pool, per viewer and
    filters for job lists, per job for explanations; and the jobs submitted here the reads may not have yet."""

    def __init__(self, max_cached: int = MAX_CACHED, max_submitted: int = MAX_SUBMITTED):
        self.max_cached = max_cached
        self.max_submitted = max_submitted
        self._lock = threading.Lock()
        self._pool: dict[bool, tuple[Snapshot, bytes]] = {}
        self._jobs: tuple[Any, dict[Hashable, bytes]] = (None, {})
        self._why: tuple[Any, dict[Hashable, dict[str, Any]]] = (None, {})
        self._submitted: dict[int, JobRecord] = {}

    def pool(self, operator: bool, snap: Snapshot, build: Callable[[], bytes]) -> bytes:
        """The pool's answer for an operator or anyone else, from ``snap``."""
        with self._lock:
            cached = self._pool.get(operator)
        if cached is None or cached[0] is not snap:
            cached = (snap, build())
            with self._lock:
                self._pool[operator] = cached
        return cached[1]

    def _per(self, slot: str, source: Any, key: Hashable, build: Callable[[], Any]) -> Any:
        """The answer for ``key`` from ``source`` (a read, a forecast): a new source drops every other."""
        with self._lock:
            if getattr(self, slot)[0] is not source:
                setattr(self, slot, (source, {}))
            hit = getattr(self, slot)[1].get(key)
        if hit is None:
            hit = build()
            with self._lock:
                at, answers = getattr(self, slot)
                if at is source and len(answers) < self.max_cached:
                    answers[key] = hit
        return hit

    def jobs(self, snap: Snapshot, key: Hashable, build: Callable[[], bytes]) -> bytes:
        """A job list from ``snap`` for ``key`` (the viewer and the filters)."""
        found: bytes = self._per("_jobs", snap, key, build)
        return found

    def explained(self, forecast: Any, key: Hashable, build: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        """An explanation from ``forecast`` for ``key`` (the job and whether alternatives are asked), any viewer."""
        found: dict[str, Any] = self._per("_why", forecast, key, build)
        return found

    def remember(self, job: JobRecord) -> None:
        """A job submitted here, until the reads have it (the oldest forgotten first)."""
        with self._lock:
            self._submitted[job.job_id] = job
            while len(self._submitted) > self.max_submitted:
                self._submitted.pop(next(iter(self._submitted)))

    def submitted(self, job_id: int) -> JobRecord | None:
        with self._lock:
            return self._submitted.get(job_id)


class Service:
    """The pool's service: its spec, Slurm (read once for all, acted on as the caller), its callers, its cache."""

    def __init__(
        self,
        spec: PoolSpec,
        reader: PoolReader,
        auth: Authenticator,
        commands: UserCommands,
        clock: Callable[[], float] = time.time,
    ):
        self.spec = spec
        self.reader = reader
        self.auth = auth
        self.commands = commands
        self.clock = clock
        self.cache = AnswerCache()
        console = spec.console
        self.refresh = console.refresh_seconds if console else 10
        self.lend_partition = self.lend_partition_of(spec)
        self.public_tls = bool(console and console.public_url and console.public_url.startswith("https://"))
        self.pam_turns: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
            weakref.WeakKeyDictionary()
        )
        self._tables: PolicyTables | None = None
        self._tables_lock = threading.Lock()

    @staticmethod
    def lend_partition_of(spec: PoolSpec) -> str:
        """The partition whose jobs hold the nodes lent to Kubernetes."""
        return bridge_of(spec).partition

    def tables(self) -> PolicyTables:
        """The policy tables for the running Slurm (its version picks the MIG type names); while Slurm does
        not say its version, those of the default version (asked again next time)."""
        with self._tables_lock:
            if self._tables is not None:
                return self._tables
            try:
                self._tables = build_tables(self.spec, self.reader.slurm.version())
            except Exception as exc:  # noqa: BLE001 -- Slurm not answering: the default release's names for now
                log.warning("asking Slurm its version failed: %s", text.shown(str(exc))[:300])
                return build_tables(self.spec, DEFAULT_VERSION)
            return self._tables

    def viewer(self, who: Caller) -> views.Viewer:
        return views.viewer(self.spec, who.user, self.reader.coordinators())

    def secure(self, request: Request) -> bool:
        """The browser reaches the service over TLS (its own, or a proxy's that ``public_url`` names)."""
        return request.url.scheme == "https" or self.public_tls

    def pam_turn(self) -> asyncio.Semaphore:
        """The turns of password checks of the running event loop."""
        return self.pam_turns.setdefault(asyncio.get_running_loop(), asyncio.Semaphore(PAM_TURNS))


def job_ref(value: str, ranges: bool = False) -> JobId:
    """The path's job id in Slurm's notation (:class:`~slurm_pool.jobid.JobId`); 422 naming the value else."""
    try:
        return JobId.parse(value, "path.job_id", ranges=ranges)
    except JobIdError as exc:
        raise ApiError(422, str(exc), "path.job_id") from None


def find(svc: Service, access: Access, ref: JobId, me: views.Viewer) -> tuple[JobRecord, JobRecord | None]:
    """Job ``ref`` (queue first, else accounting) and its queue record; 404, or 403 if ``me`` may not see it
    (or, for an array task or het component, any of the records it names)."""
    reader = svc.reader
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
        job = runs[-1] if runs else svc.cache.submitted(ref.job) if ref.plain else None
    if job is None:
        raise ApiError(404, f"there is no job {ref}", "job_id")
    if not access.may_see(me, named or [job]):
        raise ApiError(403, f"{me.user} may not see or act on job {ref}", "job_id")
    return job, current


class Access:
    """The service's own checks, before Slurm's: who may see a job, submit, act on a job, change its tier."""

    def may_see(self, me: views.Viewer, records: Sequence[JobRecord]) -> bool:
        return all(me.sees(r) for r in records)

    def explain(self, svc: Service, me: views.Viewer, body: models.SubmitRequest) -> models.Explanation:
        """What the submit policy makes of ``body`` from ``me``, and the service's refusal of a project not
        ``me``'s (first, as it is the first thing to change)."""
        tables = svc.tables()  # one set for both: they are not kept while Slurm does not say its version
        found = submitting.explain(svc.spec, tables, me, body)
        project = submitting.project_of(tables, me, body)
        why = submitting.not_a_member(me, project) if project is not None else None
        if why is None:
            return found
        return found.model_copy(update={"ok": False, "refusals": [why, *found.refusals]})

    def check_submit(self, explanation: models.Explanation) -> None:
        """400 when the pool's submit policy refuses the job."""
        if not explanation.ok:
            raise ApiError(400, "the pool's submit policy refuses this job: " + "; ".join(explanation.refusals))

    def before_action(self, svc: Service, ref: JobId, me: views.Viewer) -> None:
        """404 or 403 unless ``me`` may act on job ``ref``."""
        find(svc, self, ref, me)

    def job_to_move(self, svc: Service, ref: JobId, me: views.Viewer) -> JobRecord:
        """The job a tier change moves (404 or 403 as :func:`find` says)."""
        return find(svc, self, ref, me)[0]

    def tier_move(self, svc: Service, me: views.Viewer, job: JobRecord, tier: str) -> tuple[str, str | None]:
        """The QOS and partition moving ``job`` to ``tier``; 403 if ``me`` may not, 400 if its project may not."""
        try:
            return views.tier_change(svc.tables(), me, job, tier)
        except PermissionError as exc:
            raise ApiError(403, str(exc), "tier") from None
        except ValueError as exc:
            raise ApiError(400, str(exc), "tier") from None


def service(request: Request) -> Service:
    """The app's :class:`Service`."""
    svc: Service = request.app.state.service
    return svc


def access() -> Access:
    """The service's own checks (a test may override them to prove that Slurm refuses too)."""
    return Access()


Svc = Annotated[Service, Depends(service)]
Checks = Annotated[Access, Depends(access)]


def caller(request: Request, svc: Svc) -> Caller:
    """Who calls (a Bearer token, a session, a trusted proxy's header); 401 else."""
    return svc.auth.caller(request.headers, request.cookies, request.client.host if request.client else None)


Who = Annotated[Caller, Depends(caller)]


def changing(request: Request, who: Who, svc: Svc) -> Caller:
    """Who calls, for a state-changing request: it passes the CSRF check."""
    svc.auth.check_csrf(who, request.method, request.headers)
    return who


Changing = Annotated[Caller, Depends(changing)]
