"""What Slurm says about a running job, and why a signal arrived.

The signal alone does not tell preemption from the time limit: with
``send_user_signal`` a preemption delivers the job's ``--signal`` (USR1), and
the time limit ends with SIGTERM too.  :func:`classify` therefore looks at the
job record (``squeue --json``, else ``scontrol --json show job`` from 23.02,
with a plain-text fallback): Slurm sets ``PreemptTime`` and pulls
``EndTime`` in to now + GraceTime when it preempts, and a time-limit warning
arrives with ``EndTime`` close to ``StartTime + TimeLimit``.  Only when the
query fails does the signal decide.
"""

from __future__ import annotations

import json
import re
import time
from typing import Any, NamedTuple

from slurm_pool.adapters.slurmjson import number, parse_duration, states

PREEMPT = "preempt"
TIMEOUT = "timeout"
TERMINATE = "terminate"
CHECKPOINT = "checkpoint"
#: Every reason a run can end for, as outcome records spell them.
REASONS = (PREEMPT, TIMEOUT, TERMINATE, CHECKPOINT)

#: Seconds of slack when deciding that the time limit is "near".
SLACK = 30.0
SELF_REQUEUE_TOKEN = "slurm-pool:self-requeues="
_TOKEN_RE = re.compile(re.escape(SELF_REQUEUE_TOKEN) + r"(\d+)")


class JobInfo(NamedTuple):
    """The fields of a job record that matter here (None: unknown)."""

    job_id: str
    state: frozenset[str]
    reason: str
    start_time: float | None
    end_time: float | None
    preempt_time: float | None
    time_limit: float | None  # seconds; None: unlimited or unknown
    restart_count: int | None
    comment: str | None
    requeue: bool | None

    @property
    def natural_end(self) -> float | None:
        if self.start_time is None or self.time_limit is None:
            return None
        return self.start_time + self.time_limit


def _time(v: Any) -> float | None:
    n = number(v)
    return float(n) if n else None


def parse_job_json(text: str, job_id: str) -> JobInfo | None:
    """One job from ``scontrol --json show job`` output."""
    try:
        data = json.loads(text)
    except ValueError:
        return None
    for j in data.get("jobs") or []:
        if str(number(j.get("job_id"))) != str(job_id):
            continue
        limit = number(j.get("time_limit"))
        comment = j.get("comment")
        if isinstance(comment, dict):
            comment = comment.get("job")
        req = j.get("requeue")
        return JobInfo(
            job_id=str(job_id),
            state=frozenset(states(j.get("job_state"))),
            reason=str(j.get("state_reason") or ""),
            start_time=_time(j.get("start_time")),
            end_time=_time(j.get("end_time")),
            preempt_time=_time(j.get("preempt_time")),
            time_limit=None if limit is None else float(limit) * 60.0,
            restart_count=number(j.get("restart_cnt")),
            comment=None if comment is None else str(comment),
            requeue=None if req is None else bool(req),
        )
    return None


def _parse_stamp(v: str) -> float | None:
    try:
        return time.mktime(time.strptime(v, "%Y-%m-%dT%H:%M:%S"))
    except (ValueError, OverflowError):
        return None


def parse_job_text(text: str, job_id: str) -> JobInfo | None:
    """One job from plain ``scontrol show job`` output (no comment: it may hold spaces)."""
    fields: dict[str, str] = {}
    for tok in text.split():
        k, sep, v = tok.partition("=")
        if sep and k not in fields:
            fields[k] = v
    if fields.get("JobId") != str(job_id):
        return None
    restarts = fields.get("Restarts", "")
    requeue = fields.get("Requeue")
    return JobInfo(
        job_id=str(job_id),
        state=frozenset(states(fields.get("JobState", ""))),
        reason=fields.get("Reason", ""),
        start_time=_parse_stamp(fields.get("StartTime", "")),
        end_time=_parse_stamp(fields.get("EndTime", "")),
        preempt_time=_parse_stamp(fields.get("PreemptTime", "")),
        time_limit=parse_duration(fields.get("TimeLimit", "")),
        restart_count=int(restarts) if restarts.isdigit() else None,
        comment=None,
        requeue=None if requeue is None else requeue == "1",
    )


def query_job(runner: Any, job_id: str, scontrol: str = "scontrol", timeout: float = 10.0) -> JobInfo | None:
    """The job's record through the Runner; None when Slurm cannot be asked."""
    import os

    squeue = os.path.join(os.path.dirname(scontrol), "squeue") if os.path.dirname(scontrol) else "squeue"
    try:
        # squeue --json has the comment, PreemptTime and EndTime on every
        # release; scontrol --json only exists from 23.02 on.
        for argv in ([squeue, "--json", "--jobs", str(job_id)], [scontrol, "--json", "show", "job", str(job_id)]):
            res = runner.run(argv, check=False, timeout=timeout)
            if res.ok:
                info = parse_job_json(res.stdout, job_id)
                if info is not None:
                    return info
        res = runner.run([scontrol, "show", "job", str(job_id)], check=False, timeout=timeout)
        return parse_job_text(res.stdout, job_id) if res.ok else None
    except OSError:
        return None


def classify(info: JobInfo | None, now: float, signal: str | None, *, warn_seconds: float,
             warn_signal: str = "USR1") -> tuple[str, str]:
    """``(reason, evidence)`` for a signal (or the wrapper's own timer: ``signal=None``).

    Reasons: ``preempt``, ``timeout``, ``terminate`` (scancel, node shutdown:
    no requeue), ``checkpoint`` (a user asked for one; keep running).
    """
    sig = (signal or "").upper().removeprefix("SIG")
    if info is not None:
        if info.preempt_time and (info.start_time is None or info.preempt_time >= info.start_time - 1):
            return PREEMPT, "Slurm set the job's PreemptTime"
        if "PREEMPTED" in info.state or "preempt" in info.reason.lower():
            return PREEMPT, f"job state {'+'.join(sorted(info.state))}, reason {info.reason}"
        natural = info.natural_end
        if info.end_time and natural and info.end_time < natural - 2 and not info.state & {"SUSPENDED"}:
            return PREEMPT, "Slurm pulled the job's EndTime in before its time limit"
        end = info.end_time or natural
        if end is not None and end - now <= warn_seconds + SLACK:
            return TIMEOUT, f"the time limit is {max(0.0, end - now):.0f}s away"
        if "TIMEOUT" in info.state or info.reason == "TimeLimit":
            return TIMEOUT, "Slurm reports the time limit"
        if sig in ("TERM", "INT", "HUP", "KILL"):
            return TERMINATE, "neither preempted nor near the time limit (scancel or shutdown)"
        if sig:
            return CHECKPOINT, f"SIG{sig} with no preemption or time limit in sight"
        return CHECKPOINT, "timer"
    if sig == "TERM":
        return PREEMPT, "job query failed; SIGTERM assumed to be a preemption"
    if sig == warn_signal.upper().removeprefix("SIG"):
        return TIMEOUT, f"job query failed; SIG{sig} assumed to be the time-limit warning"
    if sig:
        return TERMINATE, f"job query failed; SIG{sig}"
    return CHECKPOINT, "timer without job information"


def deadline(reason: str, info: JobInfo | None, now: float, kill_wait: float) -> float | None:
    """When Slurm will kill the job for this request (None: not at all)."""
    if reason == CHECKPOINT:
        return None
    if reason in (PREEMPT, TIMEOUT) and info is not None and info.end_time and info.end_time > now + 1:
        return info.end_time
    return now + kill_wait


def self_requeues(comment: str | None) -> int | None:
    """The count slurm-pool keeps in the job's comment (None: comment unknown)."""
    if comment is None:
        return None
    m = _TOKEN_RE.search(comment)
    return int(m.group(1)) if m else 0


def with_self_requeues(comment: str | None, count: int) -> str:
    """The comment with its self-requeue token set to ``count``."""
    comment = comment or ""
    token = f"{SELF_REQUEUE_TOKEN}{count}"
    if _TOKEN_RE.search(comment):
        return _TOKEN_RE.sub(token, comment, count=1)
    return f"{comment} {token}".strip()
