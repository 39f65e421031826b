"""One read of Slurm shared by every request of ``slurm-pool serve``.

The pool (node records and ``squeue --json``) is read at most once per
``refresh_seconds`` whatever the number of clients, in one background thread,
as the exporter does (:class:`slurm_pool.metrics.collector.PoolCollector`):
requests get the last read at once, and the one that finds it stale starts the
next read (only the very first request waits for one).  A failed read keeps
the last good figures, marked not fresh.  Job details (``sacct -D -j ID`` and
the epilog's outcome records) and the projects' accounting are cached for a
few seconds.  :attr:`PoolReader.calls` counts the Slurm commands run.

The utilisation history comes from Prometheus when the spec names one (one
range query per ``refresh_seconds`` at most, in the same background thread),
else, or while Prometheus fails, from the service's own samples.  The nodes'
last reclaims (when the pool last took a lent node back from Kubernetes: the
end of its last lend-partition job) come from the projects page's cached
``sacct`` read, refreshed in the background at most once per
``slow_seconds``.

The start-time forecast (``why is my job waiting``) is one forward run of the
queue shared by every request for ``refresh_seconds``; the users' recent runs it
estimates runtimes from are read from ``sacct`` at most once per ``slow_seconds``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict, deque
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from slurm_pool import text
from slurm_pool.adapters import jobnames, prometheus
from slurm_pool.adapters.records import JobRecord, NodeRecord
from slurm_pool.adapters.runner import Result, Runner
from slurm_pool.adapters.slurm import SlurmClient
from slurm_pool.jobid import JobId
from slurm_pool.metrics.collector import DEFAULT_LEND_PARTITION
from slurm_pool.metrics.outcomes import load_record, tail_lines
from slurm_pool.metrics.parse import job_nodes
from slurm_pool.predict.forward import Forecast
from slurm_pool.predict.live import HISTORY_DAYS, read_history
from slurm_pool.predict.live import forecast as live_forecast
from slurm_pool.predict.pool import PoolModel
from slurm_pool.web import models, views

log = logging.getLogger(__name__)

#: Samples of utilisation kept (an hour at the default 10 s).
HISTORY = 360
#: Seconds a job's accounting records are reused.
DETAIL_SECONDS = 5.0
#: Seconds the coordinators and the projects' accounting are reused.
SLOW_SECONDS = 60.0
#: Jobs whose details are kept.
DETAIL_CACHE = 512
#: Seconds the first request waits for the first read.
FIRST_READ_WAIT = 30.0
#: Seconds of utilisation the chart shows when it reads Prometheus.
PROMETHEUS_WINDOW = 3 * 3600.0
#: Points per series asked of Prometheus (the step is the window over this, at least ``refresh_seconds``).
PROMETHEUS_POINTS = 360
#: Seconds a Prometheus query may take.
PROMETHEUS_TIMEOUT = 5.0
#: Hours of accounting the last reclaims are read from (the projects page's read, so one cache serves both).
RECLAIM_HOURS = 24

#: Called in the reader thread with what the pool's answer is built from -- the read, the history, the last
#: reclaims and :attr:`PoolReader.version` -- *before* requests see it, so answers are ready when they do.
Prepare = Callable[["Snapshot", list[models.Sample], dict[str, float], int], None]
_KEEP: Any = object()
#: The adapter's seam: ``(prometheus_url, endpoint, params, timeout)`` -> the answer's ``data``.
PrometheusApi = Callable[[str, str, Mapping[str, str], float], Any]


def utilisation_query(lend_partition: str) -> str:
    """One PromQL query over the exporter's metrics: GPU units by state, and ``lent`` (held by the lend partition).

    The exporter counts lent units as allocated; :func:`history_samples` takes them out again.
    """
    part = lend_partition.replace("\\", "\\\\").replace('"', '\\"')
    return (
        "sum by (state) (slurm_pool_gpus) or "
        f'label_replace(sum(slurm_pool_allocated_gpus{{partition="{part}"}}), "state", "lent", "", "")'
    )


def history_samples(data: Any) -> list[models.Sample]:
    """Samples of :func:`utilisation_query`'s range answer; a malformed answer is a ``QueryError``."""
    per_time: dict[float, dict[str, float]] = {}
    for labels, points in prometheus.matrix(data):
        state = labels.get("state", "")
        for t, v in points:
            per_time.setdefault(t, {})[state] = v
    out = []
    for t, by_state in sorted(per_time.items()):
        lent = by_state.pop("lent", 0.0)
        total = sum(by_state.values())
        allocated = by_state.get("allocated", 0.0) - lent
        out.append(
            models.Sample(
                time=t,
                allocated=max(0, round(allocated)),
                lent=max(0, round(lent)),
                idle=max(0, round(by_state.get("idle", 0.0))),
                total=max(0, round(total)),
            )
        )
    return out


def reclaim_times(runs: Sequence[JobRecord], lend_partition: str) -> dict[str, float]:
    """Node -> when its last lend-partition job ended (the pool took the node back from Kubernetes)."""
    out: dict[str, float] = {}
    for run in runs:
        if run.partition != lend_partition or not run.start_time or not run.end_time:
            continue
        for node in job_nodes(run):
            out[node] = max(out.get(node, 0.0), run.end_time)
    return out


class CountingRunner:
    """Wraps a runner and counts the commands it runs (the load benchmark reads :attr:`calls`)."""

    def __init__(self, inner: Runner):
        self.inner = inner
        self.calls = 0
        self._lock = threading.Lock()

    def run(
        self, argv: Sequence[str], *, check: bool = True, input: str | None = None, timeout: float | None = None
    ) -> Result:
        with self._lock:
            self.calls += 1
        return self.inner.run(argv, check=check, input=input, timeout=timeout)


@dataclass(frozen=True)
class Snapshot:
    """One read of the pool (the last good one when ``fresh`` is False)."""

    time: float
    nodes: tuple[NodeRecord, ...] = ()
    jobs: tuple[JobRecord, ...] = ()
    fresh: bool = True
    error: str = ""


@dataclass
class _Timed:
    time: float
    value: Any
    lock: threading.Lock = field(default_factory=threading.Lock)


class PoolReader:
    """The shared read of the pool, its short history, and cached per-job and per-project accounting."""

    def __init__(
        self,
        slurm: SlurmClient,
        refresh_seconds: float = 10.0,
        clock: Callable[[], float] = time.time,
        *,
        state_dir: str | None = None,
        lend_partition: str = DEFAULT_LEND_PARTITION,
        history: int = HISTORY,
        detail_seconds: float = DETAIL_SECONDS,
        slow_seconds: float = SLOW_SECONDS,
        prometheus_url: str | None = None,
        prometheus_api: PrometheusApi | None = None,
        reclaim_hours: int | None = RECLAIM_HOURS,
    ):
        self.counter = CountingRunner(slurm.runner)
        slurm.runner = self.counter
        self.slurm = slurm
        self.refresh = float(refresh_seconds)
        self.clock = clock
        self.state_dir = state_dir
        self.lend_partition = lend_partition
        self.detail_seconds = detail_seconds
        self.slow_seconds = slow_seconds
        self.own_history: deque[models.Sample] = deque(maxlen=history)
        self.prometheus_url = prometheus_url
        self.prometheus_api = prometheus_api
        self.reclaim_hours = reclaim_hours
        #: The last good Prometheus history; None: none yet, or the last query failed.
        self._prometheus: list[models.Sample] | None = None
        self._prometheus_attempt = float("-inf")
        self._reclaims: dict[str, float] = {}
        self._extras: Future[None] | None = None
        self._lock = threading.Lock()
        self._snapshot: Snapshot | None = None
        self._attempt = float("-inf")  # clock of the last read started
        self._inflight: Future[Snapshot] | None = None
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="slurm-pool-web-read")
        self._details: OrderedDict[str, _Timed] = OrderedDict()
        self._slow: dict[str, _Timed] = {}
        self._models: dict[int, tuple[Any, PoolModel]] = {}  # id(spec) -> (spec, its predictor model)
        #: Counts the changes of the history and reclaims that a read does not make (Prometheus', sacct's).
        self.version = 0
        #: Builds the answers of a new state before requests see it (the service's; None: built on demand).
        self.prepare: Prepare | None = None

    @property
    def history(self) -> list[models.Sample]:
        """The utilisation chart's points: Prometheus' when it answered last, else the service's own."""
        with self._lock:
            return list(self._prometheus if self._prometheus is not None else self.own_history)

    def last_reclaims(self) -> dict[str, float]:
        """Node -> when the pool last took it back from Kubernetes (the last 24 h; empty until read)."""
        with self._lock:
            return dict(self._reclaims)

    @property
    def calls(self) -> int:
        """Slurm commands run so far."""
        return self.counter.calls

    # -- the pool ---------------------------------------------------------
    def snapshot(self, wait: float = FIRST_READ_WAIT) -> Snapshot:
        """The last read; starts the next one when it is ``refresh_seconds`` old (one at a time)."""
        with self._lock:
            self._next_read()
            fut, snap = self._inflight, self._snapshot
        if snap is not None or fut is None:
            return snap or Snapshot(time=self.clock(), fresh=False, error="no read of Slurm yet")
        try:
            return fut.result(timeout=wait)
        except FutureTimeout:
            return Snapshot(time=self.clock(), fresh=False, error="Slurm did not answer in time")

    def latest(self) -> Snapshot | None:
        """The last read without waiting (None before the first); starts the next one when due, as
        :meth:`snapshot` does."""
        with self._lock:
            self._next_read()
            return self._snapshot

    def _next_read(self) -> None:
        """Start the next read when the last is ``refresh_seconds`` old (one at a time); the lock held."""
        now = self.clock()
        if (self._inflight is None or self._inflight.done()) and now - self._attempt >= self.refresh:
            self._attempt = now
            self._inflight = self._pool.submit(self._read)
            if self._extras is None or self._extras.done():
                self._extras = self._pool.submit(self._read_extras)

    def stale(self) -> None:
        """Read again on the next request (after an action changed the queue); still one read at a time."""
        with self._lock:
            self._attempt = float("-inf")
            self._details.clear()

    def wait_idle(self, timeout: float = 30.0) -> None:
        """Wait for a read in flight (tests)."""
        for fut in (self._inflight, self._extras):
            if fut is not None:
                fut.result(timeout=timeout)

    def _read(self) -> Snapshot:
        """Read Slurm once (runs in the reader thread); never raises."""
        now = self.clock()
        try:
            nodes = self.slurm.nodes()
            jobs = self.slurm.jobs()
        except Exception as exc:  # noqa: BLE001 -- any failure keeps the last good read
            reason = text.shown(str(exc))[:500]
            log.warning("reading the pool failed: %s", reason)
            with self._lock:
                last = self._snapshot
                snap = Snapshot(
                    time=last.time if last else now,
                    nodes=last.nodes if last else (),
                    jobs=last.jobs if last else (),
                    fresh=False,
                    error=reason,
                )
                self._snapshot = snap
            return snap
        snap = Snapshot(time=now, nodes=tuple(nodes), jobs=tuple(jobs))
        try:
            point = views.sample(snap.nodes, snap.jobs, now, self.lend_partition)
        except Exception as exc:  # noqa: BLE001 -- a sample is not worth a failed read
            log.warning("sampling the pool failed: %s", exc)
            point = None
        with self._lock:
            if self._prometheus is not None:
                history = list(self._prometheus)
            else:
                history = list(self.own_history) + ([point] if point is not None else [])
                history = history[-(self.own_history.maxlen or len(history)) :]
            reclaims, version = dict(self._reclaims), self.version
        self._prepare(snap, history, reclaims, version)
        with self._lock:
            self._snapshot = snap
            if point is not None:
                self.own_history.append(point)
        return snap

    def _prepare(self, snap: Snapshot, history: list[models.Sample], reclaims: dict[str, float], version: int) -> None:
        if self.prepare is None:
            return
        try:
            self.prepare(snap, history, reclaims, version)
        except Exception:  # noqa: BLE001 -- answers are then built on demand
            log.exception("preparing the answers of a read failed")

    def _changed(self, prometheus: Any = _KEEP, reclaims: Any = _KEEP) -> None:
        """Publish Prometheus' history (a list, None when it failed) or the last ``reclaims`` when they differ
        from what requests see, their answers prepared first."""
        with self._lock:
            new_prom = self._prometheus if prometheus is _KEEP else prometheus
            new_reclaims = self._reclaims if reclaims is _KEEP else reclaims
            if new_prom == self._prometheus and new_reclaims == self._reclaims:
                return
            snap, version = self._snapshot, self.version + 1
            history = list(new_prom if new_prom is not None else self.own_history)
        if snap is not None:
            self._prepare(snap, history, dict(new_reclaims), version)
        with self._lock:
            self._prometheus, self._reclaims, self.version = new_prom, new_reclaims, version

    def _read_extras(self) -> None:
        """Prometheus' history and the last reclaims, when due (runs in the reader thread after a read); never raises."""
        if self.prometheus_url:
            now = self.clock()
            if now - self._prometheus_attempt >= self.refresh:
                self._prometheus_attempt = now
                got = self._read_prometheus(now)
                self._changed(prometheus=got)
        if self.reclaim_hours:
            try:
                runs, _start, _end = self.accounting(self.reclaim_hours)
            except Exception as exc:  # noqa: BLE001 -- no accounting: the last reclaims stay as they were
                log.warning("reading the last reclaims (sacct) failed: %s", text.shown(str(exc))[:300])
                return
            self._changed(reclaims=reclaim_times(runs, self.lend_partition))

    def _read_prometheus(self, now: float) -> list[models.Sample] | None:
        """The last :data:`PROMETHEUS_WINDOW` of utilisation from Prometheus; None (logged) when that fails."""
        assert self.prometheus_url
        step = max(self.refresh, PROMETHEUS_WINDOW / PROMETHEUS_POINTS)
        end = now - now % step
        params = {
            "query": utilisation_query(self.lend_partition),
            "start": f"{end - PROMETHEUS_WINDOW:.3f}",
            "end": f"{end:.3f}",
            "step": f"{step:g}",
        }
        try:
            ask = self.prometheus_api or prometheus.api  # the adapter's, looked up late (tests replace it)
            return history_samples(ask(self.prometheus_url, "query_range", params, PROMETHEUS_TIMEOUT))
        except Exception as exc:  # noqa: BLE001 -- any failure falls back to the service's own history
            log.warning(
                "reading the utilisation from Prometheus failed (showing the service's own history): %s",
                text.shown(str(exc))[:300],
            )
            return None

    def job(self, job_id: int) -> JobRecord | None:
        """The job as the last read has it (None: not in the queue)."""
        return next((j for j in self.snapshot().jobs if j.job_id == job_id), None)

    # -- cached reads -------------------------------------------------------
    def _cached(self, slot: _Timed, ttl: float, fn: Callable[[], Any]) -> Any:
        with slot.lock:  # one read per slot in flight; the others wait and reuse it
            now = self.clock()
            if slot.value is None or now - slot.time >= ttl:
                slot.value = fn()
                slot.time = now
            return slot.value

    def named(self, ref: JobId) -> list[JobRecord]:
        """The queue's records that ``ref`` (an array task, a het component) names, from ``squeue --json``
        (the narrow read does not say which array or het job a record is part of); read at most once per
        ``refresh_seconds``.  Raises what the Slurm client raises when squeue fails."""
        with self._lock:
            slot = self._slow.setdefault("named", _Timed(float("-inf"), None))
        records: list[JobRecord] = self._cached(slot, self.refresh, self.slurm.jobs_json)
        return jobnames.named(ref, records)

    def detail(self, job: JobId | int) -> tuple[list[JobRecord], list[dict[str, Any]]]:
        """The accounting's records of the job (one per run) and the epilog's records of the job; cached briefly.

        ``job`` in Slurm's notation: a plain id is that job's runs, ``4_2`` / ``5+1`` the task's / component's.
        Raises what the Slurm client raises when sacct fails.
        """
        ref = job if isinstance(job, JobId) else JobId(job)
        key = str(ref)
        with self._lock:
            slot = self._details.get(key)
            if slot is None:
                slot = self._details[key] = _Timed(float("-inf"), None)
                while len(self._details) > DETAIL_CACHE:
                    self._details.popitem(last=False)
            else:
                self._details.move_to_end(key)

        def read() -> tuple[list[JobRecord], list[dict[str, Any]]]:
            found = self.slurm.job_runs(key, every_run=True)
            runs = [r for r in found if r.job_id == ref.job] if ref.plain else jobnames.named(ref, found)
            if not runs:
                return [], []
            unique = runs[-1].job_id  # the epilog names a run by its own id (SLURM_JOB_ID)
            return runs, views.job_outcomes(self.outcome_records(unique), unique)

        value: tuple[list[JobRecord], list[dict[str, Any]]] = self._cached(slot, self.detail_seconds, read)
        return value

    def outcome_records(self, job_id: int) -> list[dict[str, Any]]:
        """The epilog's records that name ``job_id``, from the end of every node's outcome file."""
        if not self.state_dir:
            return []
        needles = (f'"job_id": "{job_id}"'.encode(), f'"job_id":"{job_id}"'.encode())
        out = []
        for _node, line in tail_lines(self.state_dir):
            if any(n in line for n in needles):
                rec = load_record(line)
                if rec is not None:
                    out.append(rec)
        return out

    def coordinators_now(self) -> dict[str, set[str]] | None:
        """The coordinators when a read of them is at hand and not stale, without waiting; None else."""
        slot = self._slow.get("coord")
        if slot is None or slot.value is None or self.clock() - slot.time >= self.slow_seconds:
            return None
        found: dict[str, set[str]] = slot.value
        return found

    def coordinators(self) -> dict[str, set[str]]:
        """Account -> its coordinators (Slurm's accounts); empty when they cannot be read."""
        slot = self._slow.setdefault("coord", _Timed(float("-inf"), None))

        def read() -> dict[str, set[str]]:
            try:
                rows = self.slurm.account_coordinators()
            except Exception as exc:  # noqa: BLE001 -- nobody coordinates then
                log.warning("reading the coordinators failed: %s", text.shown(str(exc))[:300])
                return {}
            out: dict[str, set[str]] = {}
            for account, coordinators in rows:
                users = {u for u in coordinators.split(",") if text.matches("login", u)}
                if users and text.matches("name", account):
                    out[account] = users
            return out

        value: dict[str, set[str]] = self._cached(slot, self.slow_seconds, read)
        return value

    def accounting(self, hours: int) -> tuple[list[JobRecord], float, float]:
        """Every user's runs of the last ``hours`` (the accounting's allocations), and the window; cached for a
        minute."""
        slot = self._slow.setdefault(f"acct-{hours}", _Timed(float("-inf"), None))

        def read() -> tuple[list[JobRecord], float, float]:
            end = self.clock()
            start = end - hours * 3600
            return self.slurm.runs_since(start), start, end

        value: tuple[list[JobRecord], float, float] = self._cached(slot, self.slow_seconds, read)
        return value

    # -- the start-time forecast --------------------------------------------------
    def runtime_history(self, days: int = HISTORY_DAYS) -> list[JobRecord]:
        """The jobs that ended in the last ``days`` (every user's runtimes); cached for ``slow_seconds``.

        An empty window is no history (22.05's sacct says "Nothing found"); other failures raise.
        """
        slot = self._slow.setdefault(f"history-{days}", _Timed(float("-inf"), None))
        value: list[JobRecord] = self._cached(slot, self.slow_seconds, lambda: read_history(self.slurm, days))
        return value

    def forecast(self, spec: Any) -> Forecast:
        """Every pending job's predicted start (:func:`slurm_pool.predict.live.forecast`), shared for
        ``refresh_seconds``: one forward run in flight at a time, the others wait for it and reuse it.

        Raises what the Slurm client raises when squeue, sinfo or sacct fails (the last forecast is kept).
        """
        with self._lock:
            slot = self._slow.setdefault(f"forecast-{id(spec)}", _Timed(float("-inf"), None))
            model = self._models.get(id(spec))
            if model is None or model[0] is not spec:
                model = self._models[id(spec)] = (spec, PoolModel.from_spec(spec))

        def read() -> Forecast:
            history = self.runtime_history()
            return live_forecast(self.slurm, spec, now=self.clock(), history=history, pool=model[1])

        value: Forecast = self._cached(slot, self.refresh, read)
        return value

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
