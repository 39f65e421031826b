"""Discrete-event replay of jobs on per-project GPU servers, pooled or not.

The model, kept small on purpose:

* Each project owns ``capacity[p]`` GPUs.  GPUs are interchangeable within
  the pool (node boundaries and MIG are not modelled: a job with a MIG
  ``profile`` is refused).
* An owner's job runs in the **guaranteed** tier while its project's
  guaranteed jobs fit in the project's own GPUs.  Owner queues are strict
  FIFO per project (the head blocks), as a priority queue without backfill.
* With ``Policy.pooled``, a job that does not fit its owner's share, and any
  job of the borrower backlog (``project=None``), may **borrow** idle GPUs of
  any project.  Borrowed GPUs are taken from the projects with most idle
  GPUs first.
* With ``Policy.preempt``, a guaranteed job whose own GPUs are held by
  borrowers signals just enough of them (least work at risk first) and
  starts ``grace`` seconds later, as PreemptMode=REQUEUE with GraceTime
  does (GPUs of borrowers signalled earlier count too, from the moment they
  come free).  A victim keeps its work up to the signal when it checkpoints on
  the signal, else up to its last periodic checkpoint; it goes back to the
  front of its queue and pays ``restart_overhead`` when it runs again.

Utilisation counts only *useful* GPU-seconds (work that is kept) inside
``[0, window]``; GPU time spent in grace windows, restarts and lost work
is reported apart.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass, field, replace
from typing import Iterable, Iterator

GUARANTEED, BORROWED = "guaranteed", "borrowed"


@dataclass(frozen=True)
class Job:
    """One job: ``work`` GPU-seconds per GPU when run without interruption.

    With ``profile`` it asks ``gpus`` MIG instances of that profile (``3g.20gb``), which only the
    node engine (:mod:`.nodes`) models.
    """

    id: str
    project: str | None  # None: a borrower with no servers of its own
    arrival: float
    work: float
    gpus: int
    profile: str | None = None
    #: Seconds the scheduler expects it to hold its GPUs from the start of a run (Slurm's TimeLimit; None:
    #: the policy's ``time_limit``).  Only the node engine's backfill reads it; the job still runs ``work``.
    limit: float | None = None


@dataclass(frozen=True)
class Policy:
    """How the servers are shared."""

    name: str
    pooled: bool = True
    preempt: bool = True
    grace: float = 60.0
    checkpoint_on_signal: bool = True
    checkpoint_interval: float = 600.0
    restart_overhead: float = 60.0


@dataclass
class _Run:
    job: Job
    tier: str
    alloc: dict[str, int]
    start: float  # useful work begins here (after a grace wait and a restart)
    version: int
    free_at: float | None = None  # signalled: its GPUs come free at this time


@dataclass
class _State:
    done: float = 0.0  # work kept so far (checkpointed)
    first_start: float | None = None
    runs: int = 0


@dataclass
class Result:
    """What one replay measured."""

    policy: str
    window: float
    capacity: int
    useful_gpu_seconds: float = 0.0
    owner_gpu_seconds: float = 0.0
    lost_gpu_seconds: float = 0.0
    grace_gpu_seconds: float = 0.0
    restart_gpu_seconds: float = 0.0
    preemptions: int = 0
    owner_waits: list[float] = field(default_factory=list)
    #: When each of those jobs first started (same order as ``owner_waits``).
    owner_starts: list[float] = field(default_factory=list)
    #: Whose job each of those was (same order as ``owner_waits``).
    owner_projects: list[str] = field(default_factory=list)
    owner_jobs_preempted: int = 0
    borrower_jobs_done: int = 0
    borrower_waits: list[float] = field(default_factory=list)
    #: When each borrower job finished (same order as ``borrower_waits``).
    borrower_ends: list[float] = field(default_factory=list)
    unfinished_owner_jobs: int = 0
    #: ``(time, idle GPUs)`` whenever the count changed inside the window (for :mod:`.lending`).  Counts
    #: are GPU-equivalents: whole numbers, except on MIG instances (one of ``3g.20gb`` is 3/7 of a GPU).
    idle_timeline: list[tuple[float, float]] = field(default_factory=list)
    #: ``(time, guaranteed GPUs busy, other GPUs busy)`` whenever either changed inside the window, in
    #: GPU-equivalents.  A preemptor's GPUs count as guaranteed from the moment it is placed (its victims' grace).
    tier_timeline: list[tuple[float, float, float]] = field(default_factory=list)
    #: GPU-seconds held per tier (guaranteed, borrowed) inside the window: from each run's start of work to its
    #: end or preemption, kept work and lost work alike (grace waits and restart overhead are counted apart).
    tier_gpu_seconds: dict[str, float] = field(default_factory=dict)

    @property
    def utilization(self) -> float:
        """Useful GPU-seconds over GPU-seconds of capacity, in the window."""
        return self.useful_gpu_seconds / (self.capacity * self.window) if self.capacity and self.window else 0.0

    @property
    def owner_utilization(self) -> float:
        """The share of capacity that did owners' work."""
        return self.owner_gpu_seconds / (self.capacity * self.window) if self.capacity and self.window else 0.0

    def charges(self, factors: dict[str, float]) -> dict[str, dict[str, float]]:
        """GPU-hours used and charged per tier, at ``factors`` (tier -> price; a tier without one pays 1)."""
        return {
            tier: {
                "usage_factor": factors.get(tier, 1.0),
                "gpu_hours": round(sec / 3600, 4),
                "charged_gpu_hours": round(sec * factors.get(tier, 1.0) / 3600, 4),
            }
            for tier, sec in sorted(self.tier_gpu_seconds.items())
        }

    def wait_quantile(self, q: float) -> float:
        """The ``q`` quantile of owner jobs' queue wait (nearest rank), seconds."""
        return quantile(self.owner_waits, q)


def note_held(res: Result, tier: str, gpu_seconds: float) -> None:
    """Add a run's GPU-seconds to its tier's in ``res.tier_gpu_seconds``."""
    if gpu_seconds > 0:
        res.tier_gpu_seconds[tier] = res.tier_gpu_seconds.get(tier, 0.0) + gpu_seconds


def note_done(res: Result, job: Job, first_start: float, now: float) -> None:
    """``job`` finished at ``now``: its wait (arrival to first start) goes to the owners' or borrowers' lists."""
    wait = first_start - job.arrival
    if job.project is None:
        res.borrower_jobs_done += 1
        res.borrower_waits.append(wait)
        res.borrower_ends.append(now)
    else:
        res.owner_waits.append(wait)
        res.owner_starts.append(first_start)
        res.owner_projects.append(job.project)


def note_tiers(res: Result, now: float, guaranteed: float, busy: float) -> None:
    """Append to ``res.tier_timeline`` when the split of busy GPUs changed."""
    point = (now, guaranteed, max(0, busy - guaranteed))
    line = res.tier_timeline
    if not line or line[-1][1:] != point[1:]:
        line.append(point)


def quantile(values: list[float], q: float) -> float:
    """Nearest-rank quantile; 0.0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


class _Sim:
    def __init__(self, capacity: dict[str, int], policy: Policy, window: float):
        bad = {p: c for p, c in capacity.items() if c < 0}
        if bad:
            raise ValueError(f"capacity: negative GPU counts {bad}")
        self.cap = dict(capacity)
        self.idle = dict(capacity)
        self.owner_used = {p: 0 for p in capacity}
        self.pol = policy
        self.window = window
        self.res = Result(policy.name, window, sum(capacity.values()))
        self.queues: dict[str | None, deque[Job]] = {p: deque() for p in capacity}
        self.queues[None] = deque()
        self.backlog: Iterator[Job] | None = None
        self.owner_jobs = 0
        self.owner_done = 0
        self.runs: dict[str, _Run] = {}
        self.leaving: dict[str, _Run] = {}  # signalled borrowers inside their grace window
        self.state: dict[str, _State] = {}
        self.ids: set[str] = set()
        self.events: list[tuple[float, int, str, object]] = []
        self.seq = 0
        self.now = 0.0

    # -- events --------------------------------------------------------------
    def push(self, t: float, kind: str, payload: object) -> None:
        """Queue an event; ties run in the order pushed."""
        self.seq += 1
        heapq.heappush(self.events, (t, self.seq, kind, payload))

    def _segment(self, s: float, e: float, gpus: int) -> float:
        """GPU-seconds of ``[s, e)`` that fall inside the window."""
        return max(0.0, min(e, self.window) - max(s, 0.0)) * gpus

    def _account(self, run: _Run, until: float, kept: float) -> None:
        job = run.job
        useful = self._segment(run.start, run.start + kept, job.gpus)
        self.res.useful_gpu_seconds += useful
        if job.project is not None:
            self.res.owner_gpu_seconds += useful
        self.res.lost_gpu_seconds += self._segment(run.start + kept, until, job.gpus)
        note_held(self.res, run.tier, self._segment(run.start, until, job.gpus))

    # -- starting jobs -------------------------------------------------------
    def _take_idle(self, g: int, prefer: str | None) -> dict[str, int]:
        alloc: dict[str, int] = {}
        order = sorted(self.idle, key=lambda p: (p != prefer, -self.idle[p], p))
        for p in order:
            n = min(self.idle[p], g - sum(alloc.values()))
            if n > 0:
                alloc[p] = n
                self.idle[p] -= n
        return alloc

    def _launch(self, job: Job, tier: str, alloc: dict[str, int], delay: float) -> None:
        st = self.state.setdefault(job.id, _State())
        overhead = self.pol.restart_overhead if st.done > 0 else 0.0
        begin = self.now + delay
        self.res.grace_gpu_seconds += self._segment(self.now, begin, job.gpus)
        self.res.restart_gpu_seconds += self._segment(begin, begin + overhead, job.gpus)
        if st.first_start is None:
            st.first_start = begin
        st.runs += 1
        if tier == GUARANTEED and job.project is not None:
            self.owner_used[job.project] += job.gpus
        run = _Run(job, tier, alloc, begin + overhead, st.runs)
        self.runs[job.id] = run
        self.push(run.start + job.work - st.done, "finish", (job.id, run.version))

    def _victims(self, project: str, need: int) -> list[_Run] | None:
        """Borrowers on ``project``'s GPUs to signal for ``need`` GPUs, least work at risk first."""
        cands = [r for r in self.runs.values() if r.tier == BORROWED and r.alloc.get(project)]
        cands.sort(key=lambda r: (r.job.project is not None, (self.now - r.start) * r.job.gpus, r.job.id))
        chosen, got = [], 0
        for r in cands:
            if got >= need:
                break
            chosen.append(r)
            got += r.alloc[project]
        return chosen if got >= need else None

    def _preempt(self, run: _Run) -> None:
        st = self.state[run.job.id]
        ran = max(0.0, self.now - run.start)
        total = st.done + ran
        if self.pol.checkpoint_on_signal:
            kept_total = total
        else:
            step = self.pol.checkpoint_interval
            kept_total = max(st.done, math.floor(total / step) * step) if step > 0 else st.done
        self._account(run, self.now, kept_total - st.done)
        st.done = kept_total
        self.res.preemptions += 1
        del self.runs[run.job.id]  # its finish event is void now
        if run.job.project is not None:
            self.res.owner_jobs_preempted += 1
        run.free_at = self.now + self.pol.grace
        self.leaving[run.job.id] = run  # holds its GPUs until the grace window ends
        self.push(run.free_at, "requeue", run)

    def _try_guaranteed(self, job: Job) -> bool:
        """Start an owner's job on its own GPUs: idle ones now; GPUs of borrowers already
        signalled when they come free; else signal more borrowers and start after grace."""
        p = job.project
        assert p is not None
        if self.owner_used[p] + job.gpus > self.cap[p]:
            return False
        if self.idle[p] >= job.gpus:
            self.idle[p] -= job.gpus
            self._launch(job, GUARANTEED, {p: job.gpus}, 0.0)
            return True
        if not (self.pol.pooled and self.pol.preempt):
            return False
        need = job.gpus - self.idle[p]
        leaving: list[tuple[_Run, int]] = []  # (signalled borrower, GPUs of p it will free)
        for run in sorted(self.leaving.values(), key=lambda r: (r.start, r.job.id)):
            if need <= 0:
                break
            n = min(run.alloc.get(p, 0), need)
            if n:
                leaving.append((run, n))
                need -= n
        victims = self._victims(p, need) if need > 0 else []
        if victims is None:
            return False
        self.idle[p] = 0
        ready = self.now
        for run, n in leaving:
            run.alloc[p] -= n  # passes to the owner when the borrower is gone
            assert run.free_at is not None
            ready = max(ready, run.free_at)
        for v in victims:
            n = min(v.alloc[p], need)
            v.alloc[p] -= n  # any surplus returns to idle when the victim is gone
            need -= n
            self._preempt(v)
            ready = self.now + self.pol.grace
        self._launch(job, GUARANTEED, {p: job.gpus}, ready - self.now)
        return True

    def _try_borrow(self, job: Job) -> bool:
        if not self.pol.pooled or sum(self.idle.values()) < job.gpus:
            return False
        self._launch(job, BORROWED, self._take_idle(job.gpus, job.project), 0.0)
        return True

    def schedule(self) -> None:
        """Start what can start now: owners' queues first, then the borrowers'."""
        progress = True
        while progress:
            progress = False
            for p in self.cap:
                q = self.queues[p]
                while q:
                    job = q[0]
                    if self._try_guaranteed(job) or self._try_borrow(job):
                        q.popleft()
                        progress = True
                    else:
                        break
            q = self.queues[None]
            while q and self.pol.pooled and q[0].gpus <= sum(self.idle.values()):
                if self._try_borrow(q[0]):
                    q.popleft()
                    progress = True
                else:
                    break

    # -- main loop -----------------------------------------------------------
    def run(self, jobs: Iterable[Job], backlog: Iterator[Job] | None) -> Result:
        """Replay until the window has passed and every owner job is done."""
        for job in sorted(jobs, key=lambda j: (j.arrival, j.id)):
            self._check_new_id(job)
            if job.project is not None and job.project not in self.cap:
                raise ValueError(f"job {job.id}: project {job.project!r} owns no servers")
            limit = self.cap[job.project] if job.project is not None else self.res.capacity
            if not 1 <= job.gpus <= limit:
                raise ValueError(f"job {job.id}: gpus {job.gpus} outside 1..{limit}")
            if job.work <= 0 or job.arrival < 0:
                raise ValueError(f"job {job.id}: work {job.work} and arrival {job.arrival} must be positive")
            self.push(job.arrival, "arrive", job)
            if job.project is not None:
                self.owner_jobs += 1
        self.backlog = backlog
        self.push(0.0, "tick", None)  # borrowers start after the jobs that arrive at 0
        while self.events:
            t = self.events[0][0]
            while self.events and self.events[0][0] == t:
                _, _, kind, payload = heapq.heappop(self.events)
                self.now = t
                self._handle(kind, payload)
            if self.now < self.window:
                self._refill()
            self.schedule()
            self._note_idle()
            if self.now >= self.window and self.owner_done == self.owner_jobs:
                break
        for run in self.runs.values():  # still running: count what ran inside the window
            self._account(run, self.now, max(0.0, self.now - run.start))
        self.res.unfinished_owner_jobs = self.owner_jobs - self.owner_done
        return self.res

    def _note_idle(self) -> None:
        if self.now < self.window:
            idle = sum(self.idle.values())
            line = self.res.idle_timeline
            if not line or line[-1][1] != idle:
                line.append((self.now, idle))
            note_tiers(self.res, self.now, sum(self.owner_used.values()), self.res.capacity - idle)

    def _refill(self) -> None:
        """Keep the borrower queue non-empty while the window lasts."""
        if self.backlog is None:
            return
        while len(self.queues[None]) < 64:
            try:
                job = next(self.backlog)
            except StopIteration:
                self.backlog = None
                return
            self._check_new_id(job)
            self.queues[None].append(job)

    def _check_new_id(self, job: Job) -> None:
        """Job ids key the engine's state: a second job with one would corrupt the first's.

        Also refuses MIG jobs: GPUs here are interchangeable, so instances cannot be modelled."""
        if job.id in self.ids:
            raise ValueError(f"job {job.id}: duplicate job id")
        if job.profile is not None:
            raise ValueError(
                f"job {job.id}: asks MIG instances ({job.profile!r}), which the GPU-pool engine does not model "
                "(use the node engine, slurm_pool.sim.nodes)"
            )
        self.ids.add(job.id)

    def _handle(self, kind: str, payload: object) -> None:
        if kind == "arrive":
            job = payload
            assert isinstance(job, Job)
            self.queues[job.project].append(job)
        elif kind == "finish":
            assert isinstance(payload, tuple)
            job_id, version = payload
            run = self.runs.get(job_id)
            if run is None or run.version != version:
                return
            st = self.state[job_id]
            self._account(run, self.now, run.job.work - st.done)
            st.done = run.job.work
            del self.runs[job_id]
            self._release(run)
            assert st.first_start is not None  # set when the run was launched
            note_done(self.res, run.job, st.first_start, self.now)
            if run.job.project is not None:
                self.owner_done += 1
        elif kind == "requeue":
            run = payload  # type: ignore[assignment]
            assert isinstance(run, _Run)
            del self.leaving[run.job.id]
            self._release(run)
            self.queues[run.job.project].appendleft(run.job)

    def _release(self, run: _Run) -> None:
        for p, n in run.alloc.items():
            self.idle[p] += n
        if run.tier == GUARANTEED and run.job.project is not None:
            self.owner_used[run.job.project] -= run.job.gpus


def standard_policies(grace: float, interval: float, restart: float) -> list[tuple[str, Policy]]:
    """The policies compared (label, policy), dedicated servers first: the baseline."""
    base = Policy("pool-checkpoint-on-preempt", grace=grace, checkpoint_interval=interval, restart_overhead=restart)
    return [
        ("dedicated servers", replace(base, name="dedicated", pooled=False)),
        ("pool, no preemption", replace(base, name="pool-no-preemption", preempt=False)),
        ("pool, checkpoint-on-preempt", base),
        (
            "pool, periodic checkpoints only",
            replace(base, name="pool-periodic-checkpoints", checkpoint_on_signal=False),
        ),
    ]


def simulate(
    capacity: dict[str, int], jobs: Iterable[Job], policy: Policy, window: float, backlog: Iterator[Job] | None = None
) -> Result:
    """Replay owners' ``jobs`` (and, pooled, the ``backlog`` of borrower jobs) under ``policy``.

    The replay runs until ``window`` has passed and every owner job is done;
    borrower jobs are drawn from ``backlog`` only while the window lasts.
    """
    if window <= 0:
        raise ValueError(f"window: {window} is not positive")
    return _Sim(capacity, policy, window).run(jobs, backlog)
