"""The SDK (``slurm_pool.client``) against a table of canned answers (httpx.MockTransport).

Each method: the request it sends (method, path, query, body, headers) and the model it reads back;
errors: the service's Problem as an ApiError, whatever the status; tokens, URLs, ``wait``.
The same client against the real app is in ``test_api_schema.py``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any, Callable

import httpx
import pytest
from pydantic import ValidationError

from slurm_pool.client import ApiError, PoolClient, clean_token
from slurm_pool.jobid import JobId
from slurm_pool.web import models as m

TOKEN = "eyJhbGciOiJIUzI1NiJ9.eyJzdW4iOiJhbGljZSJ9.c2lnbmF0dXJl"
URL = "https://pool.test:8080"  # plain http only to loopback (issue 49)

JOB = {"job_id": 42, "name": "train", "user": "alice", "project": "proja", "tier": "scavenger", "state": "RUNNING"}
EXPLAINED = {"ok": True, "tier": "scavenger", "partition": "scavenger", "options": ["--qos=scavenger"]}
ANSWERS: dict[tuple[str, str], Any] = {
    ("GET", "/api/v1/me"): {"user": "alice", "projects": ["proja"], "tiers": ["scavenger"], "new_field": 1},
    ("GET", "/api/v1/pool"): {
        "time": 1.0,
        "refresh_seconds": 5,
        "total": 4,
        "states": {"idle": 4},
        "nodes": [{"name": "a-gpu1", "state": "IDLE", "total": 4, "idle": 4}],
    },  # fmt: skip
    ("GET", "/api/v1/jobs"): {"jobs": [JOB], "hidden": {"RUNNING": 3}},
    ("GET", "/api/v1/jobs/42"): {"job": JOB, "timeline": [{"time": 1.0, "kind": "submitted"}], "restarts": 0},
    ("GET", "/api/v1/jobs/42/why"): {
        "job_id": 42,
        "now": 100.0,
        "reason": "Resources",
        "predicted_start": 700.0,
        "range": [600.0, 900.0],
        "slurm_estimate": None,
        "causes": [{"kind": "owner", "text": "owners' jobs hold its GPUs", "jobs": [7]}],
        "alternatives": [{"what": "1 GPU instead of 2", "how": "resubmit with --gpus=1", "predicted_start": 100.0}],
    },  # fmt: skip
    ("POST", "/api/v1/jobs/explain"): EXPLAINED,
    ("POST", "/api/v1/jobs"): {"job_id": 43, "explanation": EXPLAINED},
    **{
        ("POST", f"/api/v1/jobs/42/{a}"): {"job_id": 42, "action": a, "ok": True, "message": ""}
        for a in ("cancel", "hold", "release", "requeue")
    },
    ("POST", "/api/v1/jobs/42/tier"): {"job_id": 42, "action": "tier", "ok": True},
    ("GET", "/api/v1/projects"): [{"name": "proja", "guaranteed_gpu_hours": 1.5, "owns": ["a-gpu1"]}],
    ("POST", "/api/v1/login"): {"user": "alice", "csrf_token": "c" * 32},
}


class Fake:
    """A canned service: ``answers[(method, path)]`` or a ``(status, body)`` override; records requests."""

    def __init__(self, answers: dict[tuple[str, str], Any] | None = None, status: int = 200, raw: bytes | None = None):
        self.answers = ANSWERS if answers is None else answers
        self.status, self.raw = status, raw
        self.seen: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.seen.append(request)
        if self.raw is not None:
            return httpx.Response(self.status, content=self.raw)
        path = request.url.path
        key = (request.method, path[path.find("/api/") :])  # behind a proxy's prefix too
        if key not in self.answers:
            return httpx.Response(404, json={"status": 404, "message": f"no route {key}"})
        return httpx.Response(self.status, json=self.answers[key])

    def client(self, token: str | None = TOKEN, **kw: Any) -> PoolClient:
        return PoolClient(URL, token, transport=httpx.MockTransport(self), env={}, **kw)

    @property
    def last(self) -> httpx.Request:
        return self.seen[-1]


# (call, method, path, query, body sent, model returned, a check on it)
CALLS: list[tuple[str, Callable[[PoolClient], Any], str, str, dict[str, str], Any, type, Callable[[Any], bool]]] = [
    ("me", lambda c: c.me(), "GET", "/api/v1/me", {}, None, m.Me, lambda r: r.projects == ["proja"]),
    ("status", lambda c: c.status(), "GET", "/api/v1/pool", {}, None, m.Pool, lambda r: r.nodes[0].idle == 4),
    ("jobs", lambda c: c.jobs(), "GET", "/api/v1/jobs", {}, None, m.JobList, lambda r: r.hidden == {"RUNNING": 3}),
    ("jobs filtered", lambda c: c.jobs(state="RUNNING", user="alice", sort="job_id"), "GET", "/api/v1/jobs",
     {"state": "RUNNING", "user": "alice", "sort": "job_id"}, None, m.JobList, lambda r: r.jobs[0].job_id == 42),
    ("job", lambda c: c.job(42), "GET", "/api/v1/jobs/42", {}, None, m.JobDetail,
     lambda r: r.timeline[0].kind == "submitted"),
    ("job by string", lambda c: c.job("42"), "GET", "/api/v1/jobs/42", {}, None, m.JobDetail,
     lambda r: r.job.state == "RUNNING"),
    ("why", lambda c: c.why(42), "GET", "/api/v1/jobs/42/why", {}, None, m.Why,
     lambda r: r.range == (600.0, 900.0) and r.causes[0].jobs == [7] and r.alternatives[0].predicted_start == 100.0),
    ("why without alternatives", lambda c: c.why("42", alternatives=False), "GET", "/api/v1/jobs/42/why",
     {"alternatives": "false"}, None, m.Why, lambda r: r.predicted_start == 700.0 and r.slurm_estimate is None),
    ("explain", lambda c: c.explain("scavenger", gpus=2), "POST", "/api/v1/jobs/explain", {},
     {"tier": "scavenger", "script": "#!/bin/sh\n", "gpus": 2}, m.Explanation, lambda r: r.ok),
    ("submit", lambda c: c.submit("#!/bin/sh\ntrue\n", "scavenger", checkpoint=True, nodes="b-gpu1"), "POST",
     "/api/v1/jobs", {}, {"tier": "scavenger", "script": "#!/bin/sh\ntrue\n", "checkpoint": True, "nodes": "b-gpu1"},
     m.Submitted, lambda r: r.job_id == 43 and r.explanation.partition == "scavenger"),
    ("cancel", lambda c: c.cancel(42), "POST", "/api/v1/jobs/42/cancel", {}, None, m.ActionResult,
     lambda r: r.action == "cancel"),
    ("hold", lambda c: c.hold(42), "POST", "/api/v1/jobs/42/hold", {}, None, m.ActionResult,
     lambda r: r.action == "hold"),
    ("release", lambda c: c.release("42"), "POST", "/api/v1/jobs/42/release", {}, None, m.ActionResult,
     lambda r: r.action == "release"),
    ("requeue", lambda c: c.requeue(42), "POST", "/api/v1/jobs/42/requeue", {}, None, m.ActionResult,
     lambda r: r.action == "requeue"),
    ("change_tier", lambda c: c.change_tier(42, "shared"), "POST", "/api/v1/jobs/42/tier", {}, {"tier": "shared"},
     m.ActionResult, lambda r: r.ok),
    ("projects", lambda c: c.projects(), "GET", "/api/v1/projects", {}, None, list,
     lambda r: isinstance(r[0], m.ProjectView) and r[0].owns == ["a-gpu1"]),
]  # fmt: skip


@pytest.mark.parametrize("call,method,path,query,body,model,check", [c[1:] for c in CALLS], ids=[c[0] for c in CALLS])
def test_each_method(call, method, path, query, body, model, check) -> None:
    fake = Fake()
    got = call(fake.client())
    req = fake.last
    assert (req.method, req.url.path, dict(req.url.params)) == (method, path, query)
    assert req.headers["authorization"] == f"Bearer {TOKEN}"
    assert json.loads(req.content) == body if body is not None else req.content == b""
    assert isinstance(got, model) and check(got)


@pytest.mark.parametrize(
    "status,body,message,field",
    [
        (401, {"status": 401, "message": "token expired"}, "token expired", None),
        (403, {"status": 403, "message": "not your job"}, "not your job", None),
        (404, {"status": 404, "message": "no job 42"}, "no job 42", None),
        (422, {"status": 422, "message": "gpus: must be <= 64", "field": "gpus"}, "gpus: must be <= 64", "gpus"),
        (500, {"status": 500, "message": "sacct failed"}, "sacct failed", None),
        # FastAPI's own shapes, should one reach the client
        (422, {"detail": [{"loc": ["body", "gpus"], "msg": "too big", "type": "x"}]}, "too big", "gpus"),
        (401, {"detail": "Not authenticated"}, "Not authenticated", None),
        (502, {"unexpected": True}, "Bad Gateway", None),
    ],
)
def test_errors_carry_the_service_message(status, body, message, field) -> None:
    fake = Fake({("GET", "/api/v1/jobs/42"): body}, status=status)
    with pytest.raises(ApiError) as exc:
        fake.client().job(42)
    assert (exc.value.status, exc.value.message, exc.value.field) == (status, message, field)
    assert message in str(exc.value)


@pytest.mark.parametrize(
    "raw,status,message",
    [
        (b"<html>gateway down</html>", 502, "<html>gateway down</html>"),
        (b"\xff\xfe not utf-8", 500, "not utf-8"),
        (b"{not json", 200, "not JSON"),
        (b'{"user": 5}', 200, "not a Me: user"),
        (b"[]", 200, "not a Me"),
    ],
)
def test_unreadable_answers_are_api_errors(raw, status, message) -> None:
    with pytest.raises(ApiError) as exc:
        Fake(raw=raw, status=status).client().me()
    assert exc.value.status == status and message in str(exc.value)


def test_hostile_message_is_shown_inert() -> None:
    fake = Fake({("GET", "/api/v1/me"): {"status": 403, "message": "no\x1b[2J\u202e" + "x" * 5000}}, status=403)
    with pytest.raises(ApiError) as exc:
        fake.client().me()
    shown = str(exc.value)
    assert "\x1b" not in shown and "\u202e" not in shown and "\\x1b" in shown
    assert len(exc.value.message) <= 2000


@pytest.mark.parametrize(
    "error,message",
    [
        (httpx.ConnectError("connection refused"), "cannot reach the service: connection refused"),
        (httpx.ReadTimeout("slow"), "no answer in time (ReadTimeout)"),
    ],
)
def test_connection_errors_are_wrapped(error, message) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise error

    c = PoolClient(URL, TOKEN, transport=httpx.MockTransport(handler), env={})
    with pytest.raises(ApiError) as exc:
        c.status()
    assert exc.value.status == 0 and message in str(exc.value)


@pytest.mark.parametrize(
    "given",
    [TOKEN, f"SLURM_JWT={TOKEN}", f"SLURM_JWT={TOKEN}\n", f"  {TOKEN}\n"],
)
def test_token_prefix_and_blanks_are_stripped(given) -> None:
    assert clean_token(given) == TOKEN
    fake = Fake()
    fake.client(given).me()
    assert fake.last.headers["authorization"] == f"Bearer {TOKEN}"


@pytest.mark.parametrize(
    "bad", ["", "SLURM_JWT=", "secret", "se.cret", f"{TOKEN}\nsecret", f"secret {TOKEN}", f"{TOKEN}\x00", 5]
)
def test_bad_tokens_are_refused_without_showing_them(bad) -> None:
    with pytest.raises(ValueError, match="token: ") as exc:
        PoolClient(URL, bad, env={})
    assert "secret" not in str(exc.value) and TOKEN not in str(exc.value)


@pytest.mark.parametrize(
    "env,header",
    [({"SLURM_JWT": TOKEN}, f"Bearer {TOKEN}"), ({"SLURM_JWT": f"SLURM_JWT={TOKEN}"}, f"Bearer {TOKEN}"), ({}, None)],
)
def test_token_defaults_to_the_environment(env, header) -> None:
    fake = Fake()
    PoolClient(URL, transport=httpx.MockTransport(fake), env=env).me()
    assert fake.last.headers.get("authorization") == header


@pytest.mark.parametrize(
    "url,ok",
    [
        ("https://pool.test:8080", True),
        ("https://pool.example.org/slurm-pool/", True),
        ("http://[::1]:8080", True),
        ("http://127.0.0.1:8787", True),
        ("http://127.8.9.10:8787/", True),
        ("http://localhost:8787", True),
        ("http://pool.test:8080", False),  # a token over plain http to another machine
        ("http://10.0.0.5:8787", False),
        ("http://[2001:db8::1]:8787", False),
        ("http://localhost.evil.example", False),
        ("http://127.0.0.1.nip.io", False),
        ("ftp://pool.test", False),
        ("pool.test:8080", False),
        ("http://", False),
        ("http://user:pw@pool.test", False),
        ("http://pool.test/?x=1", False),
        ("http://pool.test/#frag", False),
        ("http://pool.test\n/x", False),
        ("http://pool.test/\x1b[2J", False),
        ("http://pool .test", False),
        ("javascript:alert(1)", False),
        (None, False),
    ],
)
def test_urls(url, ok) -> None:
    if ok:
        fake = Fake()
        PoolClient(url, TOKEN, transport=httpx.MockTransport(fake), env={}).me()
        assert str(fake.last.url) == url.rstrip("/") + "/api/v1/me"
    else:
        with pytest.raises(ValueError, match="url: "):
            PoolClient(url, TOKEN, env={})


@pytest.mark.parametrize(
    "call,field",
    [
        (lambda c: c.submit("#!/bin/sh\n", "scavenger", gpus="2"), "gpus"),
        (lambda c: c.submit("#!/bin/sh\n", "scavenger", gpus=65), "gpus"),
        (lambda c: c.submit("#!/bin/sh\n", "Bad Tier"), "tier"),
        (lambda c: c.submit("", "scavenger"), "script"),
        (lambda c: c.submit("#!/bin/sh\n\x1b[2J", "scavenger"), "script"),
        (lambda c: c.submit("#!/bin/sh\n", "scavenger", colour="red"), "colour"),
        (lambda c: c.explain("scavenger", time_limit="soon"), "time_limit"),
        (lambda c: c.change_tier(42, "x y"), "tier"),
    ],
)
def test_bad_requests_fail_in_the_client(call, field) -> None:
    fake = Fake()
    with pytest.raises(ValidationError) as exc:
        call(fake.client())
    assert field in str(exc.value) and fake.seen == []


@pytest.mark.parametrize(
    "call", [lambda c: c.job(True), lambda c: c.job("42/../me"), lambda c: c.cancel(-1), lambda c: c.job("٤٢"),
             lambda c: c.why("42/../me"),
             lambda c: c.jobs(state="RUNNING\n"), lambda c: c.jobs(user=5)]
)  # fmt: skip
def test_bad_ids_and_filters_fail_in_the_client(call) -> None:
    fake = Fake()
    with pytest.raises(ValueError):
        call(fake.client())
    assert fake.seen == []


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.now += s


def _states(states: list[str]) -> Fake:
    """A service whose job 42 goes through ``states``, one per poll (then stays in the last)."""
    seq = iter(states)
    last = [states[0]]

    class Seq(Fake):
        def __call__(self, request: httpx.Request) -> httpx.Response:
            self.seen.append(request)
            last[0] = next(seq, last[0])
            return httpx.Response(200, json={"job": {**JOB, "state": last[0]}})

    return Seq({})


@pytest.mark.parametrize(
    "states,want,polls",
    [
        (["PENDING", "PENDING", "RUNNING"], "RUNNING", 3),
        (["RUNNING"], "running", 1),
        (["PENDING", "RUNNING", "FAILED"], ("COMPLETED", "FAILED"), 3),
    ],
)
def test_wait_polls_until_the_state(states, want, polls) -> None:
    clock = Clock()
    fake = _states(states)
    view = fake.client(clock=clock, sleep=clock.sleep).wait(42, want, timeout=60, poll=5)
    assert view.state == states[-1] and len(fake.seen) == polls and clock.now == 5 * (polls - 1)


def test_wait_times_out_naming_the_last_state() -> None:
    clock = Clock()
    fake = _states(["PENDING", "PENDING", "CONFIGURING"])
    with pytest.raises(TimeoutError, match="job 42 is still CONFIGURING after 12 s .waiting for RUNNING"):
        fake.client(clock=clock, sleep=clock.sleep).wait(42, "RUNNING", timeout=12, poll=5)
    assert clock.now == 12 and len(fake.seen) == 4  # at 0, 5, 10 and 12


@pytest.mark.parametrize("kw", [{"state": []}, {"state": "RUNNING", "poll": 0}, {"state": "RUNNING", "timeout": -1}])
def test_wait_refuses_bad_arguments(kw) -> None:
    with pytest.raises(ValueError):
        Fake().client().wait(42, **kw)


def test_login_sends_the_session_token_on_every_request() -> None:
    fake = Fake()
    c = fake.client(token=None)
    assert c.login("alice", "pw").csrf_token == "c" * 32
    assert json.loads(fake.last.content) == {"user": "alice", "password": "pw"}
    c.status()  # a session is its cookie and its token, reads included (issue 49)
    assert fake.last.headers["x-csrf-token"] == "c" * 32 and "authorization" not in fake.last.headers
    c.cancel(42)
    assert fake.last.headers["x-csrf-token"] == "c" * 32


def test_repr_never_shows_the_token() -> None:
    assert TOKEN not in repr(Fake().client())


def test_the_sdk_needs_only_httpx_and_pydantic() -> None:
    code = (
        "import sys, slurm_pool.client; "
        "bad = sorted(n for n in sys.modules if n.split('.')[0] in ('fastapi', 'starlette', 'uvicorn', 'jwt')); "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr


# -- slurm-pool --remote URL status ------------------------------------------------------------------------
HOSTILE_POOL = {
    "time": 1.0,
    "refresh_seconds": 5,
    "total": 4,
    "states": {"allocated": 1, "idle": 3},
    "by_project": {"proja": 1},
    "nodes": [{"name": "a-gpu1", "state": "DRAINED", "total": 4, "idle": 3, "reason": "[red]boom\x1b[2J<b>"}],
    "lent_nodes": ["b-gpu1"],
    "fresh": False,
}


@pytest.fixture
def remote(monkeypatch):
    """The CLI's PoolClient answering from a Fake; returns the fake."""
    import slurm_pool.client

    fake = Fake({("GET", "/api/v1/pool"): HOSTILE_POOL})
    real = slurm_pool.client.PoolClient
    monkeypatch.setattr(
        slurm_pool.client, "PoolClient", lambda *a, **kw: real(*a, transport=httpx.MockTransport(fake), **kw)
    )
    monkeypatch.delenv("SLURM_JWT", raising=False)
    return fake


def _run(*args: str):
    from click.testing import CliRunner

    from slurm_pool.cli import cli

    return CliRunner().invoke(cli, list(args), env={"COLUMNS": "200"})


def test_remote_status_prints_the_pool_inert(remote) -> None:
    res = _run("--remote", URL, "--token", f"SLURM_JWT={TOKEN}", "status")
    assert res.exit_code == 0, res.output
    assert remote.last.url.path == "/api/v1/pool" and remote.last.headers["authorization"] == f"Bearer {TOKEN}"
    assert "a-gpu1" in res.output and "b-gpu1" in res.output and "last good figures" in res.output
    assert "[red]boom\\x1b[2J<b>" in res.output and "\x1b" not in res.output


def test_remote_status_json(remote) -> None:
    res = _run("--remote", URL, "status", "--json")
    assert res.exit_code == 0, res.output
    got = json.loads(res.output)
    assert got == m.Pool.model_validate(HOSTILE_POOL).model_dump(mode="json")
    assert "authorization" not in remote.last.headers


@pytest.mark.parametrize(
    "args,code,message",
    [
        (["--remote", URL, "validate", "x.yaml"], 2, "--remote works with status, not validate"),
        (["--token", TOKEN, "status"], 2, "--token is for --remote"),
        (["--remote", URL, "status", "--spec", __file__], 2, "No such option '--spec'"),
        (["--remote", URL, "status", "--timeout", "nan"], 2, "is not a finite number"),
        (["--remote", "ftp://x", "status"], 2, "error: url: 'ftp://x' is not an http"),
        (["--remote", "http://pool.test:8787", "status"], 2, "error: url: 'http://pool.test:8787' is plain http"),
        (["--remote", URL, "--token", "nope", "status"], 2, "error: token: not a JWT"),
    ],
)
def test_remote_refusals(remote, args, code, message) -> None:
    res = _run(*args)
    assert res.exit_code == code and message in res.output, res.output


def test_remote_switches_only_the_remote_commands() -> None:
    import click

    from slurm_pool import cli as cli_mod
    from slurm_pool.remote import cli as remote_cli

    assert cli_mod.REMOTE_KEY == remote_cli.REMOTE_KEY
    group = cli_mod.cli
    local = group.get_command(click.Context(group), "status")
    remote_ctx = click.Context(group)
    remote_ctx.params["remote"] = URL
    assert local is not None and local.callback.__module__ == "slurm_pool.metrics.status_cli"
    assert group.get_command(remote_ctx, "status") is remote_cli.status
    assert group.get_command(remote_ctx, "validate") is group.get_command(click.Context(group), "validate")


def test_remote_error_is_one_line_without_controls(monkeypatch) -> None:
    import slurm_pool.client

    fake = Fake({("GET", "/api/v1/pool"): {"status": 401, "message": "expired\x1b]0;owned\x07"}}, status=401)
    real = slurm_pool.client.PoolClient
    monkeypatch.setattr(
        slurm_pool.client, "PoolClient", lambda *a, **kw: real(*a, transport=httpx.MockTransport(fake), **kw)
    )
    res = _run("--remote", URL, "--token", TOKEN, "status")
    assert res.exit_code == 1
    assert res.output == f"error: {URL}: HTTP 401: expired\\x1b]0;owned\\x07\n"


@pytest.mark.parametrize(("status", "code"), [(400, 2), (401, 1), (403, 1), (422, 2), (429, 1), (502, 1), (503, 1)])
def test_remote_exit_status_is_the_kinds(monkeypatch, status: int, code: int) -> None:
    import slurm_pool.client
    from slurm_pool.errors import kind_of

    fake = Fake({("GET", "/api/v1/pool"): {"status": status, "message": "no"}}, status=status)
    real = slurm_pool.client.PoolClient
    monkeypatch.setattr(
        slurm_pool.client, "PoolClient", lambda *a, **kw: real(*a, transport=httpx.MockTransport(fake), **kw)
    )
    res = _run("--remote", URL, "--token", TOKEN, "status")
    kind = kind_of(status)
    assert kind is not None and res.exit_code == code == kind.exit_code, res.output
    assert res.output == f"error: {URL}: HTTP {status}: no\n"


def test_remote_unreachable_names_the_service_once() -> None:
    res = _run("--remote", "http://127.0.0.1:9", "status", "--timeout", "2")
    assert res.exit_code == 1
    assert (
        res.output.startswith("error: http://127.0.0.1:9: cannot reach the service") and res.output.count("127.0") == 1
    )


@pytest.mark.parametrize(
    ("call", "path"),
    [
        (lambda c: c.cancel("4_2"), "/api/v1/jobs/4_2/cancel"),
        (lambda c: c.cancel("4_[1-3,7]"), "/api/v1/jobs/4_[1-3,7]/cancel"),
        (lambda c: c.hold("5+1"), "/api/v1/jobs/5+1/hold"),
        (lambda c: c.why("4_2"), "/api/v1/jobs/4_2/why"),
        (lambda c: c.job(JobId(5, component=1)), "/api/v1/jobs/5+1"),
        (lambda c: c.requeue(42), "/api/v1/jobs/42/requeue"),
    ],
)
def test_slurms_notation_reaches_the_path_as_written(call, path) -> None:
    fake = Fake({})
    with pytest.raises(ApiError):  # no canned answer (404): only the request matters here
        call(fake.client())
    assert fake.last.url.path == path


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("+3", "has a sign"),
        ("03", "leading zero"),
        ("3.0", "not a whole number"),
        (" 3", "blanks"),
        ("4__2", "at most one array task"),
        ("٤٢", "other than ASCII"),
        (0, "a job id is 1 to"),
        (2**32, "a job id is 1 to"),
        ("4_[1-3]", "a range of array tasks is not taken here"),  # only cancel takes a range
    ],
)
def test_ids_not_in_slurms_notation_fail_in_the_client_naming_the_value(value, why) -> None:
    fake = Fake()
    with pytest.raises(ValueError) as exc:
        fake.client().hold(value)
    assert why in str(exc.value) and str(value) in str(exc.value) and fake.seen == []


def test_an_action_answer_with_a_numeric_id_is_still_read() -> None:
    assert m.ActionResult.model_validate({"job_id": 42, "action": "cancel", "ok": True}).job_id == "42"
