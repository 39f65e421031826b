"""What Slurm says about a running job, and why a signal arrived.

The signal alone does not tell preemption from the time limit: with
``send_user_signal`` a preemption delivers the job's ``--signal`` (USR1), and
the time limit ends with SIGTERM too.  :func:`classify` therefore looks at the
job record (:func:`query_job`): Slurm sets ``PreemptTime`` and pulls
``EndTime`` in to now + GraceTime when it preempts, and a time-limit warning
arrives with ``EndTime`` close to ``StartTime + TimeLimit``.  Only when the
query fails does the signal decide.
"""

from __future__ import annotations

import re
from typing import Any

from slurm_pool.adapters.records import JobRecord
from slurm_pool.adapters.slurmcalls import SlurmCalls

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


def query_job(runner: Any, job_id: str, scontrol: str | None = None, timeout: float = 10.0) -> JobRecord | None:
    """The job's record through the Runner (:meth:`~slurm_pool.adapters.slurmcalls.SlurmCalls.job`;
    ``scontrol``: where it is, None: on PATH); None when Slurm cannot be asked."""
    slurm = SlurmCalls(runner) if scontrol is None else SlurmCalls(runner, scontrol)
    return slurm.job(job_id, timeout=timeout)


def classify(
    info: JobRecord | None, now: float, signal: str | None, *, warn_seconds: float, warn_signal: str = "USR1"
) -> tuple[str, str]:
    """``(reason, evidence)`` for a signal (or the wrapper's own timer: ``signal=None``).

    Reasons: ``preempt``, ``timeout``, ``terminate`` (scancel, node shutdown:
    no requeue), ``checkpoint`` (a user asked for one; keep running).
    """
    sig = (signal or "").upper().removeprefix("SIG")
    if info is not None:
        if info.preempt_time and (info.start_time is None or info.preempt_time >= info.start_time - 1):
            return PREEMPT, "Slurm set the job's PreemptTime"
        if "PREEMPTED" in info.state or "preempt" in info.reason.lower():
            return PREEMPT, f"job state {info.state}, reason {info.reason}"
        natural = info.natural_end
        if info.end_time and natural and info.end_time < natural - 2 and "SUSPENDED" not in info.state:
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


def deadline(reason: str, info: JobRecord | None, now: float, kill_wait: float) -> float | None:
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
