"""GPU-hours used and charged per tier.  Pure.

A tier is a Slurm QOS, and its ``UsageFactor`` is its price: Slurm charges a
job's usage (fair share, QOS limits, billing) at that factor times the time it
held its TRES (``UsageFactor`` in sacctmgr(1); Slurm's default is 1).  The
example pool's spot tier (``scavenger``) runs on idle GPUs at 0.3.  A GPU here
is what Slurm counts as one ``gres/gpu``: a whole GPU or one MIG instance.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from slurm_pool.adapters.records import JobRecord

#: Slurm's UsageFactor of a QOS that sets none.
DEFAULT_USAGE_FACTOR = 1.0


def held_seconds(job: JobRecord, start: float, end: float) -> float:
    """GPU-seconds ``job`` held inside ``[start, end]`` (a running job holds them until ``end``)."""
    if job.gpus <= 0 or not job.start_time or job.start_time <= 0:
        return 0.0
    stop = job.end_time if job.end_time and job.end_time > 0 else end
    return max(0.0, min(stop, end) - max(job.start_time, start)) * job.gpus


def usage_by_tier(
    jobs: Iterable[JobRecord], factors: Mapping[str, float], start: float, end: float
) -> dict[str, dict[str, Any]]:
    """Per tier (QOS): its usage factor, the runs that held GPUs, GPU-hours used and charged, in ``[start, end]``.

    ``jobs`` are accounting records, one per run (``sacct -D`` lists each run of a requeued job).
    """
    out: dict[str, dict[str, Any]] = {}
    for job in jobs:
        held = held_seconds(job, start, end)
        if held <= 0:
            continue
        tier = job.qos or "(none)"
        factor = float(factors.get(tier, DEFAULT_USAGE_FACTOR))
        row = out.setdefault(tier, {"usage_factor": factor, "runs": 0, "gpu_hours": 0.0, "charged_gpu_hours": 0.0})
        row["runs"] += 1
        row["gpu_hours"] += held / 3600
        row["charged_gpu_hours"] += held * factor / 3600
    for row in out.values():
        row["gpu_hours"] = round(row["gpu_hours"], 4)
        row["charged_gpu_hours"] = round(row["charged_gpu_hours"], 4)
    return dict(sorted(out.items()))
