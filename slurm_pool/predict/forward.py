"""The live queue run forward in the node engine: a predicted start for every pending job (pure).

The running jobs are placed where Slurm put them, each to end when its user's
history says (:mod:`.runtimes`); the pending jobs queue in Slurm's order
(partition PriorityTier, then job priority, then submission); the engine
(:func:`slurm_pool.sim.nodes.forward_nodes`) then schedules them as this
pool's policy does: owners on their nodes, preempting borrowers after
GraceTime, floating projects within their guarantees likewise on the nodes
nobody owns (a job in the guarantees' partition is its account's), borrowers
best fit anywhere, backfill on time limits.

Two runs give the range: the *expected* run (runtimes from history) is the
prediction; the *late* run lets every job use its whole time limit, as
``squeue --start`` assumes.  A job that depends on another arrives when that
one ends (or starts, for ``after:``) in the run before; a few runs settle it.
Nodes that are down or drained take no jobs; a node lent to Kubernetes returns
when the bridge's off-peak window ends.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

from slurm_pool.jobid import JobId, names
from slurm_pool.predict.pool import PoolModel, Queue
from slurm_pool.predict.runtimes import Estimate, Runtimes, remaining
from slurm_pool.sim.engine import BORROWED, GUARANTEED, Job
from slurm_pool.sim.nodes import NodePolicy, NodeResult, Seed, forward_nodes
from slurm_pool.sim.nodestate import FLOAT
from slurm_pool.sim.units import mig_counts

#: How far ahead a forward run looks (seconds).
HORIZON = 14 * 86400.0
#: Seconds a requeued job is held before it may start again (Slurm: requeue_delay, job_mgr.c).
REQUEUE_HOLD = 121.0
#: Forward runs that settle dependencies.
DEP_PASSES = 3

_DEP_ITEM = re.compile(r"(after|afterany|afterok|afternotok|aftercorr|afterburstbuffer):(.+)")
_DEP_ID = re.compile(r"(\d+)(?:_\*|_\d+)?(?:\+\d+)?(?:\([a-z]+\))?")


@dataclass(frozen=True, slots=True)
class LiveJob:
    """A job in Slurm's queue, as the predictor needs it (times are Unix seconds)."""

    job_id: int
    user: str
    account: str
    partition: str
    state: str  # "running", "leaving" (signalled, in its GraceTime) or "pending"
    gpus: int
    profile: str | None = None
    nodes: tuple[tuple[str, int], ...] = ()  # running: (node, GPUs or instances held there)
    priority: int = 0
    submit: float = 0.0
    start: float | None = None
    limit: float | None = None  # seconds (None: none)
    eligible: float | None = None  # not before (BeginTime)
    dependency: str = ""
    reason: str = ""
    held: bool = False
    qos: str = ""
    leaves_at: float | None = None  # leaving: when its GPUs come free


@dataclass(frozen=True, slots=True)
class Prediction:
    """A pending job's predicted start (Unix seconds; None: none within the horizon) and its range."""

    job_id: int
    start: float | None
    low: float | None
    high: float | None
    runtime: Estimate
    note: str = ""  # why there is no estimate, or what the model leaves out for this job


@dataclass
class Forecast:
    """One forward run of the queue: the predictions and what they came from."""

    now: float
    predictions: dict[int, Prediction]
    jobs: dict[int, LiveJob]
    result: NodeResult | None
    #: Slurm's own estimate for each pending job (its ``start_time``, as ``squeue --start``; None: none).
    slurm_start: dict[int, float | None] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    #: What the run came from (:func:`slurm_pool.predict.explain.explain` runs alternatives on it).
    pool: PoolModel | None = None
    runtimes: Runtimes | None = None
    down: frozenset[str] = frozenset()
    #: Engine job id -> when its run in ``result`` is expected to end (from now; also past the run's stop).
    ends: dict[str, float] = field(default_factory=dict)
    #: Job id -> its name in Slurm's notation (``4_2``, ``5+1``), where it has one besides its id.
    names: dict[int, JobId] = field(default_factory=dict)

    def named(self, ref: JobId) -> list[int]:
        """The ids of the queue's jobs that ``ref`` names (``5``: every component of het job 5), in order."""
        out = []
        for j in sorted(self.jobs):
            own = self.names.get(j)  # none: known by its id alone
            if names(ref, j, own) if own is not None else (ref.plain and j == ref.job):
                out.append(j)
        return out

    def name(self, job_id: int) -> str:
        """``job_id`` in Slurm's notation (``4_2``, ``5+1``, ``4_[1-3]``), else the id."""
        own = self.names.get(job_id)
        return str(own) if own is not None and not own.plain else str(job_id)


def dependencies(text: str) -> tuple[list[tuple[str, int]], bool] | None:
    """Slurm's dependency string as (kind, job id) pairs and whether all are needed (``,``) or any (``?``);
    None when it holds something else (singleton, or what this does not read)."""
    text = text.strip()
    if not text or text == "(null)":
        return [], True
    any_of = "?" in text
    out: list[tuple[str, int]] = []
    for item in re.split(r"[,?]", text):
        m = _DEP_ITEM.fullmatch(item.strip())
        if m is None:
            return None
        for part in m.group(2).split(":"):
            d = _DEP_ID.fullmatch(part)
            if d is None:
                return None
            if "(" not in part or part.endswith("(unfulfilled)"):
                out.append((m.group(1), int(d.group(1))))
    return out, not any_of


def order_key(pool: PoolModel, job: LiveJob) -> tuple[int, int, float, int]:
    """Slurm's queue order: partition PriorityTier, job priority, submission, id."""
    q = pool.queues.get(job.partition)
    return (-(q.priority_tier if q else 0), -job.priority, job.submit, job.job_id)


class Inputs:
    """The engine's seeds and pending jobs for one forward run, and what was left out."""

    def __init__(self, pool: PoolModel, jobs: Sequence[LiveJob], runtimes: Runtimes, now: float, down: set[str]):
        self.pool, self.now = pool, now
        self.nodes = [n for n in pool.nodes if n.name not in down]
        names = {n.name for n in self.nodes}
        self.est: dict[int, Estimate] = {}
        self.skip: dict[int, str] = {}
        self.running: list[tuple[LiveJob, Queue, float | None]] = []
        self.pending: list[LiveJob] = []
        self.queue_of: dict[int, Queue] = {}
        self.notes: list[str] = []
        room: dict[tuple[str, str | None], int] = {}  # free GPUs (None) or instances per node
        # (owner, FLOAT: nobody's nodes, or None: all; kind) -> most on one node / total
        most: dict[tuple[str | None, str | None], int] = {}
        for nd in self.nodes:
            room[(nd.name, None)] = nd.gpus - len(nd.mig)
            for prof, c in mig_counts(nd).items():
                room[(nd.name, prof)] = c
            for scope in {None, FLOAT if nd.owner is None else nd.owner}:
                most[(scope, None)] = most.get((scope, None), 0) + nd.gpus - len(nd.mig)
                for prof, c in mig_counts(nd).items():
                    most[(scope, prof)] = max(most.get((scope, prof), 0), c)
        self._most = most
        for j in jobs:
            q = pool.queues.get(j.partition.split(",")[0])
            if q is None:
                if j.state == "pending":
                    self.skip[j.job_id] = f"partition {j.partition!r} is not one of the pool's"
                continue
            self.queue_of[j.job_id] = q
            if q.floating and j.profile is not None and j.gpus > 0:
                self.notes.append(f"job {j.job_id}: MIG instances in a guarantee are modelled as borrowed")
            limit = q.limit(j.limit)
            self.est[j.job_id] = runtimes.estimate(j.user, q.name, j.gpus, limit)
            if j.state == "pending":
                why = self._unmodelled(j)
                if why:
                    self.skip[j.job_id] = why
                else:
                    self.pending.append(j)
            elif j.gpus > 0 and j.nodes and all(n in names for n, _ in j.nodes):
                if all(room.get((n, j.profile), 0) >= c for n, c in j.nodes):
                    for n, c in j.nodes:
                        room[(n, j.profile)] -= c
                    self.running.append((j, q, limit))
                else:
                    self.notes.append(f"job {j.job_id}: holds GPUs the spec's nodes do not have free; left out")
        self.pending.sort(key=lambda j: order_key(pool, j))

    def _unmodelled(self, j: LiveJob) -> str:
        if j.held:
            return "held: it starts only once released (scontrol release)"
        if j.gpus <= 0:
            return "asks for no whole GPU or MIG instance (CPU-only or shards): outside the model"
        q = self.queue_of[j.job_id]
        project = project_of(self.pool, q, j)
        scope = FLOAT if project is not None and q.floating else project
        most = self._most.get((scope, j.profile), 0)
        what = f"{j.profile} instances" if j.profile else "GPUs"
        promised = dict(self.pool.guarantees).get(project or "", 0)
        if scope == FLOAT and j.gpus > promised:
            return f"asks for {j.gpus} GPUs; project {project}'s guarantee is {promised} (its QOS's GrpTRES)"
        if j.gpus > most:
            where = (
                f"partition {q.name}'s nodes that are up"
                if scope == FLOAT
                else f"project {scope}'s nodes that are up"
                if scope
                else "the pool's nodes that are up"
            )
            per = " on one node" if j.profile else ""
            return f"asks for {j.gpus} {what}; {where} have at most {most}{per}"
        return ""

    def seeds(self, late: bool) -> list[Seed]:
        """The running jobs as the engine's seeds, each ending when expected (``late``: at its time limit)."""
        return [self._seed(j, q, limit, late) for j, q, limit in self.running]

    def _seed(self, j: LiveJob, q: Queue, limit: float | None, late: bool) -> Seed:
        elapsed = max(0.0, self.now - (j.start or self.now))
        lim = None if limit is None else max(1.0, limit - elapsed)
        if j.partition == self.pool.lend_partition:
            work = lim = lend_left(self.pool, self.now)
        elif late and lim is not None:
            work = lim
        else:
            work = remaining(self.est[j.job_id].seconds, elapsed, limit)
        free_at = None
        if j.state == "leaving":
            free_at = max(1.0, (j.leaves_at or self.now) - self.now + (self.pool.kill_wait if late else 0.0))
        project = project_of(self.pool, q, j)
        job = Job(str(j.job_id), project, 0.0, work, j.gpus, j.profile, lim)
        return Seed(job, GUARANTEED if project is not None else BORROWED, j.nodes, free_at)


def project_of(pool: PoolModel, q: Queue, j: LiveJob) -> str | None:
    """The engine project of ``j`` in ``q`` (None: a borrower): its owner's, or in the floating partition its
    account's whole GPUs (a floating project's; its MIG instances borrow, as the engine's guarantees are
    whole GPUs)."""
    if q.floating and j.profile is not None:
        return None
    return pool.project(q, j.account)


def lend_left(pool: PoolModel, now: float) -> float:
    """Seconds until a lent node comes back: the rebalancer gives lent nodes back when the off-peak window
    ends (read to the minute, up to a day ahead); lending at any hour: at the horizon."""
    from datetime import datetime, timezone

    from slurm_pool.bridge.windows import off_peak

    if pool.bridge is None or not pool.bridge.off_peak:
        return HORIZON
    t0 = math.floor(now / 60) * 60
    for minute in range(1, 24 * 60 + 1):
        if not off_peak(pool.bridge, datetime.fromtimestamp(t0 + 60 * minute, timezone.utc)):
            return max(1.0, t0 + 60 * minute - now)
    return HORIZON


def _policy(pool: PoolModel, late: bool) -> NodePolicy:
    """The pool's policy; ``late``: a victim holds its GPUs for KillWait past GraceTime (it ignored SIGTERM)."""
    return NodePolicy(
        name="forecast",
        pooled=True,
        preempt=True,
        grace=pool.grace + (pool.kill_wait if late else 0.0),
        checkpoint_on_signal=True,
        restart_overhead=0.0,
        requeue_delay=REQUEUE_HOLD,
        owners_borrow=False,
        bf_interval=pool.bf_interval,
        guarantees=pool.guarantees,
    )


def _engine_jobs(inp: Inputs, work: Mapping[int, float], arrival: Mapping[int, float]) -> list[Job]:
    out = []
    for j in inp.pending:
        q = inp.queue_of[j.job_id]
        limit = q.limit(j.limit)
        project = project_of(inp.pool, q, j)
        out.append(Job(str(j.job_id), project, arrival.get(j.job_id, 0.0), work[j.job_id], j.gpus, j.profile, limit))
    return out


def starts(result: NodeResult) -> dict[str, tuple[float, float]]:
    """Each job's first run in ``result``: (start, end)."""
    out: dict[str, tuple[float, float]] = {}
    for p in result.schedule:
        if p.job not in out or p.start < out[p.job][0]:
            out[p.job] = (p.start, p.end)
    return out


def run_forward(
    inp: Inputs, work: Mapping[int, float], late: bool = False, horizon: float = HORIZON
) -> tuple[NodeResult, dict[str, tuple[float, float]]]:
    """One forward run with runtimes ``work``; jobs with dependencies arrive when those end (or start,
    for ``after``) in the run before, over up to :data:`DEP_PASSES` runs, until that moves nothing."""
    seeds = inp.seeds(late)
    running_end = {int(s.job.id): s.job.work for s in seeds}
    pending_ids = {j.job_id for j in inp.pending}
    base = {j.job_id: max(0.0, (j.eligible or 0.0) - inp.now) for j in inp.pending}
    deps = {j.job_id: d for j in inp.pending if (d := dependencies(j.dependency)) and d[0]}
    prev: dict[str, tuple[float, float]] = {}
    arrival: dict[int, float] = {}
    result: NodeResult | None = None
    for _ in range(DEP_PASSES):
        new = dict(base)
        for jid, (items, all_of) in deps.items():
            times = []
            for kind, other in items:
                if other in running_end:
                    times.append(0.0 if kind == "after" else running_end[other])
                elif other in pending_ids:
                    got = prev.get(str(other))
                    times.append(horizon if got is None else got[0] if kind == "after" else got[1])
                else:
                    times.append(0.0)  # not in the queue: ended (Slurm's reason says if it never will be met)
            new[jid] = max(new[jid], max(times) if all_of else min(times))
        if result is not None and new == arrival:
            break
        arrival = new
        result = forward_nodes(inp.nodes, seeds, _engine_jobs(inp, work, arrival), _policy(inp.pool, late), horizon)
        prev = starts(result)
        if not deps:
            break
    assert result is not None
    return result, prev


def predict(
    pool: PoolModel,
    jobs: Iterable[LiveJob],
    runtimes: Runtimes,
    now: float,
    down: Iterable[str] = (),
    horizon: float = HORIZON,
    late_range: bool = True,
) -> Forecast:
    """Every pending job's predicted start: the expected run, and the late run (time limits) for the range
    (``late_range`` False: no late run, each range is its start alone; the exporter reads only the start)."""
    listed, down = list(jobs), set(down)
    inp = Inputs(pool, listed, runtimes, now, down)
    forecast = Forecast(now, {}, {j.job_id: j for j in listed}, None, notes=inp.notes, pool=pool, runtimes=runtimes)
    forecast.down = frozenset(down)
    for jid, why in inp.skip.items():
        forecast.predictions[jid] = Prediction(jid, None, None, None, inp.est.get(jid, Estimate(0.0, "none")), why)
    # The forward run goes ahead with no pending job the model takes: what the running jobs hold is the plan
    # an alternative for a skipped job (fewer GPUs, say) is fitted into.
    expected = {j.job_id: inp.est[j.job_id].seconds for j in inp.pending}
    late = {j.job_id: _late(inp, j) for j in inp.pending} if late_range else {}
    result, got = run_forward(inp, expected, horizon=horizon)
    forecast.result = result
    seeds = {s.job.id: s.job.work for s in inp.seeds(late=False)}
    for p in result.schedule:
        if p.outcome == "running":
            forecast.ends[p.job] = p.start + (seeds[p.job] if p.job in seeds else expected[int(p.job)])
    late_got = run_forward(inp, late, late=True, horizon=horizon)[1] if late_range else got
    for j in inp.pending:
        a, b = got.get(str(j.job_id)), late_got.get(str(j.job_id))
        start = None if a is None else now + a[0]
        other = None if b is None else now + b[0]
        both = [t for t in (start, other) if t is not None]
        note = "" if start is not None else f"does not start within {horizon / 86400:g} days in the model"
        forecast.predictions[j.job_id] = Prediction(
            j.job_id, start, min(both) if both else None, max(both) if both else None, inp.est[j.job_id], note
        )
    return forecast


def _late(inp: Inputs, j: LiveJob) -> float:
    """A pending job's runtime in the late run: its whole time limit (else its expected runtime)."""
    q = inp.queue_of[j.job_id]
    limit = q.limit(j.limit)
    return limit if limit is not None else inp.est[j.job_id].seconds
