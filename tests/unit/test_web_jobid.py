"""Job ids in Slurm's notation on the REST API: ``4_2`` reaches scancel as ``4_2`` (task 2 of array 4, never
job 42), ``5+1`` as ``5+1``; what is not the notation is a 422 naming the value before any command runs; ``why``
answers for an array task, a het component and a het job.  Slurm replayed from the recorded 22.05 queue: jobs
1-2 alice's, 3 bob's, array 4 (4_[1-3], no task started) and het job 5 (5+0 = job 5, 5+1 = job 6) carol's."""

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
from tests.unit.test_web_views import COORDINATORS, KEY, NODE_COMMAND, Clock, example_spec, recorded

pytestmark = pytest.mark.usefixtures("narrow_from_json")

USERS = {"alice", "bob", "carol", "olga"}


class Ran:
    """The commands run as users, each answered as a success."""

    def __init__(self) -> None:
        self.argvs: list[tuple[str, tuple[str, ...]]] = []

    def runner_for(self, user: str, env: Any) -> RecordingRunner:
        r = RecordingRunner()

        def answer(argv: tuple[str, ...], stdin: str | None) -> Result:
            self.argvs.append((user, argv))
            return Result(argv, 0, "")

        r.respond([], answer)
        return r


def make(check_access: bool = True) -> tuple[TestClient, Ran]:
    spec = example_spec()
    assert spec.console is not None
    r = RecordingRunner()
    r.on(["sinfo", "--version"], "slurm 22.05.0\n")
    r.on(NODE_COMMAND["22.05"], recorded("nodes-busy.json", "22.05"))
    r.on(["squeue", "--json"], recorded("squeue-array-het.json", "22.05"))
    r.on(["sacctmgr"], COORDINATORS)
    r.on(["sacct"], json.dumps({"jobs": []}))
    ran = Ran()
    auth = identity.Authenticator(
        KEY, spec.console, check_password=lambda u, p: False, user_exists=lambda u: u in USERS, clock=time.time
    )
    app = create_app(
        spec,
        slurm=SlurmClient(r),
        auth=auth,
        commands=UserCommands(KEY, runner_for=ran.runner_for),
        clock=Clock(time.time()),
    )
    slurm_decides(app, check_access)
    return TestClient(app, raise_server_exceptions=False), ran


def bearer(user: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {identity.mint(KEY, user, lifespan=3600)}"}


@pytest.fixture(scope="module")
def service() -> tuple[TestClient, Ran]:
    return make()


ACTS = [
    # user, path, status, the command run (None: none)
    ("carol", "/api/v1/jobs/4_2/cancel", 200, ("scancel", "4_2")),
    ("carol", "/api/v1/jobs/4_%5B1-2%5D/cancel", 200, ("scancel", "4_[1-2]")),  # a range: scancel takes one
    ("carol", "/api/v1/jobs/4_[1,3]/cancel", 200, ("scancel", "4_[1,3]")),
    ("carol", "/api/v1/jobs/5+1/hold", 200, ("scontrol", "hold", "5+1")),
    ("carol", "/api/v1/jobs/5%2B1/release", 200, ("scontrol", "release", "5+1")),
    ("carol", "/api/v1/jobs/5/requeue", 200, ("scontrol", "requeue", "5")),  # the whole het job
    ("carol", "/api/v1/jobs/6/cancel", 200, ("scancel", "6")),  # 5+1 by its own id
    ("alice", "/api/v1/jobs/4_2/cancel", 403, None),  # carol's task
    ("alice", "/api/v1/jobs/5+1/cancel", 403, None),
    ("olga", "/api/v1/jobs/4_2/cancel", 200, ("scancel", "4_2")),  # operator
    ("carol", "/api/v1/jobs/4_9/cancel", 404, None),  # no task 9
    ("carol", "/api/v1/jobs/5+2/cancel", 404, None),  # no component 2
    ("carol", "/api/v1/jobs/42/cancel", 404, None),  # 4_2 is never 42
    ("carol", "/api/v1/jobs/4_[1-3]/hold", 422, None),  # only cancel takes a range
]


@pytest.mark.parametrize(("user", "path", "status", "argv"), ACTS)
def test_actions_pass_slurms_notation_through(user: str, path: str, status: int, argv: Any) -> None:
    client, ran = make()
    res = client.post(path, headers=bearer(user))
    assert res.status_code == status, res.text
    assert ran.argvs == ([(user, argv)] if argv else [])
    if status == 200:
        assert res.json()["job_id"] == argv[-1] and res.json()["ok"] is True


def test_a_tier_change_of_an_array_task_names_the_task() -> None:
    client, ran = make()
    res = client.post("/api/v1/jobs/4_2/tier", headers=bearer("carol"), json={"tier": "shared"})
    assert res.status_code == 200, res.text
    assert [a for _u, a in ran.argvs] == [("scontrol", "update", "JobId=4_2", "Partition=shared", "QOS=shared")]


BAD = [
    # path segment, what the message says
    ("+3", "has a sign"),
    ("-3", "has a sign"),
    ("03", "leading zero"),
    ("3.0", "not a whole number"),
    ("%203", "blanks"),
    ("3%20", "blanks"),
    ("4__2", "at most one array task or het component"),
    ("4_2+1", "at most one array task or het component"),
    ("4_02", "leading zero"),
    ("%D9%A3", "other than ASCII"),  # Arabic-Indic three
    ("0", "a job id is 1 to 4294967292"),
    ("4294967293", "a job id is 1 to 4294967292"),
    ("99999999999999999999999", "is not a Slurm job id"),
    ("4_4000001", "an array task id is 0 to 4000000"),
    ("5+128", "a het component is 0 to 127"),
    ("4_", "is not a Slurm job id"),
    ("abc", "is not a Slurm job id"),
]


@pytest.mark.parametrize("how", ["cancel", "get", "why"])
@pytest.mark.parametrize(("segment", "said"), BAD)
def test_what_is_not_slurms_notation_is_422_naming_the_value(segment: str, said: str, how: str) -> None:
    client, ran = make()
    if how == "cancel":
        res = client.post(f"/api/v1/jobs/{segment}/cancel", headers=bearer("olga"))
    else:
        res = client.get(f"/api/v1/jobs/{segment}{'/why' if how == 'why' else ''}", headers=bearer("olga"))
    assert res.status_code == 422, res.text
    body = res.json()
    assert body["field"] == "path.job_id" and said in body["message"] and "path.job_id: " in body["message"]
    assert ran.argvs == []


def test_job_detail_of_an_array_task_and_a_het_component(service) -> None:
    client = service[0]
    task = client.get("/api/v1/jobs/4_2", headers=bearer("carol"))
    assert task.status_code == 200 and task.json()["job"]["job_id"] == 4  # still in the array's record
    comp = client.get("/api/v1/jobs/5+1", headers=bearer("carol"))
    assert comp.status_code == 200 and comp.json()["job"]["job_id"] == 6
    assert client.get("/api/v1/jobs/5+1", headers=bearer("alice")).status_code == 403


@pytest.mark.parametrize(
    ("ref", "job_id", "name", "parts"),
    [
        ("4_2", 4, "4_[1-3]", []),
        ("5+1", 6, "5+1", []),
        ("6", 6, "5+1", []),
        ("5", 5, "5+0", ["5+0", "5+1"]),  # the het job: every component
    ],
)
def test_why_answers_for_array_tasks_and_het_jobs(service, ref: str, job_id: int, name: str, parts: list) -> None:
    res = service[0].get(f"/api/v1/jobs/{ref}/why", headers=bearer("carol"))
    assert res.status_code == 200, res.text
    got = res.json()
    assert (got["job_id"], got["name"]) == (job_id, name)
    assert [p["name"] for p in got["parts"]] == parts
    if parts:
        starts = [p["predicted_start"] for p in got["parts"]]
        assert None not in starts and got["het_start"] == max(starts)
    else:
        assert got["het_start"] is None


def test_why_of_a_running_job_is_409() -> None:
    client, _ran = make()
    res = client.get("/api/v1/jobs/1/why", headers=bearer("alice"))
    assert res.status_code == 409 and "job 1 is running, not waiting" in res.json()["message"]
