"""One error hierarchy: every kind of failure (``slurm_pool.errors.KINDS``) is the same HTTP status when the
service answers it, the same SDK exception when the SDK reads that answer, and the same exit status when a
command ends with either."""

from __future__ import annotations

from typing import Any

import click
import httpx
import pytest
from click.testing import CliRunner
from fastapi import FastAPI
from fastapi.testclient import TestClient

from slurm_pool import client as sdk
from slurm_pool.cli import LazyGroup
from slurm_pool.errors import KINDS, Kind, PoolError, ServiceError, kind_of
from slurm_pool.web import problems
from slurm_pool.web.actions import ActionError
from slurm_pool.web.identity import AuthError

TOKEN = "a.b.c"
#: The service's error classes: each carries a status, a message and (the service's own) a field.
WEB_ERRORS: list[Any] = [
    lambda s: problems.ApiError(s, "the message", "the.field"),
    lambda s: ActionError(s, "the message"),
    lambda s: AuthError(s, "the message"),
]


def answered(exc: ServiceError) -> httpx.Response:
    """What the service answers when a route raises ``exc``."""
    app = FastAPI()
    problems.install(app)

    @app.get("/api/v1/me")
    def fail() -> None:
        raise exc

    with TestClient(app, raise_server_exceptions=False) as tc:
        return tc.get("/api/v1/me")


def sdk_raises(response: httpx.Response | Exception) -> sdk.ApiError:
    """What the SDK raises for ``response`` (or for a transport that fails with that exception)."""

    def handler(_request: httpx.Request) -> httpx.Response:
        if isinstance(response, Exception):
            raise response
        return httpx.Response(response.status_code, headers=response.headers, content=response.content)

    with pytest.raises(sdk.ApiError) as caught:
        sdk.PoolClient("https://pool.test", TOKEN, transport=httpx.MockTransport(handler), env={}).me()
    return caught.value


def exit_status(exc: Exception) -> tuple[int, str]:
    """The exit status and stderr of a slurm-pool command that ends with ``exc``."""

    @click.command("fail")
    def fail() -> None:
        raise exc

    class Group(LazyGroup):
        def list_commands(self, ctx: click.Context) -> list[str]:
            return ["fail"]

        def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
            return fail if cmd_name == "fail" else None

    res = CliRunner().invoke(Group("slurm-pool"), ["fail"])
    return res.exit_code, res.output


@pytest.mark.parametrize("kind", KINDS, ids=[k.name for k in KINDS])
def test_every_kind_maps_the_same_way_in_every_voice(kind: Kind) -> None:
    assert kind_of(kind.http) is kind
    cls = sdk.EXCEPTIONS[kind.sdk]
    assert issubclass(cls, sdk.ApiError) and issubclass(cls, PoolError)
    if kind.http == 0:  # never an answer: the service cannot be reached
        raised = sdk_raises(httpx.ConnectError("refused"))
        assert type(raised) is cls and raised.status == 0
    else:
        for make in WEB_ERRORS:
            exc = make(kind.http)
            assert exc.kind is kind and exc.exit_code == kind.exit_code
            assert exit_status(exc) == (kind.exit_code, "error: the message\n")
            res = answered(exc)
            assert res.status_code == kind.http and res.json()["status"] == kind.http
            assert res.json()["message"] == "the message" and res.json()["field"] == exc.field
            assert ("www-authenticate" in res.headers) is (kind.http == 401)
            raised = sdk_raises(res)
            assert type(raised) is cls, (kind, type(raised))
            assert (raised.status, raised.message, raised.field) == (kind.http, "the message", exc.field)
    assert raised.kind is kind and raised.exit_code == kind.exit_code
    assert exit_status(raised)[0] == kind.exit_code


def test_the_table_is_whole_and_one_to_one() -> None:
    names = [k.name for k in KINDS]
    assert len(set(names)) == len(names)
    assert len({k.http for k in KINDS}) == len(KINDS)
    assert sorted(k.sdk for k in KINDS) == sorted(sdk.EXCEPTIONS)
    assert all(k.exit_code in (1, 2) for k in KINDS)
    # Every status a route declares, and the service's own failures, is a kind.
    for status in [*problems.ERRORS, 500, 504]:
        assert kind_of(int(status)) is not None, status
    assert set(sdk.__all__) >= {"ApiError", *sdk.EXCEPTIONS}


@pytest.mark.parametrize(("status", "cls"), [(418, sdk.ApiError), (302, sdk.ApiError)])
def test_a_status_of_no_kind_is_a_plain_api_error(status: int, cls: type) -> None:
    raised = sdk_raises(httpx.Response(status, json={"status": status, "message": "odd"}))
    assert type(raised) is cls and raised.kind is None and raised.exit_code == 1
    assert ServiceError(status, "odd").exit_code == 1
