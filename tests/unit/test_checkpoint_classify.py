"""Preempt vs timeout: parsing Slurm's job record and classifying signals."""

from __future__ import annotations

import json
import signal
import time

import pytest

from slurm_pool.adapters.records import JobRecord, job_state, parse_job_text, parse_jobs
from slurm_pool.adapters.runner import RecordingRunner
from slurm_pool.adapters.slurmjson import parse_duration
from slurm_pool.checkpoint import slurmjob
from slurm_pool.checkpoint.api import Checkpointer
from slurm_pool.checkpoint.slurmjob import CHECKPOINT, PREEMPT, TERMINATE, TIMEOUT

NOW = 1_764_700_000.0


def job_json_2205(**over):
    """``scontrol --json show job`` as Slurm 22.05 (openapi v0.0.38) prints it."""
    j = {
        "job_id": 42,
        "job_state": "RUNNING",
        "state_reason": "None",
        "start_time": int(NOW - 600),
        "end_time": int(NOW - 600 + 3600),
        "preempt_time": 0,
        "time_limit": 60,
        "restart_cnt": 1,
        "comment": "my run",
        "requeue": True,
    }
    j.update(over)
    return json.dumps({"meta": {"plugin": {"type": "openapi/v0.0.38"}}, "errors": [], "jobs": [j]})


def num(v, infinite=False):
    return {"set": True, "infinite": infinite, "number": v}


def job_json_2311(**over):
    """The later layout: lists for states, set/infinite/number objects for numbers."""
    j = {
        "job_id": 42,
        "job_state": ["RUNNING"],
        "state_reason": "None",
        "start_time": num(int(NOW - 600)),
        "end_time": num(int(NOW - 600 + 3600)),
        "preempt_time": num(0),
        "time_limit": num(60),
        "restart_cnt": 1,
        "comment": "my run",
        "requeue": True,
    }
    j.update(over)
    return json.dumps({"jobs": [j]})


def info(**over) -> JobRecord:
    base = dict(
        job_id=42,
        state=job_state("RUNNING"),
        reason="None",
        start_time=NOW - 600,
        end_time=NOW + 3000,
        preempt_time=None,
        time_limit=3600.0,
        restart_count=0,
        comment="",
        requeue=True,
    )
    base.update(over)
    return JobRecord(**base)


def test_parse_2205_json():
    (i,) = parse_jobs(job_json_2205())
    assert i.state.base == "RUNNING" and i.time_limit == 3600 and i.preempt_time is None
    assert i.restart_count == 1 and i.comment == "my run" and i.natural_end == NOW - 600 + 3600


def test_parse_later_json_with_objects():
    (i,) = parse_jobs(job_json_2311(time_limit=num(0, infinite=True)))
    assert i.state.base == "RUNNING" and i.time_limit is None and i.end_time == int(NOW + 3000)


def test_query_picks_the_job_and_rejects_garbage():
    r = RecordingRunner()
    r.on(["squeue"], job_json_2205())
    r.on(["scontrol"], "scontrol: error: ...")
    assert slurmjob.query_job(r, "42").job_id == 42
    assert slurmjob.query_job(r, "43") is None
    (i,) = parse_jobs(job_json_2205(time_limit=4294967295))
    assert i.time_limit is None


TEXT = """JobId=42 JobName=train $(touch /tmp/x)
   UserId=alice(1001) GroupId=alice(1001) MCS_label=N/A
   JobState=RUNNING Reason=None Dependency=(null)
   Requeue=1 Restarts=2 BatchFlag=1 Reboot=0 ExitCode=0:0
   RunTime=00:10:00 TimeLimit=1-00:00:00 TimeMin=N/A
   SubmitTime=2025-12-02T10:00:00 EligibleTime=2025-12-02T10:00:00
   StartTime=2025-12-02T10:00:00 EndTime=2025-12-03T10:00:00 Deadline=N/A
   PreemptEligibleTime=2025-12-02T10:00:00 PreemptTime=2025-12-02T10:10:00
   Comment=a b c
"""


def test_parse_text_fallback():
    i = parse_job_text(TEXT, "42")
    assert i.time_limit == 86400 and i.restart_count == 2 and i.requeue is True
    assert i.preempt_time is not None and i.preempt_time - i.start_time == 600
    assert i.comment is None  # never trusted from text
    assert parse_job_text(TEXT, "7") is None


@pytest.mark.parametrize(
    "v,want",
    [
        ("1-00:00:00", 86400),
        ("02:03:04", 7384),
        ("05:00", 300),
        ("UNLIMITED", None),
        ("Partition_Limit", None),
        ("", None),
    ],
)
def test_parse_duration(v, want):
    assert parse_duration(v) == want


CASES = [
    # (name, job info or None, signal, expected reason)
    ("preempt_time set, SIGTERM", info(preempt_time=NOW - 1, end_time=NOW + 19), "TERM", PREEMPT),
    (
        "preempt_time set, user signal (send_user_signal)",
        info(preempt_time=NOW - 1, end_time=NOW + 19),
        "USR1",
        PREEMPT,
    ),
    ("end time pulled in without preempt_time", info(end_time=NOW + 20), "TERM", PREEMPT),
    ("state PREEMPTED", info(state=job_state(["PREEMPTED"])), "TERM", PREEMPT),
    ("warning near the limit", info(start_time=NOW - 3540, end_time=NOW + 60), "USR1", TIMEOUT),
    ("SIGTERM at the time limit", info(start_time=NOW - 3600, end_time=NOW), "TERM", TIMEOUT),
    ("timer near the limit", info(start_time=NOW - 3500, end_time=NOW + 100), None, TIMEOUT),
    ("scancel far from the limit", info(), "TERM", TERMINATE),
    ("manual USR1 far from the limit", info(), "USR1", CHECKPOINT),
    ("timer far from the limit", info(), None, CHECKPOINT),
    ("stale preempt_time from the previous run", info(preempt_time=NOW - 7200), "TERM", TERMINATE),
    ("unlimited job, SIGTERM", info(time_limit=None, end_time=None), "TERM", TERMINATE),
    ("query failed, SIGTERM", None, "TERM", PREEMPT),
    ("query failed, warning signal", None, "USR1", TIMEOUT),
    ("query failed, SIGHUP", None, "HUP", TERMINATE),
]


@pytest.mark.parametrize("name,ji,sig,want", CASES, ids=[c[0] for c in CASES])
def test_classify(name, ji, sig, want):
    reason, evidence = slurmjob.classify(ji, NOW, sig, warn_seconds=120, warn_signal="USR1")
    assert reason == want, evidence
    assert evidence


def test_deadline():
    assert slurmjob.deadline(PREEMPT, info(end_time=NOW + 20), NOW, 30) == NOW + 20
    assert slurmjob.deadline(PREEMPT, info(end_time=NOW - 1), NOW, 30) == NOW + 30  # second SIGTERM: KillWait
    assert slurmjob.deadline(TERMINATE, info(), NOW, 30) == NOW + 30
    assert slurmjob.deadline(CHECKPOINT, info(), NOW, 30) is None
    assert slurmjob.deadline(TIMEOUT, None, NOW, 30) == NOW + 30


@pytest.mark.parametrize(
    "comment,count,new",
    [
        (None, None, "slurm-pool:self-requeues=1"),
        ("", 0, "slurm-pool:self-requeues=1"),
        ("resnet run slurm-pool:self-requeues=3", 3, "resnet run slurm-pool:self-requeues=4"),
        ("$(touch /tmp/x); rm -rf ~", 0, "$(touch /tmp/x); rm -rf ~ slurm-pool:self-requeues=1"),
    ],
)
def test_self_requeue_token(comment, count, new):
    assert slurmjob.self_requeues(comment) == count
    assert slurmjob.with_self_requeues(comment, (count or 0) + 1) == new


def test_query_job_squeue_json_then_scontrol_json_then_text_then_none():
    r = RecordingRunner()
    r.on(["squeue", "--json", "--jobs", "42"], job_json_2205(preempt_time=int(NOW)))
    assert slurmjob.query_job(r, "42").preempt_time == NOW
    assert r.calls == [("squeue", "--json", "--jobs", "42")]

    r = RecordingRunner()
    r.fail(["squeue"], stderr="Unable to contact slurm controller")
    r.on(["scontrol", "--json", "show", "job", "42"], job_json_2205(preempt_time=int(NOW)))
    assert slurmjob.query_job(r, "42").preempt_time == NOW
    assert r.calls[-1] == ("scontrol", "--json", "show", "job", "42")

    r = RecordingRunner()
    r.fail(["squeue"], stderr="no serializer")
    r.fail(["scontrol", "--json"], stderr="serializer plugin missing")
    r.on(["scontrol", "show", "job", "42"], TEXT)
    assert slurmjob.query_job(r, "42").restart_count == 2

    r = RecordingRunner()
    r.fail(["squeue"], stderr="Unable to contact slurm controller")
    r.fail(["scontrol"], stderr="Unable to contact slurm controller")
    assert slurmjob.query_job(r, "42") is None
    assert len(r.calls) == 3


def test_query_job_uses_the_squeue_beside_a_configured_scontrol():
    r = RecordingRunner()
    r.on(["/opt/slurm/bin/squeue", "--json", "--jobs", "7"], "{}")
    slurmjob.query_job(r, "7", scontrol="/opt/slurm/bin/scontrol")
    assert r.calls[0][0] == "/opt/slurm/bin/squeue"


def _ck(tmp_path, runner, **env):
    base = {"SLURM_JOB_ID": "42", "SLURM_RESTART_COUNT": "1", "SLURM_POOL_NODE_CONF": str(tmp_path / "none.conf")}
    base.update(env)
    return Checkpointer(str(tmp_path / "ck"), install=False, env=base, runner=runner, clock=lambda: NOW)


def test_checkpointer_asks_slurm_once_and_caches(tmp_path):
    r = RecordingRunner()
    r.on(["scontrol", "--json", "show", "job", "42"], job_json_2205(preempt_time=int(NOW), end_time=int(NOW + 20)))
    ck = _ck(tmp_path, r)
    assert not ck.requested and ck.reason is None and r.calls == []
    ck.request(signal.SIGUSR1)  # send_user_signal: preemption arrives as USR1
    assert ck.requested and ck.reason == PREEMPT and ck.should_stop
    assert ck.time_left == pytest.approx(20)
    _ = ck.reason, ck.time_left, ck.evidence
    assert len(r.commands("scontrol")) == 1


def test_checkpointer_falls_back_when_slurm_is_down(tmp_path):
    r = RecordingRunner()
    r.fail(["scontrol"], stderr="Unable to contact slurm controller")
    ck = _ck(tmp_path, r, SLURM_POOL_KILL_WAIT="45")
    ck.request(signal.SIGTERM)
    assert ck.reason == PREEMPT and ck.time_left == pytest.approx(45)
    ck.clear()
    ck.request(signal.SIGUSR1)
    assert ck.reason == TIMEOUT


def test_checkpointer_prefers_the_wrappers_request(tmp_path):
    from slurm_pool.checkpoint import control

    r = RecordingRunner()
    ck = _ck(tmp_path, r, SLURM_POOL_RUN="42.1")
    control.write(
        ck.directory,
        control.REQUEST,
        {"id": "r1", "run": "42.1", "reason": TIMEOUT, "evidence": "wrapper", "time": NOW, "deadline": NOW + 100},
    )
    ck.request(signal.SIGUSR1)
    assert ck.reason == TIMEOUT and ck.time_left == pytest.approx(100) and r.calls == []
    ck.save(7, b"s")
    ack = control.read(ck.directory, control.ACK)
    assert ack["request_id"] == "r1" and ack["step"] == 7


def test_checkpointer_ignores_a_stale_request_from_an_earlier_run(tmp_path):
    from slurm_pool.checkpoint import control

    r = RecordingRunner()
    r.on(["scontrol", "--json", "show", "job", "42"], job_json_2205())
    ck = _ck(tmp_path, r, SLURM_POOL_RUN="42.1")
    ck._wait_for_wrapper = 0.1
    control.write(ck.directory, control.REQUEST, {"id": "old", "run": "42.0", "reason": PREEMPT, "time": NOW})
    ck.request(signal.SIGUSR1)
    assert ck.reason == CHECKPOINT  # its own query: a manual USR1, far from the limit
    ck.save(3, b"x")
    assert not ck.requested  # a checkpoint-only request is served by the save


def test_real_signals_are_recorded_and_chained(tmp_path):
    seen = []
    old = signal.signal(signal.SIGUSR1, lambda n, f: seen.append(n))
    try:
        ck = Checkpointer(
            str(tmp_path / "ck"), env={"SLURM_POOL_NODE_CONF": str(tmp_path / "x")}, runner=RecordingRunner()
        )
        try:
            signal.raise_signal(signal.SIGUSR1)
            deadline = time.time() + 5
            while not ck.requested and time.time() < deadline:
                time.sleep(0.01)
            assert ck.requested and ck.signal == "USR1"
            assert seen == [signal.SIGUSR1]  # the previous handler still ran
        finally:
            ck.uninstall()
    finally:
        signal.signal(signal.SIGUSR1, old)
