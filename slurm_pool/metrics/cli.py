"""``slurm-pool exporter``: serve the pool's metrics at ``/metrics`` for Prometheus.

Binds loopback by default; put it behind whatever already guards the
controller (or pass ``--listen`` explicitly) to expose it.  A scrape config::

    scrape_configs:
      - job_name: slurm-pool
        scrape_interval: 30s
        static_configs: [{targets: ["127.0.0.1:9877"]}]
"""

from __future__ import annotations

import os
import re
import signal
import threading
from typing import Any, Callable, Mapping

import click

from slurm_pool import nodeconf
from slurm_pool.clitypes import Finite
from slurm_pool.metrics.collector import DEFAULT_DEADLINE, DEFAULT_LEND_PARTITION
from slurm_pool.text import check_free_text, has_control, matches, shown

DEFAULT_LISTEN = "127.0.0.1:9877"


def parse_listen(value: str) -> tuple[str, int]:
    """``host:port``, ``[v6]:port`` or ``:port`` (loopback) -> (host, port); the host a name or an address."""
    import ipaddress

    host, sep, port = value.rpartition(":")
    if not sep or not _PORT_RE.fullmatch(port) or not 0 <= int(port) <= 65535:
        raise ValueError(f"{value!r} is not HOST:PORT")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if host:
        if has_control(host) or any(c.isspace() for c in host):  # an IPv6 scope id takes anything
            raise ValueError(f"{value!r}: {host!r} is not a host name or address")
        try:
            ipaddress.ip_address(host)
        except ValueError:
            if not matches("host", host):
                raise ValueError(f"{value!r}: {host!r} is not a host name or address") from None
    return host or "127.0.0.1", int(port)


_PORT_RE = re.compile(r"[0-9]{1,5}")


def default_state_dir(env: Mapping[str, str] | None = None) -> str:
    """node.conf's ``state_dir`` (beside ``$SLURM_CONF``, else /etc/slurm-pool), where the epilog writes."""
    try:
        return nodeconf.load(trusted=False, env=dict(os.environ if env is None else env)).get("state_dir")
    except nodeconf.ConfigError:
        return nodeconf.DEFAULTS["state_dir"]


def build_registry(
    runner: Any = None,
    *,
    state_dir: str | None = None,
    lend_partition: str = DEFAULT_LEND_PARTITION,
    process_metrics: bool = True,
    deadline: float = DEFAULT_DEADLINE,
    reclaim_window: float = 0.0,
    reclaim_interval: float = 60.0,
    inference: Callable[[], Mapping[str, int]] | None = None,
    gpu_resource: str = "nvidia.com/gpu",
    rebalance: Callable[[], Mapping[str, float]] | None = None,
    predict: Callable[[], Mapping[str, tuple[list[float], int]]] | None = None,
    guarantees: Callable[[list], Mapping[str, Any] | None] | None = None,
    gangs: Callable[[], Mapping[str, Any]] | None = None,
    slurmctld_counts: str = "off",
) -> Any:
    """A fresh ``CollectorRegistry`` holding the pool collector (and process metrics).

    ``reclaim_window`` > 0 reads ``sacct`` over that many seconds, at most every ``reclaim_interval``
    seconds, for the reclaim histogram.  ``inference`` reads the inference tier's demand per GPU-like
    resource on each scrape (:func:`slurm_pool.bridge.k8s.inference_demand`); ``rebalance`` the last
    rebalance run's record on the bridge's Lease (:func:`rebalance_reader`); ``predict`` the predicted
    waits of the pending jobs (:class:`slurm_pool.metrics.predicted.PredictionReader`); ``guarantees``
    the floating guarantees of the jobs scraped (:func:`guarantees_reader`); ``gangs`` the Volcano
    gangs on lent nodes (:func:`gangs_reader`); ``slurmctld_counts`` (``auto``, ``commands``, ``off``) adds jobs
    by partition and state and nodes by state, from slurmctld's own counts where it serves them (``auto``) or
    from the records (:mod:`slurm_pool.metrics.openmetrics_source`).
    """
    from prometheus_client import CollectorRegistry, ProcessCollector

    from slurm_pool.adapters.slurm import SlurmClient
    from slurm_pool.metrics.collector import PoolCollector
    from slurm_pool.metrics.openmetrics_source import counts_reader
    from slurm_pool.metrics.reclaims import ReclaimTally

    slurm = SlurmClient(runner)
    reclaims = None
    if reclaim_window > 0:

        def read(since: str) -> list:
            return slurm.accounting(since, all_users=True, allocations=True, duplicates=True)

        reclaims = ReclaimTally(read, lend_partition, window=reclaim_window, interval=reclaim_interval)
    registry = CollectorRegistry()
    registry.register(
        PoolCollector(
            slurm,
            state_dir=state_dir or None,
            lend_partition=lend_partition,
            deadline=deadline,
            reclaims=reclaims,
            inference=inference,
            gpu_resource=gpu_resource,
            rebalance=rebalance,
            predict=predict,
            guarantees=guarantees,
            gangs=gangs,
            slurmctld_counts=counts_reader(slurmctld_counts, slurm.config),
        )
    )
    if process_metrics:
        ProcessCollector(registry=registry)
    return registry


def prediction_reader(
    spec_path: str, runner: Any, interval: float
) -> Callable[[], Mapping[str, tuple[list[float], int]]]:
    """The spec's pool, predicted from Slurm at most every ``interval`` seconds (its own Slurm client)."""
    from slurm_pool.adapters.slurm import SlurmClient
    from slurm_pool.metrics.predicted import PredictionReader
    from slurm_pool.predict.live import RecentRuns, forecast
    from slurm_pool.predict.pool import PoolModel
    from slurm_pool.spec import load_spec

    spec = load_spec(spec_path)
    pool = PoolModel.from_spec(spec)
    slurm = SlurmClient(runner)
    recent = RecentRuns(slurm)  # later forecasts read only the runs that ended since the last
    return PredictionReader(lambda: forecast(slurm, spec, pool=pool, late_range=False, runs=recent()), interval)


def guarantees_reader(spec_path: str, lend_partition: str) -> Callable[[list], Mapping[str, Any] | None] | None:
    """The spec's floating guarantees as a function of the scraped jobs (None: the spec has none)."""
    from slurm_pool.metrics.status import guarantee_status
    from slurm_pool.spec import load_spec

    spec = load_spec(spec_path)
    if spec.guarantees is None:
        return None
    return lambda jobs: guarantee_status(spec, jobs, lend_partition)


def rebalance_reader(api: Any, namespace: str, name: str) -> Callable[[], Mapping[str, float]]:
    """A reader of the last rebalance run's record on the bridge's Lease (none yet: an empty record).

    The values are checked as they are read (:func:`slurm_pool.bridge.lease.last_run`): one that does not
    read raises, which the collector counts as a failed Kubernetes read.
    """
    from slurm_pool.bridge.lease import last_run

    return lambda: last_run(api.read_lease(namespace, name))


def gang_observer(config: Any, api: Any) -> Callable[[], Mapping[str, Any]]:
    """A reader of the gangs on lent nodes (:func:`slurm_pool.metrics.gangs.gang_status`): Kubernetes'
    Nodes and Volcano's objects only, read as ``rebalance`` reads them; no Slurm read, no plan, no change."""
    from slurm_pool.bridge.gangs import read_gangs
    from slurm_pool.bridge.k8sview import k8s_node_view
    from slurm_pool.bridge.objects import listed
    from slurm_pool.metrics.gangs import gang_status

    settings = config.gangs

    def read() -> Mapping[str, Any]:
        views = (k8s_node_view(o, config.gpu_resource) for o in listed(api.list_nodes(), "Nodes"))
        gangs = read_gangs(
            listed(api.list_podgroups(settings.namespaces), "PodGroups"),
            listed(api.list_vcjobs(settings.namespaces), "Jobs"),
            listed(api.list_priority_classes(), "PriorityClasses"),
            settings,
            config.gpu_resource,
            problems=[],
        )
        return gang_status({v.name: v for v in views}, gangs, config.gpu_resource)

    return read


def gangs_reader(spec_path: str, kubeconfig: str | None) -> Callable[[], Mapping[str, Any]] | None:
    """The spec's bridge wired to Kubernetes: a reader of its gangs (None: no ``bridge.gangs``)."""
    from slurm_pool.bridge.k8s import KubernetesAPI
    from slurm_pool.spec import load_spec

    config = load_spec(spec_path).bridge
    if config is None or config.gangs is None:
        return None
    try:
        api = KubernetesAPI.connect(config, kubeconfig)
    except Exception as exc:  # noqa: BLE001 -- the client raises several kinds for an unusable config
        raise click.BadParameter(f"no usable Kubernetes configuration: {exc}", param_hint="--kubeconfig") from None
    return gang_observer(config, api)


def inference_reader(spec_path: str, kubeconfig: str | None) -> tuple[Callable[[], Mapping[str, int]], str]:
    """The spec's bridge section wired to Kubernetes: a reader of the demand, and the GPU resource."""
    inference, _, gpu_resource = bridge_readers(spec_path, kubeconfig)
    return inference, gpu_resource


def bridge_readers(
    spec_path: str, kubeconfig: str | None
) -> tuple[Callable[[], Mapping[str, int]], Callable[[], Mapping[str, float]], str]:
    """The spec's bridge section wired to Kubernetes: readers of the demand and of the last rebalance
    run (on the bridge's Lease), and the GPU resource."""
    from slurm_pool.bridge.k8s import KubernetesAPI, inference_demand
    from slurm_pool.spec import load_spec

    config = load_spec(spec_path).bridge
    if config is None:
        raise click.BadParameter(f"{spec_path}: the spec has no bridge section", param_hint="--spec")
    try:
        api = KubernetesAPI.connect(config, kubeconfig)
    except Exception as exc:  # noqa: BLE001 -- the client raises several kinds for an unusable config
        raise click.BadParameter(f"no usable Kubernetes configuration: {exc}", param_hint="--kubeconfig") from None
    rebalance = rebalance_reader(api, config.lease_namespace, config.lease_name)
    return (lambda: inference_demand(api, config)), rebalance, config.gpu_resource


@click.command("exporter")
@click.option("--listen", default=DEFAULT_LISTEN, show_default=True, help="HOST:PORT to serve /metrics on.")
@click.option(
    "--state-dir",
    default=None,
    help="Directory with <node>/outcomes.jsonl [node.conf's state_dir]; '' turns outcome counters off.",
)
@click.option(
    "--lend-partition",
    default=DEFAULT_LEND_PARTITION,
    show_default=True,
    help="Partition whose running jobs mean a node is lent out.",
)
@click.option(
    "--slurm-timeout",
    default=10.0,
    show_default=True,
    type=Finite(min=0.001),
    help="Seconds one sinfo/squeue call may take.",
)
@click.option(
    "--scrape-deadline",
    default=DEFAULT_DEADLINE,
    show_default=True,
    type=Finite(min=0.001),
    help="Seconds a scrape waits for Slurm before answering slurm_pool_up 0 (keep it below Prometheus' scrape_timeout).",
)
@click.option(
    "--reclaim-window",
    default=3600.0,
    show_default=True,
    type=Finite(min=0),
    help="Seconds of sacct history read once a minute for slurm_pool_reclaim_latency_seconds (0: off).",
)
@click.option(
    "--reclaim-interval",
    default=60.0,
    show_default=True,
    type=Finite(min=0),
    help="Seconds between those sacct reads.",
)
@click.option(
    "--spec",
    "spec_path",
    default=None,
    type=click.Path(dir_okay=False),
    help="Pool spec with a bridge section: also export the inference demand KServe shows "
    "(slurm_pool_inference_demand_gpus, which the bridge's forecast reads back) and the last rebalance run "
    "(slurm_pool_rebalance_duration_seconds); with bridge.gangs, the Volcano gangs pending and lent "
    "(slurm_pool_bridge_gang*).",
)
@click.option(
    "--kubeconfig",
    default=None,
    type=click.Path(dir_okay=False),
    help="Kubeconfig for --spec [$KUBECONFIG, ~/.kube/config, else in-cluster].",
)
@click.option(
    "--predict-spec",
    default=None,
    type=click.Path(exists=True, dir_okay=False),
    help="Pool spec: also export each pending job's predicted wait (slurm_pool_pending_predicted_wait_seconds), "
    "as `slurm-pool why` predicts it; with floating guarantees, also each project's guarantee, use and borrowing "
    "(so does --spec).",
)
@click.option(
    "--predict-interval",
    default=60.0,
    show_default=True,
    type=Finite(min=1),
    help="Seconds between forecasts for --predict-spec (each reads squeue --json, sinfo and sacct).",
)
@click.option(
    "--slurmctld-counts",
    type=click.Choice(["auto", "commands", "off"]),
    default="auto",
    show_default=True,
    help="Jobs by partition and state and nodes by state (slurm_pool_slurm_jobs, slurm_pool_slurm_nodes): auto "
    "takes slurmctld's own OpenMetrics counts where it serves them (Slurm 25.11+, MetricsType=metrics/openmetrics), "
    "else counts the squeue/sinfo records; commands always counts the records; off leaves them out.",
)
@click.option("--once", is_flag=True, help="Print one scrape to stdout and exit.")
def exporter(
    listen: str,
    state_dir: str | None,
    lend_partition: str,
    slurm_timeout: float,
    scrape_deadline: float,
    reclaim_window: float,
    reclaim_interval: float,
    spec_path: str | None,
    kubeconfig: str | None,
    predict_spec: str | None,
    predict_interval: float,
    slurmctld_counts: str,
    once: bool,
) -> None:
    """Serve Prometheus metrics of the pool (GPUs, jobs, drains, lending, preemptions)."""
    from prometheus_client import generate_latest, start_http_server

    from slurm_pool.adapters.runner import SubprocessRunner

    try:
        host, port = parse_listen(listen)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--listen") from exc
    try:
        check_free_text(lend_partition, "--lend-partition", max_len=256)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--lend-partition") from None
    if kubeconfig and not spec_path:
        raise click.BadParameter("needs --spec (the bridge section says what to read)", param_hint="--kubeconfig")
    if state_dir is None:
        state_dir = default_state_dir()
    inference, rebalance, gpu_resource, gangs = None, None, "nvidia.com/gpu", None
    if spec_path:
        inference, rebalance, gpu_resource = bridge_readers(spec_path, kubeconfig)
        gangs = gangs_reader(spec_path, kubeconfig)
    predict = None
    if predict_spec:
        predict = prediction_reader(predict_spec, SubprocessRunner(default_timeout=slurm_timeout), predict_interval)
    guarantees = None
    for path in (predict_spec, spec_path):
        if path and guarantees is None:
            guarantees = guarantees_reader(path, lend_partition)
    registry = build_registry(
        SubprocessRunner(default_timeout=slurm_timeout),
        state_dir=state_dir,
        lend_partition=lend_partition,
        deadline=scrape_deadline,
        reclaim_window=reclaim_window,
        reclaim_interval=reclaim_interval,
        inference=inference,
        gpu_resource=gpu_resource,
        rebalance=rebalance,
        predict=predict,
        guarantees=guarantees,
        gangs=gangs,
        slurmctld_counts=slurmctld_counts,
    )
    if once:
        click.echo(generate_latest(registry).decode(), nl=False)
        return
    try:
        server, thread = start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        raise click.ClickException(shown(f"cannot listen on {host}:{port}: {exc.strerror or exc}")) from None
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    click.echo(f"slurm-pool exporter listening on {host}:{server.server_port}", err=True)
    try:
        while not stop.wait(3600):
            pass
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


if __name__ == "__main__":
    exporter(prog_name="slurm-pool exporter")
