"""The Python SDK: :class:`PoolClient` over the ``slurm-pool serve`` REST API (``/api/v1``).

Typed with the service's own models (:mod:`slurm_pool.web.models`), so what a
method returns is what the server's OpenAPI schema says (a test pins both).
Needs only httpx and pydantic -- nothing from the server side::

    from slurm_pool.client import PoolClient
    pool = PoolClient("https://pool.example.org", token)   # token: `scontrol token` output, or $SLURM_JWT
    job = pool.submit("#!/bin/sh\\nsrun train.py\\n", "scavenger", gpus=2, checkpoint=True)
    pool.wait(job.job_id, "RUNNING", timeout=600)

Requests are built as the server's strict request models, so bad input fails
here with pydantic's message; every error the service answers (and every
failure to reach it) is an :class:`ApiError` carrying the service's message: the subclass of its
kind (:class:`NotFound`, :class:`Forbidden`, ... mapped once in :data:`slurm_pool.errors.KINDS`).
What the service sends is untrusted: ``str(ApiError)`` shows control characters
escaped, and answers are read through the models (unknown fields ignored).
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import time
from typing import Any, Callable, Iterable, Mapping, Optional, TypeVar

import httpx
from pydantic import BaseModel, TypeAdapter, ValidationError

from slurm_pool import text
from slurm_pool.errors import ServiceError, kind_of
from slurm_pool.jobid import JobId
from slurm_pool.web import models as m
from slurm_pool.wellknown import CSRF_HEADER

__all__ = [
    "ApiError",
    "BadRequest",
    "Conflict",
    "Forbidden",
    "Invalid",
    "NotFound",
    "PoolClient",
    "ServerError",
    "SlurmFailed",
    "Throttled",
    "TimedOut",
    "TooLarge",
    "Unauthenticated",
    "Unavailable",
    "Unreachable",
]

API = f"/api/{m.API_VERSION}"
#: A JWT as ``scontrol token`` prints it: three base64url parts (the signature may be empty for alg none,
#: which the server refuses; the client does not judge it).
_JWT = re.compile(r"[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*")
#: Characters of an error message kept (a hostile server may send megabytes).
MAX_MESSAGE = 2000

T = TypeVar("T", bound=BaseModel)


class ApiError(ServiceError):
    """The service refused or failed a request: its HTTP status (0: it could not be reached), message and field.

    Each kind of failure (:data:`slurm_pool.errors.KINDS`) raises its own subclass (:class:`NotFound`,
    :class:`Forbidden`, ...); catching ``ApiError`` catches them all.
    """

    def __init__(self, status: int, message: str, field: Optional[str] = None):
        super().__init__(status, message[:MAX_MESSAGE], field[:200] if field else None)
        self.args = (status, message, field)

    def __str__(self) -> str:
        where = f" (field {self.field})" if self.field else ""
        head = f"HTTP {self.status}: " if self.status else ""
        return text.shown(f"{head}{self.message}{where}")


class BadRequest(ApiError):
    """400: the request cannot be used (the submit policy refuses the job, Slurm refuses an option)."""


class Unauthenticated(ApiError):
    """401: no valid token or session."""


class Forbidden(ApiError):
    """403: the caller may not see or do this (the service's check, or Slurm's)."""


class NotFound(ApiError):
    """404: no such job (or route)."""


class Conflict(ApiError):
    """409: the job is not in a state for this (not waiting, already held...)."""


class TooLarge(ApiError):
    """413: the request is larger than the service takes."""


class Invalid(ApiError):
    """422: a field of the request is not valid (:attr:`field` names it)."""


class Throttled(ApiError):
    """429: too many requests or logins; wait and try again."""


class ServerError(ApiError):
    """500: the service failed (it logged why)."""


class SlurmFailed(ApiError):
    """502: Slurm failed to answer the service."""


class Unavailable(ApiError):
    """503: the service (or the Slurm command it runs) cannot serve now."""


class TimedOut(ApiError):
    """504: Slurm's command took too long."""


class Unreachable(ApiError):
    """Status 0: the service could not be reached, or did not answer in time."""


#: The SDK's exception of each kind (named by :data:`slurm_pool.errors.KINDS`).
EXCEPTIONS: dict[str, type[ApiError]] = {
    c.__name__: c
    for c in (BadRequest, Unauthenticated, Forbidden, NotFound, Conflict, TooLarge, Invalid, Throttled,
              ServerError, SlurmFailed, Unavailable, TimedOut, Unreachable)
}  # fmt: skip


def error(status: int, message: str, field: Optional[str] = None) -> ApiError:
    """The exception of ``status``'s kind (a plain :class:`ApiError` for a status of no kind)."""
    kind = kind_of(status)
    return (EXCEPTIONS[kind.sdk] if kind else ApiError)(status, message, field)


def clean_token(token: str) -> str:
    """The JWT in ``token``: surrounding blanks and the ``SLURM_JWT=`` that ``scontrol token`` prints removed.

    Anything but a JWT's three base64url parts is a ValueError that never shows the token itself.
    """
    if not isinstance(token, str):
        raise ValueError(f"token: a string is needed, not {type(token).__name__}")
    tok = token.strip()
    tok = tok.removeprefix("SLURM_JWT=").strip()
    if not _JWT.fullmatch(tok):
        raise ValueError(
            "token: not a JWT (three base64url parts, as `scontrol token` prints it, with or without 'SLURM_JWT=')"
        )
    return tok


def loopback(host: str) -> bool:
    """``host`` is this machine: ``localhost`` or a loopback address (127.0.0.0/8, ::1)."""
    host = host.strip("[]").lower()
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_url(url: str) -> str:
    """``url`` without a trailing ``/`` if it is an http(s) URL with a host, no credentials, query or fragment."""
    if not isinstance(url, str):
        raise ValueError(f"url: a string is needed, not {type(url).__name__}")
    bad = text.control_chars(url)
    if bad or " " in url:
        raise ValueError(f"url: {text.shown(url)!r} holds control characters or spaces")
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError) as exc:
        raise ValueError(f"url: {url!r} is not a URL: {exc}") from None
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise ValueError(f"url: {url!r} is not an http:// or https:// URL with a host")
    if parsed.userinfo:
        raise ValueError(f"url: {url!r} holds credentials; pass a token instead")
    if parsed.query or parsed.fragment or "?" in url or "#" in url:
        raise ValueError(f"url: {url!r} has a query or fragment; give the service's base address")
    if parsed.scheme == "http" and not loopback(parsed.host):
        raise ValueError(
            f"url: {url!r} is plain http to another machine: the token or password would cross the network "
            "unencrypted; use https:// (plain http is only for this machine: localhost, 127.0.0.0/8, [::1])"
        )
    return url.rstrip("/")


def job_id(value: int | str | JobId, ranges: bool = False) -> str:
    """A job id as the path takes it, in Slurm's notation (:class:`~slurm_pool.jobid.JobId`): an int, or
    ``"123"``, ``"123_4"``, ``"123+1"`` (``ranges``: also ``"123_[1-3]"``); ValueError naming the value else."""
    if isinstance(value, JobId):
        if value.tasks and not ranges:
            raise ValueError(f"job id: {value}: a range of array tasks is not taken here")
        return str(value)
    return str(JobId.parse(value, "job id", ranges=ranges))


def _word(what: str, value: object) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{what}: {value!r} is not a string")
    text.check_free_text(value, what, max_len=256)
    return value


def _problem(resp: httpx.Response) -> ApiError:
    """The service's Problem (or FastAPI's ``detail``) of an error answer as an :class:`ApiError`."""
    try:
        body: Any = resp.json()
    except (json.JSONDecodeError, UnicodeDecodeError, ValueError):
        snippet = resp.text[:200].strip() if resp.content else ""
        return error(resp.status_code, snippet or resp.reason_phrase or "no message")
    if isinstance(body, dict):
        try:
            p = m.Problem.model_validate(body)
            return error(resp.status_code, p.message, p.field)
        except ValidationError:
            pass
        detail = body.get("detail")
        if isinstance(detail, str):
            return error(resp.status_code, detail)
        if isinstance(detail, list) and detail and isinstance(detail[0], dict):
            first = detail[0]
            loc = first.get("loc")
            field = ".".join(str(x) for x in loc[1:] or loc) if isinstance(loc, list) and loc else None
            return error(resp.status_code, str(first.get("msg", "invalid request")), field)
    return error(resp.status_code, resp.reason_phrase or "error")


class PoolClient:
    """A client of one ``slurm-pool serve``: each method is one request (``wait`` polls)."""

    def __init__(
        self,
        url: str,
        token: Optional[str] = None,
        *,
        timeout: float = 10,
        transport: Optional[httpx.BaseTransport] = None,
        http: Optional[httpx.Client] = None,
        env: Optional[Mapping[str, str]] = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ):
        """``token``: a Slurm JWT (default ``$SLURM_JWT``); ``transport`` or ``http`` (an httpx client,
        e.g. a test client of the app) replace the network."""
        self.url = check_url(url)
        if token is None:
            token = (os.environ if env is None else env).get("SLURM_JWT") or None
        self._token = clean_token(token) if token is not None else None
        self._csrf: Optional[str] = None
        self._clock, self._sleep = clock, sleep
        if http is None:
            http = httpx.Client(timeout=timeout, transport=transport, follow_redirects=False)
        self._http = http

    def __repr__(self) -> str:  # never the token
        return f"PoolClient({self.url!r})"

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> PoolClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- transport --------------------------------------------------------------------------------------
    def _request(
        self, method: str, path: str, *, body: Optional[BaseModel] = None, params: Optional[dict[str, str]] = None
    ) -> tuple[int, Any]:
        """The status and JSON body of a 2xx answer; an :class:`ApiError` for anything else."""
        headers = {"Accept": "application/json"}
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        if self._csrf:  # a session is its cookie and this token, reads included
            headers[CSRF_HEADER] = self._csrf
        content = None
        if body is not None:
            content = body.model_dump_json(exclude_unset=True).encode()
            headers["Content-Type"] = "application/json"
        try:
            resp = self._http.request(method, self.url + API + path, headers=headers, content=content, params=params)
        except httpx.TimeoutException as exc:
            raise error(0, f"{self.url}: no answer in time ({type(exc).__name__})") from None
        except httpx.HTTPError as exc:
            raise error(0, f"{self.url}: cannot reach the service: {exc}") from None
        if resp.status_code >= 400:
            raise _problem(resp)
        if not 200 <= resp.status_code < 300:
            raise error(resp.status_code, f"unexpected answer {resp.status_code} {resp.reason_phrase}")
        if resp.status_code == 204 or not resp.content:
            return resp.status_code, None
        try:
            return resp.status_code, resp.json()
        except (json.JSONDecodeError, UnicodeDecodeError, ValueError):
            raise error(resp.status_code, "the service answered something that is not JSON") from None

    def _get(self, model: type[T], path: str, params: Optional[dict[str, str]] = None) -> T:
        return _read(model, *self._request("GET", path, params=params))

    def _post(self, model: type[T], path: str, body: Optional[BaseModel] = None) -> T:
        return _read(model, *self._request("POST", path, body=body))

    # -- reading ----------------------------------------------------------------------------------------
    def me(self) -> m.Me:
        """Who the service takes the caller for, their projects, tiers and role."""
        return self._get(m.Me, "/me")

    def status(self) -> m.Pool:
        """The pool at a glance (what the caller may see of it)."""
        return self._get(m.Pool, "/pool")

    def jobs(
        self,
        *,
        state: Optional[str] = None,
        user: Optional[str] = None,
        project: Optional[str] = None,
        tier: Optional[str] = None,
        sort: Optional[str] = None,
    ) -> m.JobList:
        """Jobs the caller may see, filtered as the service's ``/jobs`` query takes it."""
        given = {"state": state, "user": user, "project": project, "tier": tier, "sort": sort}
        params = {k: _word(k, v) for k, v in given.items() if v is not None}
        return self._get(m.JobList, "/jobs", params)

    def history(self) -> m.JobList:
        """Jobs that ended in the last two weeks, the latest first (others' as counts by state)."""
        return self._get(m.JobList, "/jobs/history")

    def job(self, id: int | str | JobId) -> m.JobDetail:
        """One job in full, with its timeline."""
        return self._get(m.JobDetail, f"/jobs/{job_id(id)}")

    def why(self, id: int | str | JobId, alternatives: bool = True) -> m.Why:
        """Why a pending job waits, when the pool's model starts it, and (``alternatives``) what would start it
        sooner; an :class:`ApiError` 409 for a job that is not waiting."""
        params = None if alternatives else {"alternatives": "false"}
        return self._get(m.Why, f"/jobs/{job_id(id)}/why", params)

    def projects(self) -> list[m.ProjectView]:
        """The caller's projects: guaranteed, borrowed and lent GPU-hours, charges per tier."""
        return _read_list(m.ProjectView, *self._request("GET", "/projects"))

    # -- submitting -------------------------------------------------------------------------------------
    def explain(self, tier: str, script: str = "#!/bin/sh\n", **fields: Any) -> m.Explanation:
        """What the pool's submit policy makes of a job (the fields of :class:`SubmitRequest`), before it is sent."""
        return self._post(m.Explanation, "/jobs/explain", m.SubmitRequest(tier=tier, script=script, **fields))

    def submit(self, script: str, tier: str, **fields: Any) -> m.Submitted:
        """Submit a batch job as the caller; ``fields`` are :class:`SubmitRequest`'s (gpus, time_limit, ...)."""
        return self._post(m.Submitted, "/jobs", m.SubmitRequest(tier=tier, script=script, **fields))

    # -- job control ------------------------------------------------------------------------------------
    def _action(self, id: int | str | JobId, action: str) -> m.ActionResult:
        return self._post(m.ActionResult, f"/jobs/{job_id(id, ranges=action == 'cancel')}/{action}")

    def cancel(self, id: int | str | JobId) -> m.ActionResult:
        """Cancel a job, an array task (``"4_2"``), array tasks (``"4_[1-3]"``) or a het job's component."""
        return self._action(id, "cancel")

    def hold(self, id: int | str | JobId) -> m.ActionResult:
        return self._action(id, "hold")

    def release(self, id: int | str | JobId) -> m.ActionResult:
        return self._action(id, "release")

    def requeue(self, id: int | str | JobId) -> m.ActionResult:
        return self._action(id, "requeue")

    def change_tier(self, id: int | str | JobId, tier: str) -> m.ActionResult:
        """Move a pending job to another tier (Slurm decides whether the caller may)."""
        return self._post(m.ActionResult, f"/jobs/{job_id(id)}/tier", m.TierChange(tier=tier))

    def wait(
        self, id: int | str | JobId, state: str | Iterable[str], timeout: float = 600, poll: float = 2.0
    ) -> m.JobView:
        """Poll :meth:`job` until the job is in ``state`` (one or several, e.g. ``("COMPLETED", "FAILED")``).

        TimeoutError after ``timeout`` seconds names the last state seen.
        """
        wanted = {state.upper()} if isinstance(state, str) else {s.upper() for s in state}
        if not wanted or not all(isinstance(s, str) and s for s in wanted):
            raise ValueError("state: name at least one job state, e.g. 'RUNNING'")
        if not (timeout >= 0 and poll > 0):
            raise ValueError(f"timeout {timeout!r} must be >= 0 and poll {poll!r} > 0")
        deadline = self._clock() + timeout
        while True:
            view = self.job(id).job
            if view.state.upper() in wanted:
                return view
            left = deadline - self._clock()
            if left <= 0:
                raise TimeoutError(
                    text.shown(
                        f"job {view.job_id} is still {view.state or 'in no state'} after {timeout:g} s "
                        f"(waiting for {', '.join(sorted(wanted))})"
                    )
                )
            self._sleep(min(poll, left))

    # -- browser-style sessions -------------------------------------------------------------------------
    def login(self, user: str, password: str) -> m.Me:
        """Log in with a password (a session cookie and CSRF token instead of a JWT)."""
        me = self._post(m.Me, "/login", m.Login(user=user, password=password))
        self._csrf = me.csrf_token
        return me

    def logout(self) -> None:
        self._request("POST", "/logout")
        self._csrf = None


def _read(model: type[T], status: int, body: Any) -> T:
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        raise error(status, f"the service's answer is not a {model.__name__}: {_first(exc)}") from None


def _read_list(model: type[T], status: int, body: Any) -> list[T]:
    try:
        return TypeAdapter(list[model]).validate_python(body)  # type: ignore[valid-type]
    except ValidationError as exc:
        raise error(status, f"the service's answer is not a list of {model.__name__}: {_first(exc)}") from None


def _first(exc: ValidationError) -> str:
    err = exc.errors()[0]
    return f"{'.'.join(str(x) for x in err['loc']) or '(top)'}: {err['msg']}"
