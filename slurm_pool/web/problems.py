"""Every error of the service as a :class:`~slurm_pool.web.models.Problem`: a status, a message, the field.

The service's own refusals (:class:`ApiError`), Slurm's refusals of an action and the refusals of who
calls are all a :class:`~slurm_pool.errors.ServiceError`: one handler answers them.  A bad request names
its first bad field; anything unexpected is a logged 500, never a traceback.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from slurm_pool import text
from slurm_pool.errors import ServiceError
from slurm_pool.web import models

log = logging.getLogger(__name__)

#: Characters of a bad value quoted back in an error.
MAX_QUOTED = 80
#: The Problem answers every route may give (its OpenAPI ``responses``).
ERRORS: dict[int | str, dict[str, Any]] = {
    s: {"model": models.Problem} for s in (400, 401, 403, 404, 409, 413, 422, 429, 502, 503)
}


class ApiError(ServiceError):
    """A refusal of the service itself: a status, a message, maybe the field."""


def json_answer(body: bytes) -> Response:
    """An answer serialized already (from a model of the route's ``response_model``)."""
    return Response(content=body, media_type="application/json")


def problem(status: int, message: str, field: str | None = None, headers: dict[str, str] | None = None) -> Response:
    body = models.Problem(status=status, message=text.shown_lines(message)[:2000], field=field)  # lines kept
    return JSONResponse(body.model_dump(), status_code=status, headers=headers)


def quoted(value: Any) -> str:
    """A bad value, short and with its control characters shown (never a huge input echoed back)."""
    if isinstance(value, (bytes, bytearray)):
        value = bytes(value[:MAX_QUOTED]).decode("utf-8", "replace")
    shown = text.shown(repr(value) if not isinstance(value, str) else repr(value[: MAX_QUOTED + 1]))
    return shown if len(shown) <= MAX_QUOTED else shown[:MAX_QUOTED] + "..."


def validation_problem(exc: RequestValidationError) -> Response:
    """422 naming the first bad field (``loc`` joined with '.'); 400 for a body that is not JSON."""
    errors = list(exc.errors())
    if not errors:
        return problem(422, "the request is not valid")
    err = errors[0]
    loc = [str(p) for p in err.get("loc", ())]
    kind = str(err.get("type", ""))
    if kind in ("json_invalid", "json_type") or (loc[:1] == ["body"] and kind == "model_attributes_type"):
        return problem(400, "the request body is not a JSON object", "body")
    joined = text.shown(".".join(loc))  # an unknown key is the client's text: shown, and never echoed whole
    field = (joined if len(joined) <= 2 * MAX_QUOTED else joined[: 2 * MAX_QUOTED] + "...") or None
    msg = str(err.get("msg", "is not valid"))
    if len(msg) > 4 * MAX_QUOTED:  # a message that quotes a huge value
        msg = msg[: 4 * MAX_QUOTED] + "..."
    if kind == "missing":
        return problem(422, f"{field}: is required", field)
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    quotes = kind == "extra_forbidden" or kind.startswith("value_error")  # those messages quote the value
    value = f" (got {quoted(err.get('input'))})" if "input" in err and not quotes else ""
    if kind == "extra_forbidden":
        msg = "is not a field of this request"
    return problem(422, f"{field}: {msg}{value}{more}", field)


def service_problem(exc: ServiceError) -> Response:
    """A :class:`~slurm_pool.errors.ServiceError` as its Problem; a 401 says how to authenticate."""
    headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
    return problem(exc.status, exc.message, exc.field, headers=headers)


async def _invalid(_request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    return validation_problem(exc)


async def _refused(_request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ServiceError)
    return service_problem(exc)


async def _http(_request: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
    message = exc.detail if isinstance(exc.detail, str) else "the request cannot be served"
    if exc.status_code == 400 and message == "There was an error parsing the body":
        return problem(400, "the request body is not JSON (UTF-8, nested at most a few hundred deep)", "body")
    return problem(exc.status_code, message, headers=getattr(exc, "headers", None))


async def _unexpected(_request: Request, exc: Exception) -> Response:
    log.exception("unexpected error")
    return problem(500, "internal error (logged by the service)")


def install(app: FastAPI) -> None:
    """Answer every error of ``app`` as a Problem."""
    app.add_exception_handler(RequestValidationError, _invalid)
    app.add_exception_handler(ServiceError, _refused)
    app.add_exception_handler(StarletteHTTPException, _http)
    app.add_exception_handler(Exception, _unexpected)
