"""A cluster's own history as simulator input (pure: callers pass parsed data).

``slurm-pool simulate --spec SPEC --sacct FILE`` replays the GPU jobs of a
``sacct --json`` export on the servers each project owns in the spec: what
dedicated servers gave, and what the pool would give, on the same jobs.

* A project's servers: the GPUs of the node groups it ``owns`` (physical
  GPUs; MIG layouts are not modelled).
* A job belongs to the project whose name is its account; accounts without
  servers (or unknown to the spec) are borrowers.
* Its work is its elapsed run time, its arrival its submission time, its
  size the ``gres/gpu`` it was allocated.  Jobs that never ran, ran for 0 s,
  or held no GPU are left out, and counted.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from slurm_pool.adapters.records import job_record
from slurm_pool.errors import InputError
from slurm_pool.sim.engine import Job
from slurm_pool.spec.hosts import expand


class HistoryError(InputError):
    """The export is not ``sacct --json`` output."""


@dataclass
class History:
    """Jobs ready for :func:`slurm_pool.sim.engine.simulate`, and what was left out."""

    capacity: dict[str, int]
    jobs: list[Job]
    start: float
    end: float
    skipped: Counter[str] = field(default_factory=Counter)

    @property
    def window(self) -> float:
        """From the first submission to the last end, seconds."""
        return max(self.end - self.start, 1.0)


def owned_gpus(spec: Any) -> dict[str, int]:
    """GPUs of the node groups each project owns (projects owning nothing are left out)."""
    groups = {g.name: g for g in spec.node_groups}
    out = {}
    for p in spec.projects:
        n = sum(
            len(expand(groups[g].hosts)) * groups[g].gpus.count for g in p.owns if groups[g].gpus is not None
        )  # owns is checked on load
        if n:
            out[p.name] = n
    return out


def jobs_from_sacct(data: Any, capacity: dict[str, int], name: str = "sacct") -> History:
    """The GPU jobs of a ``sacct --json`` document, times shifted to start at 0."""
    if not isinstance(data, dict) or not isinstance(data.get("jobs"), list):
        raise HistoryError(f"{name}: not sacct --json output (no 'jobs' list)")
    rows: list[tuple[float, str, str | None, float, int]] = []
    last_end = 0.0
    skipped: Counter[str] = Counter()
    for i, raw in enumerate(data["jobs"]):
        if not isinstance(raw, dict):
            raise HistoryError(f"{name}: jobs[{i}] is not an object")
        job = job_record(raw)
        submit, start, end, gpus = job.submit_time, job.start_time, job.end_time, job.gpus
        if not submit or not start or not end:  # unset (Slurm's 0)
            skipped["never ran or still running"] += 1
            continue
        if end <= start:
            skipped["ran 0 s"] += 1
            continue
        if gpus <= 0:
            skipped["no GPU"] += 1
            continue
        project = job.account if job.account in capacity else None
        if project is not None and gpus > capacity[project]:
            skipped["more GPUs than the project owns"] += 1
            continue
        if project is None and gpus > sum(capacity.values()):
            skipped["more GPUs than the pool has"] += 1
            continue
        rows.append((submit, f"{job.job_id or i}", project, end - start, gpus))
        last_end = max(last_end, float(end))
    if not rows:
        raise HistoryError(f"{name}: no GPU job that ran ({dict(skipped) or 'no jobs'})")
    t0 = min(r[0] for r in rows)
    jobs = [
        Job(f"{job_id}#{k}", project, submit - t0, work, gpus)
        for k, (submit, job_id, project, work, gpus) in enumerate(rows)
    ]
    return History(dict(capacity), jobs, t0, last_end, skipped)
