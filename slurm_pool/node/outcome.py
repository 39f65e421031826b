"""What the epilog records about a finished job run (pure).

One JSON object per run, appended to ``<state_dir>/<node>/outcomes.jsonl``
(root-owned, mode 0644) for the metrics exporter::

    {"v": 1, "time": 1733140000.5, "node": "a-gpu1", "job_id": "42",
     "user": "alice", "restart_count": 2, "state": ["COMPLETING", "REQUEUED"],
     "run_start": 1733139000.0,     # when the prolog saw this run begin (null: unknown)
     "reason": "preempt",          # preempt | timeout | terminate | checkpoint | null
     "preempted": true,            # Slurm's PreemptTime for this run, or the wrapper says so
     "event_time": 1733139990.0,   # PreemptTime (else the wrapper's signal time)
     "checkpointed": true,         # a checkpoint was committed after the event
     "checkpoint_step": 1200, "checkpoint_time": 1733139991.2,
     "checkpoint_age_s": 0.0,      # event_time - checkpoint_time, >= 0: work lost
     "requeued": true, "self_requeues": null, "exit_code": 85,
     "sources": ["slurm", "wrapper", "checkpoint_dir"]}

Fields from the job's own files are untrusted: only numbers, booleans and
known words are copied.
"""

from __future__ import annotations

import math
from typing import Any

from slurm_pool.adapters.records import JobRecord
from slurm_pool.checkpoint.slurmjob import REASONS

# The wrapper's values are the user's: numbers outside these bounds are not believed.
_MAX_NUM = 2.0**53


def _num(v: Any) -> float | None:
    """A finite number from untrusted JSON, or None (a 400-digit integer overflows float())."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    if isinstance(v, int) and abs(v) > _MAX_NUM:
        return None
    f = float(v)
    return f if math.isfinite(f) and abs(f) <= _MAX_NUM else None


def _int(v: Any) -> int | None:
    return int(v) if isinstance(v, int) and not isinstance(v, bool) and abs(v) <= _MAX_NUM else None


def _preempted(info: JobRecord, run_start: float | None) -> bool:
    """Slurm preempted the run that just ended (a PreemptTime from an earlier run does not count)."""
    began = run_start if run_start is not None else info.start_time
    if info.preempt_time and (began is None or info.preempt_time >= began - 5):
        return True
    return "PREEMPTED" in info.state


def _this_run(w: dict[str, Any], info: JobRecord | None, run_start: float | None) -> bool:
    """Whether the wrapper's outcome belongs to the run that just ended."""
    if run_start is not None:  # the prolog noted when this run began on this node
        t = _num(w.get("time"))
        return t is not None and t >= run_start - 5
    if info is None:
        return True
    # a requeue may already have counted the next run by the time the epilog asks
    return w.get("restart_count") in (info.restart_count, info.restart_count - 1)


def build(
    *,
    job_id: str,
    user: str,
    node: str,
    now: float,
    info: JobRecord | None,
    wrapper: dict[str, Any] | None,
    newest: tuple[int, float] | None,
    run_start: float | None = None,
) -> dict[str, Any]:
    """The outcome record of one run (see the module docstring)."""
    w = wrapper if wrapper and str(wrapper.get("job_id")) == job_id else None
    if w and not _this_run(w, info, run_start):
        w = None  # left by an earlier run of this job
    sources = [s for s, present in (("slurm", info), ("wrapper", w), ("checkpoint_dir", newest)) if present]
    w_reason = w.get("reason") if w and w.get("reason") in REASONS else None
    preempted = bool(info is not None and _preempted(info, run_start)) or w_reason == "preempt"
    if w_reason:
        reason = w_reason
    elif preempted:
        reason = "preempt"
    elif info is not None and ("TIMEOUT" in info.state or info.reason == "TimeLimit"):
        reason = "timeout"
    else:
        reason = None
    event = None
    if preempted and info is not None and info.preempt_time:
        event = info.preempt_time
    elif w and w_reason:
        event = _num(w.get("signal_time"))
    step, ck_time = newest if newest else (None, None)
    checkpointed = bool(w and w.get("checkpointed") is True)
    if event is not None and ck_time is not None and ck_time >= event:
        checkpointed = True
    age = None
    if event is not None and ck_time is not None:
        age = round(max(0.0, event - ck_time), 3)
    restart = info.restart_count if info is not None else (_int(w.get("restart_count")) if w else None)
    return {
        "v": 1,
        "time": round(now, 3),
        "node": node,
        "job_id": job_id,
        "user": user,
        "restart_count": restart,
        "state": list(info.state) if info is not None else None,
        "run_start": run_start,
        "reason": reason,
        "preempted": preempted,
        "event_time": event,
        "checkpointed": checkpointed,
        "checkpoint_step": step,
        "checkpoint_time": ck_time,
        "checkpoint_age_s": age,
        "requeued": bool(w.get("requeued") is True) if w else None,
        "self_requeues": _int(w.get("self_requeues")) if w else None,
        "exit_code": _int(w.get("exit_code")) if w else None,
        "sources": sources,
    }
