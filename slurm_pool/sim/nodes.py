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
* With ``NodePolicy.guarantees``, a *floating* project owns no node: it is
  promised that many whole GPUs anywhere on the nodes nobody owns (the
  floating partition; every node when nobody owns one), as its own QOS with
  ``GrpTRES=gres/gpu=N``.  Its jobs run in the guaranteed tier there, best
  fit, while its guaranteed jobs fit the guarantee (and the job fits those
  nodes' GPUs); beyond it they borrow as owners beyond their share do.
  Guarantees may sum above those nodes' GPUs (overcommit): a guaranteed job
  never preempts another, so the later one waits.  Its MIG jobs always borrow
  (a guarantee covers whole GPUs only), and GPU types are not told apart.
* With ``Policy.preempt`` (preempt/qos, PreemptMode=REQUEUE, GraceTime), a
  guaranteed job that does not fit on free GPUs picks victims among the
  borrowed jobs on ONE of its nodes (or on the whole nodes it needs; a
  floating project's: any node of the floating partition), the node
  with least work at risk, least work at risk first; GPUs of borrowers already
  signalled count first (:mod:`.victims`).  It starts when the last of them is gone (GraceTime
  after the signal).  A victim keeps its work up to the signal when it
  checkpoints on the signal, else up to its last periodic checkpoint.
  With ``NodePolicy.signal_end`` other than ``"hold"``, a victim whose work
  would end within its grace frees its GPUs at that end (requeued, or done).
* With ``NodePolicy.borrow_tiers``, the borrowers' queue is ordered by
  priority tier (an overflow partition ahead of scavenger), then FIFO.
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

:func:`forward_nodes` runs the same engine forward from a live state: the
running jobs placed at time 0 (:mod:`.forward`), the pending ones queued in
the caller's (priority) order, until each has started or a horizon passes.

The state every part shares (nodes as units, free GPUs, runs, queues,
reservations, and the moves fit, launch and release) is
:class:`.nodestate.EngineState`; this module adds the event loop, the main
scheduler and preemption, and :mod:`.backfill`, :mod:`.victims` and
:mod:`.nodelend` are functions of that state.

Simplified against Slurm: one reservation per queue head (not one per waiting
job), no bf_window or bf_resolution, backfilled jobs do not preempt, the
queues are scheduled in a fixed order (each project's, then the borrowers'),
time limits are the jobs' exact remaining durations unless a job's own
``Job.limit`` or ``NodePolicy.time_limit`` is given (a job past its limit is
not killed, it is expected to end at any moment), and no CPUs, memory or topology.  MIG layouts
are fixed through a replay, a job's instances are all of one profile, and a
plain GPU request never lands on a MIG instance (Slurm may give one to an
untyped ``--gpus``); a guaranteed MIG job must fit one of its project's nodes.
The floating partition is every node nobody owns (a spec's may cover fewer),
and a floating project's job is routed by its guaranteed GPUs when it is
tried, not by pending and running ones when it is submitted (job_submit.lua).
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import replace
from itertools import islice
from typing import Any, Callable, Iterable, Sequence

from slurm_pool.mig.profiles import geometry
from slurm_pool.sim.backfill import backfill
from slurm_pool.sim.engine import BORROWED, GUARANTEED, Job, Policy, note_done, note_tiers
from slurm_pool.sim.forward import Seed, place_seeds
from slurm_pool.sim.nodelend import Lender
from slurm_pool.sim.nodestate import ALL, EngineState, JobState, Node, NodePolicy, NodeResult, Placement, Run, drop
from slurm_pool.sim.victims import plan_victims
from slurm_pool.spec.guarantees import floating_projects
from slurm_pool.spec.hosts import expand

__all__ = [
    "ALL",
    "Node",
    "NodePolicy",
    "NodeResult",
    "Placement",
    "Seed",
    "forward_nodes",
    "guarantees_from_spec",
    "nodes_from_spec",
    "simulate_nodes",
]


class _Sim(EngineState):
    """The event loop and the main scheduler, on the shared state (:mod:`.nodestate`)."""

    def __init__(self, nodes: list[Node], policy: NodePolicy, window: float):
        super().__init__(nodes, policy, window)
        self.lender = Lender(self, policy.lend) if policy.lend is not None else None
        self.tiers = dict(policy.borrow_tiers)  # borrowed-tier job id -> priority tier
        self.union: dict[tuple[str, ...], frozenset[int]] = {}

    def _try_guaranteed(self, job: Job) -> bool:
        p = job.project
        assert p is not None
        key = (p, job.profile)
        alloc = self.fit(job, p)
        if alloc is not None:
            self.launch(job, GUARANTEED, alloc, alloc, self.now)
            return True
        if self._reclaim(job, GUARANTEED, p):
            return True
        home = self.home(key)
        if not (self.pol.pooled and self.pol.preempt) or self.borrowed_on[home] == 0:
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
                self.bump(n)  # what the victim will free there changed
                self.borrow(n, -c)  # claimed: no longer borrowed GPUs to take
                ready = max(ready, r.free_at)
        self.launch(job, GUARANTEED, alloc, free_part, ready)
        return True

    def _preempt(self, run: Run) -> None:
        st = self.state[run.job.id]
        natural = run.start + run.job.work - st.done  # when its work would end
        if self.pol.signal_end != "hold" and natural <= self.now + self.pol.grace:
            run.signalled = self.now
            if self.pol.signal_end == "complete":  # it ends within its grace: done there, not preempted
                del self.runs[run.job.id]
                run.free_at = max(self.now, natural)
                self.leaving[run.job.id] = run
                for n in run.alloc:
                    self.bump(n)
                self.epoch += 1
                self.push(run.free_at, "ended", run)
                return
        total = st.done + max(0.0, self.now - run.start)
        if self.pol.checkpoint_on_signal:
            kept = total
        else:
            step = self.pol.checkpoint_interval
            kept = max(st.done, math.floor(total / step) * step) if step > 0 else st.done
        self.account(run, self.now, kept - st.done)
        st.done = kept
        # signalled while still loading its checkpoint: the rest of the restart never happens
        self.res.restart_gpu_seconds -= self.segment(self.now, run.start, run.w)
        self.res.preemptions += 1
        if run.job.project is not None:
            self.res.owner_jobs_preempted += 1
        del self.runs[run.job.id]
        run.free_at = self.now + self.pol.grace if run.signalled is None else max(self.now, natural)
        self.leaving[run.job.id] = run
        for n in run.alloc:
            self.bump(n)  # it now ends at the end of its grace window
        self.epoch += 1
        self.push(run.free_at, "requeue", run)

    def _try(self, job: Job, skip: frozenset[int] = frozenset()) -> bool:
        """Start ``job`` now if it can; a borrowed-tier job off the ``skip`` units."""
        tier, scope = self.tier(job)
        if tier == GUARANTEED:
            return self._try_guaranteed(job)
        if tier == BORROWED:
            alloc = self.fit(job, ALL, skip)
            if alloc is not None:
                self.launch(job, BORROWED, alloc, alloc, self.now)
                return True
            return self._reclaim(job, BORROWED, ALL)
        return False

    def _reclaim(self, job: Job, tier: str, scope: str) -> bool:
        """Start ``job`` on lent nodes whose placeholders it preempts (the lowest tier goes first)."""
        got = self.lender.reclaim(job, tier, scope) if self.lender is not None else None
        if got is None:
            return False
        alloc, ready = got
        self.launch(job, tier, alloc, alloc, ready)
        return True

    def schedule(self) -> None:
        """Start what can start now: each project's queue, then the borrowers'.

        As Slurm's main scheduler, a pass starts no borrower on the nodes of a project whose queue
        head could not start (job_scheduler.c: a job that fails for resources removes its partition's
        nodes from the rest of the pass); backfill may, around that head's reservation.
        """
        blocked: list[str] = []  # the scopes of the waiting heads so far (their units: :meth:`blocked_units`)
        higher: list[tuple[str | None, deque[Job]]] = []  # queues whose head waits, scheduled before
        empty: frozenset[int] = frozenset()
        for key, q in self.queues.items():
            if not q:
                continue
            skip = self._blocked_units(tuple(blocked)) if key is None else empty
            while q and self._try(q[0], skip):
                q.popleft()
                self.qgen[key] += 1
            if not q:
                continue
            tier, scope = self.tier(q[0])
            if key is not None and tier != GUARANTEED:
                self._guaranteed_ahead(key, q)  # starts guaranteed jobs behind it: its tier stays
            head_held = bool(skip and tier is not None and self.fits(q[0], ALL))
            if self.pol.backfill and (len(q) > 1 or head_held) and self._backfill_now():
                backfill(self, key, q, higher, from_head=head_held)
                scope = self.tier(q[0])[1] if q else scope
            if q and key is not None:
                blocked.append(scope)
                higher.append((key, q))

    def _blocked_units(self, scopes: tuple[str, ...]) -> frozenset[int]:
        """The units of ``scopes`` together (kept per combination: passes see few of them)."""
        got = self.union.get(scopes)
        if got is None:
            got = self.union[scopes] = frozenset().union(*(self.scope_units[s] for s in scopes))
        return got

    def _backfill_now(self) -> bool:
        """With ``bf_interval``: whether this is a backfill pass, else make sure the next one comes."""
        step = self.pol.bf_interval
        if step <= 0 or self.now == self.bf_next:
            return True
        if self.bf_next is None or self.bf_next < self.now:
            self.bf_next = (math.floor(self.now / step) + 1) * step
            self.push(self.bf_next, "backfill", None)
        return False

    def _guaranteed_ahead(self, p: str, q: deque[Job]) -> None:
        """Owner jobs within the share outrank a waiting borrowed-tier head (a higher tier)."""
        started = []
        used, share, span, index = self.used, self.share, self.span, self.index
        for job in islice(q, 1, 1 + self.pol.bf_depth):
            # self.tier(job)[0] == GUARANTEED, inlined: every job of the queue is of project ``p``
            k, g = (p, job.profile), job.gpus
            if used[k] + g <= share[k] and g <= (span[k] if job.profile is None else index[k].top):
                if not self._try_guaranteed(job):
                    break
                started.append(job)
        drop(q, started)
        self.qgen[p] += len(started)

    # -- main loop -------------------------------------------------------------
    def run(self, jobs: Iterable[Job]) -> NodeResult:
        """Replay ``jobs`` until the window has passed and every owner job is done."""
        arrivals = sorted(jobs, key=lambda j: (j.arrival, j.id))
        for job in arrivals:
            self._check(job)
        return self.loop(arrivals, lambda: self.now >= self.window and self.owner_done == self.owner_jobs)

    def forward(self, running: Iterable[Seed], pending: Sequence[Job], horizon: float) -> NodeResult:
        """Seed ``running`` at time 0, queue ``pending`` in the order given, and run until all have started."""
        seeds = list(running)
        for seed in seeds:
            self._check(seed.job, seeded=True)
        arrivals = sorted((replace(j, arrival=0.0) if j.arrival < 0 else j for j in pending), key=lambda j: j.arrival)
        for job in arrivals:
            self._check(job)
        place_seeds(self, seeds)
        # started: a pending job once it ran once; a seed already signalled once it runs again
        track = [(self.state[j.id], 1) for j in pending]
        track += [(self.state[s.job.id], 2) for s in seeds if s.free_at is not None]
        self.push(horizon, "horizon", None)  # a last pass there, and nothing after it
        at = 0

        def started() -> bool:
            nonlocal at
            while at < len(track) and track[at][0].runs >= track[at][1]:
                at += 1
            return at == len(track) or self.now >= horizon

        return self.loop(arrivals, started)

    def loop(self, arrivals: list[Job], stop: Callable[[], bool]) -> NodeResult:
        """The event loop: ``arrivals`` in order (by arrival time), until no event is left or ``stop()``."""
        # Arrivals come first among events at the same time (as if pushed first), read from this list in
        # order rather than held in the heap.
        self.seq += len(arrivals)
        if self.lender is not None:
            for t in self.lender.ticks():
                self.push(t, "lend", None)
        nxt, last = 0, len(arrivals)
        events = self.events
        stopped = stop()  # a forward run may have nothing to wait for
        while not stopped and (nxt < last or events):
            t = (
                arrivals[nxt].arrival
                if nxt < last and (not events or arrivals[nxt].arrival <= events[0][0])
                else events[0][0]
            )
            self.now = t
            tick = False
            while nxt < last and arrivals[nxt].arrival == t:
                self._handle("arrive", arrivals[nxt])
                nxt += 1
            while events and events[0][0] == t:
                _, _, kind, payload = heapq.heappop(events)
                tick |= kind == "lend"
                self._handle(kind, payload)
            self.schedule()
            if tick and self.lender is not None:  # cron runs after the scheduler's pass at that moment
                self.lender.tick()
                self.schedule()  # what it gave back may start a job
            self._note_idle()
            stopped = stop()
        for run in list(self.runs.values()) + list(self.leaving.values()):
            if run.job.id in self.runs:
                self.account(run, self.now, max(0.0, self.now - run.start))
            self.record(run, max(self.now, run.begin), "running" if run.free_at is None else "preempted")
        self.res.unfinished_owner_jobs = self.owner_jobs - self.owner_done
        if self.lender is not None:
            self.lender.close()
            self.res.lending = self.lender.stats
        return self.res

    def _check(self, job: Job, seeded: bool = False) -> None:
        """ValueError naming ``job`` and the field when it cannot run here (``seeded``: running at the start,
        its arrival ignored and a limit of 0 allowed: already past it)."""
        if job.id in self.state:
            raise ValueError(f"job {job.id}: duplicate job id")
        self.state[job.id] = JobState()
        if job.project is not None and (job.project, None) not in self.share:
            raise ValueError(f"job {job.id}: project {job.project!r} owns no nodes and has no guarantee")
        if job.profile is not None:
            most = self.index[(ALL, job.profile)].top if (ALL, job.profile) in self.index else 0
            if not most:
                raise ValueError(f"job {job.id}: profile {job.profile!r}: no node has MIG instances of it")
            if not 1 <= job.gpus <= most:
                raise ValueError(
                    f"job {job.id}: gpus {job.gpus} outside 1..{most} (the most {job.profile} instances on a node)"
                )
        # an owner's job within its share; a floating project's within the pool (beyond its guarantee it borrows)
        limit = self.share[(ALL if job.project is None or job.project in self.floating else job.project, None)]
        if job.profile is None and not 1 <= job.gpus <= limit:
            raise ValueError(f"job {job.id}: gpus {job.gpus} outside 1..{limit}")
        if not (job.work > 0 and (seeded or job.arrival >= 0)):
            raise ValueError(f"job {job.id}: work {job.work} and arrival {job.arrival} must be positive")
        if job.limit is not None:
            if not (math.isfinite(job.limit) and (job.limit >= 0 if seeded else job.limit > 0)):
                raise ValueError(f"job {job.id}: limit {job.limit} is not positive")
            self.limited = True
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
            q = self.queues[payload.project]
            at = len(q)
            if payload.project is None and self.tiers:  # behind the borrowers of its tier and higher
                mine = self.tiers.get(payload.id, 0)
                at = next((i for i, o in enumerate(q) if self.tiers.get(o.id, 0) < mine), at)
            if at <= self.pol.bf_depth:  # it lands inside backfill's window
                self.qgen[payload.project] += 1
            q.insert(at, payload)
        elif kind == "finish":
            assert isinstance(payload, tuple)
            job_id, version = payload
            run = self.runs.get(job_id)
            if run is None or run.version != version:
                return
            del self.runs[job_id]
            lim = self.limit_of(run.job) if self.limited else None
            if lim is not None and self.now < run.begin + lim:
                self.epoch += 1  # ended before its limit: reservations may come earlier
            self._done(run)
            if self.pol.release_delay > 0:  # completing: its GPUs come free a little later
                run.free_at = self.now + self.pol.release_delay
                for n in run.alloc:
                    self.bump(n)
                self.push(run.free_at, "released", run)
            else:
                self.release(run)
        elif kind == "ended":  # signalled, it ended within its grace (``signal_end="complete"``)
            assert isinstance(payload, Run)
            del self.leaving[payload.job.id]
            self._done(payload)
            self.release(payload)
        elif kind == "requeue":
            assert isinstance(payload, Run)
            del self.leaving[payload.job.id]
            self.release(payload)
            self.record(payload, self.now, "preempted")
            if self.pol.requeue_delay > 0:
                self.push(self.now + self.pol.requeue_delay, "eligible", payload.job)
            else:
                self._requeue(payload.job)
        elif kind == "released":
            assert isinstance(payload, Run)
            self.release(payload)
        elif kind in ("lend", "backfill", "horizon"):  # a cron tick (run after the scheduler's pass), a pass
            pass
        elif kind == "eligible":  # a requeued job's hold is over: it keeps its place at the front
            assert isinstance(payload, Job)
            self._requeue(payload)

    def _done(self, run: Run) -> None:
        """``run`` finished its work now: count it and record it."""
        st = self.state[run.job.id]
        self.account(run, self.now, run.job.work - st.done)
        st.done = run.job.work
        self.record(run, self.now, "done")
        assert st.first_start is not None
        note_done(self.res, run.job, st.first_start, self.now)
        if run.job.project is not None:
            self.owner_done += 1

    def _requeue(self, job: Job) -> None:
        """A requeued ``job`` goes back to the front of its queue (of its priority tier's jobs)."""
        q = self.queues[job.project]
        if job.project is None and self.tiers:
            at = next((i for i, o in enumerate(q) if self.tiers.get(o.id, 0) <= self.tiers.get(job.id, 0)), len(q))
            q.insert(at, job)
        else:
            q.appendleft(job)
        self.qgen[job.project] += 1


def nodes_from_spec(spec: Any) -> list[Node]:
    """The spec's GPU nodes, each owned by the project that owns its node group (none by a floating
    project: :func:`guarantees_from_spec`), with its MIG layouts."""
    owners = {g: p.name for p in spec.projects if not p.guarantee for g in p.owns}
    out = []
    for g in spec.node_groups:
        if g.gpus is not None and g.gpus.count > 0:
            mig = tuple(tuple(lay) for lay in g.gpus.mig or [] if lay is not None)
            slices = geometry(g.gpus.model).compute_slices if mig else Node.slices_per_gpu
            out += [Node(h, g.gpus.count, owners.get(g.name), mig, slices) for h in expand(g.hosts)]
    return out


def guarantees_from_spec(spec: Any) -> tuple[tuple[str, int], ...]:
    """The spec's floating projects and their guarantees, for :attr:`NodePolicy.guarantees`: each
    ``guarantee`` as whole GPUs, the sum of its values (``{gres/gpu:h100: 2, gres/gpu:a100: 1}``: 3;
    the engine knows no GPU types)."""
    return tuple((p.name, sum(p.guarantee.values())) for p in floating_projects(spec))


def simulate_nodes(nodes: Iterable[Node], jobs: Iterable[Job], policy: Policy, window: float) -> NodeResult:
    """Replay ``jobs`` on ``nodes`` under ``policy`` until ``window`` has passed and owners are done.

    A plain :class:`~.engine.Policy` gets :class:`NodePolicy`'s defaults (backfill on).
    """
    if window <= 0:
        raise ValueError(f"window: {window} is not positive")
    if not isinstance(policy, NodePolicy):
        policy = NodePolicy(**vars(policy))
    return _Sim(list(nodes), policy, window).run(jobs)


def forward_nodes(
    nodes: Iterable[Node], running: Iterable[Seed], pending: Sequence[Job], policy: Policy, horizon: float
) -> NodeResult:
    """Run the engine forward from a live state and stop once every pending job has started, or at horizon.

    ``running`` are placed at time 0 (:class:`~.forward.Seed`); ``pending`` are queued in the order given
    (by priority), each into its project's queue (None: the borrowers'), one with ``arrival > 0`` only from
    then (a begin time, a dependency).  A job's predicted start is the ``start`` of its first placement in
    the result's schedule; a job without one had not started by ``horizon``.
    """
    if not (math.isfinite(horizon) and horizon > 0):
        raise ValueError(f"horizon: {horizon} is not a positive number of seconds")
    if not isinstance(policy, NodePolicy):
        policy = NodePolicy(**vars(policy))
    return _Sim(list(nodes), policy, horizon).forward(running, pending, horizon)
