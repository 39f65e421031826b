"""The exporter against the real local cluster, scraped by the real ``prometheus`` binary.

One exporter and one Prometheus (scrape interval 1 s, loopback only) serve
this module; both are stopped by pid at its end.  Every assertion reads
Prometheus' HTTP query API, so the whole path -- sinfo/squeue JSON, the
collector, the HTTP exposition, a real scrape -- is covered.  The last test
runs every PromQL expression of ``docs/grafana/slurm-pool.json`` against that
Prometheus (after a preemption, a drain, lending and pending work) and draws
each panel as a PNG from the range API (no Grafana in Debian 12 or on PyPI).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Callable

import pytest

from slurm_pool.localcluster import procs
from slurm_pool.metrics import panels
from slurm_pool.render.context import gpu_units
from slurm_pool.spec.hosts import expand
from tests.support.patience import patience
from tests.support.slurm_cluster import self_requeue

pytestmark = [pytest.mark.slurm, pytest.mark.k8s]

REPO = Path(__file__).resolve().parent.parent.parent
# Long enough to outlive every wait of a test on a loaded machine; the cluster fixture cancels it.
SLEEP_JOB = "#!/bin/bash\nsleep 600\n"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(url: str, timeout: float = 3.0) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310 -- loopback only
        return resp.read().decode()


def wait_for(fn: Callable[[], Any], timeout: float, what: str) -> Any:
    """Poll ``fn`` (HTTP errors count as "not yet") until it returns something truthy."""
    return procs.wait_for(fn, patience(timeout), what, interval=0.5, ignore=(OSError,))


def wait_equal(fn: Callable[[], Any], want: Any, timeout: float, what: str) -> None:
    """Poll ``fn`` until it returns ``want``; on timeout the error shows the last answer."""
    seen: list[Any] = []

    def check() -> bool:
        seen[:] = [fn()]
        return seen[0] == want

    try:
        wait_for(check, timeout, what)
    except TimeoutError as exc:
        raise TimeoutError(f"{exc} (last: {seen[0] if seen else None!r})") from None


class Daemon:
    """A child process we started, stopped by its pid."""

    def __init__(self, argv: list[str], log: Path, env: dict[str, str] | None = None):
        self.log = log
        self.fh = open(log, "wb")
        self.proc = subprocess.Popen(
            argv, stdout=self.fh, stderr=subprocess.STDOUT, env=env, cwd=REPO, stdin=subprocess.DEVNULL
        )

    def check_alive(self) -> None:
        if self.proc.poll() is not None:
            raise AssertionError(f"{self.log.name} exited {self.proc.returncode}:\n{self.log.read_text()[-3000:]}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self.fh.close()


def leave_a_run_record(spec: Path, kubeconfig: Path) -> None:
    """Take and give back the bridge's Lease with a run record, as a rebalance run does (``reconcile``).

    The exporter reads it back as the ``slurm_pool_rebalance_*`` metrics, whether or not a bridge
    test ran a real rebalance earlier in the session.  A Lease held by a live run records its own.
    """
    from datetime import datetime, timezone

    from slurm_pool.bridge.k8s import KubernetesAPI
    from slurm_pool.bridge.lease import LeaseHeld, run_annotations
    from slurm_pool.bridge.reconcile import give_back_lease, take_lease
    from slurm_pool.spec import load_spec
    from slurm_pool.spec.bridge import bridge_of

    config = bridge_of(load_spec(spec))
    k8s = KubernetesAPI.connect(config, kubeconfig)
    holder = "metrics-e2e/" + os.urandom(4).hex()
    try:
        take_lease(k8s, config, holder, datetime.now(timezone.utc))
    except LeaseHeld:
        return
    give_back_lease(k8s, config, holder, run_annotations(1.5, datetime.now(timezone.utc), 3))


@pytest.fixture(scope="module")
def exporter(slurm_cluster, k8s_kubeconfig, tmp_path_factory):
    """``slurm-pool exporter`` on a free loopback port, talking to the test cluster, and given the
    example spec and the session's Kubernetes (real KServe) so it exports the inference demand too."""
    import yaml

    port = free_port()
    env = {**os.environ, **slurm_cluster.env, "PYTHONPATH": str(REPO)}
    logs = tmp_path_factory.mktemp("exporter")
    data = yaml.safe_load((REPO / "examples" / "pool.yaml").read_text())
    data["bridge"]["kserve_namespace"] = "metrics-e2e"  # no InferenceService there: a demand of 0
    spec = logs / "pool.yaml"
    spec.write_text(yaml.safe_dump(data))
    leave_a_run_record(spec, k8s_kubeconfig)
    argv = [sys.executable, "-m", "slurm_pool.metrics.cli", "--listen", f"127.0.0.1:{port}", "--reclaim-interval", "1"]
    d = Daemon([*argv, "--spec", str(spec), "--kubeconfig", str(k8s_kubeconfig)], logs / "exporter.log", env)
    url = f"http://127.0.0.1:{port}/metrics"
    try:

        def ready() -> bool:
            d.check_alive()
            return "\nslurm_pool_up 1.0" in http_get(url)

        wait_for(ready, 30, "exporter answers with slurm_pool_up 1")
        yield f"127.0.0.1:{port}"
    finally:
        d.stop()


@pytest.fixture(scope="module")
def prometheus(exporter, tmp_path_factory):
    """The real Prometheus scraping the exporter every second; yields its base URL."""
    binary = shutil.which("prometheus") or "/usr/bin/prometheus"
    assert os.access(binary, os.X_OK), "the prometheus binary is needed (Debian package 'prometheus')"
    work = tmp_path_factory.mktemp("prometheus")
    config = work / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, scrape_timeout: 1s, evaluation_interval: 1s}\n"
        "scrape_configs:\n"
        "  - job_name: slurm-pool\n"
        f"    static_configs: [{{targets: ['{exporter}']}}]\n"
    )
    port = free_port()
    d = Daemon(
        [
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={work / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
        ],
        work / "prometheus.log",
    )
    base = f"http://127.0.0.1:{port}"
    try:

        def scraped() -> bool:
            d.check_alive()
            return query(base, "slurm_pool_up") == {(): 1.0}

        wait_for(scraped, 40, "Prometheus has scraped slurm_pool_up 1")
        yield base
    finally:
        d.stop()


def query(base: str, expr: str) -> dict[tuple[tuple[str, str], ...], float]:
    """An instant query: {sorted labels without job/instance: value}."""
    body = json.loads(http_get(f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": expr})))
    assert body["status"] == "success", body
    out = {}
    for row in body["data"]["result"]:
        labels = {k: v for k, v in row["metric"].items() if k not in ("job", "instance", "__name__")}
        out[tuple(sorted(labels.items()))] = float(row["value"][1])
    return out


def by_node(base: str, expr: str) -> dict[str, float]:
    return {dict(k)["node"]: v for k, v in query(base, f"sum by (node) ({expr})").items()}


def scalar(base: str, expr: str) -> float | None:
    res = query(base, expr)
    assert len(res) <= 1, res
    return next(iter(res.values()), None)


def pool_units(spec) -> dict[str, int]:
    return {n: len(gpu_units(g)) for g in spec.node_groups for n in expand(g.hosts)}


def test_prometheus_sees_gpu_jobs_lending_and_drains(cluster, prometheus):
    units = pool_units(cluster.spec)
    total = sum(units.values())
    job = cluster.sbatch(
        "-p",
        "scavenger",
        "--qos=scavenger",
        "-A",
        "proja",
        "--gres=gpu:2",
        "--signal=B:USR1@30",
        "-o",
        "/dev/null",
        "-D",
        "/tmp",
        user="alice",
        script=SLEEP_JOB,
    )
    cluster.wait_state(job, ["RUNNING"], timeout=30)
    lend = cluster.sbatch(
        "-p",
        "k8s-lend",
        "--qos=k8s-lend",
        "-A",
        "k8s-bridge",
        "--gres=gpu:1",
        "-o",
        "/dev/null",
        "-D",
        "/tmp",
        user="slurmpool",
        script=SLEEP_JOB,
    )
    cluster.wait_state(lend, ["RUNNING"], timeout=30)
    node, lent = cluster.job_field(job, "%N"), cluster.job_field(lend, "%N")
    want = {n: 0.0 for n in units}
    want[node] += 2
    want[lent] += 1

    got = wait_for(
        lambda: (r := by_node(prometheus, 'slurm_pool_gpus{state="allocated"}')) == want and r,
        20,
        f"allocated GPUs per node == {want}",
    )
    assert got == want
    all_units = by_node(prometheus, "slurm_pool_gpus")
    assert all_units == {n: float(u) for n, u in units.items()}
    assert scalar(prometheus, 'slurm_pool_jobs{partition="scavenger",tier="scavenger",state="running"}') == 1
    assert scalar(prometheus, 'slurm_pool_allocated_gpus{partition="scavenger",tier="scavenger"}') == 2
    assert scalar(prometheus, 'slurm_pool_allocated_gpus{partition="k8s-lend",tier="k8s-lend"}') == 1
    assert scalar(prometheus, "slurm_pool_gpu_utilization_ratio") == pytest.approx(3 / total)
    assert scalar(prometheus, 'slurm_pool_tier_gpu_utilization_ratio{tier="scavenger"}') == pytest.approx(2 / total)
    assert scalar(prometheus, "slurm_pool_lent_nodes") == 1
    assert by_node(prometheus, "slurm_pool_node_lent") == {n: float(n == lent) for n in units}
    assert scalar(prometheus, "slurm_pool_up") == 1

    # Drains: one by a person, one by slurm-pool (reason prefix), on nodes without jobs.
    human, ours = [n for n in units if n not in (node, lent)][:2]
    try:
        cluster.run(["scontrol", "update", f"NodeName={human}", "State=DRAIN", "Reason=swap a fan"], check=True)
        cluster.run(
            ["scontrol", "update", f"NodeName={ours}", "State=DRAIN", "Reason=slurm-pool: e2e test"], check=True
        )
        want_drained = {
            (("node", human), ("owner", "human"), ("reason", "swap a fan")): 1.0,
            (("node", ours), ("owner", "slurm-pool"), ("reason", "slurm-pool: e2e test")): 1.0,
        }
        wait_for(lambda: query(prometheus, "slurm_pool_node_drained") == want_drained, 20, "both drains exported")
        assert query(prometheus, "slurm_pool_drained_nodes") == {
            (("owner", "human"),): 1.0,
            (("owner", "slurm-pool"),): 1.0,
        }
        drained = by_node(prometheus, 'slurm_pool_gpus{state="drained"}')
        assert drained[human] == units[human] and drained[ours] == units[ours]
        assert drained[node] == 0
    finally:
        cluster.run(["scontrol", "update", f"NodeName={human},{ours}", "State=RESUME"])
    wait_for(lambda: scalar(prometheus, "sum(slurm_pool_drained_nodes)") == 0, 20, "drains gone after resume")


def test_epilog_outcome_records_reach_prometheus(cluster, prometheus):
    """A finished job's epilog record shows up as slurm_pool_job_runs_total on its node."""
    assert cluster.spec.health.epilog, "this check needs the epilog (health.epilog) of the example spec"
    node = next(iter(pool_units(cluster.spec)))
    before = scalar(prometheus, f'sum(slurm_pool_job_runs_total{{node="{node}"}})') or 0.0
    job = cluster.sbatch(
        "-p",
        "scavenger",
        "--qos=scavenger",
        "-A",
        "proja",
        "-w",
        node,
        "--gres=gpu:1",
        "--signal=B:USR1@30",
        "-o",
        "/dev/null",
        "-D",
        "/tmp",
        user="alice",
        script="#!/bin/bash\nsleep 1\n",
    )
    cluster.wait_state(job, ["COMPLETED"], timeout=30)
    wait_for(
        lambda: (scalar(prometheus, f'sum(slurm_pool_job_runs_total{{node="{node}"}})') or 0) > before,
        20,
        f"slurm_pool_job_runs_total for {node} grows past {before}",
    )
    assert scalar(prometheus, 'slurm_pool_scrape_errors_total{source="outcomes"}') == 0


# -- the Grafana dashboard on the same Prometheus ------------------------------------

DASHBOARD = REPO / "docs" / "grafana" / "slurm-pool.json"
PREEMPTIBLE = """#!/bin/bash
trap '{requeue}exit 0' USR1
sleep 300 &
wait
"""


def dashboard_exprs(dashboard: dict) -> list[tuple[str, str]]:
    """(panel title, expr with the dashboard's variables expanded) of every target."""
    values = panels.variables(dashboard, rate_interval="1m", range_="5m")
    return [(p["title"], panels.expand(t["expr"], values)) for p in panels.panels(dashboard) for t in p["targets"]]


def test_every_dashboard_expr_has_data_and_every_panel_renders(cluster, prometheus, tmp_path):
    """Allocation in two tiers and projects, a lent node, a pending (preempted) job, a drain and a
    preemption with its epilog record: then every panel's PromQL parses and returns series, and
    every panel is drawn as a PNG from the range API."""
    dashboard = panels.load_dashboard(DASHBOARD)
    exprs = dashboard_exprs(dashboard)
    assert len(exprs) >= 10
    requeue = self_requeue(cluster.version)
    common = ["-o", "/dev/null", "-D", "/tmp"]
    before = scalar(prometheus, "sum(slurm_pool_preemptions_total)") or 0.0
    victim = cluster.sbatch(
        "-p", "scavenger", "--qos=scavenger", "-A", "projb", "-w", "a-gpu1", "--gres=gpu:2", "--signal=B:USR1@30",
        *common, user="bob", script=PREEMPTIBLE.format(requeue=requeue),
    )  # fmt: skip
    lend = cluster.sbatch(
        "-p", "k8s-lend", "--qos=k8s-lend", "-A", "k8s-bridge", "-w", "b-gpu1", "--gres=gpu:1",
        *common, user="slurmpool", script=SLEEP_JOB,
    )  # fmt: skip
    cluster.wait_state(victim, ["RUNNING"], timeout=30)
    cluster.wait_state(lend, ["RUNNING"], timeout=30)
    owner = cluster.sbatch(
        "-p", "a-owner", "--qos=guaranteed", "-A", "proja", "-w", "a-gpu1", "--gres=gpu:2",
        *common, user="alice", script=SLEEP_JOB,
    )  # fmt: skip
    grace = cluster.spec.tier("scavenger").grace_time
    cluster.wait_state(owner, ["RUNNING"], timeout=grace + 30)
    cluster.wait_state(victim, ["PENDING", "REQUEUED"], timeout=30)  # held back by Slurm's requeue delay
    human = "a-gpu2"
    cluster.run(["scontrol", "update", f"NodeName={human}", "State=DRAIN", "Reason=dashboard e2e"], check=True)
    try:
        wait_for(
            lambda: (scalar(prometheus, "sum(slurm_pool_preemptions_total)") or 0) > before,
            60,
            "the preempted run's epilog record counted in slurm_pool_preemptions_total",
        )
        # The same preemption in `slurm-pool status`, with its checkpoint outcome (no checkpoint was taken).
        env = {**os.environ, **cluster.env, "PYTHONPATH": str(REPO)}
        res = subprocess.run(
            [sys.executable, "-m", "slurm_pool.cli", "status", "--json", "--last", "100"],
            env=env, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert res.returncode == 0, res.stderr
        mine = [p for p in json.loads(res.stdout)["preemptions"] if p["job_id"] == str(victim)]
        assert mine and mine[0]["node"] == "a-gpu1" and mine[0]["checkpointed"] is False, mine
        # The epilog record can reach a scrape before the owner's allocation does: wait for both.
        want_projects = {(("project", "proja"),): 2.0, (("project", "k8s-bridge"),): 1.0}
        wait_equal(
            lambda: (
                scalar(prometheus, 'sum(slurm_pool_allocated_gpus{tier="guaranteed"})'),
                query(prometheus, "slurm_pool_project_allocated_gpus"),
            ),
            (2, want_projects),
            30,
            "the owner's 2 guaranteed GPUs scraped, and the GPUs per project",
        )
        for title, expr in exprs:
            wait_for(lambda e=expr: query(prometheus, e), 30, f"data for {expr!r} (panel {title!r})")

        out = tmp_path / "panels"
        done = panels.render_panels(dashboard, prometheus, out, range_s=90, rate_interval="1m")
        assert [r.title for r in done] == [p["title"] for p in panels.panels(dashboard)]
        pngs = sorted(out.glob("*.png"))
        assert len(pngs) == len(done) == len({r.path for r in done})
        for r in done:
            assert r.series > 0, r
            assert r.path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and r.path.stat().st_size > 5000, r
        if os.environ.get("SLURM_POOL_PANELS_DIR"):  # keep them for a look
            shutil.copytree(out, os.environ["SLURM_POOL_PANELS_DIR"], dirs_exist_ok=True)
    finally:
        cluster.run(["scontrol", "update", f"NodeName={human}", "State=RESUME"])


def test_a_reclaim_of_a_lent_node_reaches_the_latency_histogram(cluster, prometheus):
    """A real placeholder holds b-gpu1; the owner's job takes it back; the histogram counts that once."""
    from slurm_pool.bridge.slurm_side import SlurmSide
    from slurm_pool.spec.bridge import Bridge

    count = "sum(slurm_pool_reclaim_latency_seconds_count)"
    wait_for(lambda: scalar(prometheus, count) is not None, 30, "the reclaim histogram scraped")
    before = scalar(prometheus, count)
    total = scalar(prometheus, "sum(slurm_pool_reclaim_latency_seconds_sum)")
    assert before is not None and total is not None
    lend = SlurmSide(cluster.slurm, Bridge(), submit_as="slurmpool").submit_placeholder("b-gpu1")
    cluster.wait_state(lend, ["RUNNING"], timeout=30)
    owner = cluster.sbatch(
        "-p", "b-owner", "--qos=guaranteed", "-A", "projb", "-w", "b-gpu1", "--gres=gpu:2",
        "-o", "/dev/null", "-D", "/tmp", user="bob", script="#!/bin/bash\nsleep 1\n",
    )  # fmt: skip
    grace = cluster.spec.tier("k8s-lend").grace_time
    cluster.wait_state(owner, ["RUNNING", "COMPLETED"], timeout=grace + 30)
    wait_for(lambda: (scalar(prometheus, count) or 0) == before + 1, 60, "one more reclaim counted")
    waited = (scalar(prometheus, "sum(slurm_pool_reclaim_latency_seconds_sum)") or 0.0) - total
    assert 0 <= waited <= grace + 5, waited
    # Counted once: the reads of the next seconds see the same jobs and do not count them again.
    seen = scalar(prometheus, "max(timestamp(slurm_pool_up))") or 0.0
    wait_for(lambda: (scalar(prometheus, "max(timestamp(slurm_pool_up))") or 0) >= seen + 3, 30, "3 s of scrapes")
    assert scalar(prometheus, count) == before + 1
