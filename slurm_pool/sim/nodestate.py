"""The node engine's state, and the moves every part of it makes (pure).

:class:`EngineState` is what :mod:`.nodes` (the event loop and the main
scheduler), :mod:`.backfill`, :mod:`.victims` and :mod:`.nodelend` share:
the nodes as units (:mod:`.units`), their free GPUs and the runs on them,
the queues, the reservations, and the moves that change them (fit, launch,
release).  The parts depend on this module, never on each other's names.
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass, field

from slurm_pool.sim.engine import BORROWED, GUARANTEED, Job, Policy, Result, note_held
from slurm_pool.sim.freeindex import FreeIndex, TimeIndex
from slurm_pool.sim.lendrule import LendRule, LendStats
from slurm_pool.sim.units import check_mig, expand_units

ALL = "*"  # the scope of every node
FLOAT = "~"  # the scope of the nodes nobody owns, where floating guarantees run (when some node is owned)


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
    #: Floating projects and their guaranteed whole GPUs, anywhere on the nodes nobody owns (a QOS with
    #: GrpTRES=gres/gpu=N on the floating partition); such a project owns no node.
    guarantees: tuple[tuple[str, int], ...] = ()
    #: A signalled run whose work would end within its GraceTime: ``"hold"`` holds its GPUs for the whole
    #: grace (a victim that ignores the signal, and more); ``"requeue"`` frees them at that end and requeues
    #: it (Slurm 26.05 records it PREEMPTED); ``"complete"`` frees them there and it is done (Slurm 22.05).
    signal_end: str = "hold"
    #: Borrowed-tier jobs' priority tiers (job id -> tier, as the partition's PriorityTier; others 0): the
    #: borrowers' queue is ordered by tier, higher first, then as it would be (arrival, requeued first).
    borrow_tiers: tuple[tuple[str, int], ...] = ()


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


@dataclass(slots=True)
class Run:
    """One run of a job: what it holds where, from when, and (signalled) when it is gone."""

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
    signalled: float | None = None  # when it was signalled (None: ``free_at`` minus the grace)


@dataclass(slots=True)
class JobState:
    """A job's progress over its runs: work kept, first start, runs so far."""

    done: float = 0.0
    first_start: float | None = None
    runs: int = 0


def drop(q: deque[Job], jobs: list[Job]) -> None:
    """Take ``jobs`` out of ``q``, each found by identity from the front (they are among the first; ids are unique)."""
    for job in jobs:
        for i, o in enumerate(q):
            if o is job:
                del q[i]
                break


def check_guarantees(guarantees: tuple[tuple[str, int], ...], nodes: list[Node]) -> dict[str, int]:
    """:attr:`NodePolicy.guarantees` as a dict; ValueError naming the project when one cannot be."""
    out: dict[str, int] = {}
    for p, g in guarantees:
        if p in out or p in (ALL, FLOAT):
            raise ValueError(
                f"guarantees: project {p!r} given twice" if p in out else f"guarantees: {p!r} is not a project name"
            )
        if isinstance(g, bool) or not isinstance(g, int) or g < 1:
            raise ValueError(f"guarantees: project {p!r} has guarantee {g!r}, not a whole number of GPUs >= 1")
        out[p] = g
    for nd in nodes:
        if nd.owner in out:
            raise ValueError(
                f"guarantees: project {nd.owner!r} has a guarantee and owns node {nd.name!r} (a floating project owns none)"
            )
    return out


class EngineState:
    """One replay's state: units, free GPUs, runs, queues and reservations, and the moves on them."""

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
        if policy.signal_end not in ("hold", "requeue", "complete"):
            raise ValueError(f"signal_end: {policy.signal_end!r} is not 'hold', 'requeue' or 'complete'")
        self.nodes = nodes
        # Per unit (:mod:`.units`; unit n < len(nodes) is node n's whole GPUs), and keyed (scope, kind).
        self.units = units = expand_units(nodes)
        self.size = units.size
        self.owner = [nodes[n].owner for n in units.node]
        self.free = list(self.size)
        self.total_free = sum(self.size)
        self.all_eq = self.free_eq = sum(s * c for s, c in zip(self.size, units.cost, strict=True))  # 1/den GPUs
        self.bheld = [0] * len(self.size)  # GPUs held by borrowed runs, not yet claimed by an owner
        self.on_node: list[dict[str, Run]] = [{} for _ in self.size]
        self.ver = [0] * len(self.size)
        self.watch: list[list[set[int]]] = [[] for _ in self.size]  # the dirty sets of the time indexes of each unit
        self.tindex: dict[tuple[str, str | None, bool, int], TimeIndex] = {}
        owners = sorted({o for o in self.owner if o is not None})
        #: Floating projects -> guaranteed whole GPUs; they run guaranteed on the floating scope's nodes (those
        #: nobody owns: :data:`FLOAT`, or :data:`ALL` when nobody owns a node; None: no project floats).
        self.floating = check_guarantees(policy.guarantees, nodes)
        self.float_scope = None if not self.floating else FLOAT if owners else ALL
        projects = sorted([*owners, *self.floating])
        kinds = sorted(set(units.kind), key=lambda k: (k is not None, k or ""))
        self.owned: dict[tuple[str, str | None], list[int]] = {(s, k): [] for s in [*owners, ALL] for k in kinds}
        if self.float_scope == FLOAT:
            self.owned[(FLOAT, None)] = []  # whole GPUs only: MIG jobs of floating projects borrow
        #: Per unit: the (scope, kind) keys it belongs to (all nodes', then its owner's or the floating scope's).
        self.keys_of: list[tuple[tuple[str, str | None], ...]] = []
        for u, k in enumerate(units.kind):
            o = self.owner[u]
            keys = [(ALL, k)]
            if o is not None:
                keys.append((o, k))
            elif self.float_scope == FLOAT and k is None:
                keys.append((FLOAT, None))
            self.keys_of.append(tuple(keys) if self.size[u] else ())
            for key in self.keys_of[-1]:
                self.owned[key].append(u)
        #: GPUs of each scope's nodes; ``share``: the guaranteed GPUs (a floating project's: its guarantee).
        self.span = {key: sum(self.size[u] for u in m) for key, m in self.owned.items()}
        self.share = dict(self.span)
        self.index = {key: FreeIndex(self.size, m) for key, m in self.owned.items()}
        #: Per (scope, kind): how often a unit's free GPUs rose to at least g (index g), and last, to all of
        #: them.  While a count stays, no node of the scope has come to fit what did not fit (backfill).
        self.rises = {key: [0] * (idx.top + 2) for key, idx in self.index.items()}
        self.borrowed_on = {key: 0 for key in self.owned}  # GPUs held by borrowed runs per scope and kind
        #: Per (scope, kind): changes of its units' free or borrowed GPUs; ``no_victims``: (project, kind, GPUs)
        #: -> the count at which :func:`.victims.plan_victims` found none (nothing changed: none still).
        self.fgen = {key: 0 for key in self.owned}
        self.no_victims: dict[tuple[tuple[str, str | None], int], int] = {}
        for p, g in self.floating.items():  # a floating project's keys name the floating scope's nodes
            for k in kinds:
                home = (self.float_scope or ALL, None) if k is None else None
                self.owned[(p, k)] = self.owned[home] if home else []
                self.index[(p, k)] = self.index[home] if home else FreeIndex(self.size, [])
                self.rises[(p, k)] = self.rises[home] if home else [0, 0]
                self.span[(p, k)] = self.span[home] if home else 0
                self.share[(p, k)] = g if home else 0
        for u in range(len(self.size)):
            self.note(u)
        self.used = {key: 0 for key in self.owned if key[0] not in (ALL, FLOAT)}  # guaranteed GPUs per project, kind
        self.used_eq = 0  # ... all of them, in 1/den GPUs
        self.usedgen: dict[str | None, int] = {p: 0 for p in projects}  # changes of a project's guaranteed GPUs
        self.qgen: dict[str | None, int] = {p: 0 for p in [*projects, None]}  # changes in a queue's first jobs
        #: Per queue: the last backfill pass that started nothing and found nothing fitting, and what it saw.
        self.bf_idle: dict[str | None, tuple[object, list[tuple[list[int], int, int]]]] = {}
        self.pol = policy
        self.window = window
        self.res = NodeResult(policy.name, window, sum(nd.gpus for nd in nodes))
        self.queues: dict[str | None, deque[Job]] = {p: deque() for p in projects}
        self.queues[None] = deque()
        self.runs: dict[str, Run] = {}
        self.leaving: dict[str, Run] = {}
        self.state: dict[str, JobState] = {}
        self.events: list[tuple[float, int, str, object]] = []
        self.seq = 0
        self.now = 0.0
        self.epoch = 0  # bumped when GPUs may come free earlier than any time limit said
        self.tcache: dict[tuple[int, int, bool], tuple[int, float]] = {}  # node's time for a need, by version
        self.resv: dict[str | None, tuple[str, int, float, dict[int, int]]] = {}
        self.owner_jobs = self.owner_done = 0
        self.lent: dict[int, float] = {}  # nodes lent to the inference tier -> since (:mod:`.nodelend`)
        #: The units of each scope's nodes (a project's partition, or all of them).
        self.scope_units = {p: frozenset(u for u, o in enumerate(self.owner) if o == p) for p in owners}
        self.scope_units[ALL] = frozenset(range(len(self.size)))
        if self.floating:  # the floating partition: every unit of the nodes nobody owns
            nobody = frozenset(u for u, o in enumerate(self.owner) if o is None)
            self.scope_units.update((p, nobody) for p in self.floating)
        self.bf_next: float | None = None  # the backfill pass already due (with bf_interval)
        #: Whether any job or the policy has a time limit (:meth:`limit_of`): an expected end may then be one
        #: the clock has passed, so backfill keeps no per-node time cache and trusts its time index at the clock;
        #: a job ending before its limit moves reservations earlier.
        self.limited = policy.time_limit is not None

    def limit_of(self, job: Job) -> float | None:
        """The seconds ``job`` is expected to hold its GPUs from a run's start: its own limit, else the
        policy's (None: neither, its exact remaining duration).  Note a job with a limit in :attr:`limited`."""
        return job.limit if job.limit is not None else self.pol.time_limit

    def home(self, key: tuple[str, str | None]) -> tuple[str, str | None]:
        """The (scope, kind) whose nodes guaranteed jobs of ``key`` (project, kind) run on: the project's
        own, or for a floating project's whole GPUs, the floating scope's."""
        if key[1] is None and key[0] in self.floating:
            assert self.float_scope is not None
            return (self.float_scope, None)
        return key

    def note(self, n: int) -> None:
        """Index unit ``n`` at its free GPUs, in its scopes (none: all its GPUs are partitioned)."""
        f = self.free[n]
        for key in self.keys_of[n]:
            self.index[key].note(n, f)

    def set_free(self, n: int, f: int) -> None:
        """Unit ``n`` now has ``f`` free GPUs (or instances)."""
        old = self.free[n]
        if f > old:  # GPUs came free: count the levels crossed, per scope (:attr:`rises`)
            for key in self.keys_of[n]:
                counts = self.rises[key]
                for g in range(old + 1, f + 1):
                    counts[g] += 1
                if f == self.size[n]:
                    counts[-1] += 1
        self.total_free += f - self.free[n]
        self.free_eq += (f - self.free[n]) * self.units.cost[n]
        self.free[n] = f
        self.bump(n)
        fgen = self.fgen
        for key in self.keys_of[n]:
            self.index[key].note(n, f)
            fgen[key] += 1

    def bump(self, n: int) -> None:
        """What unit ``n`` holds or will free changed: its version moves, and backfill's times of it are stale."""
        self.ver[n] += 1
        for dirty in self.watch[n]:
            dirty.add(n)

    def time_index(self, key: tuple[str, str | None, bool, int], members: list[int], whole: bool) -> TimeIndex:
        """Backfill's index of when ``key`` (scope, kind, preemptible, need; 0: whole nodes) fits per node."""
        idx = self.tindex.get(key)
        if idx is None:
            idx = self.tindex[key] = TimeIndex(members, whole, self.size)
            for n in members:
                self.watch[n].append(idx.dirty)
        return idx

    def push(self, t: float, kind: str, payload: object) -> None:
        """Schedule an event (events at one time run in the order pushed)."""
        self.seq += 1
        heapq.heappush(self.events, (t, self.seq, kind, payload))

    # -- accounting ------------------------------------------------------------
    def segment(self, s: float, e: float, gpus: float) -> float:
        """GPU-seconds of ``gpus`` from ``s`` to ``e``, inside the window."""
        return max(0.0, min(e, self.window) - max(s, 0.0)) * gpus

    def account(self, run: Run, until: float, kept: float) -> None:
        """Count ``run``'s time up to ``until``: ``kept`` seconds of useful work, the rest lost."""
        useful = self.segment(run.start, run.start + kept, run.w)
        self.res.useful_gpu_seconds += useful
        if run.job.project is not None:
            self.res.owner_gpu_seconds += useful
        self.res.lost_gpu_seconds += self.segment(run.start + kept, until, run.w)
        note_held(self.res, run.tier, self.segment(run.start, until, run.w))

    def record(self, run: Run, end: float, outcome: str) -> None:
        """Add ``run`` to the schedule, ended at ``end`` with ``outcome``."""
        nodes = tuple((self.nodes[self.units.node[u]].name, c) for u, c in sorted(run.alloc.items()))
        sig = None if run.free_at is None or outcome == "done" else run.free_at - self.pol.grace
        if run.signalled is not None and outcome != "done":
            sig = run.signalled
        self.res.schedule.append(
            Placement(run.job.id, run.tier, run.placed, run.begin, end, nodes, outcome, sig, run.job.profile)
        )

    # -- placing ---------------------------------------------------------------
    def fit(self, job: Job, scope: str, skip: frozenset[int] = frozenset()) -> dict[int, int] | None:
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

    def fits(self, job: Job, scope: str) -> bool:
        """Whether :meth:`fit` finds room for ``job`` in ``scope`` (nothing skipped), without placing it."""
        return self.index[(scope, job.profile)].fits(job.gpus, job.profile is None)

    def take(self, run: Run, free_part: dict[int, int]) -> None:
        """``run`` holds its allocation; ``free_part`` of it comes from free GPUs."""
        for n, c in free_part.items():
            self.set_free(n, self.free[n] - c)
        for n in run.alloc:
            self.on_node[n][run.job.id] = run
            if run.tier == BORROWED:
                self.borrow(n, run.alloc[n])

    def borrow(self, n: int, c: int) -> None:
        """Borrowed runs hold ``c`` more GPUs of unit ``n``."""
        self.bheld[n] += c
        for key in self.keys_of[n]:
            self.borrowed_on[key] += c
            self.fgen[key] += 1

    def eq(self, job: Job, alloc: dict[int, int]) -> int:
        """The GPUs (or instances) ``job`` counts for, in 1/den GPUs (every unit of an alloc is of one kind)."""
        return job.gpus * self.units.cost[next(iter(alloc))]

    def launch(
        self,
        job: Job,
        tier: str,
        alloc: dict[int, int],
        free_part: dict[int, int],
        ready: float,
        leaving_at: float | None = None,
    ) -> None:
        """Start ``job`` in ``tier`` on ``alloc`` now; it holds the GPUs from ``ready`` (after any grace wait).

        ``leaving_at``: it was already signalled (a run seeded at the start, :mod:`.forward`): it holds them
        until then, and is then requeued."""
        st = self.state[job.id]
        overhead = self.pol.restart_overhead if st.done > 0 else 0.0
        w = job.gpus * self.units.weight(next(iter(alloc)))
        self.res.grace_gpu_seconds += self.segment(self.now, ready, w)
        self.res.restart_gpu_seconds += self.segment(ready, ready + overhead, w)
        if st.first_start is None:
            st.first_start = ready
        st.runs += 1
        if tier == GUARANTEED:
            assert job.project is not None
            self.used[(job.project, job.profile)] += job.gpus
            self.usedgen[job.project] += 1
            self.used_eq += self.eq(job, alloc)
        run = Run(job, tier, alloc, self.now, ready, ready + overhead, st.runs, w, leaving_at)
        if leaving_at is None:
            self.runs[job.id] = run
        else:
            self.leaving[job.id] = run
        self.take(run, free_part)
        if leaving_at is None:
            self.push(run.start + job.work - st.done, "finish", (job.id, run.version))
        else:
            self.push(leaving_at, "requeue", run)

    def release(self, run: Run) -> None:
        """``run``'s GPUs come free (those owners claimed stay with them)."""
        for n, c in run.alloc.items():
            left = c - run.claimed.get(n, 0)
            self.set_free(n, self.free[n] + left)
            if run.tier == BORROWED:
                self.borrow(n, -left)
            del self.on_node[n][run.job.id]
        if run.tier == GUARANTEED:
            assert run.job.project is not None
            self.used[(run.job.project, run.job.profile)] -= run.job.gpus
            self.usedgen[run.job.project] += 1
            self.used_eq -= self.eq(run.job, run.alloc)

    def tier(self, job: Job) -> tuple[str | None, str]:
        """The tier ``job`` would run in now, and where (None: it must wait)."""
        p = job.project
        if p is not None:
            key = (p, job.profile)
            if self.used[key] + job.gpus <= self.share[key]:
                # MIG: on one of its nodes; whole GPUs: within its nodes' (a guarantee may exceed them)
                if job.gpus <= (self.span[key] if job.profile is None else self.index[key].top):
                    return GUARANTEED, p
        if not self.pol.pooled or (p is not None and not self.pol.owners_borrow):
            return None, ALL if p is None else p
        return BORROWED, ALL
