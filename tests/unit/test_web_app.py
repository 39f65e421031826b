"""The REST API in-process (FastAPI's TestClient) over Slurm replayed from recorded 26.05 output: who sees
what, the shared read, who may act on which job (the service's checks, and Slurm's with them off), CSRF,
and bad input to every POST endpoint: always a 4xx Problem naming the field, never a 500."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from fastapi.testclient import TestClient

from slurm_pool.adapters.runner import RecordingRunner, Result
from slurm_pool.adapters.slurm import SlurmClient
from slurm_pool.web import identity
from slurm_pool.web.actions import UserCommands
from slurm_pool.web.app import create_app
from tests.support.web import slurm_decides
from tests.unit.test_web_views import KEY, Clock, example_spec, pool_reads, replay

pytestmark = pytest.mark.usefixtures("narrow_from_json")

USERS = {"alice", "bob", "carol", "olga", "dave"}
OWNERS = {1: "alice", 2: "bob", 3: "carol", 4: "alice", 5: "bob", 6: "alice"}
DENIED = "scancel: error: Kill job error on job id {}: Access/permission denied"


class FakeSlurm:
    """Slurm as a user meets it: a command on another's job is refused (scontrol/scancel's own words)."""

    def __init__(self) -> None:
        self.ran: list[tuple[str, tuple[str, ...], str | None]] = []

    def runner_for(self, user: str, env: Any) -> RecordingRunner:
        r = RecordingRunner()

        def answer(argv: tuple[str, ...], stdin: str | None) -> Result:
            self.ran.append((user, argv, stdin))
            if argv[0] == "sbatch":  # as the user's uid, no token (it would reach the job)
                assert "SLURM_JWT" not in env
                return Result(argv, 0, "4242\n")
            assert identity.verify(KEY, env["SLURM_JWT"], lambda u: True) == user
            job = next((int(a.removeprefix("JobId=")) for a in argv if a.removeprefix("JobId=").isdigit()), 0)
            if OWNERS.get(job) not in (user, None) and user != "olga" and not (user == "carol" and job in (2, 5)):
                return Result(argv, 1, "", DENIED.format(job))
            return Result(argv, 0, "")

        r.respond([], answer)
        return r


#: When every token of these tests is issued, and where each service's clock starts: a token minted at the
#: real time would be "issued in the future" (beyond identity.LEEWAY) for a service whose fake clock stood
#: still while a loaded machine ran the module for longer than that.
T0 = time.time()


def make(check_access: bool = True, version: str = "26.05") -> tuple[TestClient, RecordingRunner, FakeSlurm, Clock]:
    spec = example_spec()
    assert spec.console is not None
    runner = replay(version)
    clock = Clock(T0)  # the tokens' issue time (bearer): no wall clock, so no module is too slow for them
    slurm = FakeSlurm()
    auth = identity.Authenticator(
        KEY, spec.console, check_password=lambda u, p: p == f"pw-{u}", user_exists=lambda u: u in USERS, clock=clock
    )
    app = create_app(
        spec,
        slurm=SlurmClient(runner),
        auth=auth,
        commands=UserCommands(KEY, runner_for=slurm.runner_for),
        clock=clock,
    )
    slurm_decides(app, check_access)
    return TestClient(app, raise_server_exceptions=False), runner, slurm, clock


def bearer(user: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {identity.mint(KEY, user, lifespan=3600, now=T0)}"}


@pytest.fixture(scope="module")
def service() -> tuple[TestClient, RecordingRunner, FakeSlurm, Clock]:
    return make()


# -- reading ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("user", "seen", "operator", "coordinates"),
    [
        ("alice", [1, 4, 6], False, []),
        ("carol", [2, 3, 5], False, ["projb"]),
        ("olga", [1, 2, 3, 4, 5, 6], True, []),
        ("dave", [], False, []),
    ],
)
def test_views_per_user(service, user: str, seen: list[int], operator: bool, coordinates: list[str]) -> None:
    client = service[0]
    me = client.get("/api/v1/me", headers=bearer(user)).json()
    assert me["operator"] is operator and me["coordinates"] == coordinates
    jobs = client.get("/api/v1/jobs", headers=bearer(user)).json()
    assert [j["job_id"] for j in jobs["jobs"]] == seen
    assert sum(jobs["hidden"].values()) == 6 - len(seen)
    pool = client.get("/api/v1/pool", headers=bearer(user)).json()
    assert pool["total"] == 11
    assert any(n["reason"] for n in pool["nodes"]) is operator


def test_me_lists_tiers_and_the_hub(service) -> None:
    me = service[0].get("/api/v1/me", headers=bearer("alice")).json()
    assert me["projects"] == ["proja"] and me["tiers"] == ["guaranteed", "shared", "scavenger"]
    assert me["hub_url"] == "https://hub.example.org/"


@pytest.mark.parametrize("path", ["/api/v1/me", "/api/v1/pool", "/api/v1/jobs", "/api/v1/jobs/1", "/api/v1/projects"])
def test_no_token_is_401(service, path: str) -> None:
    res = service[0].get(path)
    assert res.status_code == 401 and res.json()["status"] == 401
    bad = service[0].get(path, headers={"Authorization": "Bearer " + identity.mint(b"x" * 32, "alice")})
    assert bad.status_code == 401


def test_many_clients_one_read_per_interval() -> None:
    client, runner, _slurm, clock = make()
    reader = client.app.state.reader  # type: ignore[attr-defined]
    for i in range(60):
        user = ("alice", "bob", "olga")[i % 3]
        assert client.get("/api/v1/pool", headers=bearer(user)).status_code == 200
        assert client.get("/api/v1/jobs", headers=bearer(user)).status_code == 200
    assert pool_reads(runner, "26.05") == 2
    clock.now += 10
    for _ in range(30):
        client.get("/api/v1/jobs", headers=bearer("alice"))
    reader.wait_idle()
    assert pool_reads(runner, "26.05") == 4
    stats = client.get("/api/v1/stats", headers=bearer("alice")).json()
    assert stats["slurm_calls"] == len(runner.calls)


def test_job_detail_and_its_visibility(service) -> None:
    client = service[0]
    assert client.get("/api/v1/jobs/5", headers=bearer("bob")).json()["job"]["user"] == "bob"
    assert client.get("/api/v1/jobs/5", headers=bearer("carol")).status_code == 200  # projb's coordinator
    refused = client.get("/api/v1/jobs/5", headers=bearer("alice"))
    assert refused.status_code == 403 and refused.json()["field"] == "job_id"
    assert client.get("/api/v1/jobs/999", headers=bearer("olga")).status_code == 404


# -- acting ----------------------------------------------------------------------------
ACTS = [
    # check_access, user, path, status, whether Slurm was asked
    (True, "alice", "/api/v1/jobs/1/cancel", 200, True),
    (True, "alice", "/api/v1/jobs/2/cancel", 403, False),  # bob's: the service refuses
    (True, "alice", "/api/v1/jobs/5/hold", 403, False),
    (True, "alice", "/api/v1/jobs/5/requeue", 403, False),
    (True, "carol", "/api/v1/jobs/2/hold", 200, True),  # coordinator of projb
    (True, "olga", "/api/v1/jobs/3/requeue", 200, True),  # operator
    (True, "bob", "/api/v1/jobs/5/release", 200, True),
    (True, "dave", "/api/v1/jobs/1/cancel", 403, False),
    (True, "alice", "/api/v1/jobs/999/cancel", 404, False),
    (True, "alice", "/api/v1/jobs/1/explode", 404, False),
    (False, "alice", "/api/v1/jobs/2/cancel", 403, True),  # the service's check off: Slurm refuses
    (False, "alice", "/api/v1/jobs/5/hold", 403, True),
    (False, "dave", "/api/v1/jobs/1/requeue", 403, True),
    (False, "alice", "/api/v1/jobs/1/cancel", 200, True),
]


@pytest.mark.parametrize(("check", "user", "path", "status", "asked"), ACTS)
def test_action_authorization(check: bool, user: str, path: str, status: int, asked: bool) -> None:
    client, _runner, slurm, _clock = make(check_access=check)
    res = client.post(path, headers=bearer(user))
    assert res.status_code == status, res.text
    assert bool(slurm.ran) is asked
    assert all(u == user for u, _a, _i in slurm.ran)
    if status == 403 and asked:
        assert "Access/permission denied" in res.json()["message"]
    if status == 200:
        assert res.json()["ok"] is True


@pytest.mark.parametrize(
    ("check", "user", "job", "tier", "status", "argv"),
    [
        (True, "alice", 4, "shared", 200, ("scontrol", "update", "JobId=4", "Partition=shared", "QOS=shared")),
        (True, "alice", 4, "k8s-lend", 400, None),
        (True, "bob", 4, "shared", 403, None),
        (False, "bob", 4, "shared", 403, ("scontrol", "update", "JobId=4", "Partition=shared", "QOS=shared")),
    ],
)
def test_tier_change(check: bool, user: str, job: int, tier: str, status: int, argv: Any) -> None:
    client, _runner, slurm, _clock = make(check_access=check)
    res = client.post(f"/api/v1/jobs/{job}/tier", headers=bearer(user), json={"tier": tier})
    assert res.status_code == status, res.text
    assert [a for _u, a, _i in slurm.ran] == ([argv] if argv else [])


@pytest.mark.parametrize("check", [True, False], ids=["service-refuses", "slurm-decides"])
def test_a_project_not_the_users_is_refused_by_the_service_first(check: bool) -> None:
    client, _runner, slurm, _clock = make(check_access=check)
    body = {"tier": "guaranteed", "project": "projb", "script": "#!/bin/sh\ntrue\n"}
    exp = client.post("/api/v1/jobs/explain", headers=bearer("alice"), json=body).json()
    member = [r for r in exp["refusals"] if "is not a member of project 'projb'" in r]
    assert (exp["refusals"][:1] == member and not exp["ok"]) if check else member == [], exp
    res = client.post("/api/v1/jobs", headers=bearer("alice"), json=body)
    assert (res.status_code == 400 and slurm.ran == []) if check else slurm.ran[0][0] == "alice", res.text


def test_submit_and_explain() -> None:
    client, _runner, slurm, _clock = make()
    body = {"tier": "scavenger", "gpus": 1, "checkpoint": True, "nodes": "b-gpu1", "script": "#!/bin/sh\nsleep 1\n"}
    exp = client.post("/api/v1/jobs/explain", headers=bearer("alice"), json=body).json()
    assert exp["ok"] and exp["partition"] == "scavenger" and "--nodelist=b-gpu1" in exp["options"]
    assert slurm.ran == []
    res = client.post("/api/v1/jobs", headers=bearer("alice"), json=body)
    assert res.status_code == 200 and res.json()["job_id"] == 4242
    (user, argv, stdin) = slurm.ran[0]
    assert user == "alice" and argv[0] == "sbatch" and "--account=proja" in argv and stdin == body["script"]
    # Before Slurm's next read has it, the new job is hers to see (and nobody else's).
    assert client.get("/api/v1/jobs/4242", headers=bearer("alice")).json()["job"]["state"] == "PENDING"
    assert client.get("/api/v1/jobs/4242", headers=bearer("bob")).status_code == 403
    refused = client.post("/api/v1/jobs", headers=bearer("alice"), json={**body, "checkpoint": False})
    assert refused.status_code == 400 and "checkpoint" in refused.json()["message"]
    assert len(slurm.ran) == 1
    other = client.post("/api/v1/jobs", headers=bearer("alice"), json={**body, "project": "projb"})
    assert other.status_code == 400 and "projb" in other.json()["message"]


# -- sessions and CSRF -------------------------------------------------------------------
def test_login_session_and_csrf() -> None:
    client, _runner, slurm, _clock = make()
    assert client.post("/api/v1/login", json={"user": "alice", "password": "nope"}).status_code == 401
    res = client.post("/api/v1/login", json={"user": "alice", "password": "pw-alice"})
    assert res.status_code == 200, res.text
    csrf = res.json()["csrf_token"]
    assert csrf and "HttpOnly" in res.headers["set-cookie"] and "SameSite=Strict" in res.headers["set-cookie"]
    assert client.get("/api/v1/me").status_code == 401  # the cookie alone: no session (issue 49)
    me = client.get("/api/v1/me", headers={"X-CSRF-Token": csrf}).json()
    assert me["user"] == "alice" and me["csrf_token"] is None  # a GET never hands the token out
    assert client.post("/api/v1/jobs/1/hold").status_code == 401  # no CSRF token
    assert client.post("/api/v1/jobs/1/hold", headers={"X-CSRF-Token": "x" * 43}).status_code == 401
    assert slurm.ran == []
    assert client.post("/api/v1/jobs/1/hold", headers={"X-CSRF-Token": csrf}).status_code == 200
    cross = client.post("/api/v1/jobs/1/hold", headers={"X-CSRF-Token": csrf, "Sec-Fetch-Site": "cross-site"})
    assert cross.status_code == 403
    assert client.post("/api/v1/logout", headers={"X-CSRF-Token": csrf}).status_code == 200
    assert client.get("/api/v1/me", headers={"X-CSRF-Token": csrf}).status_code == 401


# -- bad input -------------------------------------------------------------------------
SUBMIT = {"tier": "guaranteed", "script": "#!/bin/sh\ntrue\n"}
POSTS = {
    "/api/v1/login": {"user": "alice", "password": "pw"},
    "/api/v1/jobs": SUBMIT,
    "/api/v1/jobs/explain": SUBMIT,
    "/api/v1/jobs/1/tier": {"tier": "shared"},
}
BAD: list[tuple[str, Any, str | None]] = [
    # what, body (dict: JSON merged over a good one; bytes: sent raw), the field the Problem names
    ("wrong type", {"tier": 5}, "body.tier"),
    ("unknown field", {"evil": 1}, "body.evil"),
    ("null", {"tier": None}, "body.tier"),
    ("control chars", {"tier": "a\nb"}, "body.tier"),
    ("huge string", {"tier": "a" * 100_000}, "body.tier"),
    ("huge unknown key", {"k" * 100_000: 1}, None),  # the Problem named it whole (found by bench/robustness.py)
    ("control-char key", {"x\x1b[2J": 1}, "body.x\\x1b[2J"),  # ... with its escape raw
    ("not JSON", b"{", None),
    ("a list", b"[1, 2]", None),
    ("non-UTF-8", b'{"tier": "\xff\xfe"}', None),
    ("empty", b"", None),
    ("deep", b"[" * 5000 + b"]" * 5000, None),
]
SUBMIT_BAD: list[tuple[str, Any, str]] = [
    ("huge number", {"gpus": 10**30}, "body.gpus"),
    ("float", {"gpus": 1.5}, "body.gpus"),
    ("bool as int", {"gpus": True}, "body.gpus"),
    ("NaN", b'{"tier": "guaranteed", "script": "x", "gpus": NaN}', ""),
    ("negative", {"shards": -1}, "body.shards"),
    ("bad time", {"time_limit": "1h; rm -rf"}, "body.time_limit"),
    ("bad node", {"nodes": "a-gpu1 --uid=0"}, "body.nodes"),
    ("bad mig", {"mig": "9g.1tb"}, "body.mig"),
    ("script too big", {"script": "x" * 70_000}, "body.script"),
    ("script NUL", {"script": "a\x00b"}, "body.script"),
    ("name option", {"name": "x\x1b[2J"}, "body.name"),
]


def _send(client: TestClient, path: str, body: Any, good: dict[str, Any]) -> Any:
    headers = {**bearer("alice"), "Content-Type": "application/json"}
    if isinstance(body, bytes):
        return client.post(path, headers=headers, content=body)
    return client.post(path, headers=headers, content=json.dumps({**good, **body}))


def _is_problem(res: Any, field: str | None) -> None:
    assert 400 <= res.status_code < 500, (res.status_code, res.text[:300])
    got = res.json()
    assert got["status"] == res.status_code and got["message"]
    assert len(res.text) < 2000  # never the huge input echoed back
    if field:
        assert got["field"] == field and field.split(".")[-1] in got["message"]


@pytest.mark.parametrize("path", list(POSTS))
@pytest.mark.parametrize(("what", "body", "field"), BAD, ids=[b[0] for b in BAD])
def test_bad_input_to_every_post(service, path: str, what: str, body: Any, field: str | None) -> None:
    if path == "/api/v1/login" and field == "body.tier":
        field = None  # login has no tier: the unknown or missing field is named instead
    _is_problem(_send(service[0], path, body, POSTS[path]), field)


@pytest.mark.parametrize("path", ["/api/v1/jobs", "/api/v1/jobs/explain"])
@pytest.mark.parametrize(("what", "body", "field"), SUBMIT_BAD, ids=[b[0] for b in SUBMIT_BAD])
def test_bad_submit_fields(service, path: str, what: str, body: Any, field: str) -> None:
    _is_problem(_send(service[0], path, body, SUBMIT), field or None)


@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/jobs/0",
        "/api/v1/jobs/-1",
        "/api/v1/jobs/99999999999999999999999",
        "/api/v1/jobs/abc",
        "/api/v1/jobs?sort=__class__",
        "/api/v1/jobs?user=a%0Ab",
        "/api/v1/jobs?state=" + "R" * 5000,
        "/api/v1/jobs?project=%FF",
    ],
)
def test_bad_paths_and_queries(service, path: str) -> None:
    _is_problem(service[0].get(path, headers=bearer("alice")), None)


def test_openapi_and_no_docs(service) -> None:
    client = service[0]
    schema = client.get("/api/v1/openapi.json").json()
    assert "/api/v1/jobs/{job_id}/{action}" in schema["paths"] and "/api/v1/stats" not in schema["paths"]
    assert client.get("/docs").status_code == 404 and client.get("/redoc").status_code == 404
    assert "frame-ancestors 'none'" in client.get("/api/v1/me").headers["content-security-policy"]


# -- the command -------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--spec", "examples/pool.yaml"], "no console section"),
        (["--spec", "examples/pool.yaml", "--listen", "nope"], "--listen"),
        (["--spec", "examples/pool.yaml", "--listen", "1.2.3.4:99999"], "--listen"),
    ],
)
def test_serve_refuses_clearly(args: list[str], said: str) -> None:
    from click.testing import CliRunner

    from slurm_pool.cli import cli
    from tests.unit.test_web_views import REPO

    res = CliRunner().invoke(cli, ["serve", *[str(REPO / a) if a.endswith(".yaml") else a for a in args]])
    assert res.exit_code == 2, res.output
    assert said in res.output
