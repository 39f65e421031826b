"""Each job record's name in Slurm's notation (``4_2``, ``4_[1-3]``, ``5+1``), from its JSON.  Stdlib only.

A job record has a unique id (``job_id``); an array's task and a heterogeneous
job's component also have a name that squeue prints (``%i``, ``_print_job_job_id``
in ``src/squeue/print.c``).  ``squeue --json`` and ``scontrol show job --json``
say it in ``array_job_id``, ``array_task_id``, ``array_task_string`` (the tasks
not started yet, still one record), ``het_job_id`` and ``het_job_offset``;
``sacct --json`` nests them in ``array`` (``job_id``, ``task_id``, ``task``) and
``het`` (``job_id``, ``job_offset``).  22.05 writes unset numbers as ``null`` or
NO_VAL, 23.02+ as ``{"set": false}``.  A record read from text (no JSON) is
known by its unique id only.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from slurm_pool.adapters.records import JobRecord
from slurm_pool.adapters.slurmjson import number
from slurm_pool.jobid import JobId, JobIdError, names, parse_tasks


def own_name(rec: JobRecord) -> JobId | None:
    """``rec``'s name in Slurm's notation; None for a record without a usable job id."""
    try:
        return _name(rec.job_id, rec.raw)
    except JobIdError:
        return None


def _name(unique: int, raw: Mapping[str, Any]) -> JobId:
    array, het = raw.get("array"), raw.get("het")
    if isinstance(array, dict) or isinstance(het, dict):  # sacct
        a, h = array if isinstance(array, dict) else {}, het if isinstance(het, dict) else {}
        array_job, task, tasks = number(a.get("job_id")), number(a.get("task_id")), a.get("task")
        het_job, offset = number(h.get("job_id")), number(h.get("job_offset"))
    else:
        array_job, task, tasks = number(raw.get("array_job_id")), number(raw.get("array_task_id")), None
        tasks = raw.get("array_task_string")
        het_job, offset = number(raw.get("het_job_id")), number(raw.get("het_job_offset"))
    if array_job:
        ranges = parse_tasks(tasks) if isinstance(tasks, str) and tasks else None
        if ranges:
            return JobId(array_job, tasks=ranges)
        return JobId(array_job, task=task) if task is not None else JobId(array_job)
    if het_job and offset is not None:
        return JobId(het_job, component=offset)
    return JobId(unique)


def named(ref: JobId, records: Iterable[JobRecord]) -> list[JobRecord]:
    """The records ``ref`` names (as ``scancel`` reads it), in their order; records without a usable id skipped."""
    out = []
    for rec in records:
        own = own_name(rec)
        if own is not None and names(ref, rec.job_id, own):
            out.append(rec)
    return out


def name_map(records: Iterable[JobRecord]) -> dict[int, JobId]:
    """Unique id -> name, of every record with a usable id."""
    return {rec.job_id: own for rec in records if (own := own_name(rec)) is not None}
