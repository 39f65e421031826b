"""Move a floating project's overflowed jobs back into its guarantee once it frees.

job_submit.lua routes a floating project's job at submission: into the
project's guarantee QOS while its GPUs there plus the job's fit, else into the
overflow tier, tagged with the admin comment :func:`overflow_tag`.  A burst
therefore leaves jobs waiting in the overflow tier after the guarantee frees.
:func:`plan_moves` is the level-triggered reconcile: from the spec and the
queue's job records, the pending tagged jobs that now fit the guarantee, oldest
first.  Running jobs are never moved; a job whose tag, QOS, partition or hold
someone else changed is not the pool's to move.  Pure: no Slurm is asked.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Container, Iterable, Mapping, Protocol

from slurm_pool.policy.tables import GuaranteeRule, build_tables
from slurm_pool.spec.model import PoolSpec
from slurm_pool.versions import DEFAULT_VERSION

#: The admin comment job_submit.lua gives a job it sent to the overflow tier because the guarantee was full.
TAG_PREFIX = "slurm-pool: overflow of "
#: Job states that hold, or wait for, GPUs of a guarantee (as job_submit.lua counts them).
HOLDS = ("PENDING", "RUNNING", "SUSPENDED")
#: Job state words of a job that has (or is about to have) processes on its nodes: never moved.
ON_NODE = ("RUNNING", "SUSPENDED", "CONFIGURING", "COMPLETING", "SIGNALING", "STAGE_OUT", "RESIZING")
_ARRAY_ITEM = re.compile(r"([0-9]+)(?:-([0-9]+)(?::([0-9]+))?)?")


def overflow_tag(qos: str) -> str:
    """The admin comment of a job that overflowed the guarantee ``qos``."""
    return TAG_PREFIX + qos


class QueuedJob(Protocol):
    """What the plan reads of a job record (:class:`slurm_pool.adapters.records.JobRecord` from ``squeue --json``)."""

    @property
    def job_id(self) -> int: ...
    @property
    def state(self) -> Container[str]: ...
    @property
    def reason(self) -> str: ...
    @property
    def partition(self) -> str: ...
    @property
    def qos(self) -> str: ...
    @property
    def account(self) -> str: ...
    @property
    def submit_time(self) -> float | None: ...
    @property
    def gpus(self) -> int: ...
    @property
    def gpu_types(self) -> Mapping[str, int]: ...
    @property
    def raw(self) -> Mapping[str, Any]: ...


@dataclass(frozen=True)
class Move:
    """One pending job to move from the overflow tier into its project's guarantee."""

    job_id: int
    project: str
    partition: str  # the floating partition
    qos: str  # the project's guarantee QOS
    gpus: int  # the GPUs it counts against the guarantee (all array tasks)


def admin_comment(job: QueuedJob) -> str:
    """The job's admin comment, as ``squeue --json`` gives it ("" when none)."""
    value = job.raw.get("admin_comment")
    return value if isinstance(value, str) else ""


def array_tasks(text: Any) -> int:
    """Tasks of a pending array's ``array_task_string`` ("0-9", "1,3,5-7", "0-15:4", "0-9%2"); 1 when none."""
    if not isinstance(text, str) or not text:
        return 1
    n = 0
    for item in text.split("%", 1)[0].split(","):
        m = _ARRAY_ITEM.fullmatch(item.strip())
        if m is None:
            continue
        first, last, step = int(m[1]), int(m[2] or m[1]), int(m[3] or 1)
        if last >= first and step >= 1:
            n += (last - first) // step + 1
    return max(n, 1)


def _pending(job: QueuedJob) -> bool:
    return "PENDING" in job.state and not any(w in job.state for w in ON_NODE)


def _tasks(job: QueuedJob) -> int:
    """Tasks a record stands for: every task of a pending array, else one."""
    return array_tasks(job.raw.get("array_task_string")) if _pending(job) else 1


def _counts(job: QueuedJob, rule: GuaranteeRule) -> list[int]:
    """The job's GPUs against each entry of the guarantee, as job_submit.lua counts them."""
    tasks = _tasks(job)
    typed = {t: n for t, n in job.gpu_types.items() if n}
    # A job of no known type counts against every type (it may be any).
    return [(job.gpus if not gtype or not typed else typed.get(gtype, 0)) * tasks for gtype, _ in rule.gpus]


def _takes(job: QueuedJob, rule: GuaranteeRule) -> bool:
    """May the job move into the guarantee at all?  A typed one refuses a job of no type, or of another type."""
    covered = {t for t, _ in rule.gpus}
    if "" in covered or not job.gpus:
        return True
    typed = {t: n for t, n in job.gpu_types.items() if n}
    return bool(typed) and set(typed) <= covered and sum(typed.values()) >= job.gpus


def rules(spec: PoolSpec) -> dict[str, GuaranteeRule]:
    """Each floating project's guarantee, as job_submit.lua has it: project -> rule."""
    tables = build_tables(spec, DEFAULT_VERSION)
    return {p.name: p.guarantee for p in tables.projects if p.guarantee is not None}


def tagged(job: QueuedJob, project: str, rule: GuaranteeRule) -> bool:
    """A pending job of ``project`` that the Lua sent to the overflow tier, as it left it (tag, QOS, partition)."""
    return (
        job.account == project
        and _pending(job)
        and admin_comment(job) == overflow_tag(rule.qos)
        and job.qos == rule.overflow_tier
        and job.partition == rule.overflow_partition
        and not job.reason.startswith("JobHeld")
    )


def plan_moves(spec: PoolSpec, jobs: Iterable[QueuedJob]) -> list[Move]:
    """The tagged pending jobs that now fit their project's guarantee, oldest submission first, per project."""
    jobs = list(jobs)
    moves: list[Move] = []
    for project, rule in rules(spec).items():
        used = [0] * len(rule.gpus)
        for job in jobs:
            if job.account == project and job.qos == rule.qos and any(w in job.state for w in HOLDS):
                used = [u + c for u, c in zip(used, _counts(job, rule), strict=True)]
        waiting = [j for j in jobs if tagged(j, project, rule)]
        waiting.sort(key=lambda j: (j.submit_time or 0.0, j.job_id))
        for job in waiting:
            if not _takes(job, rule):
                continue
            counts = _counts(job, rule)
            if all(u + c <= limit for u, c, (_, limit) in zip(used, counts, rule.gpus, strict=True)):
                used = [u + c for u, c in zip(used, counts, strict=True)]
                moves.append(Move(job.job_id, project, rule.partition, rule.qos, job.gpus * _tasks(job)))
    return moves


def waiting_jobs(spec: PoolSpec, jobs: Iterable[QueuedJob]) -> int:
    """How many pending jobs carry the overflow tag of their project's guarantee (moved or not)."""
    jobs = list(jobs)
    return sum(1 for project, rule in rules(spec).items() for j in jobs if tagged(j, project, rule))
