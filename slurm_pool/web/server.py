"""How ``slurm-pool serve`` runs the service under uvicorn so that it survives without a proxy in front.

uvicorn alone closes a connection only after a first answer (its keep-alive timeout), and its
concurrency limit counts idle sockets: a thousand connections that send nothing make every other
client get 503.  Here, per connection (:class:`GuardedH11`):

* a whole request must arrive within ``request_seconds`` of the connection opening or of its last
  answer, however slowly its bytes trickle in; past it the connection is closed;
* one client address holds at most ``connections_per_address`` connections, and all of them together
  at most :data:`MAX_CONNECTIONS` (and what the open-files limit leaves): a new connection past a cap
  closes the oldest *idle* one (no request being answered) of that address, or of all -- so idle
  sockets never shut a new client out -- and is itself refused only when every other one is busy;
* requests being answered at once are capped (:class:`RequestCap`, 503 past it), idle sockets not counted.

The access log never holds a query string (:class:`NoQuery`).
"""

from __future__ import annotations

import asyncio
import logging
import resource
from collections import OrderedDict
from dataclasses import dataclass
from typing import Literal

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from slurm_pool.spec.console import Console
from slurm_pool.web.guard import ASGIApp, Guard, Message, Receive, Scope, Send
from slurm_pool.web.hosts import AllowedHosts

log = logging.getLogger(__name__)

#: Requests answered at once (more get 503); the load benchmark polls with 200 clients.
MAX_REQUESTS = 1024
#: Connections held at once, whoever holds them (less where the open-files limit is lower).
MAX_CONNECTIONS = 8192
#: Files kept free for everything but connections (logs, Slurm's commands, the key).
SPARE_FILES = 256
#: Seconds an idle keep-alive connection is kept (a slow client holds nothing for long).
KEEP_ALIVE = 5
#: Bytes of request line and headers h11 buffers before refusing the request.
MAX_HEADERS = 16 * 1024


@dataclass(frozen=True)
class Limits:
    """What one client may hold, and for how long, before it is cut off."""

    request_seconds: float = 10.0
    per_address: int = 256
    connections: int = MAX_CONNECTIONS
    requests: int = MAX_REQUESTS

    @classmethod
    def of(cls, console: Console | None, open_files: int | None = None) -> Limits:
        """The spec's limits; ``open_files`` (the process's limit) bounds the connections."""
        total = MAX_CONNECTIONS if open_files is None else max(16, min(MAX_CONNECTIONS, open_files - SPARE_FILES))
        if console is None:
            return cls(connections=total)
        return cls(float(console.request_seconds), console.connections_per_address, total)


def raise_open_files() -> int:
    """Raise this process's soft open-files limit to its hard limit; the limit now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY:
        hard = max(soft, 1 << 16)
    if soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):
            pass
    return int(soft)


class Connections:
    """The open connections of one server, oldest first, in all and per client address."""

    def __init__(self, limits: Limits):
        self.limits = limits
        self.all: OrderedDict[GuardedH11, None] = OrderedDict()
        self.by_address: dict[str, OrderedDict[GuardedH11, None]] = {}

    def add(self, conn: GuardedH11) -> bool:
        """Track ``conn``; close idle ones past the caps.  False: ``conn`` itself must go (all are busy)."""
        mine = self.by_address.setdefault(conn.address, OrderedDict())
        mine[conn] = None
        self.all[conn] = None
        if len(mine) > self.limits.per_address and not self._evict(mine, conn):
            return False
        return len(self.all) <= self.limits.connections or self._evict(self.all, conn)

    def remove(self, conn: GuardedH11) -> None:
        self.all.pop(conn, None)
        mine = self.by_address.get(conn.address)
        if mine is not None:
            mine.pop(conn, None)
            if not mine:
                del self.by_address[conn.address]

    def _evict(self, among: OrderedDict[GuardedH11, None], keep: GuardedH11) -> bool:
        for other in among:
            if other is not keep and other.idle():
                other.cut("an idle connection over the cap")
                return True
        return False


class GuardedH11(H11Protocol):
    """uvicorn's h11 protocol with a deadline for each whole request and the server's connection caps."""

    tracker: Connections  # set on the subclass :func:`protocol_for` makes

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.address = self.client[0] if self.client else "-"
        self.deadline: asyncio.TimerHandle | None = None
        self.cut_reason = ""
        self._arm()
        if not self.tracker.add(self):
            self.cut("every connection is busy")

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        self.tracker.remove(self)
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.conn.their_state not in (h11.IDLE, h11.SEND_BODY):
            self._disarm()  # the whole request is in (or the connection is over)

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._arm()  # the next request's clock starts now

    def idle(self) -> bool:
        """No request of this connection is being answered."""
        return self.cycle is None or self.cycle.response_complete

    def cut(self, why: str) -> None:
        """Close the connection now."""
        self._disarm()
        self.tracker.remove(self)
        if not self.transport.is_closing():
            self.cut_reason = why
            self.transport.close()

    def _arm(self) -> None:
        self._disarm()
        self.deadline = self.loop.call_later(self.tracker.limits.request_seconds, self._late)

    def _disarm(self) -> None:
        if getattr(self, "deadline", None) is not None:
            assert self.deadline is not None
            self.deadline.cancel()
            self.deadline = None

    def _late(self) -> None:
        self.deadline = None
        if self.conn.their_state in (h11.IDLE, h11.SEND_BODY):
            self.cut("no whole request in time")


def protocol_for(limits: Limits) -> type[GuardedH11]:
    """A protocol class whose connections share one :class:`Connections` (one per server)."""
    return type("ServedH11", (GuardedH11,), {"tracker": Connections(limits)})


class RequestCap:
    """ASGI middleware: at most ``limit`` requests answered at once; past it 503 (idle sockets not counted)."""

    def __init__(self, app: ASGIApp, limit: int):
        self.app = app
        self.limit = limit
        self.running = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self.running < self.limit:
            self.running += 1
            try:
                await self.app(scope, receive, send)
            finally:
                self.running -= 1
            return
        body = b'{"status": 503, "message": "the service is answering too many requests; try again"}'
        start: Message = {
            "type": "http.response.start",
            "status": 503,
            "headers": [(b"content-type", b"application/json"), (b"retry-after", b"1"), (b"connection", b"close")],
        }
        await send(start)
        await send({"type": "http.response.body", "body": body, "more_body": False})


class NoQuery(logging.Filter):
    """Drops the query string from uvicorn's access-log lines (a token sent as ``?token=`` is never written)."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) >= 3 and isinstance(args[2], str):
            record.args = (args[0], args[1], args[2].split("?", 1)[0], *args[3:])
        return True


def build_server(
    app: ASGIApp,
    host: str,
    port: int,
    console: Console | None,
    *,
    hosts: AllowedHosts | None = None,
    log_level: str = "info",
    lifespan: Literal["auto", "on", "off"] = "auto",
    limits: Limits | None = None,
) -> uvicorn.Server:
    """A uvicorn server for ``app`` on ``host:port`` with the guards above (and :class:`Guard` outermost);
    ``limits`` default to the spec's (``console``) within the open-files limit."""
    open_files = raise_open_files()
    limits = limits or Limits.of(console, open_files)
    config = uvicorn.Config(
        RequestCap(Guard(app, hosts=hosts), limits.requests),  # Guard outermost too: even a 500 has the headers
        host=host,
        port=port,
        http=protocol_for(limits),
        proxy_headers=False,
        forwarded_allow_ips="",
        server_header=False,
        limit_concurrency=None,
        timeout_keep_alive=KEEP_ALIVE,
        h11_max_incomplete_event_size=MAX_HEADERS,
        log_level=log_level,
        lifespan=lifespan,
    )
    access = logging.getLogger("uvicorn.access")
    if not any(isinstance(f, NoQuery) for f in access.filters):
        access.addFilter(NoQuery())
    return uvicorn.Server(config)
