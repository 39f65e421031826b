"""The service's outer wall (slurm_pool.web.guard): security headers on every response, capped bodies."""

from __future__ import annotations

import asyncio
import json
from typing import Any, Iterator

import pytest
from fastapi import FastAPI
from pydantic import BaseModel
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route
from starlette.testclient import TestClient

from slurm_pool.web.guard import CSP, Guard

LIMIT = 1024


async def home(request: Request) -> Response:
    return PlainTextResponse("hello", headers={"Cache-Control": "public, max-age=99999", "X-Frame-Options": "ALLOW"})


async def echo(request: Request) -> Response:
    body = await request.body()
    return JSONResponse({"length": len(body)})


async def asset(request: Request) -> Response:
    return PlainTextResponse("body { }", media_type="text/css")


async def boom(request: Request) -> Response:
    raise RuntimeError("boom")


def tiny() -> Starlette:
    return Starlette(
        routes=[
            Route("/", home),
            Route("/echo", echo, methods=["POST"]),
            Route("/static/app.css", asset),
            Route("/boom", boom),
        ]
    )


@pytest.fixture()
def client() -> Iterator[TestClient]:
    with TestClient(Guard(tiny(), max_body=LIMIT), raise_server_exceptions=False) as c:
        yield c


WANT = {
    "content-security-policy": CSP,
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "x-frame-options": "DENY",
    "cross-origin-opener-policy": "same-origin",
}


def test_the_policy_is_strict() -> None:
    directives = dict(d.split(" ", 1) for d in CSP.split("; "))
    assert directives["default-src"] == "'none'"
    assert directives["frame-ancestors"] == "'none'"
    assert all("unsafe" not in v and "*" not in v and "http" not in v for v in directives.values())
    assert directives["script-src"] == directives["style-src"] == "'self'"


@pytest.mark.parametrize(
    "method,path,body,status,cache",
    [
        ("GET", "/", None, 200, "no-store"),
        ("GET", "/nowhere", None, 404, "no-store"),
        ("GET", "/static/app.css", None, 200, "public, max-age=300"),
        ("GET", "/static/missing.css", None, 404, "no-store"),
        ("POST", "/echo", b"x" * 10, 200, "no-store"),
        ("POST", "/echo", b"x" * (LIMIT + 1), 413, "no-store"),
        ("GET", "/boom", None, 500, "no-store"),
    ],
)
def test_headers_on_every_response(
    client: TestClient, method: str, path: str, body: bytes | None, status: int, cache: str
) -> None:
    r = client.request(method, path, content=body)
    assert r.status_code == status
    for name, value in WANT.items():
        assert r.headers.get_list(name) == [value], name
    assert r.headers.get_list("cache-control") == [cache]
    assert "strict-transport-security" not in r.headers


def test_hsts_under_tls() -> None:
    with TestClient(Guard(tiny()), base_url="https://pool.example") as c:
        assert c.get("/").headers["strict-transport-security"].startswith("max-age=")


def chunks(n: int, size: int) -> Iterator[bytes]:
    for _ in range(n):
        yield b"y" * size


@pytest.mark.parametrize(
    "body,status",
    [
        (b"x" * LIMIT, 200),
        (b"x" * (LIMIT + 1), 413),
        (b"x" * (50 * LIMIT), 413),
    ],
)
def test_content_length_limit(client: TestClient, body: bytes, status: int) -> None:
    r = client.post("/echo", content=body)
    assert r.status_code == status
    if status == 413:
        assert r.json() == {"status": 413, "message": f"the request body is larger than {LIMIT} bytes"}
        assert r.headers["content-type"] == "application/json"
    else:
        assert r.json() == {"length": LIMIT}


# -- the raw ASGI conversation: chunked bodies and headers no client library would send --
def call(app: Any, headers: list[tuple[bytes, bytes]], parts: list[bytes]) -> tuple[int, dict[str, str], bytes]:
    """One POST /echo through ``app``, its body sent in ``parts``: status, headers, body."""
    sent: list[dict[str, Any]] = []
    queue = [{"type": "http.request", "body": p, "more_body": i < len(parts) - 1} for i, p in enumerate(parts)]

    async def receive() -> dict[str, Any]:
        return queue.pop(0) if queue else {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/echo",
        "raw_path": b"/echo",
        "root_path": "",
        "query_string": b"",
        "headers": [(b"host", b"pool.example"), *headers],
        "client": ("192.0.2.1", 5000),
        "server": ("pool.example", 80),
    }
    asyncio.run(app(scope, receive, send))
    starts = [m for m in sent if m["type"] == "http.response.start"]
    assert len(starts) == 1, sent
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return starts[0]["status"], {k.decode(): v.decode() for k, v in starts[0]["headers"]}, body


CHUNKED = [(b"transfer-encoding", b"chunked")]


@pytest.mark.parametrize(
    "headers,parts,status,message",
    [
        (CHUNKED, [b"y" * 100] * 10, 200, None),
        (CHUNKED, [b"y" * 100] * 11, 413, "larger than 1024"),
        (CHUNKED, [b"y" * 600, b"y" * 600, b"y" * 600], 413, "larger than 1024"),
        ([(b"content-length", b"10")], [b"y" * 10], 200, None),
        ([(b"content-length", b"10")], [b"y" * 600, b"y" * 600], 413, "larger than 1024"),  # it lied
        ([(b"content-length", b"abc")], [b""], 400, "Content-Length"),
        ([(b"content-length", b"-1")], [b""], 400, "Content-Length"),
        ([(b"content-length", b"1e3")], [b""], 400, "Content-Length"),
        ([(b"content-length", b"")], [b""], 400, "Content-Length"),
        ([(b"content-length", b"9" * 40)], [b""], 400, "Content-Length"),
        ([(b"content-length", b"5"), (b"content-length", b"6")], [b"y" * 5], 400, "Content-Length"),
        ([(b"content-length", b"1025")], [b"y" * 1025], 413, "larger than 1024"),
    ],
)
def test_bodies_raw(headers: list[tuple[bytes, bytes]], parts: list[bytes], status: int, message: str | None) -> None:
    got, out_headers, body = call(Guard(tiny(), max_body=LIMIT), headers, parts)
    assert got == status
    assert out_headers["content-security-policy"] == CSP and out_headers["cache-control"] == "no-store"
    if message is None:
        assert json.loads(body) == {"length": sum(map(len, parts))}
    else:
        problem = json.loads(body)
        assert problem["status"] == status and message in problem["message"]


class Item(BaseModel):
    name: str


def fastapi_app() -> FastAPI:
    app = FastAPI()

    @app.post("/echo")
    def post(item: Item) -> dict[str, int]:
        return {"length": len(item.name)}

    return app


@pytest.mark.parametrize(
    "size,status",
    [(100, 200), (5000, 413)],
)
def test_fastapi_read_failure_becomes_413(size: int, status: int) -> None:
    # FastAPI answers a body it could not read with 400; the guard's 413 goes instead.
    body = json.dumps({"name": "n" * size}).encode()
    parts = [body[i : i + 256] for i in range(0, len(body), 256)]
    got, _, out = call(Guard(fastapi_app(), max_body=LIMIT), [*CHUNKED, (b"content-type", b"application/json")], parts)
    assert got == status, out
    assert json.loads(out) == (
        {"length": size} if status == 200 else {"status": 413, "message": json.loads(out)["message"]}
    )


def test_other_scopes_pass_through() -> None:
    seen: list[str] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen.append(scope["type"])

    async def nothing() -> dict[str, Any]:
        return {}

    async def drop(message: Any) -> None:
        pass

    asyncio.run(Guard(app)({"type": "lifespan"}, nothing, drop))
    assert seen == ["lifespan"]


@pytest.mark.parametrize("length,called", [(b"1024", True), (b"1025", False), (b"abc", False)])
def test_a_declared_length_is_refused_before_the_app_runs(length: bytes, called: bool) -> None:
    calls: list[str] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        calls.append(scope["path"])
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    status, _, _ = call(Guard(app, max_body=LIMIT), [(b"content-length", length)], [b""])
    assert (calls == ["/echo"]) is called
    assert status == (204 if called else 413 if length.isascii() and length.isdigit() else 400)
