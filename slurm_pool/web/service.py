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
import hashlib
import logging
import threading
import time
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from typing import Annotated, Any, Callable, Hashable, Sequence, cast

from fastapi import Depends, Request, Response

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


@dataclass(frozen=True)
class Answer:
    """A serialized answer and its entity tag (a hash of its bytes): a client that has it gets 304."""

    body: bytes
    etag: str

    @classmethod
    def of(cls, body: bytes) -> Answer:
        return cls(body, '"' + hashlib.blake2b(body, digest_size=16).hexdigest() + '"')

    def response(self, request: Request) -> Response:
        """200 with the body, or 304 when the request's ``If-None-Match`` names this answer's tag."""
        tags = request.headers.get("if-none-match")
        if tags and self.etag in {t.strip().removeprefix("W/") for t in tags.split(",")[:64]}:
            return Response(status_code=304, headers={"ETag": self.etag})
        return Response(content=self.body, media_type="application/json", headers={"ETag": self.etag})


#: A job list's query: state, user, project, tier, sort.
JobQuery = tuple[str | None, str | None, str | None, str | None, str]


class AnswerCache:
    """Answers built from one read (or forecast), kept until the next: per role for the pool, per viewer and
    filters for job lists, per job for explanations; the read's jobs indexed (:class:`~.views.JobIndex`); and
    the jobs submitted here the reads may not have yet.  A missing answer is built by one thread, the others
    asking for it wait for that one (:meth:`once`)."""

    def __init__(self, max_cached: int = MAX_CACHED, max_submitted: int = MAX_SUBMITTED):
        self.max_cached = max_cached
        self.max_submitted = max_submitted
        self.lock = threading.Lock()
        #: (id of the read, version of the history and reclaims, operator) -> (the read, the answer)
        self._pool: OrderedDict[tuple[int, int, bool], tuple[Snapshot, Answer]] = OrderedDict()
        self._index: tuple[Snapshot | None, views.JobIndex | None] = (None, None)
        #: id of a read -> (the read, its job lists by viewer and query): the published read's and the next's
        self._jobs: OrderedDict[int, tuple[Snapshot, dict[Hashable, Answer]]] = OrderedDict()
        self._why: tuple[Any, dict[Hashable, dict[str, Any]]] = (None, {})
        self._submitted: dict[int, JobRecord] = {}
        self._building: dict[Hashable, threading.Lock] = {}

    def once(self, key: Hashable, find: Callable[[], Any], build: Callable[[], Any]) -> Any:
        """``find()``, else ``build()`` by one thread at a time per ``key`` (a thread that waited finds the
        answer the one before it built)."""
        found = find()
        if found is not None:
            return found
        with self.lock:
            turn = self._building.setdefault(key, threading.Lock())
        try:
            with turn:
                found = find()
                return found if found is not None else build()
        finally:
            with self.lock:
                if not turn.locked():
                    self._building.pop(key, None)

    # -- the pool -----------------------------------------------------------------------------------
    def pool_hit(self, operator: bool, snap: Snapshot, version: int) -> Answer | None:
        """The pool's answer for an operator or anyone else from ``snap`` and history ``version``, if built."""
        with self.lock:
            hit = self._pool.get((id(snap), version, operator))
        return hit[1] if hit is not None and hit[0] is snap else None

    def keep_pool(self, operator: bool, snap: Snapshot, version: int, body: bytes) -> Answer:
        answer = Answer.of(body)
        with self.lock:
            self._pool[(id(snap), version, operator)] = (snap, answer)
            while len(self._pool) > 8:  # this state's and the one before (requests see it until this is ready)
                self._pool.popitem(last=False)
        return answer

    def pool(self, operator: bool, snap: Snapshot, version: int, build: Callable[[], bytes]) -> Answer:
        """The pool's answer for an operator or anyone else, from ``snap`` (built once)."""

        def made() -> Answer:
            return self.keep_pool(operator, snap, version, build())

        found: Answer = self.once(("pool", operator), lambda: self.pool_hit(operator, snap, version), made)
        return found

    # -- jobs ---------------------------------------------------------------------------------------
    def index(self, snap: Snapshot) -> views.JobIndex:
        """``snap``'s jobs indexed (built once per read)."""

        def hit() -> views.JobIndex | None:
            at, index = self._index
            return index if at is snap else None

        def build() -> views.JobIndex:
            index = views.JobIndex(snap.jobs)
            with self.lock:
                self._index = (snap, index)
            return index

        found: views.JobIndex = self.once("index", hit, build)
        return found

    def _per(self, slot: str, source: Any, key: Hashable, build: Callable[[], Any]) -> Any:
        """The answer for ``key`` from ``source`` (a read, a forecast): a new source drops every other."""
        hit = self._hit(slot, source, key)
        if hit is None:
            hit = self.once((slot, key), lambda: self._hit(slot, source, key), build)
            with self.lock:
                at, answers = getattr(self, slot)
                if at is source and len(answers) < self.max_cached:
                    answers[key] = hit
        return hit

    def _hit(self, slot: str, source: Any, key: Hashable) -> Any:
        with self.lock:
            if getattr(self, slot)[0] is not source:
                setattr(self, slot, (source, {}))
            return getattr(self, slot)[1].get(key)

    def jobs_hit(self, snap: Snapshot, key: Hashable) -> Answer | None:
        """A job list from ``snap`` for ``key``, if built."""
        with self.lock:
            at = self._jobs.get(id(snap))
            return at[1].get(key) if at is not None and at[0] is snap else None

    def keep_jobs(self, snap: Snapshot, key: Hashable, answer: Answer) -> None:
        with self.lock:
            at = self._jobs.get(id(snap))
            if at is None or at[0] is not snap:
                at = self._jobs[id(snap)] = (snap, {})
                while len(self._jobs) > 2:
                    self._jobs.popitem(last=False)
            if len(at[1]) < self.max_cached:
                at[1][key] = answer

    def asked(self) -> list[Hashable]:
        """The job lists asked of the latest read with any (viewers and queries), most recent read first."""
        with self.lock:
            return [key for _snap, answers in reversed(self._jobs.values()) for key in answers][: self.max_cached]

    def jobs(self, snap: Snapshot, key: Hashable, build: Callable[[], Answer]) -> Answer:
        """A job list from ``snap`` for ``key`` (the viewer and the filters)."""

        def made() -> Answer:
            answer = build()
            self.keep_jobs(snap, key, answer)
            return answer

        found: Answer = self.once(("jobs", key), lambda: self.jobs_hit(snap, key), made)
        return found

    def explained(self, forecast: Any, key: Hashable, build: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        """An explanation from ``forecast`` for ``key`` (the job and whether alternatives are asked), any viewer."""
        found: dict[str, Any] = self._per("_why", forecast, key, build)
        return found

    def remember(self, job: JobRecord) -> None:
        """A job submitted here, until the reads have it (the oldest forgotten first)."""
        with self.lock:
            self._submitted[job.job_id] = job
            while len(self._submitted) > self.max_submitted:
                self._submitted.pop(next(iter(self._submitted)))

    def submitted(self, job_id: int) -> JobRecord | None:
        with self.lock:
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
        self._viewers: tuple[Any, dict[str, views.Viewer]] = (None, {})
        reader.prepare = self.prepare

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

    def viewer_now(self, who: Caller) -> views.Viewer | None:
        """:meth:`viewer` when the coordinators are at hand (None: reading them may wait for Slurm); the same
        viewer for the same user while the coordinators stay the same read."""
        found = self.reader.coordinators_now()
        if found is None:
            return None
        with self.cache.lock:
            at, known = self._viewers
            if at is not found:
                at, known = self._viewers = (found, {})
            me = known.get(who.user)
        if me is None:
            me = views.viewer(self.spec, who.user, found)
            with self.cache.lock:
                if self._viewers[0] is found and len(self._viewers[1]) < MAX_CACHED:
                    self._viewers[1][who.user] = me
        return me

    # -- answers built once per read ------------------------------------------------------------------
    def prepare(self, snap: Snapshot, history: list[models.Sample], reclaims: dict[str, float], version: int) -> None:
        """Build a new state's pool answers and job index (the reader calls it before requests see the state)."""
        index = self.cache.index(snap)
        for key in dict.fromkeys(self.cache.asked()):  # the lists asked of the last read: asked again soon
            me, *query = cast(tuple[Any, ...], key)
            self.cache.keep_jobs(snap, key, self.job_list(index, me, tuple(query)))
        full = self.pool_view(True, snap, history, reclaims)
        self.cache.keep_pool(True, snap, version, full.model_dump_json().encode())
        public = full.model_copy(update={"nodes": [n.model_copy(update={"reason": ""}) for n in full.nodes]})
        self.cache.keep_pool(False, snap, version, public.model_dump_json().encode())  # drains' reasons: operators'

    def pool_view(
        self, operator: bool, snap: Snapshot, history: list[models.Sample], reclaims: dict[str, float]
    ) -> models.Pool:
        return views.pool(
            self.spec, views.Viewer("", operator=operator), snap.nodes, snap.jobs, now=snap.time, history=history,
            fresh=snap.fresh, lend_partition=self.lend_partition, reclaims=reclaims,
        )  # fmt: skip

    def pool_body(
        self, operator: bool, snap: Snapshot, history: list[models.Sample], reclaims: dict[str, float]
    ) -> bytes:
        return self.pool_view(operator, snap, history, reclaims).model_dump_json().encode()

    def pool_answer(self, who: Caller) -> Answer:
        """The pool as ``who`` may see it (may wait for Slurm: the first read, the coordinators)."""
        me = self.viewer(who)
        reader = self.reader
        version = reader.version
        snap = reader.snapshot()
        return self.cache.pool(
            me.operator, snap, version,
            lambda: self.pool_body(me.operator, snap, reader.history, reader.last_reclaims()),
        )  # fmt: skip

    def pool_answer_now(self, who: Caller) -> Answer | None:
        """:meth:`pool_answer` when it is built already (None: it may have to be built or wait for Slurm)."""
        me = self.viewer_now(who)
        version = self.reader.version
        snap = self.reader.latest()
        return None if me is None or snap is None else self.cache.pool_hit(me.operator, snap, version)

    def jobs_answer(self, who: Caller, query: JobQuery) -> Answer:
        """The queue as ``who`` may see it, filtered and sorted (may wait for Slurm, or build the answer)."""
        me = self.viewer(who)
        snap = self.reader.snapshot()

        return self.cache.jobs(snap, (me, *query), lambda: self.job_list(self.cache.index(snap), me, query))

    @staticmethod
    def job_list(index: views.JobIndex, me: views.Viewer, query: Any) -> Answer:
        state, user, project, tier, sort = query
        listed = index.job_list(me, state=state, user=user, project=project, tier=tier, sort=sort)
        return Answer.of(listed.model_dump_json().encode())

    def jobs_answer_now(self, who: Caller, query: JobQuery) -> Answer | None:
        """:meth:`jobs_answer` when it is built already (None else)."""
        me = self.viewer_now(who)
        snap = self.reader.latest()
        return None if me is None or snap is None else self.cache.jobs_hit(snap, (me, *query))

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


async def service(request: Request) -> Service:
    """The app's :class:`Service`."""
    svc: Service = request.app.state.service
    return svc


def access() -> Access:
    """The service's own checks (a test may override them to prove that Slurm refuses too)."""
    return Access()


Svc = Annotated[Service, Depends(service)]
Checks = Annotated[Access, Depends(access)]


async def caller(request: Request, svc: Svc) -> Caller:
    """Who calls (a Bearer token, a session, a trusted proxy's header); 401 else.  On the event loop: checking
    a token or a session is a few microseconds' work, not worth a thread's turn."""
    return svc.auth.caller(request.headers, request.cookies, request.client.host if request.client else None)


Who = Annotated[Caller, Depends(caller)]


def changing(request: Request, who: Who, svc: Svc) -> Caller:
    """Who calls, for a state-changing request: it passes the CSRF check."""
    svc.auth.check_csrf(who, request.method, request.headers)
    return who


Changing = Annotated[Caller, Depends(changing)]
