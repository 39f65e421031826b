"""What each caller sees of the pool.  Pure.

Built from one read of Slurm (node and job records) with the same builders as
``slurm-pool status`` and the exporter (:func:`slurm_pool.metrics.status.build`):

* a user sees their own jobs in full, the jobs of the accounts they coordinate
  in full, and only counts by state of the rest; operators (the spec's
  ``console.operators``) see everything;
* every user sees node states and GPU units (pool state) and who uses a node by
  project only; a drain's reason (a human may have written something private)
  only operators see, the others see whose drain it is.

A job's timeline comes from ``sacct -D`` (one record per run of a requeued job)
and the epilog's outcome records.  What the submit policy makes of a request is
:mod:`slurm_pool.web.submitting`.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from slurm_pool import text
from slurm_pool.adapters.gres import parse_gres
from slurm_pool.adapters.records import JobRecord, NodeRecord, State
from slurm_pool.metrics.charges import held_seconds
from slurm_pool.metrics.collector import DEFAULT_LEND_PARTITION
from slurm_pool.metrics.outcomes import record_fields
from slurm_pool.metrics.parse import job_nodes, node_gpu_states
from slurm_pool.metrics.status import build
from slurm_pool.policy.tables import PolicyTables
from slurm_pool.spec.hosts import HostlistError, expand
from slurm_pool.spec.model import PoolSpec
from slurm_pool.web import models

#: Job state words that end a job's life (or one run of it).
FINISHED = frozenset(
    {"COMPLETED", "COMPLETE", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "DEADLINE", "BOOT_FAIL"}
)
#: Fields ``GET /jobs`` sorts by (a leading '-' reverses).
SORT_KEYS = ("job_id", "name", "user", "project", "partition", "tier", "state", "gpus", "submit_time", "start_time")


@dataclass(frozen=True)
class Viewer:
    """Who is asking, and what they may see in full."""

    user: str
    projects: tuple[str, ...] = ()
    coordinates: tuple[str, ...] = ()
    operator: bool = False

    def sees(self, job: JobRecord) -> bool:
        """May see ``job`` in full (and act on it: Slurm still decides)."""
        return self.operator or job.user == self.user or (bool(job.account) and job.account in self.coordinates)


def viewer(spec: PoolSpec, user: str, coordinators: Mapping[str, Iterable[str]] = {}) -> Viewer:
    """``user``'s projects (the spec's), the accounts they coordinate (Slurm's) and whether they operate the pool."""
    operators = spec.console.operators if spec.console else []
    return Viewer(
        user=user,
        projects=tuple(p.name for p in spec.projects if user in p.users),
        coordinates=tuple(sorted(a for a, users in coordinators.items() if user in users)),
        operator=user in operators,
    )


def project_tiers(spec: PoolSpec, tables: PolicyTables | None, projects: Iterable[str]) -> list[str]:
    """Tiers the projects may submit to (routed to a partition), in spec order."""
    names = set(projects)
    usable: set[str] = set()
    if tables is not None:
        for rule in tables.projects:
            if rule.name in names:
                usable.update(rule.tiers)
    else:
        for p in spec.projects:
            if p.name in names:
                usable.update(p.tiers)
    return [t.name for t in spec.tiers if t.name in usable]


def me(spec: PoolSpec, who: Viewer, tables: PolicyTables | None, csrf: str | None = None) -> models.Me:
    console = spec.console
    return models.Me(
        user=who.user,
        projects=list(who.projects),
        coordinates=list(who.coordinates),
        operator=who.operator,
        csrf_token=csrf,
        tiers=project_tiers(spec, tables, who.projects),
        hub_url=str(console.hub_url) if console and console.hub_url else None,
    )


# -- the pool ---------------------------------------------------------------------------
def node_owners(spec: PoolSpec) -> dict[str, list[str]]:
    """Node name -> the projects owning it (the spec's ``owns``, by node group)."""
    groups: dict[str, list[str]] = {}
    for g in spec.node_groups:
        try:
            for n in expand(g.hosts):
                groups.setdefault(g.name, []).append(n)
        except HostlistError:
            continue
    out: dict[str, list[str]] = {}
    for p in spec.projects:
        for owned in p.owns:
            for n in groups.get(owned, []):
                out.setdefault(n, []).append(p.name)
    return out


def _node_types(node: NodeRecord) -> dict[str, int]:
    """GPU units of a node by type: a GPU model, a MIG type, ``gpu`` when untyped, and ``shard``."""
    out: dict[str, int] = {}
    for gtype, states in node_gpu_states(node.state, node.gres, node.gres_used).items():
        out[gtype or "gpu"] = out.get(gtype or "gpu", 0) + sum(states.values())
    shards = sum(item.count for item in parse_gres(node.gres) if item.name == "shard")
    if shards:
        out["shard"] = shards
    return out


def _used_by(jobs: Iterable[JobRecord]) -> dict[str, Counter[str]]:
    """Node -> project -> GPU units its running jobs hold there (a multi-node job's spread evenly)."""
    out: dict[str, Counter[str]] = {}
    for job in jobs:
        if not job.on_node or not job.account:
            continue
        nodes = job_nodes(job)
        units = job.gpus or job.shards
        for n in nodes:
            out.setdefault(n, Counter())[job.account] += max(1, units // max(1, len(nodes))) if units else 0
    return out


def pool(
    spec: PoolSpec,
    who: Viewer,
    nodes: Sequence[NodeRecord],
    jobs: Sequence[JobRecord],
    *,
    now: float,
    history: Sequence[models.Sample] = (),
    fresh: bool = True,
    lend_partition: str = DEFAULT_LEND_PARTITION,
    reclaims: Mapping[str, float] = {},
) -> models.Pool:
    """The pool at a glance as ``who`` may see it; ``reclaims``: node -> when the pool last took it back."""
    status = build(nodes, jobs, (), lend_partition=lend_partition, now=now)
    gpus = status["gpus"]
    owners = node_owners(spec)
    used = _used_by(jobs)
    records = {n.name: n for n in nodes}
    views = []
    for row in status["nodes"]:
        rec = records[row["name"]]
        views.append(
            models.NodeView(
                name=text.shown(row["name"]),
                state=text.shown(row["state"]),
                owners=owners.get(row["name"], []),
                **{s: row[s] for s in ("total", "allocated", "lent", "idle", "drained", "down", "lent_out")},
                by_type={text.shown(k): v for k, v in _node_types(rec).items()},
                drain_owner=row["drain_owner"],
                reason=text.shown(row["reason"]) if who.operator else "",
                used_by={text.shown(p): n for p, n in sorted(used.get(row["name"], Counter()).items()) if n},
                last_reclaim=reclaims.get(row["name"]),
            )
        )
    return models.Pool(
        time=status["time"],
        refresh_seconds=spec.console.refresh_seconds if spec.console else 10,
        total=gpus["total"],
        states=gpus["states"],
        by_tier={text.shown(k): v for k, v in gpus["allocated_by_tier"].items()},
        by_project={text.shown(k): v for k, v in gpus["allocated_by_project"].items()},
        lent_nodes=[text.shown(n) for n in status["lent_nodes"]],
        pending={text.shown(k): v for k, v in status["pending"].items()},
        nodes=views,
        history=list(history),
        fresh=fresh,
    )


def sample(nodes: Sequence[NodeRecord], jobs: Sequence[JobRecord], now: float, lend_partition: str) -> models.Sample:
    """One point of the utilisation history."""
    states = build(nodes, jobs, (), lend_partition=lend_partition, now=now)["gpus"]
    s = states["states"]
    return models.Sample(time=now, allocated=s["allocated"], lent=s["lent"], idle=s["idle"], total=states["total"])


# -- jobs -------------------------------------------------------------------------------
def job_view(job: JobRecord) -> models.JobView:
    """A job record as the API shows it (free text with its control characters shown).

    A job that waits has no start or end yet: the times Slurm's record holds then are its own
    guesses (``squeue --start``), which the console would show beside the pool's forecast.
    """
    waiting = job.waiting
    return models.JobView(
        job_id=job.job_id,
        name=text.shown(job.name),
        user=text.shown(job.user),
        project=text.shown(job.account),
        partition=text.shown(job.partition),
        tier=text.shown(job.qos),
        state=text.shown(str(job.state)),
        reason=text.shown(job.reason),
        nodes=text.shown(job.nodes),
        gpus=job.gpus,
        gpu_types={text.shown(k): v for k, v in job.gpu_types.items()},
        shards=job.shards,
        submit_time=job.submit_time,
        start_time=None if waiting else job.start_time,
        end_time=None if waiting else job.end_time,
        time_limit_s=job.time_limit,
        restart_count=job.restart_count,
    )


def job_list(
    who: Viewer,
    jobs: Iterable[JobRecord],
    *,
    state: str | None = None,
    user: str | None = None,
    project: str | None = None,
    tier: str | None = None,
    sort: str = "job_id",
) -> models.JobList:
    """Jobs ``who`` may see in full, filtered and sorted; counts by state of the others (state filter applied)."""
    shown_jobs: list[models.JobView] = []
    hidden: Counter[str] = Counter()
    for job in jobs:
        if state and state.upper() not in job.state:
            continue
        if not who.sees(job):
            hidden[job.state.base or "UNKNOWN"] += 1
            continue
        if (user and job.user != user) or (project and job.account != project) or (tier and job.qos != tier):
            continue
        shown_jobs.append(job_view(job))
    key = sort.lstrip("-")
    if key not in SORT_KEYS:
        raise ValueError(f"sort: {sort!r} is not one of {', '.join(SORT_KEYS)} (a leading '-' reverses)")
    shown_jobs.sort(key=lambda j: _sort_value(getattr(j, key)), reverse=sort.startswith("-"))
    return models.JobList(jobs=shown_jobs, hidden=dict(sorted(hidden.items())))


class JobIndex:
    """One read's jobs by user and by account, and their counts by state: a caller's list costs the jobs
    they see, not the whole queue (:meth:`job_list` answers as :func:`job_list` does)."""

    def __init__(self, jobs: Sequence[JobRecord]):
        self.jobs = tuple(jobs)
        self.by_user: dict[str, list[int]] = {}
        self.by_account: dict[str, list[int]] = {}
        self.by_state: Counter[State] = Counter()
        for i, job in enumerate(self.jobs):
            self.by_user.setdefault(job.user, []).append(i)
            if job.account:
                self.by_account.setdefault(job.account, []).append(i)
            self.by_state[job.state] += 1

    def seen(self, who: Viewer) -> list[JobRecord]:
        """The jobs ``who`` may see in full, in the read's order."""
        if who.operator:
            return list(self.jobs)
        picked = set(self.by_user.get(who.user, ()))
        for account in who.coordinates:
            picked.update(self.by_account.get(account, ()))
        return [self.jobs[i] for i in sorted(picked)]

    def job_list(
        self, who: Viewer, *, state: str | None = None, sort: str = "job_id", **only: str | None
    ) -> models.JobList:
        """:func:`job_list` of the read's jobs (``only``: its ``user``, ``project`` and ``tier`` filters)."""
        seen = self.seen(who)
        listed = job_list(who, seen, state=state, sort=sort, **only)
        if who.operator:
            return listed
        wanted = state.upper() if state else None
        hidden: Counter[str] = Counter()
        for st, n in self.by_state.items():
            if wanted is None or wanted in st:
                hidden[st.base or "UNKNOWN"] += n
        for job in seen:
            if wanted is None or wanted in job.state:
                hidden[job.state.base or "UNKNOWN"] -= 1
        listed.hidden = dict(sorted((k, n) for k, n in hidden.items() if n > 0))
        return listed


def _sort_value(v: Any) -> tuple[int, Any]:
    return (0, v) if v is not None else (1, 0)


# -- a job's life -----------------------------------------------------------------------
def job_outcomes(records: Iterable[Mapping[str, Any]], job_id: int) -> list[dict[str, Any]]:
    """The epilog's records of ``job_id``'s runs, each with its checked fields, oldest first."""
    out = []
    for raw in records:
        if str(raw.get("job_id", "")) != str(job_id):
            continue
        rec = record_fields(raw)
        rec["time"] = _stamp(raw.get("event_time")) or _stamp(raw.get("time"))
        rec["checkpoint_time"] = _stamp(raw.get("checkpoint_time"))
        rec["requeued"] = raw.get("requeued") is True
        out.append(rec)
    out.sort(key=lambda r: r["time"] or 0.0)
    return out


def _stamp(v: Any) -> float | None:
    """A Unix time from a record, or None."""
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v < 1e11
    return float(v) if ok else None


def timeline(
    runs: Sequence[JobRecord], outcomes: Sequence[Mapping[str, Any]] = (), current: JobRecord | None = None
) -> tuple[list[models.Event], int, float | None]:
    """Events of a job's life, its restart count and the checkpoint age at its last preemption.

    ``runs``: ``sacct -D -j ID`` records (one per run: PREEMPTED or REQUEUED runs, then the last);
    ``outcomes``: :func:`job_outcomes`; ``current``: the job as squeue has it now, if it is still there.
    """
    runs = sorted(runs, key=lambda r: (r.start_time or float("inf"), r.end_time or float("inf")))
    events: list[models.Event] = []
    submits = [r.submit_time for r in runs if r.submit_time] + ([current.submit_time] if current else [])
    submitted = min((t for t in submits if t), default=None)
    events.append(models.Event(time=submitted, kind="submitted"))
    pending = list(outcomes)
    started = 0
    age: float | None = None
    for i, run in enumerate(runs):
        if run.start_time:
            events.append(
                models.Event(time=run.start_time, kind="started" if started == 0 else "resumed", detail=_on(run))
            )
            started += 1
        end = run.end_time
        preempted = "PREEMPTED" in run.state
        requeued = "REQUEUED" in run.state or (preempted and i + 1 < len(runs))
        # The epilog's record of this run: the first one left that is not later than the next run's start.
        nxt = runs[i + 1].start_time if i + 1 < len(runs) else None
        rec = next((o for o in pending if nxt is None or (o["time"] or 0.0) <= nxt), None)
        if rec is not None:
            pending.remove(rec)
            preempted = preempted or rec["preempted"]
        at = (rec or {}).get("time") or end
        if preempted:
            events.append(models.Event(time=at, kind="preempted"))
        if rec is not None and rec["checkpointed"]:
            # The last checkpoint may predate the preemption (its age is the work lost): shown in order.
            ck = max(t for t in (rec["checkpoint_time"], at, 0.0) if t is not None)
            detail = "" if rec["checkpoint_age_s"] is None else f"{rec['checkpoint_age_s']:.0f} s of work lost"
            events.append(models.Event(time=ck or None, kind="checkpointed", detail=detail))
        if rec is not None and rec["preempted"] and rec["checkpoint_age_s"] is not None:
            age = rec["checkpoint_age_s"]
        if requeued:
            events.append(models.Event(time=end, kind="requeued"))
        elif run.state.base in FINISHED and i == len(runs) - 1 and not (current and not _finished(current)):
            events.append(models.Event(time=end, kind="finished", detail=text.shown(str(run.state))))
    restarts = max(
        [r.restart_count for r in runs] + [max(0, started - 1)] + ([current.restart_count] if current else [])
    )
    return events, restarts, age


def _finished(job: JobRecord) -> bool:
    return job.state.base in FINISHED


def _on(run: JobRecord) -> str:
    return f"on {text.shown(run.nodes)}" if run.nodes else ""


def job_detail(
    job: JobRecord, runs: Sequence[JobRecord], outcomes: Sequence[Mapping[str, Any]], current: JobRecord | None
) -> models.JobDetail:
    events, restarts, age = timeline(runs, outcomes, current)
    view = job_view(job)
    view.restart_count = max(view.restart_count, restarts)
    return models.JobDetail(
        job=view, timeline=events, restarts=restarts, checkpoint_age_s=age, output=output_file(job, runs)
    )


def output_file(job: JobRecord, runs: Sequence[JobRecord]) -> str:
    """Where the job's output goes, from the accounting's record ("" when it does not say).

    Slurm 24.05+ records the path (``stdout_expanded``); older releases record the pattern
    (``stdout``) or only the working directory, where sbatch's default ``slurm-<id>.out`` goes.
    """
    for run in reversed(runs):
        raw = run.raw
        for key in ("stdout_expanded", "stdout"):
            value = raw.get(key)
            if isinstance(value, str) and value:
                return text.shown(value.replace("%j", str(job.job_id)).replace("%u", job.user))
        wd = raw.get("working_directory")
        if isinstance(wd, str) and wd.startswith("/"):
            return text.shown(f"{wd.rstrip('/')}/slurm-{job.job_id}.out (unless the script set --output)")
    return ""


def history(who: Viewer, runs: Iterable[JobRecord]) -> models.JobList:
    """The finished jobs ``who`` may see in full, the latest end first; the others as counts by state."""
    done = [r for r in runs if r.state.base in FINISHED]
    listed = job_list(who, done, sort="-start_time")
    listed.jobs.sort(key=lambda j: (j.end_time or 0.0, j.job_id), reverse=True)
    return listed


# -- projects ---------------------------------------------------------------------------
def projects(
    spec: PoolSpec, who: Viewer, runs: Iterable[JobRecord], *, start: float, end: float, hours: int
) -> list[models.ProjectView]:
    """GPU-hours per project over ``[start, end]``: in its own partitions (guaranteed), elsewhere (borrowed),
    and what others ran on its servers (lent); charges per tier at the tier's usage factor."""
    owners = node_owners(spec)
    own_parts = {p.name: set(p.allow_accounts or ()) for p in spec.partitions}
    factors = {t.name: t.usage_factor for t in spec.tiers}
    rows = {
        p.name: models.ProjectView(name=p.name, hours=hours, owns=list(p.owns))
        for p in spec.projects
        if who.operator or p.name in who.projects or p.name in who.coordinates
    }
    for run in runs:
        held = held_seconds(run, start, end) / 3600
        if held <= 0:
            continue
        row = rows.get(run.account)
        if row is not None:
            if run.account in own_parts.get(run.partition, set()):
                row.guaranteed_gpu_hours += held
            else:
                row.borrowed_gpu_hours += held
            row.charges[run.qos] = row.charges.get(run.qos, 0.0) + held * factors.get(run.qos, 1.0)
        nodes = job_nodes(run)
        for n in nodes:
            for owner in owners.get(n, []):
                if owner != run.account and owner in rows:
                    rows[owner].lent_gpu_hours += held / max(1, len(nodes))
    for row in rows.values():
        row.guaranteed_gpu_hours = round(row.guaranteed_gpu_hours, 3)
        row.borrowed_gpu_hours = round(row.borrowed_gpu_hours, 3)
        row.lent_gpu_hours = round(row.lent_gpu_hours, 3)
        row.charges = {k: round(v, 3) for k, v in sorted(row.charges.items())}
    return list(rows.values())


# -- the submit policy ------------------------------------------------------------------
def project_routes(tables: PolicyTables, project: str) -> dict[str, str]:
    """Tier -> partition of ``project`` (none for a project the tables do not know)."""
    rule = next((p for p in tables.projects if p.name == project), None)
    return dict(rule.routes) if rule else {}


def tier_route(tables: PolicyTables, job: JobRecord, tier: str) -> str:
    """The partition ``job``'s project routes ``tier`` to; ValueError if the project may not use ``tier``."""
    routes = project_routes(tables, job.account)
    if tier not in routes:
        raise ValueError(f"project {job.account!r} may not use tier {tier!r}; its tiers: {', '.join(routes) or 'none'}")
    return routes[tier]


def tier_change(tables: PolicyTables, who: Viewer, job: JobRecord, tier: str) -> tuple[str, str]:
    """The QOS and partition moving ``job`` to ``tier`` (its project's partition for it); ValueError if the
    project may not use ``tier``, PermissionError if ``who`` may not move the job."""
    partition = tier_route(tables, job, tier)
    if job.account not in who.projects and not who.operator and job.account not in who.coordinates:
        raise PermissionError(f"{who.user} is not a member of project {job.account!r}")
    return tier, partition
