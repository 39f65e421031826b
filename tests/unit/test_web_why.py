"""``GET /api/v1/jobs/{id}/why`` in-process over Slurm replayed from the recorded busy pool (both versions):
the real predictor's answer, the access rules of ``GET /jobs/{id}``, 409 for a job that is not waiting,
the causes' job ids cut to what the caller may see, the alternatives flag, and the shared cached forecast."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

import pytest
from fastapi.testclient import TestClient

from slurm_pool.adapters.records import RecordError
from slurm_pool.adapters.runner import CommandError, RecordingRunner
from slurm_pool.adapters.slurm import SlurmClient
from slurm_pool.web import identity
from slurm_pool.web.actions import UserCommands
from slurm_pool.web.app import create_app
from slurm_pool.web.reader import PoolReader
from slurm_pool.web.routes import jobs as web_app
from slurm_pool.web.routes.jobs import why_answer
from tests.support.web import slurm_decides
from tests.unit.test_web_app import USERS, FakeSlurm, bearer
from tests.unit.test_web_views import KEY, Clock, example_spec, recorded, replay

pytestmark = pytest.mark.usefixtures("narrow_from_json")

VERSIONS = ("22.05", "26.05")
WHY_KEYS = {
    "job_id", "now", "reason", "reason_text", "predicted_start", "range", "runtime_seconds", "runtime_basis",
    "note", "slurm_estimate", "causes", "alternatives", "name", "parts", "het_start",
}  # fmt: skip


def make(version: str = "26.05", check_access: bool = True) -> tuple[TestClient, RecordingRunner, Clock]:
    """The service over the busy pool: alice runs job 1 and waits with job 4 (after 1), bob's job 2 is held,
    carol runs job 3; bob's job 5 has left the queue (sacct has it)."""
    spec = example_spec()
    runner = replay(version, "busy")
    runner.on(["sacct", "--json", "--duplicates", "--jobs", "5"], recorded("sacct.json", version))
    clock = Clock(time.time())  # tokens are minted at the real time
    auth = identity.Authenticator(
        KEY, spec.console, check_password=lambda u, p: False, user_exists=lambda u: u in USERS, clock=clock
    )
    app = create_app(
        spec,
        slurm=SlurmClient(runner),
        auth=auth,
        commands=UserCommands(KEY, runner_for=FakeSlurm().runner_for),
        clock=clock,
    )
    slurm_decides(app, check_access)
    return TestClient(app, raise_server_exceptions=False), runner, clock


@pytest.fixture(scope="module", params=VERSIONS)
def service(request: pytest.FixtureRequest) -> tuple[TestClient, RecordingRunner, Clock]:
    return make(request.param)


def forecasts(runner: RecordingRunner) -> int:
    """Forward runs' reads of the queue (``squeue --json`` itself; the snapshot reads narrow text)."""
    return sum(1 for c in runner.calls if list(c) == ["squeue", "--json"])


def history_reads(runner: RecordingRunner) -> int:
    """The predictor's reads of everyone's history (the console's own read of recent runs asks for allocations)."""
    return sum(1 for c in runner.calls if c[:3] == ("sacct", "--json", "--allusers") and "--allocations" not in c)


# -- the real predictor ------------------------------------------------------------------
def test_a_pending_job_is_explained(service) -> None:
    client, _runner, clock = service
    res = client.get("/api/v1/jobs/4/why", headers=bearer("alice"))
    assert res.status_code == 200, res.text
    got = res.json()
    assert set(got) == WHY_KEYS
    assert got["job_id"] == 4 and got["reason"] == "Dependency" and got["reason_text"]
    assert (got["name"], got["parts"], got["het_start"]) == ("4", [], None)  # a plain job: no parts
    assert got["now"] == pytest.approx(clock.now, abs=60)
    low, high = got["range"]
    assert got["predicted_start"] is not None and low <= got["predicted_start"] <= high
    assert got["predicted_start"] > got["now"]  # after alice's running job 1 (its dependency) ends
    kinds = {c["kind"]: c for c in got["causes"]}
    assert "dependency" in kinds
    assert kinds["owner"]["jobs"] == [1] and kinds["owner"]["nodes"] == ["a-gpu1"]
    assert got["alternatives"] and all(set(a) == {"what", "how", "predicted_start"} for a in got["alternatives"])


def test_a_held_job_has_no_start(service) -> None:
    got = service[0].get("/api/v1/jobs/2/why", headers=bearer("bob")).json()
    assert got["reason"] == "JobHeldUser" and got["predicted_start"] is None and got["range"] == [None, None]
    assert "held" in got["note"] and got["alternatives"] == []


@pytest.mark.parametrize(("query", "some"), [("", True), ("?alternatives=true", True), ("?alternatives=false", False)])
def test_the_alternatives_flag(service, query: str, some: bool) -> None:
    got = service[0].get(f"/api/v1/jobs/4/why{query}", headers=bearer("alice")).json()
    assert bool(got["alternatives"]) is some
    assert got["causes"]  # the causes come either way


# -- refusals ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("user", "path", "status", "words"),
    [
        ("olga", "/api/v1/jobs/999/why", 404, "there is no job 999"),
        ("alice", "/api/v1/jobs/2/why", 403, "alice may not see"),  # bob's job
        ("dave", "/api/v1/jobs/4/why", 403, "dave may not see"),  # in no project
        ("alice", "/api/v1/jobs/1/why", 409, "job 1 is running, not waiting"),
        ("carol", "/api/v1/jobs/3/why", 409, "job 3 is running, not waiting"),
        ("bob", "/api/v1/jobs/5/why", 409, "job 5 has ended"),  # in the accounting only
        ("alice", "/api/v1/jobs/0/why", 422, "job_id"),
        ("alice", "/api/v1/jobs/4/why?alternatives=maybe", 422, "alternatives"),
    ],
)
def test_refusals_are_problems(service, user: str, path: str, status: int, words: str) -> None:
    res = service[0].get(path, headers=bearer(user))
    assert res.status_code == status
    body = res.json()
    assert body["status"] == status and words in body["message"] + str(body["field"])


def test_no_token_is_401(service) -> None:
    res = service[0].get("/api/v1/jobs/4/why")
    assert res.status_code == 401 and res.json()["status"] == 401


def test_access_checks_off_still_answer_another_users_job() -> None:
    client = make(check_access=False)[0]
    assert client.get("/api/v1/jobs/4/why", headers=bearer("dave")).status_code == 200


def test_a_failed_read_is_a_502_problem() -> None:
    client, runner, _clock = make()
    runner.fail(["sacct", "--json", "--allusers"], stderr="sacct: error: slurmdbd is down")
    res = client.get("/api/v1/jobs/4/why", headers=bearer("alice"))
    assert res.status_code == 502 and "slurmdbd is down" in res.json()["message"]


# -- what a caller may learn -------------------------------------------------------------
@dataclass
class _Stub:
    answer: dict[str, Any]

    def as_dict(self) -> dict[str, Any]:
        return self.answer


def _stub_answer(job_id: int, alternatives_too: bool) -> dict[str, Any]:
    return {
        "job_id": job_id, "reason": "Resources", "reason_text": "it waits for GPUs to come free",
        "predicted_start": 10.0, "range": [10.0, 20.0], "runtime_seconds": 60.0, "runtime_basis": "history",
        "note": "", "alternatives": [] if not alternatives_too else [{"what": "w", "how": "h", "predicted_start": 5.0}],
        "causes": [{"kind": "borrower", "text": "running jobs hold the GPUs", "jobs": [1, 2, 3, 999], "nodes": ["n1"]}],
    }  # fmt: skip


@pytest.mark.parametrize(
    ("user", "jobs"),
    [
        ("alice", [1]),  # her own job 1; bob's 2, carol's 3 and a job not in the queue left out
        ("carol", [2, 3]),  # hers, and projb's as its coordinator
        ("olga", [1, 2, 3]),  # an operator
    ],
)
def test_causes_name_only_jobs_the_caller_sees(monkeypatch: pytest.MonkeyPatch, user: str, jobs: list[int]) -> None:
    client = make(check_access=False)[0]  # every caller may ask about job 4 here: the filter is what is tested
    monkeypatch.setattr(web_app, "explain", lambda fc, jid, alternatives_too=True: _Stub(_stub_answer(jid, True)))
    got = client.get("/api/v1/jobs/4/why", headers=bearer(user)).json()
    assert got["causes"][0]["jobs"] == jobs


@pytest.mark.parametrize(
    ("jobs", "seen", "kept"),
    [([1, 2, 3], {1, 2, 3}, [1, 2, 3]), ([1, 2, 3], {2}, [2]), ([5], set(), []), ([], {1}, [])],
)
def test_why_answer_filters_and_shows_control_characters(jobs: list[int], seen: set[int], kept: list[int]) -> None:
    answer = _stub_answer(7, True)
    answer["causes"][0]["jobs"] = jobs
    answer["causes"][0]["text"] = "held by\nproj\x1b[31m"
    answer["reason"] = "Odd\rReason"
    got = why_answer(answer, 1.0, None, lambda j: j in seen)
    assert got.causes[0].jobs == kept
    assert "\n" not in got.causes[0].text and "\x1b" not in got.causes[0].text and "\r" not in got.reason
    assert got.range == (10.0, 20.0) and got.alternatives[0].predicted_start == 5.0


# -- one shared forecast -----------------------------------------------------------------
def test_one_forecast_per_refresh_and_one_history_read_per_slow_interval() -> None:
    client, runner, clock = make()
    for user in ("alice", "olga") * 10:
        assert client.get("/api/v1/jobs/4/why", headers=bearer(user)).status_code == 200
    assert forecasts(runner) == 1 and history_reads(runner) == 1
    clock.now += 10  # the console's refresh_seconds
    client.get("/api/v1/jobs/4/why", headers=bearer("alice"))
    assert forecasts(runner) == 2 and history_reads(runner) == 1
    clock.now += 60  # the reader's slow_seconds
    client.get("/api/v1/jobs/4/why", headers=bearer("alice"))
    assert forecasts(runner) == 3 and history_reads(runner) == 2


def test_one_explanation_per_job_and_forecast(monkeypatch: pytest.MonkeyPatch) -> None:
    client, _runner, clock = make(check_access=False)
    made: list[tuple[int, bool]] = []

    def counted(fc: Any, jid: int, alternatives_too: bool = True) -> _Stub:
        made.append((jid, alternatives_too))
        return _Stub(_stub_answer(jid, alternatives_too))

    monkeypatch.setattr(web_app, "explain", counted)
    for user in ("alice", "olga", "carol") * 3:
        assert client.get("/api/v1/jobs/4/why", headers=bearer(user)).status_code == 200
    client.get("/api/v1/jobs/4/why?alternatives=false", headers=bearer("alice"))
    client.get("/api/v1/jobs/2/why", headers=bearer("bob"))
    assert made == [(4, True), (4, False), (2, True)]
    clock.now += 10  # a new forecast: explained afresh
    client.get("/api/v1/jobs/4/why", headers=bearer("alice"))
    assert made[-1] == (4, True) and len(made) == 4


@pytest.mark.parametrize(
    ("reply", "rc", "raises"),
    [
        (json.dumps({"jobs": [], "errors": [{"error": "Nothing found"}]}), 0, False),  # 22.05: a quiet window
        (json.dumps({"jobs": []}), 0, False),
        ("", 1, True),  # sacct failed
        (json.dumps({"jobs": [], "errors": [{"error": "Invalid user"}]}), 0, True),
    ],
)
def test_the_forecast_history_read(reply: str, rc: int, raises: bool) -> None:
    runner = replay("22.05", "busy")
    runner.on(["sacct"], reply, rc)
    reader = PoolReader(SlurmClient(runner), 10, Clock())
    if raises:
        with pytest.raises((CommandError, RecordError)):
            reader.forecast(example_spec())
    else:
        assert 4 in reader.forecast(example_spec()).predictions
