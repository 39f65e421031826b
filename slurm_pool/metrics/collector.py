"""The Prometheus collector: one node-record query and one ``squeue --json`` per scrape.

Every metric family is built afresh in :meth:`PoolCollector.collect`, so a
node or job that is gone is gone from the next scrape.  A failing Slurm query
never turns into an HTTP 500: ``slurm_pool_up`` drops to 0,
``slurm_pool_scrape_errors_total{source}`` counts it, and whatever the other
query returned is still exported.

Metrics (all gauges unless ``_total``; GPU "units" are whole GPUs or MIG
instances, each one GRES unit)::

    slurm_pool_up                                   both Slurm queries worked
    slurm_pool_scrape_errors_total{source}          nodes | jobs | outcomes | reclaims | kubernetes |
                                                    deadline
    slurm_pool_scrape_duration_seconds
    slurm_pool_slurm_read_seconds{source}           nodes | jobs: the last read of Slurm, the command
                                                    and the parsing of its output
    slurm_pool_slurm_read_bytes{source}             nodes | jobs: what Slurm printed for it, when
                                                    the client says (``SlurmClient.last_read``)
    slurm_pool_gpus{node,type,state}                allocated | idle | drained | down
    slurm_pool_gpu_utilization_ratio                allocated / all units, pool-wide
    slurm_pool_partition_gpu_utilization_ratio{partition}
                                                    units held by the partition's jobs /
                                                    units on its nodes
    slurm_pool_tier_gpu_utilization_ratio{tier}     units held by the tier's (QOS's) jobs /
                                                    all units
    slurm_pool_allocated_gpus{partition,tier}       units held by running jobs
    slurm_pool_project_allocated_gpus{project}      units held by running jobs, by project (account)
    slurm_pool_project_guarantee_gpus{project,gres} a floating project's guarantee (gres/gpu or
                                                    gres/gpu:<type>), when given the spec's guarantees
    slurm_pool_project_guarantee_in_use_gpus{project,gres}
                                                    of it, held by its running jobs in its guarantee QOS
    slurm_pool_project_borrowed_gpus{project}       held by its running jobs in other tiers (not the
                                                    guarantees' own: its own servers)
    slurm_pool_jobs{partition,tier,state}           tier is the job's QOS
    slurm_pool_node_drained{node,owner,reason}      1 per drained node; owner slurm-pool | human
    slurm_pool_drained_nodes{owner}
    slurm_pool_node_lent{node}                      1 if running a job of the lend partition
    slurm_pool_lent_nodes
    slurm_pool_job_runs_total{node,reason}          epilog records: preempt | timeout |
                                                    terminate | checkpoint | none
    slurm_pool_preemptions_total{node,checkpointed} preempted runs; checkpointed true | false
    slurm_pool_checkpoint_age_seconds{reason}       histogram: event time - last checkpoint
    slurm_pool_reclaim_latency_seconds              histogram: jobs that took a lent node back,
                                                    submission to start (sacct, once a minute)
    slurm_pool_outcome_bad_records_total
    slurm_pool_inference_demand_gpus                GPUs (the bridge's gpu_resource) KServe's
                                                    InferenceServices want, when the exporter is
                                                    given the bridge (what the forecast reads back)
    slurm_pool_inference_demand{resource}           the same for every GPU-like resource, MIG
                                                    slices (nvidia.com/mig-*) included
    slurm_pool_rebalance_duration_seconds           the last rebalance run that held the bridge's
                                                    Lease: its duration, its end (Unix time) and
    slurm_pool_rebalance_last_end_timestamp_seconds the steps it carried out, as it left them on
    slurm_pool_rebalance_steps                      the Lease, when the exporter is given the bridge
    slurm_pool_bridge_gang*                         Volcano gangs: pending, lent groups and nodes, their
                                                    reclaims, when the bridge has gangs:
                                                    (:mod:`slurm_pool.metrics.gangs`)
    slurm_pool_slurm_jobs / _nodes / _counts_source slurmctld's own counts where it serves them, else the
                                                    records' (:mod:`slurm_pool.metrics.openmetrics_source`)

A failed Kubernetes read leaves the inference (rebalance, gang) families out of
that scrape (a gap in the history, not a false 0); so does a run record on the
Lease that does not read as one (counted as a ``kubernetes`` error).  Label
values and help texts come from Slurm, Kubernetes or the command line: each
goes through :func:`slurm_pool.text.shown`, so ``--once`` never writes a
control character to a terminal (the exposition format escapes only ``\\``,
``"`` and newlines).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Mapping, TypeVar

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric

from slurm_pool.adapters.records import JobRecord, NodeRecord
from slurm_pool.adapters.slurm import SlurmClient
from slurm_pool.metrics.gangs import gang_metrics
from slurm_pool.metrics.openmetrics_source import SlurmctldCounts, count_metrics, counts_from_records
from slurm_pool.metrics.outcomes import OutcomeTally
from slurm_pool.metrics.parse import lent_nodes, node_gpu_states
from slurm_pool.metrics.predicted import prediction_metrics
from slurm_pool.metrics.reclaims import ReclaimTally
from slurm_pool.text import shown
from slurm_pool.wellknown import LEND_PARTITION

log = logging.getLogger(__name__)

GPU_STATES = ("allocated", "idle", "drained", "down")
DRAIN_OWNERS = ("slurm-pool", "human")
SOURCES = ("nodes", "jobs", "outcomes", "reclaims", "kubernetes", "deadline", "predict")
#: Seconds a scrape waits for Slurm: below Prometheus' default scrape_timeout of 10 s.
DEFAULT_DEADLINE = 8.0
DEFAULT_LEND_PARTITION = LEND_PARTITION
MAX_REASON = 120

T = TypeVar("T")


def _ratio(num: float, den: float) -> float:
    return num / den if den > 0 else 0.0


def drain_owner(node: NodeRecord) -> str:
    """``slurm-pool`` if our reason prefix is on the drain, else ``human``."""
    return "slurm-pool" if node.ours else "human"


@dataclass
class _Reading:
    """One read of Slurm (and the epilog records) shared by the scrapes waiting on it."""

    nodes: list[NodeRecord] | None = None
    jobs: list[JobRecord] | None = None
    outcomes: list[Metric] | None = None  # built in the reader, which alone touches the tally
    reclaims: list[Metric] | None = None  # likewise
    inference: dict[str, int] | None = None  # GPU-like resource -> count KServe wants
    rebalance: dict[str, float] | None = None  # the last run's record: seconds, end, steps
    predicted: Mapping[str, tuple[list[float], int]] | None = None  # tier -> (predicted waits, no estimate)
    gangs: Mapping[str, Any] | None = None  # slurm_pool.metrics.gangs.gang_status
    reads: dict[str, tuple[float, int | None]] = field(default_factory=dict)  # source -> (seconds, bytes)
    failed: Counter[str] = field(default_factory=Counter)
    slurmctld: SlurmctldCounts | None = None  # slurmctld's own counts, where it serves them


class PoolCollector:
    """A custom collector: register it with a ``CollectorRegistry``.

    A scrape waits at most ``deadline`` seconds for Slurm (below Prometheus'
    default 10 s scrape timeout), then answers with ``slurm_pool_up 0``.
    Scrapes that arrive while a read is in flight wait on that same read
    instead of starting one each, so a hung Slurm never stacks queries.
    """

    def __init__(
        self,
        slurm: SlurmClient,
        *,
        state_dir: str | None = None,
        lend_partition: str = DEFAULT_LEND_PARTITION,
        deadline: float = DEFAULT_DEADLINE,
        reclaims: ReclaimTally | None = None,
        inference: Callable[[], Mapping[str, int]] | None = None,
        gpu_resource: str = "nvidia.com/gpu",
        rebalance: Callable[[], Mapping[str, float]] | None = None,
        predict: Callable[[], Mapping[str, tuple[list[float], int]]] | None = None,
        guarantees: Callable[[list[JobRecord]], Mapping[str, Any] | None] | None = None,
        gangs: Callable[[], Mapping[str, Any]] | None = None,
        slurmctld_counts: Callable[[], SlurmctldCounts | None] | None = None,
    ):
        """``guarantees``: the jobs -> :func:`slurm_pool.metrics.status.guarantee_status` of the spec;
        ``gangs``: a reader of :func:`slurm_pool.metrics.gangs.gang_status`; ``slurmctld_counts``: a
        reader of slurmctld's own counts (:class:`slurm_pool.metrics.openmetrics_source.EndpointReader`),
        which adds the families of :mod:`slurm_pool.metrics.openmetrics_source`."""
        self.slurm = slurm
        self.slurmctld_counts = slurmctld_counts
        self.gangs = gangs
        self.guarantees = guarantees
        self.predict = predict
        self.reclaims = reclaims
        self.inference = inference
        self.rebalance = rebalance
        self.gpu_resource = gpu_resource
        self.lend_partition = lend_partition
        self.deadline = deadline
        self.outcomes = OutcomeTally(state_dir) if state_dir else None
        self.errors: Counter[str] = Counter({s: 0 for s in SOURCES})
        self._lock = threading.Lock()  # guards _inflight and errors
        self._inflight: Future[_Reading] | None = None
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="slurm-pool-read")

    def describe(self) -> list[Metric]:
        """Nothing up front: registering must not query Slurm."""
        return []

    def collect(self) -> Iterator[Metric]:
        """Every family of one scrape; never raises, whatever Slurm printed."""
        yield from self._collect()

    # -- one scrape ------------------------------------------------------
    def _read(self) -> _Reading:
        """Query Slurm once (runs in the reader thread)."""
        out = _Reading()
        for source, fn in (("nodes", self.slurm.nodes), ("jobs", self.slurm.jobs)):
            start = time.monotonic()
            try:
                setattr(out, source, fn())
            except Exception as exc:  # noqa: BLE001 -- any failure becomes a metric
                out.failed[source] += 1
                log.warning("%s failed: %s", source, exc)
                out.reads[source] = (time.monotonic() - start, None)  # last_read is still the read before
                continue
            out.reads[source] = (time.monotonic() - start, read_bytes(self.slurm, source))
        # -- slurmctld's own counts (Slurm 25.11+); None: counted from the records below
        if self.slurmctld_counts is not None:
            out.slurmctld = self.slurmctld_counts()
        if self.outcomes is not None:
            try:
                out.failed["outcomes"] += self.outcomes.refresh()
                out.outcomes = outcome_metrics(self.outcomes)
            except Exception as exc:  # noqa: BLE001
                out.failed["outcomes"] += 1
                log.warning("outcomes failed: %s", exc)
        if self.reclaims is not None:
            try:
                self.reclaims.refresh()
            except Exception as exc:  # noqa: BLE001
                out.failed["reclaims"] += 1
                log.warning("reclaims failed: %s", exc)
            out.reclaims = [self.reclaims.metric()]
        if self.inference is not None:
            try:
                out.inference = {str(k): int(v) for k, v in self.inference().items()}
            except Exception as exc:  # noqa: BLE001
                out.failed["kubernetes"] += 1
                log.warning("reading the inference demand failed: %s", exc)
        if self.rebalance is not None:
            try:
                out.rebalance = {str(k): float(v) for k, v in self.rebalance().items()}
            except Exception as exc:  # noqa: BLE001
                out.failed["kubernetes"] += 1
                log.warning("reading the last rebalance run failed: %s", shown(exc))
        if self.gangs is not None:
            try:
                out.gangs = self.gangs()
            except Exception as exc:  # noqa: BLE001
                out.failed["kubernetes"] += 1
                log.warning("reading the gangs failed: %s", shown(exc))
        if self.predict is not None:
            try:
                out.predicted = self.predict()
            except Exception as exc:  # noqa: BLE001
                out.failed["predict"] += 1
                log.warning("predicting start times failed: %s", shown(exc))
        return out

    def _shared_read(self) -> Future[_Reading]:
        with self._lock:
            fresh = self._inflight is None or self._inflight.done()
            if fresh:
                self._inflight = self._pool.submit(self._read)
            fut = self._inflight
        assert fut is not None
        if fresh:  # outside the lock: a read already done runs the callback right here
            fut.add_done_callback(self._count)
        return fut

    def _count(self, fut: Future[_Reading]) -> None:
        """Count a finished read's failures once, however many scrapes shared it."""
        if fut.cancelled() or fut.exception() is not None:
            return
        with self._lock:
            self.errors.update(fut.result().failed)

    def _build(self, source: str, fn: Callable[[], list[Metric]]) -> list[Metric] | None:
        try:
            return fn()
        except Exception as exc:  # noqa: BLE001 -- unexpected values in well-formed output
            with self._lock:
                self.errors[source] += 1
            log.warning("building the %s metrics failed: %s", source, exc)
            return None

    def _collect(self) -> list[Metric]:
        start = time.monotonic()
        fut = self._shared_read()
        try:
            reading = fut.result(timeout=self.deadline)
        except FutureTimeout:
            with self._lock:
                self.errors["deadline"] += 1
            log.warning("Slurm did not answer within the %.1f s scrape deadline", self.deadline)
            reading = _Reading()
        nodes, jobs = reading.nodes, reading.jobs
        out: list[Metric] = []
        built_nodes = self._build("nodes", lambda: node_metrics(nodes)) if nodes is not None else None
        built_jobs = self._build("jobs", lambda: job_metrics(jobs)) if jobs is not None else None
        built_pool = None
        if nodes is not None and jobs is not None:
            built_pool = self._build("nodes", lambda: pool_metrics(nodes, jobs, self.lend_partition))
        built_guarantees = None
        if jobs is not None and self.guarantees is not None:
            guarantees = self.guarantees
            built_guarantees = self._build("jobs", lambda: guarantee_metrics(guarantees(jobs)))
        for built in (built_nodes, built_jobs, built_pool, built_guarantees):
            out.extend(built or [])
        out.extend(reading.outcomes or [])
        out.extend(reading.reclaims or [])
        if reading.inference is not None:
            out.extend(inference_metrics(reading.inference, self.gpu_resource))
        if reading.rebalance is not None:
            out.extend(rebalance_metrics(reading.rebalance))
        if reading.predicted is not None:
            out.extend(prediction_metrics(reading.predicted))
        if reading.gangs is not None:
            gangs = reading.gangs
            out.extend(self._build("kubernetes", lambda: gang_metrics(gangs)) or [])
        out.extend(read_metrics(reading.reads))
        # -- slurmctld's counts, else the same counts of the records read
        if self.slurmctld_counts is not None:
            if reading.slurmctld is not None:
                out.extend(count_metrics(reading.slurmctld, "openmetrics"))
            elif nodes is not None and jobs is not None:
                out.extend(
                    self._build("jobs", lambda: count_metrics(counts_from_records(nodes, jobs), "commands")) or []
                )
        healthy = built_nodes is not None and built_jobs is not None and built_pool is not None
        up = GaugeMetricFamily("slurm_pool_up", "1 if the last node and job queries both worked.")
        up.add_metric([], 1.0 if healthy else 0.0)
        errors = CounterMetricFamily(
            "slurm_pool_scrape_errors", "Failed queries while scraping, by source.", labels=["source"]
        )
        with self._lock:
            counts = dict(self.errors)
        for source in SOURCES:
            errors.add_metric([source], float(counts.get(source, 0)))
        duration = GaugeMetricFamily("slurm_pool_scrape_duration_seconds", "Time the last scrape took.")
        duration.add_metric([], time.monotonic() - start)
        return [up, errors, duration, *out]


def read_bytes(slurm: object, source: str) -> int | None:
    """What Slurm printed for the client's last ``source`` read, if it says (``last_read``: source ->
    (bytes, seconds)); None otherwise."""
    last = getattr(slurm, "last_read", None)
    entry = last.get(source) if isinstance(last, Mapping) else None
    if isinstance(entry, tuple) and len(entry) == 2 and isinstance(entry[0], int) and not isinstance(entry[0], bool):
        return entry[0] if entry[0] >= 0 else None
    return None


def read_metrics(reads: Mapping[str, tuple[float, int | None]]) -> list[Metric]:
    """Seconds (and bytes, where known) of the last read of each Slurm source; none before the first."""
    seconds = GaugeMetricFamily(
        "slurm_pool_slurm_read_seconds",
        "Seconds the last read of Slurm took (the command and the parsing of its output), by source.",
        labels=["source"],
    )
    size = GaugeMetricFamily(
        "slurm_pool_slurm_read_bytes", "Bytes Slurm printed for the last read, by source.", labels=["source"]
    )
    for source in sorted(reads):
        took, nbytes = reads[source]
        seconds.add_metric([source], took)
        if nbytes is not None:
            size.add_metric([source], float(nbytes))
    return [seconds, size] if reads else []


#: Families of the last rebalance run's record, by its key (:func:`slurm_pool.bridge.lease.last_run`).
REBALANCE = {
    "seconds": ("slurm_pool_rebalance_duration_seconds", "Seconds the last rebalance run that held the Lease took."),
    "end": ("slurm_pool_rebalance_last_end_timestamp_seconds", "When the last rebalance run ended (Unix time)."),
    "steps": ("slurm_pool_rebalance_steps", "Steps the last rebalance run carried out."),
}


def rebalance_metrics(record: Mapping[str, float]) -> list[Metric]:
    """The last rebalance run as it left itself on the bridge's Lease: each value it recorded."""
    out: list[Metric] = []
    for key, (name, text) in REBALANCE.items():
        if key in record:
            fam = GaugeMetricFamily(name, text)
            fam.add_metric([], float(record[key]))
            out.append(fam)
    return out


def node_metrics(nodes: Iterable[NodeRecord]) -> list[Metric]:
    """GPUs by node, type and state; drained nodes and who drained them."""
    gpus = GaugeMetricFamily(
        "slurm_pool_gpus",
        "GPU units (GPUs or MIG instances) by node, GRES type and state.",
        labels=["node", "type", "state"],
    )
    drained = GaugeMetricFamily(
        "slurm_pool_node_drained",
        "1 for each drained or draining node; owner slurm-pool if its reason has our prefix.",
        labels=["node", "owner", "reason"],
    )
    drained_count = GaugeMetricFamily(
        "slurm_pool_drained_nodes", "Drained or draining nodes by who drained them.", labels=["owner"]
    )
    owners: Counter[str] = Counter({o: 0 for o in DRAIN_OWNERS})
    for node in sorted(nodes, key=lambda n: n.name):
        for gtype, row in node_gpu_states(node.state, node.gres, node.gres_used).items():
            for state in GPU_STATES:
                gpus.add_metric([shown(node.name), shown(gtype), state], float(row[state]))
        if node.drained:
            owner = drain_owner(node)
            owners[owner] += 1
            drained.add_metric([shown(node.name), owner, shown(node.reason[:MAX_REASON])], 1.0)
    for owner in DRAIN_OWNERS:
        drained_count.add_metric([owner], float(owners[owner]))
    return [gpus, drained, drained_count]


def job_state_label(job: JobRecord) -> str:
    """The ``state`` label of a job: its base state, or ``completing`` while its
    epilog runs (22.05 prints only that word then; 23.02+ adds it as a flag)."""
    return "completing" if "COMPLETING" in job.state else job.state.base.lower()


def job_metrics(jobs: Iterable[JobRecord]) -> list[Metric]:
    """Jobs by partition, tier (QOS) and state."""
    fam = GaugeMetricFamily(
        "slurm_pool_jobs",
        "Jobs known to slurmctld by partition, tier (QOS) and state.",
        labels=["partition", "tier", "state"],
    )
    counts: Counter[tuple[str, str, str]] = Counter((j.partition, j.qos, job_state_label(j)) for j in jobs)
    for key in sorted(counts):
        fam.add_metric([shown(v) for v in key], float(counts[key]))
    return [fam]


def pool_metrics(nodes: list[NodeRecord], jobs: list[JobRecord], lend_partition: str) -> list[Metric]:
    """Utilization ratios, GPUs held per partition and tier, and lent nodes."""
    node_total: dict[str, int] = {}
    allocated = 0
    for node in nodes:
        rows = node_gpu_states(node.state, node.gres, node.gres_used).values()
        node_total[node.name] = sum(sum(r.values()) for r in rows)
        allocated += sum(r["allocated"] for r in rows)
    total = sum(node_total.values())
    part_total: Counter[str] = Counter()
    for node in nodes:
        for part in node.partitions:
            part_total[part] += node_total[node.name]
    held: Counter[tuple[str, str]] = Counter()
    by_project: Counter[str] = Counter()
    for job in jobs:
        if job.on_node:
            held[(job.partition, job.qos)] += job.gpus
            by_project[job.account] += job.gpus
    lent = lent_nodes(jobs, lend_partition)
    util = GaugeMetricFamily("slurm_pool_gpu_utilization_ratio", "Allocated GPU units / all GPU units of the pool.")
    util.add_metric([], _ratio(allocated, total))
    by_part = GaugeMetricFamily(
        "slurm_pool_partition_gpu_utilization_ratio",
        "GPU units held by a partition's jobs / GPU units on the partition's nodes.",
        labels=["partition"],
    )
    part_held: Counter[str] = Counter()
    tier_held: Counter[str] = Counter()
    for (part, tier), n in held.items():
        part_held[part] += n
        tier_held[tier] += n
    for part in sorted(set(part_total) | set(part_held)):
        by_part.add_metric([shown(part)], _ratio(part_held[part], part_total[part]))
    by_tier = GaugeMetricFamily(
        "slurm_pool_tier_gpu_utilization_ratio",
        "GPU units held by a tier's (QOS's) jobs / all GPU units of the pool.",
        labels=["tier"],
    )
    for tier in sorted(tier_held):
        by_tier.add_metric([shown(tier)], _ratio(tier_held[tier], total))
    held_fam = GaugeMetricFamily(
        "slurm_pool_allocated_gpus",
        "GPU units held by running jobs by partition and tier.",
        labels=["partition", "tier"],
    )
    for key in sorted(held):
        held_fam.add_metric([shown(v) for v in key], float(held[key]))
    project_fam = GaugeMetricFamily(
        "slurm_pool_project_allocated_gpus",
        "GPU units held by running jobs by project (the jobs' account).",
        labels=["project"],
    )
    for project in sorted(by_project):
        project_fam.add_metric([shown(project)], float(by_project[project]))
    names = {n.name for n in nodes}
    part = shown(lend_partition)
    per_node = GaugeMetricFamily(
        "slurm_pool_node_lent", f"1 if the node runs a job of the {part} partition.", labels=["node"]
    )
    for name in sorted(names):
        per_node.add_metric([shown(name)], 1.0 if name in lent else 0.0)
    count = GaugeMetricFamily("slurm_pool_lent_nodes", f"Nodes running a job of the {part} partition.")
    count.add_metric([], float(len(lent & names)))
    return [util, by_part, by_tier, held_fam, project_fam, per_node, count]


def guarantee_metrics(status: Mapping[str, Any] | None) -> list[Metric]:
    """Each floating project's guarantee, the part of it in use and what it borrows (``status``:
    :func:`slurm_pool.metrics.status.guarantee_status`; None, a spec without guarantees: none)."""
    if status is None:
        return []
    promised = GaugeMetricFamily(
        "slurm_pool_project_guarantee_gpus",
        "GPUs a floating project is guaranteed in the guarantees' partition, per guarantee key.",
        labels=["project", "gres"],
    )
    in_use = GaugeMetricFamily(
        "slurm_pool_project_guarantee_in_use_gpus",
        "GPUs of a floating project's guarantee held by its running jobs in its guarantee QOS.",
        labels=["project", "gres"],
    )
    borrowed = GaugeMetricFamily(
        "slurm_pool_project_borrowed_gpus",
        "GPUs held by a floating project's running jobs in tiers other than its guarantee.",
        labels=["project"],
    )
    for row in status["projects"]:
        project = shown(row["project"])
        for key, n in row["guarantee"].items():
            promised.add_metric([project, shown(key)], float(n))
            in_use.add_metric([project, shown(key)], float(row["in_use"].get(key, 0)))
        borrowed.add_metric([project], float(row["borrowed"]))
    return [promised, in_use, borrowed]


def outcome_metrics(tally: OutcomeTally) -> list[Metric]:
    """Counters and the checkpoint-age histogram from the epilog's records."""
    runs = CounterMetricFamily(
        "slurm_pool_job_runs", "Finished job runs recorded by the epilog, by end reason.", labels=["node", "reason"]
    )
    for key in sorted(tally.runs):
        runs.add_metric(list(key), float(tally.runs[key]))
    pre = CounterMetricFamily(
        "slurm_pool_preemptions",
        "Preempted job runs, by whether a checkpoint followed the event.",
        labels=["node", "checkpointed"],
    )
    for key in sorted(tally.preemptions):
        pre.add_metric(list(key), float(tally.preemptions[key]))
    ages = HistogramMetricFamily(
        "slurm_pool_checkpoint_age_seconds",
        "Work lost at a preempt/timeout/terminate event: event time - last checkpoint.",
        labels=["reason"],
    )
    for reason in sorted(tally.ages):
        hist = tally.ages[reason]
        ages.add_metric([reason], hist.buckets(), hist.total)
    bad = CounterMetricFamily("slurm_pool_outcome_bad_records", "Outcome lines that were not valid records.")
    bad.add_metric([], float(tally.bad_records))
    return [runs, pre, ages, bad]


def inference_metrics(demand: Mapping[str, int], gpu_resource: str) -> list[Metric]:
    """The inference tier's demand as KServe shows it (see :mod:`slurm_pool.bridge.demand`)."""
    gpus = GaugeMetricFamily(
        "slurm_pool_inference_demand_gpus", f"GPUs ({shown(gpu_resource)}) the InferenceServices want"
    )
    gpus.add_metric([], float(demand.get(gpu_resource, 0)))
    each = GaugeMetricFamily(
        "slurm_pool_inference_demand",
        "GPU-like devices (whole GPUs or MIG slices) the InferenceServices want, by resource",
        labels=["resource"],
    )
    for resource, count in sorted(demand.items()):
        each.add_metric([shown(resource)], float(count))
    return [gpus, each]
