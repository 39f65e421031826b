"""The predictor on the live cluster: Slurm's queue, nodes and recent accounting, read once per forecast.

``squeue --json`` carries what the narrow reader leaves out and a prediction
needs: each job's priority, dependency and begin (eligible) time, and Slurm's
own start estimate for pending jobs (what ``squeue --start`` prints).
"""

from __future__ import annotations

import math
import time
from typing import Any, Callable, Iterable, Sequence

from slurm_pool.adapters.jobnames import name_map
from slurm_pool.adapters.records import JobRecord, NodeRecord
from slurm_pool.adapters.slurm import SlurmClient
from slurm_pool.adapters.slurmjson import number
from slurm_pool.mig.demand import is_mig_type
from slurm_pool.predict.forward import Forecast, LiveJob, predict
from slurm_pool.predict.pool import PoolModel
from slurm_pool.predict.runtimes import ENDED, Finished, Runtimes
from slurm_pool.spec.hosts import expand

#: Days of accounting a forecast reads for each user's recent runtimes.
HISTORY_DAYS = 14
#: Node state words under which a node takes no new job for the forecast's horizon.  A node that has only
#: missed slurmctld's last ping (NOT_RESPONDING without DOWN) is not among them: slurmctld holds it back
#: until its slurmd answers again and marks it DOWN only once SlurmdTimeout passes (``node_not_resp`` in
#: src/slurmctld/node_mgr.c, ``ping_nodes.c``), so it either takes jobs again within seconds (a loaded
#: slurmd answering late) or the next forecast reads it DOWN; dropping it for the whole horizon would
#: predict "never" for jobs that start once it answers.
UNAVAILABLE = frozenset({"DOWN", "DRAIN", "DRAINED", "DRAINING", "FAIL", "FAILING", "POWERED_DOWN", "FUTURE"})
_HELD = ("JobHeldUser", "JobHeldAdmin", "launch failed requeued held")


def unavailable(nodes: Iterable[NodeRecord]) -> set[str]:
    """Nodes that take no new job: down, drained or draining, failing, not responding."""
    return {n.name for n in nodes if n.state.any(UNAVAILABLE)}


def _profile(rec: JobRecord, pool: PoolModel) -> str | None:
    types = [t for t, c in rec.gpu_types.items() if c > 0 and is_mig_type(t)]
    return pool.mig.profile(types[0]) if len(types) == 1 else None


def _stamp(value: Any) -> float | None:
    n = number(value)
    return float(n) if n else None


def _expand(nodes: str, hosts: dict[str, list[str]] | None) -> list[str]:
    if hosts is None:
        return expand(nodes)
    got = hosts.get(nodes)
    if got is None:
        got = hosts[nodes] = expand(nodes)
    return list(got)


def live_job(rec: JobRecord, pool: PoolModel, now: float, hosts: dict[str, list[str]] | None = None) -> LiveJob | None:
    """The predictor's view of one queue record (None: a job that holds or waits for nothing any more);
    ``hosts``: node lists already expanded (filled here), as many jobs share a node."""
    raw = rec.raw
    profile = _profile(rec, pool)
    priority = number(raw.get("priority")) or 0
    if rec.on_node:
        names = _expand(rec.nodes, hosts) if rec.nodes else []
        if profile is not None:
            names = names[:1]
        per = rec.gpus // len(names) if names else 0
        q = pool.queues.get(rec.partition)
        leaving, leaves_at = False, None
        if "COMPLETING" in rec.state:
            leaving, leaves_at = True, now + 1.0
        elif rec.preempt_time:
            leaving, leaves_at = True, rec.preempt_time + (q.grace if q else 0.0)
        state = "leaving" if leaving else "running"
        nodes = tuple((n, per) for n in names) if per else ()
    elif rec.waiting:
        state, nodes, leaves_at = "pending", (), None
    else:
        return None
    dependency = raw.get("dependency")
    return LiveJob(
        job_id=rec.job_id,
        user=rec.user,
        account=rec.account,
        partition=rec.partition,
        state=state,
        gpus=rec.gpus,
        profile=profile,
        nodes=nodes,
        priority=priority,
        submit=rec.submit_time or now,
        start=rec.start_time if state != "pending" else None,
        limit=rec.time_limit,
        eligible=_stamp(raw.get("eligible_time")) if state == "pending" else None,
        dependency=dependency if isinstance(dependency, str) else "",
        reason=rec.reason,
        held=state == "pending" and (rec.reason in _HELD or priority == 0),
        qos=rec.qos,
        leaves_at=leaves_at,
    )


def finished(records: Iterable[JobRecord]) -> list[Finished]:
    """The runs of ``sacct`` records that say how long their work took (ended, not preempted or cancelled)."""
    out = []
    for r in records:
        if r.state.base in ENDED and r.start_time and r.end_time and r.end_time > r.start_time:
            out.append(Finished(r.user, r.partition, r.gpus, r.end_time, r.end_time - r.start_time))
    return out


def read_history(slurm: SlurmClient, days: int = HISTORY_DAYS) -> list[JobRecord]:
    """Jobs that ended in the last ``days`` days, every user's the caller may see (none: no history)."""
    if days <= 0:
        return []
    return slurm.accounting(f"now-{days}days", "now", all_users=True)


class RecentRuns:
    """The finished runs of the last ``days`` days, for forecast after forecast: the whole window is read
    once, later calls read only what ended since the last read (and :data:`OVERLAP` more), and runs that
    ended before the window are dropped: the same runs as a whole read, for a fraction of its sacct."""

    #: Seconds each later read reaches back past the last one (sacct keeps whole seconds; clocks differ).
    OVERLAP = 300.0

    def __init__(self, slurm: SlurmClient, days: int = HISTORY_DAYS, clock: Callable[[], float] = time.time):
        self.slurm, self.days, self.clock = slurm, days, clock
        self.runs: set[Finished] = set()
        self.at: float | None = None

    def __call__(self) -> list[Finished]:
        if self.days <= 0:
            return []
        now = self.clock()
        window = self.days * 86400.0
        if self.at is None or now - self.at >= window - self.OVERLAP:
            self.runs = set(finished(read_history(self.slurm, self.days)))
        else:
            minutes = math.ceil((now - self.at + self.OVERLAP) / 60)
            self.runs |= set(finished(self.slurm.accounting(f"now-{minutes}minutes", "now", all_users=True)))
        self.at = now
        self.runs = {f for f in self.runs if f.end >= now - window}
        return sorted(self.runs, key=lambda f: (f.end, f.user, f.partition, f.gpus, f.seconds))


def forecast(
    slurm: SlurmClient,
    spec: Any,
    *,
    now: float | None = None,
    history: Sequence[JobRecord] | None = None,
    history_days: int = HISTORY_DAYS,
    pool: PoolModel | None = None,
    late_range: bool = True,
    runs: Sequence[Finished] | None = None,
) -> Forecast:
    """Read Slurm once and predict every pending job's start (:func:`.forward.predict`; ``late_range``
    False: without the late run, so each prediction's range is its start; ``runs``: the finished runs,
    read already, e.g. by :class:`RecentRuns`, in place of ``history``)."""
    pool = pool or PoolModel.from_spec(spec)
    records = slurm.jobs_json()
    nodes = slurm.nodes()
    at = time.time() if now is None else now
    if runs is None:
        hist = list(history) if history is not None else read_history(slurm, history_days)
        runs = finished(hist)
    hosts: dict[str, list[str]] = {}
    jobs = [j for r in records if (j := live_job(r, pool, at, hosts)) is not None]
    fc = predict(pool, jobs, Runtimes(runs), at, unavailable(nodes), late_range=late_range)
    fc.names = name_map(records)
    for r in records:
        if r.job_id in fc.predictions:
            fc.slurm_start[r.job_id] = r.start_time if r.start_time and r.start_time > 0 else None
    return fc
