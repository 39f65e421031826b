"""Sessions a stolen cookie cannot use, and the hosts the service answers to (issue 49), through the app."""

from __future__ import annotations

import time
from typing import Any

import pytest
from fastapi.testclient import TestClient

from slurm_pool.adapters.slurm import SlurmClient
from slurm_pool.web import identity
from slurm_pool.web.actions import UserCommands
from slurm_pool.web.app import create_app
from slurm_pool.web.hosts import AllowedHosts, split_host
from tests.unit.test_web_app import USERS, FakeSlurm
from tests.unit.test_web_views import KEY, Clock, example_spec, replay

pytestmark = pytest.mark.usefixtures("narrow_from_json")
BASE = "http://pool.example.org:8787"


def make(
    hosts: AllowedHosts | None = None, public_url: str | None = None, base: str = BASE
) -> tuple[TestClient, FakeSlurm]:
    spec = example_spec()
    assert spec.console is not None
    console = spec.console.model_copy(update={"public_url": public_url})
    spec = spec.model_copy(update={"console": console})
    clock = Clock(time.time())
    slurm = FakeSlurm()
    auth = identity.Authenticator(
        KEY, console, check_password=lambda u, p: p == f"pw-{u}", user_exists=lambda u: u in USERS, clock=clock,
        hosts=hosts,
    )  # fmt: skip
    app = create_app(
        spec, slurm=SlurmClient(replay("26.05")), auth=auth, commands=UserCommands(KEY, runner_for=slurm.runner_for),
        clock=clock, hosts=hosts,
    )  # fmt: skip
    return TestClient(app, base_url=base, raise_server_exceptions=False), slurm


def login(client: TestClient, user: str = "alice") -> tuple[str, str]:
    res = client.post("/api/v1/login", json={"user": user, "password": f"pw-{user}"})
    assert res.status_code == 200, res.text
    cookie = res.headers["set-cookie"].split(";", 1)[0]
    return cookie, res.json()["csrf_token"]


# What bob can do with alice's cookie alone (a browser sent it to his server on another port of the host).
REPLAYS: list[tuple[str, str, str, dict[str, Any] | None]] = [
    ("read who she is and her token", "GET", "/api/v1/me", None),
    ("list her jobs", "GET", "/api/v1/jobs", None),
    ("submit as her", "POST", "/api/v1/jobs", {"tier": "guaranteed", "script": "#!/bin/sh\ntrue\n"}),
    ("hold her job", "POST", "/api/v1/jobs/1/hold", None),
    ("log her out", "POST", "/api/v1/logout", None),
]


@pytest.mark.parametrize("what,method,path,body", REPLAYS, ids=[r[0] for r in REPLAYS])
@pytest.mark.parametrize("token", [None, "x" * 43, "short"], ids=["no token", "a guessed token", "garbage"])
def test_a_replayed_cookie_alone_does_nothing(what: str, method: str, path: str, body: Any, token: str | None) -> None:
    alice, slurm = make()
    cookie, real = login(alice)
    bob = TestClient(alice.app, base_url=BASE, raise_server_exceptions=False)
    headers = {"Cookie": cookie, **({"X-CSRF-Token": token} if token else {})}
    res = bob.request(method, path, headers=headers, json=body)
    assert res.status_code == 401, (what, res.status_code, res.text)
    assert real not in res.text
    assert slurm.ran == []
    mine = alice.get("/api/v1/me", headers={"X-CSRF-Token": real})  # her session still works
    assert mine.status_code == 200 and mine.json()["csrf_token"] is None


@pytest.mark.parametrize(
    "public_url,base,cookie",
    [
        (None, "http://pool.example.org:8787", "slurm_pool_session="),
        ("https://pool.example.org/", "http://pool.example.org:8787", "__Host-slurm_pool_session="),  # behind TLS
        (None, "https://pool.example.org", "__Host-slurm_pool_session="),
    ],
)
def test_the_cookie_under_tls_is_a_host_cookie(public_url: str | None, base: str, cookie: str) -> None:
    client, _ = make(public_url=public_url, base=base)
    res = client.post("/api/v1/login", json={"user": "alice", "password": "pw-alice"})
    parts = res.headers["set-cookie"].split("; ")
    assert parts[0].startswith(cookie) and "Path=/" in parts and not any(p.startswith("Domain") for p in parts)
    assert ("Secure" in parts) is cookie.startswith("__Host-")
    token = res.json()["csrf_token"]
    client.cookies.clear()  # sent by hand: a Secure cookie never goes over the test client's plain http
    me = client.get("/api/v1/me", headers={"X-CSRF-Token": token, "Cookie": parts[0]})
    assert me.json()["user"] == "alice"


HOSTS = AllowedHosts.of(["pool.example.org"], "https://console.example.org/", "10.0.0.5")
# (Host header, Origin header or None, status of a login)
LOGINS = [
    ("pool.example.org:8787", None, 200),
    ("console.example.org", "https://console.example.org", 200),
    ("localhost:8787", "http://localhost:8787", 200),
    ("127.0.0.1:8787", None, 200),
    ("[::1]:8787", None, 200),
    ("10.0.0.5:8787", "http://10.0.0.5:8787", 200),
    ("POOL.Example.ORG", None, 200),
    ("rebind.evil.example:8787", "http://rebind.evil.example:8787", 400),  # DNS rebinding: Host and Origin agree
    ("rebind.evil.example:8787", None, 400),
    ("pool.example.org:8787", "http://rebind.evil.example:8787", 403),
    ("pool.example.org:8787", "http://console.example.org", 403),  # allowed, but not this request's host
    ("pool.example.org:8787, evil.example", None, 400),
    ("", None, 400),
    ("pool.example.org.", None, 400),
]


@pytest.mark.parametrize("host,origin,status", LOGINS)
def test_host_and_origin_are_checked_against_the_allowed_hosts(host: str, origin: str | None, status: int) -> None:
    client, _ = make(hosts=HOSTS)
    headers = {"Host": host, **({"Origin": origin} if origin else {})}
    res = client.post("/api/v1/login", json={"user": "alice", "password": "pw-alice"}, headers=headers)
    assert res.status_code == status, (host, origin, res.text)


@pytest.mark.parametrize("hosts,host", [(HOSTS, "pool.example.org:8787"), (None, "evil.example")])
@pytest.mark.parametrize("path", ["/static", "/api/v1/me/", "/api/v1/jobs/", "//evil.example/x/"])
def test_redirects_never_name_the_clients_host(path: str, hosts: AllowedHosts | None, host: str) -> None:
    client, _ = make(hosts=hosts)
    res = client.get(path, headers={"Host": host}, follow_redirects=False)
    location = res.headers.get("location")
    assert location is None or (location.startswith("/") and not location.startswith("//")), location


@pytest.mark.parametrize(
    "value,parts",
    [
        ("pool.example.org", ("pool.example.org", None)),
        ("Pool.Example.org:8443", ("pool.example.org", 8443)),
        ("[::1]:8787", ("[::1]", 8787)),
        ("10.0.0.5", ("10.0.0.5", None)),
        ("a b", None),
        ("x:99999", None),
        ("x:0", None),
        ("user@x", None),
        ("x/y", None),
    ],
)
def test_split_host(value: str, parts: tuple[str, int | None] | None) -> None:
    assert split_host(value) == parts
