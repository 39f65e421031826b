"""Discrete-event replay on whole nodes, placed the way Slurm places jobs.

Beside :mod:`.engine` (GPUs interchangeable per project), this engine knows
nodes.  The model:

* Each node has a GPU count and an owner project (or none).  A project's
  *share* is the GPUs of the nodes it owns.
* A node's GPUs may be MIG-partitioned (``Node.mig``): a job with a
  ``profile`` asks that many instances of it, on one node, and runs only on
  free instances of its own profile; a whole-GPU job runs only on whole GPUs.
  Everything below holds per kind (whole GPUs, or one profile): shares,
  best fit, backfill and preemption (:mod:`.units`).  Accounting and the
  timelines are in GPU-equivalents: an instance of ``Ng.XXgb`` counts N of
  the GPU's ``Node.slices_per_gpu`` compute slices (7; 4 on an A30).
* A job of at most one node's GPUs runs on one node, best fit (the node left
  with the fewest free GPUs, lowest index on ties), as cons_tres packs.  A
  larger job takes whole free nodes, largest first, until their GPUs cover it
  (``ceil(gpus / node_gpus)`` nodes on equal nodes), and holds them whole.
* An owner job runs in the **guaranteed** tier, on its project's own nodes
  only, while the project's guaranteed jobs fit in its share; beyond the share
  (and for borrowers, ``project=None``) it runs in the **borrowed** tier on any
  node, when ``Policy.pooled``.  Queues are per project plus the borrowers',
  FIFO by arrival; requeued jobs go back to the front.
* With ``Policy.preempt`` (preempt/qos, PreemptMode=REQUEUE, GraceTime), a
  guaranteed job that does not fit on free GPUs picks victims among the
  borrowed jobs on ONE of its nodes (or on the whole nodes it needs), the node
  with least work at risk, least work at risk first; GPUs of borrowers already
  signalled count first.  It starts when the last of them is gone (GraceTime
  after the signal).  A victim keeps its work up to the signal when it
  checkpoints on the signal, else up to its last periodic checkpoint.
* With ``NodePolicy.backfill`` (:mod:`.backfill`), when a queue's head
  cannot start, it gets one reservation (the earliest time and nodes where it
  fits, from running jobs' time limits); up to ``bf_depth`` jobs behind it may
  start now if they fit on free GPUs and either end before that time or stay
  off the reserved nodes.  With ``NodePolicy.bf_interval`` backfill starts
  jobs only at its passes, every that many seconds, while queue heads start
  at once (Slurm's main scheduler runs on each submission and job end).
* With ``NodePolicy.lend`` (:mod:`.nodelend`), whole idle nodes are lent to
  the inference tier at cron ticks and run no job while lent; jobs whose tier
  preempts ``k8s-lend`` take one back before preempting any borrower.
* With ``NodePolicy.release_delay``, a finished job's GPUs stay taken that
  many seconds more (Slurm's epilog, the COMPLETING state and the pass that
  starts the next job); a preemptor may claim them, and starts once they are
  released.

Simplified against Slurm: one reservation per queue head (not one per waiting
job), no bf_window or bf_resolution, backfilled jobs do not preempt, the
queues are scheduled in a fixed order (each project's, then the borrowers'),
time limits are the jobs' exact remaining durations unless
``NodePolicy.time_limit`` is given (a job past its limit is not killed, it is
expected to end at any moment), and no CPUs, memory or topology.  MIG layouts
are fixed through a replay, a job's instances are all of one profile, and a
plain GPU request never lands on a MIG instance (Slurm may give one to an
untyped ``--gpus``); a guaranteed MIG job must fit one of its project's nodes.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass, field
from itertools import islice
from typing import Any, Iterable

from slurm_pool.mig.profiles import geometry
from slurm_pool.sim.backfill import backfill
from slurm_pool.sim.engine import BORROWED, GUARANTEED, Job, Policy, Result, note_held, note_tiers
from slurm_pool.sim.freeindex import FreeIndex
from slurm_pool.sim.nodelend import Lender, LendRule, LendStats
from slurm_pool.sim.units import check_mig, expand_units
from slurm_pool.sim.victims import plan_victims
from slurm_pool.spec.hosts import expand

ALL = "*"  # the scope of every node


@dataclass(frozen=True)
class Node:
    """One server: ``gpus`` GPUs, owned by ``owner`` (None: nobody's)."""

    name: str
    gpus: int
    owner: str | None = None
    #: The MIG layouts of its partitioned GPUs, one tuple of profile names each (``()``: MIG on, no
    #: instances); its other ``gpus - len(mig)`` GPUs are whole.
    mig: tuple[tuple[str, ...], ...] = ()
    #: Compute slices of one of its GPUs (4 on an A30): an instance of ``Ng.XXgb`` counts N of them.
    slices_per_gpu: int = 7


@dataclass(frozen=True)
class NodePolicy(Policy):
    """:class:`~.engine.Policy` plus Slurm's backfill."""

    backfill: bool = True
    #: Seconds every job asks for (None: its exact remaining duration).
    time_limit: float | None = None
    #: Jobs behind a blocked queue head that backfill looks at (as bf_max_job_test).
    bf_depth: int = 100
    #: Seconds a requeued job is held before it may start again (0: at once).  Slurm holds it for
    #: SchedulerParameters=requeue_delay + 1, by default 120 + 1 s (job_mgr.c, ``_requeue_delay``).
    requeue_delay: float = 0.0
    #: Owner jobs beyond the share borrow (False: they wait for their own nodes, as jobs routed
    #: only to the owner's partition do).
    owners_borrow: bool = True
    #: Seconds a finished job's GPUs stay taken before another job can start on them: Slurm's
    #: epilog and COMPLETING state, then the scheduling pass that starts the next job (0: at once).
    release_delay: float = 0.0
    #: Seconds between backfill passes (Slurm's bf_interval; 0: backfill at every event).  Backfill
    #: then starts jobs only at multiples of it, while queue heads start at once (the main scheduler
    #: runs on each submission and job end).
    bf_interval: float = 0.0
    #: Lend whole idle nodes to the inference tier (:mod:`.nodelend`; None: no lending).
    lend: LendRule | None = None


@dataclass(frozen=True)
class Placement:
    """One run of a job: GPUs held on ``nodes`` from ``start`` to ``end``."""

    job: str
    tier: str
    placed: float  # when the scheduler gave it the GPUs (a preemptor then waits for its victims)
    start: float  # when it holds them (``placed`` plus any grace wait)
    end: float  # finished, or gone at the end of its grace window, or when the replay stopped
    nodes: tuple[tuple[str, int], ...]  # (node, GPUs or, with ``profile``, instances held there)
    outcome: str  # "done", "preempted" or "running"
    signalled: float | None = None  # preempted: when it was signalled (its work stops there)
    profile: str | None = None  # MIG instances of this profile (None: whole GPUs)


@dataclass
class NodeResult(Result):
    """:class:`~.engine.Result` plus the schedule, run by run."""

    schedule: list[Placement] = field(default_factory=list)
    backfilled: int = 0
    #: What lending to the inference tier did (None: the policy lends nothing).
    lending: LendStats | None = None


@dataclass
class _Run:
    job: Job
    tier: str
    alloc: dict[int, int]  # unit -> GPUs (or instances) held
    placed: float
    begin: float  # holds its GPUs from here
    start: float  # useful work from here (after a restart)
    version: int
    w: float  # GPU-equivalents it counts for (its GPUs; for instances, their share of the GPU)
    free_at: float | None = None  # signalled: gone at this time
    claimed: dict[int, int] = field(default_factory=dict)  # GPUs owners took over while it leaves


@dataclass
class _State:
    done: float = 0.0
    first_start: float | None = None
    runs: int = 0


class _Sim:
    def __init__(self, nodes: list[Node], policy: NodePolicy, window: float):
        if not nodes:
            raise ValueError("nodes: none given")
        names: set[str] = set()
        for nd in nodes:
            if nd.name in names:
                raise ValueError(f"nodes: duplicate node name {nd.name!r}")
            names.add(nd.name)
            if nd.gpus < 1:
                raise ValueError(f"nodes: node {nd.name!r} has gpus {nd.gpus}, not at least 1")
            check_mig(nd)
        if policy.time_limit is not None and not policy.time_limit > 0:
            raise ValueError(f"time_limit: {policy.time_limit} is not positive")
        if policy.bf_depth < 0:
            raise ValueError(f"bf_depth: {policy.bf_depth} is negative")
        if not policy.bf_interval >= 0:
            raise ValueError(f"bf_interval: {policy.bf_interval} is negative")
        self.nodes = nodes
        # Per unit (:mod:`.units`; unit n < len(nodes) is node n's whole GPUs), and keyed (scope, kind).
        self.units = units = expand_units(nodes)
        self.size = units.size
        self.owner = [nodes[n].owner for n in units.node]
        self.free = list(self.size)
        self.total_free = sum(self.size)
        self.all_eq = self.free_eq = sum(s * c for s, c in zip(self.size, units.cost, strict=True))  # 1/den GPUs
        self.bheld = [0] * len(self.size)  # GPUs held by borrowed runs, not yet claimed by an owner
        self.on_node: list[dict[str, _Run]] = [{} for _ in self.size]
        self.ver = [0] * len(self.size)
        projects = sorted({o for o in self.owner if o is not None})
        kinds = sorted(set(units.kind), key=lambda k: (k is not None, k or ""))
        self.owned: dict[tuple[str, str | None], list[int]] = {(s, k): [] for s in [*projects, ALL] for k in kinds}
        for u, k in enumerate(units.kind):
            for s in {ALL, self.owner[u] or ALL} if self.size[u] else ():
                self.owned[(s, k)].append(u)
        self.share = {key: sum(self.size[u] for u in m) for key, m in self.owned.items()}
        self.index = {key: FreeIndex(self.size, m) for key, m in self.owned.items()}
        for u in range(len(self.size)):
            self._note(u)
        self.used = {key: 0 for key in self.owned if key[0] != ALL}  # guaranteed GPUs per project and kind
        self.used_eq = 0  # ... all of them, in 1/den GPUs
        self.borrowed_on = dict(self.used)
        self.pol = policy
        self.window = window
        self.res = NodeResult(policy.name, window, sum(nd.gpus for nd in nodes))
        self.queues: dict[str | None, deque[Job]] = {p: deque() for p in projects}
        self.queues[None] = deque()
        self.runs: dict[str, _Run] = {}
        self.leaving: dict[str, _Run] = {}
        self.state: dict[str, _State] = {}
        self.events: list[tuple[float, int, str, object]] = []
        self.seq = 0
        self.now = 0.0
        self.epoch = 0  # bumped when GPUs may come free earlier than any time limit said
        self.tcache: dict[tuple[int, int, bool], tuple[int, float]] = {}  # node's time for a need, by version
        self.resv: dict[str | None, tuple[str, int, float, dict[int, int]]] = {}
        self.owner_jobs = self.owner_done = 0
        self.lender = Lender(self, policy.lend) if policy.lend is not None else None
        #: The units of each scope's nodes (a project's partition, or all of them).
        self.scope_units = {p: frozenset(u for u, o in enumerate(self.owner) if o == p) for p in projects}
        self.scope_units[ALL] = frozenset(range(len(self.size)))
        self.bf_next: float | None = None  # the backfill pass already due (with bf_interval)

    def _note(self, n: int) -> None:
        if not self.size[n]:
            return  # a node whose GPUs are all partitioned: no whole GPUs to place on
        f, k = self.free[n], self.units.kind[n]
        self.index[(ALL, k)].note(n, f)
        o = self.owner[n]
        if o is not None:
            self.index[(o, k)].note(n, f)

    def _set_free(self, n: int, f: int) -> None:
        self.total_free += f - self.free[n]
        self.free_eq += (f - self.free[n]) * self.units.cost[n]
        self.free[n] = f
        self.ver[n] += 1
        self._note(n)

    def push(self, t: float, kind: str, payload: object) -> None:
        self.seq += 1
        heapq.heappush(self.events, (t, self.seq, kind, payload))

    # -- accounting ------------------------------------------------------------
    def _segment(self, s: float, e: float, gpus: float) -> float:
        return max(0.0, min(e, self.window) - max(s, 0.0)) * gpus

    def _account(self, run: _Run, until: float, kept: float) -> None:
        useful = self._segment(run.start, run.start + kept, run.w)
        self.res.useful_gpu_seconds += useful
        if run.job.project is not None:
            self.res.owner_gpu_seconds += useful
        self.res.lost_gpu_seconds += self._segment(run.start + kept, until, run.w)
        note_held(self.res, run.tier, self._segment(run.start, until, run.w))

    def _record(self, run: _Run, end: float, outcome: str) -> None:
        nodes = tuple((self.nodes[self.units.node[u]].name, c) for u, c in sorted(run.alloc.items()))
        sig = None if run.free_at is None else run.free_at - self.pol.grace
        self.res.schedule.append(
            Placement(run.job.id, run.tier, run.placed, run.begin, end, nodes, outcome, sig, run.job.profile)
        )

    # -- placing ---------------------------------------------------------------
    def _fit(self, job: Job, scope: str, skip: frozenset[int] = frozenset()) -> dict[int, int] | None:
        """Free GPUs (of its kind) for ``job`` in ``scope`` now: best fit on one node, or whole nodes."""
        idx = self.index[(scope, job.profile)]
        if job.gpus <= idx.top:
            n = idx.best_fit(self.free, job.gpus)
            if n is not None and n in skip:  # look past the reserved nodes
                n = idx.best_fit(self.free, job.gpus, skip)
            return None if n is None else {n: job.gpus}
        if job.profile is not None:
            return None  # MIG instances on one node only
        got = idx.whole_nodes(self.free, job.gpus, skip)
        return None if got is None else {n: self.size[n] for n in got}

    def _take(self, run: _Run, free_part: dict[int, int]) -> None:
        for n, c in free_part.items():
            self._set_free(n, self.free[n] - c)
        for n in run.alloc:
            self.on_node[n][run.job.id] = run
            if run.tier == BORROWED:
                self._borrow(n, run.alloc[n])

    def _borrow(self, n: int, c: int) -> None:
        self.bheld[n] += c
        o = self.owner[n]
        if o is not None:
            self.borrowed_on[(o, self.units.kind[n])] += c

    def _eq(self, job: Job, alloc: dict[int, int]) -> int:
        """The GPUs (or instances) ``job`` counts for, in 1/den GPUs (every unit of an alloc is of one kind)."""
        return job.gpus * self.units.cost[next(iter(alloc))]

    def _launch(self, job: Job, tier: str, alloc: dict[int, int], free_part: dict[int, int], ready: float) -> None:
        st = self.state[job.id]
        overhead = self.pol.restart_overhead if st.done > 0 else 0.0
        w = job.gpus * self.units.weight(next(iter(alloc)))
        self.res.grace_gpu_seconds += self._segment(self.now, ready, w)
        self.res.restart_gpu_seconds += self._segment(ready, ready + overhead, w)
        if st.first_start is None:
            st.first_start = ready
        st.runs += 1
        if tier == GUARANTEED:
            assert job.project is not None
            self.used[(job.project, job.profile)] += job.gpus
            self.used_eq += self._eq(job, alloc)
        run = _Run(job, tier, alloc, self.now, ready, ready + overhead, st.runs, w)
        self.runs[job.id] = run
        self._take(run, free_part)
        self.push(run.start + job.work - st.done, "finish", (job.id, run.version))

    def _try_guaranteed(self, job: Job) -> bool:
        p = job.project
        assert p is not None
        key = (p, job.profile)
        alloc = self._fit(job, p)
        if alloc is not None:
            self._launch(job, GUARANTEED, alloc, alloc, self.now)
            return True
        if self._reclaim(job, GUARANTEED, p):
            return True
        if not (self.pol.pooled and self.pol.preempt) or self.borrowed_on[key] == 0:
            return False
        plans = plan_victims(self, job, key)
        if plans is None:
            return False
        ready = self.now
        alloc, free_part = {}, {}
        for n, from_free, takes in plans:
            free_part[n] = from_free
            alloc[n] = from_free + sum(c for _, c in takes)
            for r, c in takes:
                if r.free_at is None:
                    self._preempt(r)
                assert r.free_at is not None
                r.claimed[n] = r.claimed.get(n, 0) + c
                self.ver[n] += 1  # what the victim will free there changed
                self.bheld[n] -= c
                self.borrowed_on[key] -= c
                ready = max(ready, r.free_at)
        self._launch(job, GUARANTEED, alloc, free_part, ready)
        return True

    def _preempt(self, run: _Run) -> None:
        st = self.state[run.job.id]
        total = st.done + max(0.0, self.now - run.start)
        if self.pol.checkpoint_on_signal:
            kept = total
        else:
            step = self.pol.checkpoint_interval
            kept = max(st.done, math.floor(total / step) * step) if step > 0 else st.done
        self._account(run, self.now, kept - st.done)
        st.done = kept
        # signalled while still loading its checkpoint: the rest of the restart never happens
        self.res.restart_gpu_seconds -= self._segment(self.now, run.start, run.w)
        self.res.preemptions += 1
        if run.job.project is not None:
            self.res.owner_jobs_preempted += 1
        del self.runs[run.job.id]
        run.free_at = self.now + self.pol.grace
        self.leaving[run.job.id] = run
        for n in run.alloc:
            self.ver[n] += 1  # it now ends at the end of its grace window
        self.epoch += 1
        self.push(run.free_at, "requeue", run)

    def _release(self, run: _Run) -> None:
        for n, c in run.alloc.items():
            left = c - run.claimed.get(n, 0)
            self._set_free(n, self.free[n] + left)
            if run.tier == BORROWED:
                self._borrow(n, -left)
            del self.on_node[n][run.job.id]
        if run.tier == GUARANTEED:
            assert run.job.project is not None
            self.used[(run.job.project, run.job.profile)] -= run.job.gpus
            self.used_eq -= self._eq(run.job, run.alloc)

    # -- scheduling (backfill: :mod:`.backfill`) ----------------------------------
    def _tier(self, job: Job) -> tuple[str | None, str]:
        """The tier ``job`` would run in now, and where (None: it must wait)."""
        p = job.project
        if p is not None:
            key = (p, job.profile)
            if self.used[key] + job.gpus <= self.share[key]:
                if job.profile is None or job.gpus <= self.index[key].top:  # MIG: on one of its nodes
                    return GUARANTEED, p
        if not self.pol.pooled or (p is not None and not self.pol.owners_borrow):
            return None, ALL if p is None else p
        return BORROWED, ALL

    def _try(self, job: Job, skip: frozenset[int] = frozenset()) -> bool:
        """Start ``job`` now if it can; a borrowed-tier job off the ``skip`` units."""
        tier, scope = self._tier(job)
        if tier == GUARANTEED:
            return self._try_guaranteed(job)
        if tier == BORROWED:
            alloc = self._fit(job, ALL, skip)
            if alloc is not None:
                self._launch(job, BORROWED, alloc, alloc, self.now)
                return True
            return self._reclaim(job, BORROWED, ALL)
        return False

    def _reclaim(self, job: Job, tier: str, scope: str) -> bool:
        """Start ``job`` on lent nodes whose placeholders it preempts (the lowest tier goes first)."""
        got = self.lender.reclaim(job, tier, scope) if self.lender is not None else None
        if got is None:
            return False
        alloc, ready = got
        self._launch(job, tier, alloc, alloc, ready)
        return True

    def schedule(self) -> None:
        """Start what can start now: each project's queue, then the borrowers'.

        As Slurm's main scheduler, a pass starts no borrower on the nodes of a project whose queue
        head could not start (job_scheduler.c: a job that fails for resources removes its partition's
        nodes from the rest of the pass); backfill may, around that head's reservation.
        """
        blocked: set[int] = set()
        higher: list[tuple[str | None, deque[Job]]] = []  # queues whose head waits, scheduled before
        for key, q in self.queues.items():
            skip = frozenset(blocked) if key is None else frozenset()
            while q and self._try(q[0], skip):
                q.popleft()
            if q and key is not None and self._tier(q[0])[0] != GUARANTEED:
                self._guaranteed_ahead(q)
            head_held = bool(q and skip and self._tier(q[0])[0] is not None and self._fit(q[0], ALL) is not None)
            if q and self.pol.backfill and (len(q) > 1 or head_held) and self._backfill_now():
                backfill(self, key, q, higher, from_head=head_held)
            if q and key is not None:
                blocked |= self.scope_units[self._tier(q[0])[1]]
                higher.append((key, q))

    def _backfill_now(self) -> bool:
        """With ``bf_interval``: whether this is a backfill pass, else make sure the next one comes."""
        step = self.pol.bf_interval
        if step <= 0 or self.now == self.bf_next:
            return True
        if self.bf_next is None or self.bf_next < self.now:
            self.bf_next = (math.floor(self.now / step) + 1) * step
            self.push(self.bf_next, "backfill", None)
        return False

    def _guaranteed_ahead(self, q: deque[Job]) -> None:
        """Owner jobs within the share outrank a waiting borrowed-tier head (a higher tier)."""
        started = []
        for job in islice(q, 1, 1 + self.pol.bf_depth):
            if self._tier(job)[0] == GUARANTEED:
                if not self._try_guaranteed(job):
                    break
                started.append(job)
        for job in started:
            q.remove(job)

    # -- main loop -------------------------------------------------------------
    def run(self, jobs: Iterable[Job]) -> NodeResult:
        for job in sorted(jobs, key=lambda j: (j.arrival, j.id)):
            self._check(job)
            self.push(job.arrival, "arrive", job)
        if self.lender is not None:
            for t in self.lender.ticks():
                self.push(t, "lend", None)
        while self.events:
            t = self.events[0][0]
            tick = False
            while self.events and self.events[0][0] == t:
                _, _, kind, payload = heapq.heappop(self.events)
                self.now = t
                tick |= kind == "lend"
                self._handle(kind, payload)
            self.schedule()
            if tick and self.lender is not None:  # cron runs after the scheduler's pass at that moment
                self.lender.tick()
                self.schedule()  # what it gave back may start a job
            self._note_idle()
            if self.now >= self.window and self.owner_done == self.owner_jobs:
                break
        for run in list(self.runs.values()) + list(self.leaving.values()):
            if run.job.id in self.runs:
                self._account(run, self.now, max(0.0, self.now - run.start))
            self._record(run, max(self.now, run.begin), "running" if run.free_at is None else "preempted")
        self.res.unfinished_owner_jobs = self.owner_jobs - self.owner_done
        if self.lender is not None:
            self.lender.close()
            self.res.lending = self.lender.stats
        return self.res

    def _check(self, job: Job) -> None:
        if job.id in self.state:
            raise ValueError(f"job {job.id}: duplicate job id")
        self.state[job.id] = _State()
        if job.project is not None and (job.project, None) not in self.share:
            raise ValueError(f"job {job.id}: project {job.project!r} owns no nodes")
        if job.profile is not None:
            most = self.index[(ALL, job.profile)].top if (ALL, job.profile) in self.index else 0
            if not most:
                raise ValueError(f"job {job.id}: profile {job.profile!r}: no node has MIG instances of it")
            if not 1 <= job.gpus <= most:
                raise ValueError(
                    f"job {job.id}: gpus {job.gpus} outside 1..{most} (the most {job.profile} instances on a node)"
                )
        limit = self.share[(job.project or ALL, None)]
        if job.profile is None and not 1 <= job.gpus <= limit:
            raise ValueError(f"job {job.id}: gpus {job.gpus} outside 1..{limit}")
        if not (job.work > 0 and job.arrival >= 0):
            raise ValueError(f"job {job.id}: work {job.work} and arrival {job.arrival} must be positive")
        if job.project is not None:
            self.owner_jobs += 1

    def _note_idle(self) -> None:
        if self.now < self.window:
            idle = self.units.equiv(self.free_eq)
            line = self.res.idle_timeline
            if not line or line[-1][1] != idle:
                line.append((self.now, idle))
            eq = self.units.equiv
            lent = self.lender.lent_eq() if self.lender is not None else 0
            note_tiers(self.res, self.now, eq(self.used_eq), eq(self.all_eq - self.free_eq - lent))

    def _handle(self, kind: str, payload: object) -> None:
        if kind == "arrive":
            assert isinstance(payload, Job)
            self.queues[payload.project].append(payload)
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
            if self.pol.time_limit is not None and self.now < self._limit_end(run):
                self.epoch += 1  # ended before its limit: reservations may come earlier
            self._record(run, self.now, "done")
            if self.pol.release_delay > 0:  # completing: its GPUs come free a little later
                run.free_at = self.now + self.pol.release_delay
                for n in run.alloc:
                    self.ver[n] += 1
                self.push(run.free_at, "released", run)
            else:
                self._release(run)
            assert st.first_start is not None
            wait = st.first_start - run.job.arrival
            if run.job.project is None:
                self.res.borrower_jobs_done += 1
                self.res.borrower_waits.append(wait)
                self.res.borrower_ends.append(self.now)
            else:
                self.owner_done += 1
                self.res.owner_waits.append(wait)
                self.res.owner_starts.append(st.first_start)
                self.res.owner_projects.append(run.job.project)
        elif kind == "requeue":
            assert isinstance(payload, _Run)
            del self.leaving[payload.job.id]
            self._release(payload)
            self._record(payload, self.now, "preempted")
            if self.pol.requeue_delay > 0:
                self.push(self.now + self.pol.requeue_delay, "eligible", payload.job)
            else:
                self.queues[payload.job.project].appendleft(payload.job)
        elif kind == "released":
            assert isinstance(payload, _Run)
            self._release(payload)
        elif kind in ("lend", "backfill"):  # a cron tick (run after the scheduler's pass), a backfill pass
            pass
        elif kind == "eligible":  # a requeued job's hold is over: it keeps its place at the front
            assert isinstance(payload, Job)
            self.queues[payload.project].appendleft(payload)

    def _limit_end(self, run: _Run) -> float:
        assert self.pol.time_limit is not None
        return run.begin + self.pol.time_limit


def nodes_from_spec(spec: Any) -> list[Node]:
    """The spec's GPU nodes, each owned by the project that owns its node group, with its MIG layouts."""
    owners = {g: p.name for p in spec.projects for g in p.owns}
    out = []
    for g in spec.node_groups:
        if g.gpus is not None and g.gpus.count > 0:
            mig = tuple(tuple(lay) for lay in g.gpus.mig or [] if lay is not None)
            slices = geometry(g.gpus.model).compute_slices if mig else Node.slices_per_gpu
            out += [Node(h, g.gpus.count, owners.get(g.name), mig, slices) for h in expand(g.hosts)]
    return out


def simulate_nodes(nodes: Iterable[Node], jobs: Iterable[Job], policy: Policy, window: float) -> NodeResult:
    """Replay ``jobs`` on ``nodes`` under ``policy`` until ``window`` has passed and owners are done.

    A plain :class:`~.engine.Policy` gets :class:`NodePolicy`'s defaults (backfill on).
    """
    if window <= 0:
        raise ValueError(f"window: {window} is not positive")
    if not isinstance(policy, NodePolicy):
        policy = NodePolicy(**vars(policy))
    return _Sim(list(nodes), policy, window).run(jobs)
