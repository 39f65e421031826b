"""The service's outer wall: security headers on every response, and a cap on request bodies.

A pure ASGI middleware (no ``BaseHTTPMiddleware``, which buffers and breaks streaming):

* every HTTP response gets a strict Content-Security-Policy (no inline script or style, nothing
  from another origin, no framing), ``nosniff``, ``no-referrer``, ``X-Frame-Options: DENY``,
  ``Cross-Origin-Opener-Policy`` and ``-Resource-Policy``, HSTS under TLS, and
  ``Cache-Control: no-store`` -- authenticated pages are never cached; only the package's
  ``/static/`` assets may be kept for a few minutes;
* a body larger than ``max_body`` is refused with 413 before the application reads it when
  ``Content-Length`` says so, and while it streams in otherwise (chunked): the application's own
  answer (FastAPI turns a failed read into a 400) is replaced by the 413.  A ``Content-Length``
  that is not one plain number is refused with 400;
* with an allowed-hosts list, a request whose ``Host`` is not on it is refused with 400 before the
  application sees it; a redirect's ``Location`` is always made relative (never built from ``Host``).
"""

from __future__ import annotations

import json
import re
from typing import Any, Awaitable, Callable, MutableMapping
from urllib.parse import urlsplit, urlunsplit

from slurm_pool.web.hosts import AllowedHosts

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "font-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
#: Headers every response carries (lower-case names, as ASGI sends them).
SECURITY_HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
)
HSTS = (b"strict-transport-security", b"max-age=31536000")
NO_STORE = b"no-store"
STATIC_CACHE = b"public, max-age=300"
STATIC_PREFIX = "/static/"
_OURS = frozenset(name for name, _ in SECURITY_HEADERS) | {b"cache-control", HSTS[0]}
_LENGTH_RE = re.compile(rb"[0-9]{1,18}")


def _relative(location: bytes) -> bytes:
    """A redirect target without its scheme and host: the browser stays on the host it asked."""
    try:
        parts = urlsplit(bytes(location).decode("latin-1"))
    except ValueError:
        return b"/"
    path = "/" + parts.path.lstrip("/")  # never '//host', which a browser reads as another host
    return urlunsplit(("", "", path, parts.query, "")).encode("latin-1")


class _TooLarge(Exception):
    """The body grew past the limit while the application read it."""


class Guard:
    """ASGI middleware: security headers on every response; 413 for bodies over ``max_body`` bytes."""

    def __init__(self, app: ASGIApp, max_body: int = 256 * 1024, hosts: AllowedHosts | None = None):
        self.app = app
        self.max_body = max_body
        self.hosts = hosts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        static = isinstance(path, str) and path.startswith(STATIC_PREFIX)
        tls = scope.get("scheme") == "https"
        state = {"started": False, "over": False}

        async def send_guarded(message: Message) -> None:
            if message["type"] == "http.response.start":
                if state["started"]:
                    return
                state["started"] = True
                status = int(message.get("status", 200))
                kept = [(k, v) for k, v in message.get("headers", []) if bytes(k).lower() not in _OURS]
                kept = [(k, _relative(v) if bytes(k).lower() == b"location" else v) for k, v in kept]
                cache = STATIC_CACHE if static and status < 400 else NO_STORE
                extra = [*SECURITY_HEADERS, (b"cache-control", cache), *([HSTS] if tls else [])]
                message = {**message, "headers": kept + extra}
            await send(message)

        async def problem(status: int, text: str) -> None:
            body = json.dumps({"status": status, "message": text}).encode()
            headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
            if status == 413:
                headers.append((b"connection", b"close"))
            await send_guarded({"type": "http.response.start", "status": status, "headers": headers})
            await send_guarded({"type": "http.response.body", "body": body, "more_body": False})

        if self.hosts is not None:
            hosts = [bytes(v).decode("latin-1") for k, v in scope.get("headers", []) if bytes(k).lower() == b"host"]
            if len(hosts) != 1 or not self.hosts.host_ok(hosts[0]):
                await problem(400, "the request's Host header does not name this service (see console.allowed_hosts)")
                return

        lengths = {bytes(v).strip() for k, v in scope.get("headers", []) if bytes(k).lower() == b"content-length"}
        if lengths:
            if len(lengths) > 1 or not _LENGTH_RE.fullmatch(next(iter(lengths))):
                await problem(400, "the Content-Length header is not one whole number of bytes")
                return
            if int(next(iter(lengths))) > self.max_body:
                await problem(413, f"the request body is larger than {self.max_body} bytes")
                return

        too_large = f"the request body is larger than {self.max_body} bytes"
        seen = 0

        async def receive_capped() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_body:
                    state["over"] = True
                    raise _TooLarge(too_large)
            return message

        async def send_app(message: Message) -> None:
            if state["over"]:
                return  # the application's answer to a body it could not read: the 413 goes instead
            await send_guarded(message)

        try:
            await self.app(scope, receive_capped, send_app)
        except Exception:
            if not state["over"]:
                raise  # not ours: the server answers 500 and logs it
        if state["over"] and not state["started"]:
            await problem(413, too_large)
