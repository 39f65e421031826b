"""The web service's pure views, its shared read of Slurm and its as-the-user commands, on JSON recorded
from real Slurm 22.05 and 26.05 (``tests/data/slurm``) and the example pool."""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from slurm_pool.adapters.records import JobRecord, RecordError, job_records, parse_jobs, parse_nodes
from slurm_pool.adapters.runner import RecordingRunner, Result, SubprocessRunner
from slurm_pool.adapters.slurm import SlurmClient
from slurm_pool.policy.tables import build_tables
from slurm_pool.spec.load import load_spec_text
from slurm_pool.spec.model import PoolSpec
from slurm_pool.versions import SlurmVersion
from slurm_pool.web import actions, models, submitting, views
from slurm_pool.web.reader import PoolReader
from tests.support.narrow_text import as_json_calls

pytestmark = pytest.mark.usefixtures("narrow_from_json")


REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data" / "slurm"
VERSIONS = ("22.05", "26.05")
NODE_COMMAND = {"22.05": ["sinfo", "--json"], "26.05": ["scontrol", "show", "nodes", "--json"]}
KEY = b"k" * 32
CONSOLE = "\nconsole:\n  operators: [olga]\n  refresh_seconds: 10\n  hub_url: https://hub.example.org/\n"
#: carol coordinates projb in Slurm (sacctmgr's Coordinators,Account).
COORDINATORS = "carol|projb\n|proja\n"


def example_spec(extra: str = CONSOLE) -> PoolSpec:
    return load_spec_text((REPO / "examples" / "pool.yaml").read_text() + extra, "pool.yaml")


def recorded(name: str, version: str) -> str:
    return (DATA / version / name).read_text()


def replay(version: str, tag: str = "requeued") -> RecordingRunner:
    """Slurm's commands answering from the recorded scene ``tag``."""
    r = RecordingRunner()
    r.on(["sinfo", "--version"], f"slurm {version}.0\n")
    r.on(NODE_COMMAND[version], recorded(f"nodes-{tag}.json", version))
    r.on(["squeue", "--json"], recorded(f"squeue-{tag}.json", version))
    r.on(["sacctmgr"], COORDINATORS)
    r.on(["sacct"], json.dumps({"jobs": []}))
    return r


def scene(version: str, tag: str = "requeued") -> tuple[list, list[JobRecord]]:
    return parse_nodes(recorded(f"nodes-{tag}.json", version)), parse_jobs(recorded(f"squeue-{tag}.json", version))


class Clock:
    def __init__(self, now: float = 1_796_235_500.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


# -- who sees what ---------------------------------------------------------------------
COORD = {"projb": {"carol"}}
VISIBLE = [
    # user, jobs seen in full, hidden counts by state
    ("alice", [1, 4, 6], {"PENDING": 2, "RUNNING": 1}),
    ("bob", [2, 5], {"PENDING": 1, "RUNNING": 3}),
    ("carol", [2, 3, 5], {"PENDING": 1, "RUNNING": 2}),  # her own, and projb's as its coordinator
    ("olga", [1, 2, 3, 4, 5, 6], {}),  # an operator
    ("dave", [], {"PENDING": 3, "RUNNING": 3}),  # in no project
]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize(("user", "seen", "hidden"), VISIBLE)
def test_job_visibility(version: str, user: str, seen: list[int], hidden: dict[str, int]) -> None:
    _nodes, jobs = scene(version)
    who = views.viewer(example_spec(), user, COORD)
    out = views.job_list(who, jobs)
    assert [j.job_id for j in out.jobs] == seen
    assert out.hidden == hidden
    assert sum(out.hidden.values()) + len(out.jobs) == len(jobs)


@pytest.mark.parametrize(
    ("query", "seen"),
    [
        ({"state": "running"}, [6, 1, 3]),
        ({"user": "bob"}, [5, 2]),
        ({"project": "proja", "state": "PENDING"}, [4]),
        ({"tier": "scavenger"}, [5]),
    ],
)
def test_job_filters_and_sort(query: dict[str, str], seen: list[int]) -> None:
    _nodes, jobs = scene("26.05")
    who = views.viewer(example_spec(), "olga")
    out = views.job_list(who, jobs, sort="-job_id", **query)
    assert [j.job_id for j in out.jobs] == sorted(seen, reverse=True)


#: Queries the index must answer as the list does: filters a viewer sees through, and ones it does not.
INDEX_QUERIES: list[dict[str, Any]] = [
    {},
    {"state": "running"},
    {"state": "PENDING", "sort": "-submit_time"},
    {"state": "REQUEUED"},
    {"user": "bob", "sort": "-job_id"},
    {"project": "projb", "state": "RUNNING"},
    {"tier": "scavenger"},
    {"user": "nobody"},
]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("user", [v[0] for v in VISIBLE])
@pytest.mark.parametrize("query", INDEX_QUERIES)
def test_job_index_answers_as_the_list_does(version: str, user: str, query: dict[str, Any]) -> None:
    _nodes, jobs = scene(version)
    jobs = jobs + [dataclasses.replace(jobs[0], job_id=99, account="", user="zed")]  # no account: nobody coordinates
    who = views.viewer(example_spec(), user, COORD)
    assert views.JobIndex(jobs).job_list(who, **query) == views.job_list(who, jobs, **query)


def test_job_index_reads_each_job_once_per_read() -> None:
    """The index is built once; a viewer's list then looks at the jobs it shows, not the queue."""
    _nodes, jobs = scene("26.05")

    class Counted(list):  # type: ignore[type-arg]
        reads = 0

        def __iter__(self) -> Any:
            Counted.reads += 1
            return super().__iter__()

    index = views.JobIndex(Counted(jobs))
    before = Counted.reads
    for user in ("alice", "bob", "carol", "dave"):
        index.job_list(views.viewer(example_spec(), user, COORD))
    assert (before, Counted.reads) == (1, 1)


def test_bad_sort_is_refused() -> None:
    with pytest.raises(ValueError, match="sort"):
        views.job_list(views.Viewer("olga", operator=True), [], sort="__class__")


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize(("user", "reasons"), [("olga", True), ("alice", False), ("dave", False)])
def test_node_view_reasons_only_for_operators(version: str, user: str, reasons: bool) -> None:
    nodes, jobs = scene(version, "busy")
    spec = example_spec()
    pool = views.pool(spec, views.viewer(spec, user), nodes, jobs, now=1.0)
    by_name = {n.name: n for n in pool.nodes}
    assert by_name["a-gpu2"].drain_owner == "slurm-pool"
    assert by_name["b-gpu1"].drain_owner == "human"
    assert (by_name["b-gpu1"].reason == "disk check by ops") is reasons
    assert (by_name["a-gpu2"].reason != "") is reasons
    # Pool state is everyone's: units by state, owners, and who uses a node, by project only.
    assert pool.total == 11 and pool.states["allocated"] == 2
    assert by_name["a-gpu1"].owners == ["proja"]
    assert by_name["a-gpu1"].used_by == {"proja": 1}
    assert by_name["c-gpu1"].by_type == {
        "nvidia_a100_3g.20gb": 1,
        "nvidia_a100_2g.10gb": 1,
        "nvidia_a100_1g.5gb": 2,
        "nvidia_a100-sxm4-40gb": 1,
    }
    assert "alice" not in json.dumps(pool.model_dump())


def test_control_characters_in_job_names_are_shown() -> None:
    job = JobRecord(job_id=7, name="evil\x1b[31m\nname", user="alice", account="proja")
    view = views.job_view(job)
    assert "\x1b" not in view.name and "\n" not in view.name


# -- a job's life ------------------------------------------------------------------------
def _sacct_runs(version: str, runs: list[dict[str, Any]]) -> list[JobRecord]:
    """``sacct -D -j 5`` of a requeued job, each run built on the recorded record of job 5."""
    base = next(j for j in json.loads(recorded("sacct.json", version))["jobs"] if j["job_id"] == 5)
    out = []
    for i, run in enumerate(runs):
        rec = copy.deepcopy(base)
        state = run["state"]
        rec["state"]["current"] = [state] if version != "22.05" else state
        rec["time"].update(submission=900, start=run.get("start", 0), end=run.get("end", 0))
        rec["restart_cnt"] = i
        out.append(rec)
    return job_records(out)


OUTCOME = {
    "v": 1,
    "time": 1101.0,
    "node": "a-gpu2",
    "job_id": "5",
    "user": "bob",
    "reason": "preempt",
    "preempted": True,
    "event_time": 1100.0,
    "checkpointed": True,
    "checkpoint_time": 1095.0,
    "checkpoint_age_s": 5.0,
    "requeued": True,
}
ALL = ["submitted", "started", "preempted", "checkpointed", "requeued", "resumed", "finished"]


@pytest.mark.parametrize(
    ("version", "first", "last", "outcomes", "kinds", "age"),
    [
        ("26.05", "PREEMPTED", "COMPLETED", [OUTCOME], ALL, 5.0),
        ("22.05", "REQUEUED", "COMPLETED", [OUTCOME], ALL, 5.0),
        # Without the epilog's record: Slurm alone says preempted (26.05) or requeued (22.05).
        ("26.05", "PREEMPTED", "COMPLETED", [], ["submitted", "started", "preempted", "requeued", "resumed", "finished"], None),
        ("22.05", "REQUEUED", "COMPLETED", [], ["submitted", "started", "requeued", "resumed", "finished"], None),
        # Still running after the requeue: no "finished".
        ("26.05", "PREEMPTED", "RUNNING", [OUTCOME], ALL[:-1], 5.0),
    ],
)  # fmt: skip
def test_timeline_of_a_requeued_job(
    version: str, first: str, last: str, outcomes: list[dict[str, Any]], kinds: list[str], age: float | None
) -> None:
    runs = _sacct_runs(
        version, [{"state": first, "start": 1000, "end": 1100}, {"state": last, "start": 1200, "end": 1500}]
    )
    events, restarts, checkpoint_age = views.timeline(runs, views.job_outcomes(outcomes, 5))
    assert [e.kind for e in events] == kinds
    assert restarts == 1
    assert checkpoint_age == age
    times = [e.time for e in events]
    assert times[0] == 900 and times[1] == 1000
    assert times == sorted(times)  # in the order the job lived them


def test_timeline_of_a_requeued_job_waiting_again() -> None:
    runs = _sacct_runs("26.05", [{"state": "PREEMPTED", "start": 1000, "end": 1100}, {"state": "PENDING"}])
    events, restarts, _ = views.timeline(runs, [], runs[-1])
    assert [e.kind for e in events] == ["submitted", "started", "preempted", "requeued"]
    assert restarts == 1


def test_outcome_records_of_other_jobs_are_ignored() -> None:
    other = {**OUTCOME, "job_id": "55"}
    assert views.job_outcomes([other, {**OUTCOME, "event_time": True}], 5)[0]["time"] == 1101.0


# -- the submit policy -------------------------------------------------------------------
def req(**kw: Any) -> models.SubmitRequest:
    return models.SubmitRequest(**{"tier": "guaranteed", "script": "#!/bin/sh\ntrue\n", **kw})


EXPLAIN = [  # fmt: skip
    # user, request, ok, partition, options that must be there / text in refusals
    ("alice", req(), True, "a-owner", ["--account=proja", "--qos=guaranteed", "--gres=gpu:1"]),
    ("alice", req(tier="scavenger"), False, "scavenger", ["must checkpoint"]),
    (
        "alice",
        req(tier="scavenger", checkpoint=True),
        True,
        "scavenger",
        ["--checkpoint", "--requeue", "--signal=B:USR1@60"],
    ),
    ("alice", req(tier="shared", gpus=5), False, "shared", ["at most 4 GPU"]),
    ("alice", req(tier="shared", time_limit="UNLIMITED"), False, "shared", ["finite time limit"]),
    ("alice", req(tier="k8s-lend"), False, "", ["may not use tier 'k8s-lend'"]),
    ("alice", req(tier="nope"), False, "", ["does not exist"]),
    ("alice", req(gpu_type="nvidia_h100_80gb_hbm3"), False, "a-owner", ["not available in partition 'a-owner'"]),
    ("bob", req(gpu_type="nvidia_h100_80gb_hbm3", gpus=2), True, "b-owner", ["--gres=gpu:nvidia_h100_80gb_hbm3:2"]),
    ("carol", req(mig="3g.20gb"), True, "c-owner", ["--gres=gpu:nvidia_a100_3g.20gb:1"]),
    ("alice", req(mig="3g.20gb"), False, "a-owner", ["MIG profile '3g.20gb' is not available"]),
    ("alice", req(shards=2), False, "a-owner", ["shares no GPU"]),
    ("alice", req(mig="1g.5gb", gpu_type="x"), False, "a-owner", ["not gpu_type and mig"]),
    ("alice", req(tier="scavenger", checkpoint=True, nodes="b-gpu1"), True, "scavenger", ["--nodelist=b-gpu1"]),
    ("alice", req(nodes="c-gpu1"), False, "a-owner", ["not in partition 'a-owner'"]),
    ("dave", req(), False, "", ["not a member of any project"]),
    ("olga", req(project="projc"), True, "c-owner", ["--account=projc"]),  # operators may submit for a project
]


@pytest.mark.parametrize(("user", "request_", "ok", "partition", "expect"), EXPLAIN)
def test_explanation(user: str, request_: models.SubmitRequest, ok: bool, partition: str, expect: list[str]) -> None:
    spec = example_spec()
    tables = build_tables(spec, SlurmVersion(22, 5))
    out = submitting.explain(spec, tables, views.viewer(spec, user), request_)
    assert out.ok is ok, out
    assert out.partition == partition
    said = out.options if ok else out.refusals
    for e in expect:
        assert any(e in s for s in said), (e, said)
    if ok:
        assert out.options[0] == "--parsable" and all(o.startswith("--") for o in out.options)
        assert f"--job-name={request_.name}" in out.options


def test_a_project_not_the_users_is_the_services_refusal() -> None:
    # The policy routes it as Slurm would; the service refuses it first (and Slurm's associations would too).
    spec = example_spec()
    tables = build_tables(spec, SlurmVersion(22, 5))
    who, asked = views.viewer(spec, "alice"), req(project="projb")
    out = submitting.explain(spec, tables, who, asked)
    assert out.partition == "b-owner"
    project = submitting.project_of(tables, who, asked)
    assert project == "projb"
    why = submitting.not_a_member(who, project)
    assert why is not None and why.startswith("alice is not a member of project 'projb'; your projects: ")
    assert submitting.not_a_member(who, who.projects[0]) is None


def test_explanation_job_name_stays_one_option() -> None:
    spec = example_spec()
    tables = build_tables(spec, SlurmVersion(22, 5))
    out = submitting.explain(spec, tables, views.viewer(spec, "alice"), req(name="--uid=0 x"))
    assert "--job-name=--uid=0 x" in out.options and "--uid=0" not in out.options


@pytest.mark.parametrize(
    ("user", "tier", "argv"),
    [
        ("alice", "shared", ("shared", "shared")),
        ("alice", "k8s-lend", ValueError),
        ("bob", "shared", PermissionError),
        ("olga", "scavenger", ("scavenger", "scavenger")),
    ],
)
def test_tier_change(user: str, tier: str, argv: Any) -> None:
    spec = example_spec()
    tables = build_tables(spec, SlurmVersion(26, 5))
    job = JobRecord(job_id=4, user="alice", account="proja", qos="guaranteed")
    if isinstance(argv, tuple):
        assert views.tier_change(tables, views.viewer(spec, user), job, tier) == argv
    else:
        with pytest.raises(argv):
            views.tier_change(tables, views.viewer(spec, user), job, tier)


def test_projects_hours() -> None:
    spec = example_spec()
    runs = [
        JobRecord(job_id=1, user="alice", account="proja", partition="a-owner", qos="guaranteed", nodes="a-gpu1",
                  gpus=2, start_time=1000.0, end_time=4600.0),
        JobRecord(job_id=2, user="bob", account="projb", partition="scavenger", qos="scavenger", nodes="a-gpu2",
                  gpus=1, start_time=1000.0, end_time=8200.0),
    ]  # fmt: skip
    rows = {p.name: p for p in views.projects(spec, views.viewer(spec, "olga"), runs, start=0, end=9000, hours=2)}
    assert rows["proja"].guaranteed_gpu_hours == 2.0 and rows["proja"].lent_gpu_hours == 2.0
    assert rows["projb"].borrowed_gpu_hours == 2.0 and rows["projb"].charges == {"scavenger": 0.6}
    assert [p.name for p in views.projects(spec, views.viewer(spec, "alice"), runs, start=0, end=9000, hours=2)] == [
        "proja"
    ]


# -- the shared read ---------------------------------------------------------------------
def pool_reads(runner: RecordingRunner, version: str) -> int:
    return sum(1 for c in as_json_calls(runner.calls) if list(c) in (NODE_COMMAND[version], ["squeue", "--json"]))


@pytest.mark.parametrize("version", VERSIONS)
def test_one_read_per_interval(version: str) -> None:
    runner = replay(version)
    clock = Clock()
    reader = PoolReader(SlurmClient(runner), 10, clock)
    snaps = {id(reader.snapshot()) for _ in range(200)}
    assert pool_reads(runner, version) == 2  # nodes and jobs, once
    assert len(snaps) == 1
    clock.now += 9.9
    reader.snapshot()
    assert pool_reads(runner, version) == 2
    clock.now += 0.2
    for _ in range(50):
        reader.snapshot()
    reader.wait_idle()
    assert pool_reads(runner, version) == 4
    assert len(reader.history) == 2
    assert reader.calls == len(runner.calls)


def test_a_failed_read_keeps_the_last_good_one() -> None:
    runner = replay("26.05")
    clock = Clock()
    reader = PoolReader(SlurmClient(runner), 10, clock)
    good = reader.snapshot()
    assert good.fresh and len(good.jobs) == 6
    runner.fail(["squeue"], stderr="slurm_load_jobs error: Unable to contact slurm controller")
    clock.now += 11
    reader.snapshot()
    reader.wait_idle()
    bad = reader.snapshot()
    assert not bad.fresh and bad.jobs == good.jobs and "Unable to contact" in bad.error


def test_first_read_failing_is_empty_not_an_error() -> None:
    runner = replay("26.05")
    runner.fail(["scontrol"], stderr="boom")
    snap = PoolReader(SlurmClient(runner), 10, Clock()).snapshot()
    assert not snap.fresh and snap.nodes == ()


def test_detail_cached_and_outcomes_read(tmp_path: Path) -> None:
    runner = replay("26.05")
    runs = _sacct_runs(
        "26.05", [{"state": "PREEMPTED", "start": 1000, "end": 1100}, {"state": "RUNNING", "start": 1200}]
    )
    runner.on(["sacct"], json.dumps({"jobs": [r.raw for r in runs]}))
    (tmp_path / "a-gpu2").mkdir()
    lines = [json.dumps(OUTCOME), json.dumps({**OUTCOME, "job_id": "6"}), "not json", '{"v": 1, "job_id": "5"']
    (tmp_path / "a-gpu2" / "outcomes.jsonl").write_text("\n".join(lines) + "\n")
    clock = Clock()
    reader = PoolReader(SlurmClient(runner), 10, clock, state_dir=str(tmp_path))
    for _ in range(20):
        got, outcomes = reader.detail(5)
    assert len(runner.commands("sacct")) == 1
    assert runner.commands("sacct")[0] == ("sacct", "--json", "--duplicates", "--jobs", "5")
    assert len(got) == 2 and [o["checkpoint_age_s"] for o in outcomes] == [5.0]
    clock.now += 6
    reader.detail(5)
    assert len(runner.commands("sacct")) == 2


def test_coordinators_from_sacctmgr() -> None:
    runner = replay("26.05")
    reader = PoolReader(SlurmClient(runner), 10, Clock())
    assert reader.coordinators() == {"projb": {"carol"}}
    assert reader.coordinators() == {"projb": {"carol"}}
    assert len(runner.commands("sacctmgr")) == 1
    runner.fail(["sacctmgr"])
    assert PoolReader(SlurmClient(runner), 10, Clock()).coordinators() == {}


# -- as the user -------------------------------------------------------------------------
class Runners:
    """``runner_for``: one recording runner per call, with the user and environment it was made for."""

    def __init__(self, answer: Result | None = None):
        self.made: list[tuple[str, dict[str, str], RecordingRunner]] = []
        self.answer = answer

    def __call__(self, user: str, env: Any) -> RecordingRunner:
        r = RecordingRunner()
        if self.answer is not None:
            answer = self.answer
            r.respond([], lambda argv, _in: Result(argv, answer.returncode, answer.stdout, answer.stderr))
        self.made.append((user, dict(env), r))
        return r


def test_user_commands_mint_a_token_per_call() -> None:
    import jwt

    runners = Runners(Result(("x",), 0, "42\n"))
    cmds = actions.UserCommands(KEY, env={"SLURM_CONF": "/etc/slurm/slurm.conf"}, runner_for=runners)
    actions.job_action(cmds, "alice", 42, "hold")
    actions.job_action(cmds, "alice", 42, "release")
    (u1, env1, r1), (_u2, env2, _r2) = runners.made
    assert u1 == "alice" and env1["SLURM_CONF"] == "/etc/slurm/slurm.conf"
    claims = jwt.decode(env1["SLURM_JWT"], KEY, algorithms=["HS256"])
    assert claims["sun"] == "alice" and claims["exp"] - claims["iat"] == actions.LIFESPAN
    assert r1.calls == [("scontrol", "hold", "42")]


def test_sbatch_runs_as_the_user_without_a_token() -> None:
    """sbatch copies its environment into the job: a token there would outlive its call."""
    runners = Runners(Result(("sbatch",), 0, "42;pool\n"))
    cmds = actions.UserCommands(KEY, env={"SLURM_JWT": "a stale one"}, runner_for=runners)
    assert actions.submit(cmds, "alice", ["--qos=guaranteed"], "#!/bin/sh\n") == 42
    [(user, env, r)] = runners.made
    assert user == "alice" and "SLURM_JWT" not in env
    assert r.calls == [("sbatch", "--parsable", "--qos=guaranteed")] and r.inputs == ["#!/bin/sh\n"]


@pytest.mark.parametrize(
    ("result", "status"),
    [
        (Result(("scancel", "2"), 1, "", "scancel: error: Kill job error on job id 2: Access/permission denied"), 403),
        (Result(("scancel", "2"), 0, "", "scancel: error: Kill job error on job id 2: Access/permission denied"), 403),
        (Result(("scontrol",), 1, "", "Job has already finished for job 3"), 409),
        (Result(("scontrol",), 1, "", "Invalid job id specified for job 99"), 400),
        (Result(("scontrol",), 1, "", "bad\x1b[2Jthing"), 400),
        (Result(("scontrol",), 127, "", "No such file"), 503),
    ],
)
def test_slurm_refusal_becomes_the_error(result: Result, status: int) -> None:
    cmds = actions.UserCommands(KEY, runner_for=Runners(result))
    with pytest.raises(actions.ActionError) as err:
        actions.job_action(cmds, "alice", 2, "cancel")
    assert err.value.status == status
    assert "\x1b" not in err.value.message and err.value.message


@pytest.mark.parametrize(
    ("action", "argv"),
    [
        ("cancel", ("scancel", "7")),
        ("hold", ("scontrol", "hold", "7")),
        ("release", ("scontrol", "release", "7")),
        ("requeue", ("scontrol", "requeue", "7")),
    ],
)
def test_job_actions_run_as_the_user(action: str, argv: tuple[str, ...]) -> None:
    runners = Runners()
    actions.job_action(actions.UserCommands(KEY, runner_for=runners), "bob", 7, action)
    assert [(u, r.calls) for u, _e, r in runners.made] == [("bob", [argv])]


def test_submit_refuses_an_option_that_is_not_one() -> None:
    runners = Runners()
    with pytest.raises(actions.ActionError):
        actions.submit(actions.UserCommands(KEY, runner_for=runners), "alice", ["script.sh"], "x")
    assert runners.made == []


def test_subprocess_runner_as_user_keeps_little_of_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    import os
    import pwd

    me = pwd.getpwuid(os.getuid()).pw_name
    monkeypatch.setenv("SECRET_OF_THE_SERVICE", "x")
    monkeypatch.setenv("SLURM_CONF", "/nonexistent/slurm.conf")
    res = SubprocessRunner(env={"SLURM_JWT": "t"}, user=me).run(["env"], check=True)
    env = dict(line.split("=", 1) for line in res.stdout.splitlines() if "=" in line)
    assert "SECRET_OF_THE_SERVICE" not in env
    assert env["SLURM_CONF"] == "/nonexistent/slurm.conf" and env["SLURM_JWT"] == "t" and env["USER"] == me


def test_a_job_sacct_does_not_have_yet_has_no_runs() -> None:
    runner = replay("22.05")
    runner.on(["sacct"], json.dumps({"jobs": [], "errors": [{"error": "Nothing found"}]}))
    assert PoolReader(SlurmClient(runner), 10, Clock()).detail(9) == ([], [])
    runner.on(["sacct"], json.dumps({"jobs": [], "errors": [{"error": "Unable to contact slurmdbd"}]}))
    with pytest.raises(RecordError):
        PoolReader(SlurmClient(runner), 10, Clock()).detail(9)


def test_a_window_without_jobs_is_an_empty_accounting() -> None:
    """22.05's sacct says "Nothing found" of a quiet day: no runs, not a failure retried on every read."""
    runner = replay("22.05")
    runner.on(["sacct"], json.dumps({"jobs": [], "errors": [{"error": "Nothing found"}]}))
    runs, start, end = PoolReader(SlurmClient(runner), 10, Clock()).accounting(24)
    assert runs == [] and end - start == 24 * 3600
    runner.on(["sacct"], json.dumps({"jobs": [], "errors": [{"error": "Unable to contact slurmdbd"}]}))
    with pytest.raises(RecordError):
        PoolReader(SlurmClient(runner), 10, Clock()).accounting(24)
