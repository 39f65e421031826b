"""The REST API's OpenAPI schema, pinned by ``tests/golden/api/openapi.json``, and the SDK held to it.

* the app's ``openapi()`` equals the golden file (``SLURM_POOL_UPDATE_GOLDEN=1`` rewrites it, as the
  render goldens do with ``UPDATE_GOLDEN``);
* every model the SDK sends or reads back (found from :class:`PoolClient`'s annotations, nested models
  included) has the golden component of the same name: the same fields, the same types, the same required;
* every SDK method calls a route the schema has, with that method, and the route answers the model the
  method returns;
* the SDK against the real app (in-process, Slurm replayed from recorded output).
"""

from __future__ import annotations

import inspect
import json
import os
import re
import typing
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import BaseModel

from slurm_pool.client import ApiError, PoolClient
from slurm_pool.web import models as m

pytestmark = pytest.mark.usefixtures("narrow_from_json")


REPO = Path(__file__).resolve().parents[2]
GOLDEN = REPO / "tests" / "golden" / "api" / "openapi.json"
EXAMPLE = REPO / "examples" / "pool.yaml"
DATA = REPO / "tests" / "data" / "slurm" / "22.05"
KEY = b"k" * 32
UPDATING = bool(os.environ.get("SLURM_POOL_UPDATE_GOLDEN") or os.environ.get("UPDATE_GOLDEN"))


def build_app(runner: Any = None, check_access: bool = True) -> Any:
    """The service for the example pool, over a RecordingRunner replaying Slurm 22.05's busy pool."""
    from slurm_pool.adapters.runner import RecordingRunner
    from slurm_pool.adapters.slurm import SlurmClient
    from slurm_pool.spec import load_spec
    from slurm_pool.spec.console import Console
    from slurm_pool.web.actions import UserCommands
    from slurm_pool.web.app import create_app
    from slurm_pool.web.identity import Authenticator
    from tests.support.web import slurm_decides

    spec = load_spec(EXAMPLE)
    if runner is None:
        runner = RecordingRunner()
        runner.on(["sinfo", "--version"], "slurm 22.05.8\n")
        runner.on(["sinfo", "--json"], (DATA / "nodes-busy.json").read_text())
        runner.on(["squeue", "--json"], (DATA / "squeue-busy.json").read_text())
        runner.on(["sacct"], (DATA / "sacct.json").read_text())
        runner.on(["sbatch"], "77\n")
    auth = Authenticator(
        KEY, spec.console or Console(), check_password=lambda u, p: False, user_exists=lambda u: u in {"alice", "bob"}
    )
    commands = UserCommands(KEY, runner_for=lambda user, env: runner)
    return slurm_decides(create_app(spec, slurm=SlurmClient(runner), auth=auth, commands=commands), check_access)


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    pytest.importorskip("fastapi")
    got = build_app().openapi()
    if UPDATING:
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        GOLDEN.write_text(json.dumps(got, indent=2, sort_keys=True) + "\n")
    return got


def golden() -> dict[str, Any]:
    return json.loads(GOLDEN.read_text())


def test_the_schema_is_the_golden_one(schema) -> None:
    assert json.loads(json.dumps(schema)) == golden(), (
        "the API's OpenAPI schema changed; if intended, rerun with SLURM_POOL_UPDATE_GOLDEN=1 and review the diff"
    )


def test_the_schema_is_served(schema) -> None:
    from fastapi.testclient import TestClient

    with TestClient(build_app()) as tc:
        resp = tc.get("/api/v1/openapi.json")
    assert resp.status_code == 200 and resp.json() == json.loads(json.dumps(schema))


# -- the SDK's models against the golden schema -----------------------------------------------------------
PUBLIC = [name for name, fn in inspect.getmembers(PoolClient, inspect.isfunction) if not name.startswith("_")]


def _models_in(tp: Any) -> set[type[BaseModel]]:
    """The pydantic models in a type (``list[X]``, ``Optional[X]``, ``X``)."""
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return {tp}
    return {mdl for arg in typing.get_args(tp) for mdl in _models_in(arg)}


def _closure(roots: set[type[BaseModel]]) -> set[type[BaseModel]]:
    """``roots`` and every model their fields hold, transitively."""
    out: set[type[BaseModel]] = set()
    todo = list(roots)
    while todo:
        mdl = todo.pop()
        if mdl in out:
            continue
        out.add(mdl)
        todo.extend(_models_in(f.annotation) for f in mdl.model_fields.values())  # type: ignore[arg-type]
        todo = [t for x in todo for t in (x if isinstance(x, set) else {x})]
    return out


def _returned() -> set[type[BaseModel]]:
    hints = (typing.get_type_hints(getattr(PoolClient, n)) for n in PUBLIC)
    return _closure({mdl for h in hints for mdl in _models_in(h.get("return"))} | {m.Problem})


SENT = {m.SubmitRequest, m.TierChange, m.Login}
READ = _returned()


def test_the_sdk_models_are_found() -> None:
    # the walk over the annotations must find the nested models too, or the check below checks little
    assert {m.Pool, m.NodeView, m.Sample, m.JobDetail, m.JobView, m.Event, m.Submitted, m.Explanation} <= READ
    assert {m.ProjectView, m.ActionResult, m.Me, m.JobList, m.Problem} <= READ


_DROP = {"title", "description", "default", "examples"}


def _norm(node: Any) -> Any:
    """A JSON schema with titles, descriptions and defaults dropped and every $ref reduced to the model name."""
    if isinstance(node, dict):
        out = {}
        for k, v in node.items():
            if k in _DROP:
                continue
            if k == "$ref" and isinstance(v, str):
                v = re.sub(r"-(Input|Output)\Z", "", v.rsplit("/", 1)[-1])
            out[k] = _norm(v)
        return out
    if isinstance(node, list):
        return [_norm(x) for x in node]
    return node


def _component(components: dict[str, Any], name: str, mode: str) -> dict[str, Any]:
    suffix = "-Output" if mode == "serialization" else "-Input"
    for key in (name, name + suffix):
        if key in components:
            return components[key]
    raise AssertionError(f"the schema has no component {name!r} (nor {name + suffix!r})")


def _compare(mdl: type[BaseModel], mode: str) -> list[str]:
    """How ``mdl`` (as the SDK has it) differs from the golden component of its name."""
    theirs = _component(golden()["components"]["schemas"], mdl.__name__, mode)
    ours = mdl.model_json_schema(mode=mode)  # type: ignore[arg-type]
    problems = []
    a, b = ours.get("properties", {}), theirs.get("properties", {})
    if set(a) != set(b):
        problems.append(f"fields: the SDK has {sorted(set(a) - set(b))} more, the server {sorted(set(b) - set(a))}")
    for name in sorted(set(a) & set(b)):
        if _norm(a[name]) != _norm(b[name]):
            problems.append(f"{name}: the SDK reads {_norm(a[name])}, the server says {_norm(b[name])}")
    if set(ours.get("required", [])) != set(theirs.get("required", [])):
        problems.append(f"required: the SDK {sorted(ours.get('required', []))}, the server {theirs.get('required')}")
    return problems


@pytest.mark.parametrize("mdl", sorted(READ, key=lambda x: x.__name__), ids=lambda x: x.__name__)
def test_each_model_the_sdk_reads_matches_the_schema(mdl) -> None:
    assert _compare(mdl, "serialization") == []


@pytest.mark.parametrize("mdl", sorted(SENT, key=lambda x: x.__name__), ids=lambda x: x.__name__)
def test_each_model_the_sdk_sends_matches_the_schema(mdl) -> None:
    assert _compare(mdl, "validation") == []


class _Drifted(m.JobView):
    """A JobView as an SDK that drifted would have it: one field more, one type changed."""

    queue_position: int = 0
    gpus: str = ""  # type: ignore[assignment]


def test_the_comparison_can_fail() -> None:
    _Drifted.__name__ = "JobView"
    got = _compare(_Drifted, "serialization")
    assert any("queue_position" in p for p in got) and any(p.startswith("gpus:") for p in got)


# -- the SDK's requests against the schema's routes -------------------------------------------------------
TOKEN = "eyJhbGciOiJIUzI1NiJ9.eyJzdW4iOiJhbGljZSJ9.c2ln"
#: Each public method, called once (``wait`` is ``job`` in a loop; ``login``/``logout`` are sessions).
CALLS: dict[str, Any] = {
    "me": lambda c: c.me(),
    "status": lambda c: c.status(),
    "jobs": lambda c: c.jobs(state="RUNNING"),
    "job": lambda c: c.job(1),
    "history": lambda c: c.history(),
    "why": lambda c: c.why(1),
    "projects": lambda c: c.projects(),
    "explain": lambda c: c.explain("scavenger"),
    "submit": lambda c: c.submit("#!/bin/sh\n", "scavenger"),
    "cancel": lambda c: c.cancel(1),
    "hold": lambda c: c.hold(1),
    "release": lambda c: c.release(1),
    "requeue": lambda c: c.requeue(1),
    "change_tier": lambda c: c.change_tier(1, "shared"),
    "login": lambda c: c.login("alice", "pw"),
    "logout": lambda c: c.logout(),
    "wait": lambda c: c.wait(1, "RUNNING", timeout=0),
}


def test_every_public_method_is_called_below() -> None:
    assert sorted(set(PUBLIC) - {"close"}) == sorted(CALLS)


def _route(paths: dict[str, Any], method: str, path: str) -> tuple[str, dict[str, Any]]:
    """The schema's route template (``/api/v1/jobs/{job_id}``) that ``path`` is, and its operation."""
    for template, ops in paths.items():
        pattern = re.sub(r"\\\{[a-z_]+\\\}", "[^/]+", re.escape(template))
        if re.fullmatch(pattern, path) and method.lower() in ops:
            if "{action}" in template and path.rsplit("/", 1)[-1] not in m.ACTIONS:
                continue
            return template, ops[method.lower()]
    raise AssertionError(f"{method} {path}: no such route in the schema")


def _answer_ref(op: dict[str, Any]) -> str:
    content = op["responses"]["200"]["content"]["application/json"]["schema"]
    ref = content.get("$ref") or content.get("items", {}).get("$ref", "")
    return re.sub(r"-(Input|Output)\Z", "", ref.rsplit("/", 1)[-1])


@pytest.mark.parametrize("name", sorted(CALLS))
def test_each_method_calls_a_route_of_the_schema(name) -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(599, json={"status": 599, "message": "recorded"})

    client = PoolClient("https://pool.test", TOKEN, transport=httpx.MockTransport(handler), env={})
    with pytest.raises(ApiError):
        CALLS[name](client)
    req = seen[-1]
    template, op = _route(golden()["paths"], req.method, req.url.path)
    hint = typing.get_type_hints(getattr(PoolClient, name)).get("return")
    returned = _models_in(hint)
    if returned:
        want = next(iter(returned)).__name__ if name != "wait" else "JobDetail"  # wait polls job()
        assert _answer_ref(op) == want, f"{name}: {template} answers {_answer_ref(op)}, the SDK reads {want}"
    body = op.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema", {})
    sent = re.sub(r"-(Input|Output)\Z", "", body.get("$ref", "").rsplit("/", 1)[-1]) or None
    if req.content:
        assert sent is not None and sent in {x.__name__ for x in SENT}, f"{name} sends a body {template} takes not"
    else:
        assert sent is None, f"{name} sends no body, {template} wants a {sent}"


# -- the SDK against the real app (in-process; Slurm replayed) ---------------------------------------------
def _sacct(argv: tuple[str, ...], _input: str | None) -> Any:
    from slurm_pool.adapters.runner import Result

    if "-j" in argv and argv[argv.index("-j") + 1] not in {"1", "3", "5"}:
        return Result(argv, 0, json.dumps({"jobs": []}), "")
    return Result(argv, 0, (DATA / "sacct.json").read_text(), "")


@pytest.fixture
def served():
    """``(runner, client_for(user or token))``: the app over a replayed Slurm, and SDK clients of it."""
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from slurm_pool.adapters.runner import RecordingRunner
    from slurm_pool.web.identity import mint

    runner = RecordingRunner()
    runner.on(["sinfo", "--version"], "slurm 22.05.8\n")
    runner.on(["sinfo", "--json"], (DATA / "nodes-busy.json").read_text())
    runner.on(["squeue", "--json"], (DATA / "squeue-busy.json").read_text())
    runner.respond(["sacct"], _sacct)
    runner.on(["sbatch"], "77\n")
    clients: list[PoolClient] = []
    with TestClient(build_app(runner)) as tc:

        def client_for(user: str | None = "alice", token: str | None = None) -> PoolClient:
            tok = token if token is not None else (mint(KEY, user) if user else None)
            c = PoolClient("https://testserver", tok, http=tc, env={})
            clients.append(c)
            return c

        yield runner, client_for


def test_sdk_reads_the_real_app(served) -> None:
    _, client_for = served
    alice = client_for("alice")
    me = alice.me()
    assert me.user == "alice" and "proja" in me.projects and "scavenger" in me.tiers
    pool = alice.status()
    assert pool.total > 0 and sum(pool.states.values()) == pool.total and pool.nodes
    jobs = alice.jobs()
    assert {j.job_id for j in jobs.jobs} == {1, 4} and sum(jobs.hidden.values()) == 2
    assert [j.job_id for j in alice.jobs(state="RUNNING").jobs] == [1]
    detail = alice.job(1)
    assert detail.job.user == "alice" and detail.job.state == "RUNNING"
    assert alice.wait(1, "RUNNING", timeout=0).job_id == 1
    why = alice.why(4)
    assert why.job_id == 4 and why.predicted_start is not None and why.causes and why.alternatives


def test_sdk_acts_through_the_real_app(served) -> None:
    runner, client_for = served
    alice = client_for("alice")
    refused = alice.explain("scavenger", gpus=1)
    assert not refused.ok and any("checkpoint" in r for r in refused.refusals), refused
    with pytest.raises(ApiError) as exc:
        alice.submit("#!/bin/sh\ntrue\n", "scavenger", gpus=1)
    assert exc.value.status == 400 and "checkpoint" in exc.value.message and not runner.commands("sbatch")
    assert alice.explain("scavenger", gpus=1, checkpoint=True).ok
    got = alice.submit("#!/bin/sh\ntrue\n", "scavenger", gpus=1, name="sdk", checkpoint=True)
    assert got.job_id == 77 and got.explanation.ok
    (sbatch,) = runner.commands("sbatch")
    assert "--qos=scavenger" in sbatch and runner.inputs[runner.calls.index(sbatch)] == "#!/bin/sh\ntrue\n"
    done = alice.cancel(1)
    assert (done.job_id, done.action, done.ok) == ("1", "cancel", True)  # Slurm's notation, as asked
    assert runner.commands("scancel") == [("scancel", "1")]


@pytest.mark.parametrize(
    "call,user,token,status,words",
    [
        (lambda c: c.me(), None, None, 401, ""),
        (lambda c: c.me(), None, "eyJhbGciOiJIUzI1NiJ9.eyJzdW4iOiJhbGljZSJ9.c2ln", 401, ""),
        (lambda c: c.me(), "mallory", None, 401, ""),
        (lambda c: c.job(3), "alice", None, 403, "alice may not"),
        (lambda c: c.cancel(3), "alice", None, 403, "alice may not"),
        (lambda c: c.job(999), "alice", None, 404, "no job 999"),
        (lambda c: c.why(1), "alice", None, 409, "job 1 is running, not waiting"),
        (lambda c: c.why(3), "alice", None, 403, "alice may not"),
        (lambda c: c.login("alice", "wrong"), None, None, 401, ""),
    ],
)
def test_sdk_errors_from_the_real_app(served, call, user, token, status, words) -> None:
    runner, client_for = served
    with pytest.raises(ApiError) as exc:
        call(client_for(user, token))
    assert exc.value.status == status and words in exc.value.message and exc.value.message
    assert not runner.commands("scancel")
