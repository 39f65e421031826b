"""slurmctld's OpenMetrics counts: the reader, the collector's choice of source, the slurm.conf line."""

from __future__ import annotations

import http.server
import os
import threading
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from slurm_pool.adapters import openmetrics
from slurm_pool.adapters.openmetrics import SlurmctldCounts, Unavailable
from slurm_pool.adapters.records import JobRecord, NodeRecord, job_state, node_state
from slurm_pool.errors import SpecError
from slurm_pool.metrics.collector import PoolCollector
from slurm_pool.metrics.openmetrics_source import EndpointReader, count_metrics, counts_from_records
from slurm_pool.render import Site, SlurmVersion, render_all
from slurm_pool.spec import load_spec
from tests.support.golden import GOLDEN, golden_view

REPO = Path(__file__).resolve().parents[2]
RECORDED = REPO / "tests" / "data" / "slurm" / "26.05" / "openmetrics"
CONFIG = {"MetricsType": "metrics/openmetrics", "SlurmctldHost[0]": "ctl(127.0.0.1)", "SlurmctldPort": "6817"}


def body(*lines: str) -> str:
    return "".join(f"{line}\n" for line in lines) + "# EOF\n"


PARTS = body(
    "# HELP slurm_partition_jobs_pending Number of jobs in Pending state",
    "# TYPE slurm_partition_jobs_pending gauge",
    'slurm_partition_jobs_pending{partition="shared"} 2',
    "# TYPE slurm_partition_jobs_running gauge",
    'slurm_partition_jobs_running{partition="shared"} 1',
    'slurm_partition_jobs_running{partition="scavenger"} 3',
    "# TYPE slurm_partition_jobs_cpus_alloc gauge",
    'slurm_partition_jobs_cpus_alloc{partition="shared"} 8',
)
NODES = body(
    "# TYPE slurm_nodes gauge",
    "slurm_nodes 4",
    "# TYPE slurm_nodes_idle gauge",
    "slurm_nodes_idle 2",
    "# TYPE slurm_nodes_mixed gauge",
    "slurm_nodes_mixed 2",
    "# TYPE slurm_nodes_drain gauge",
    "slurm_nodes_drain 1",
    "# TYPE slurm_nodes_draining gauge",
    "slurm_nodes_draining 1",
    "# TYPE slurm_node_gpus gauge",
    'slurm_node_gpus{node="a-gpu1"} 4',
)


def test_parse_takes_the_counts_it_knows():
    got = openmetrics.parse(PARTS, NODES)
    assert got.jobs == {("shared", "pending"): 2, ("shared", "running"): 1, ("scavenger", "running"): 3}
    assert got.nodes == {"idle": 2, "mixed": 2, "drain": 2}
    assert got.refused == []


@pytest.mark.parametrize(
    "sample, why",
    [
        ('slurm_partition_jobs_running{partition="a\\nb"} 1', "a newline in the partition"),
        ('slurm_partition_jobs_running{partition="a b"} 1', "a space in the partition"),
        ('slurm_partition_jobs_running{partition="x",node="y"} 1', "a label Slurm does not give"),
        ("slurm_partition_jobs_running 1", "no partition"),
        ('slurm_partition_jobs_running{partition="x"} -1', "a negative count"),
        ('slurm_partition_jobs_running{partition="x"} 1.5', "a fraction"),
        ('slurm_partition_jobs_running{partition="x"} NaN', "not a number"),
        ('slurm_partition_jobs_running{partition="x"} +Inf', "infinite"),
        ('slurm_partition_jobs_running{partition="x"} 1e300', "beyond a count"),
    ],
)
def test_a_hostile_sample_is_refused_alone(sample, why):
    got = openmetrics.parse(body("# TYPE slurm_partition_jobs_running gauge", sample) + PARTS, NODES)
    assert len(got.refused) == 1, why
    assert got.jobs[("shared", "pending")] == 2  # the rest is kept


@pytest.mark.parametrize(
    "parts, nodes",
    [
        ("<html>not metrics</html>\n", NODES),
        ("", ""),  # 26.05 without MetricsType answers 200 with an empty body (http.c _send_metrics_resp)
        (PARTS, 'slurm_nodes_idle{node="x" 1\n'),
    ],
)
def test_what_is_not_counts_is_unavailable(parts, nodes):
    with pytest.raises(Unavailable):
        openmetrics.parse(parts, nodes)


@pytest.mark.parametrize(
    "config, want",
    [
        (CONFIG, ("127.0.0.1", 6817)),
        ({**CONFIG, "SlurmctldHost[0]": "ctl"}, ("ctl", 6817)),
        (
            {k: v for k, v in CONFIG.items() if k != "SlurmctldHost[0]"} | {"SlurmctldHost": "vm(10.0.0.1)"},
            ("10.0.0.1", 6817),
        ),
        ({**CONFIG, "SlurmctldPort": "6817-6820"}, ("127.0.0.1", 6817)),
        ({**CONFIG, "MetricsType": "(null)"}, None),
        ({k: v for k, v in CONFIG.items() if k != "MetricsType"}, None),  # 22.05 has no such key
        ({**CONFIG, "SlurmctldPort": "70000"}, None),
        ({**CONFIG, "SlurmctldHost[0]": "ctl(127.0.0.1);rm"}, None),
    ],
)
def test_endpoint_from_config(config, want):
    assert openmetrics.endpoint(config) == want


class _Handler(http.server.BaseHTTPRequestHandler):
    answers: dict[str, tuple[int, bytes]] = {}

    def do_GET(self):  # noqa: N802 -- the http.server name
        status, data = self.answers.get(self.path, (404, b""))
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()


@pytest.mark.parametrize(
    "answers, ok",
    [
        ({"/metrics/partitions": (200, PARTS.encode()), "/metrics/nodes": (200, NODES.encode())}, True),
        ({"/metrics/partitions": (403, b"denied"), "/metrics/nodes": (200, NODES.encode())}, False),
        ({"/metrics/partitions": (200, b"\xff\xfe"), "/metrics/nodes": (200, NODES.encode())}, False),
    ],
)
def test_read_over_http(server, monkeypatch, answers, ok):
    monkeypatch.setattr(_Handler, "answers", answers)
    host, port = server.server_address[:2]
    if ok:
        assert openmetrics.read(host, port).jobs[("shared", "pending")] == 2
    else:
        with pytest.raises(Unavailable):
            openmetrics.read(host, port)


def test_an_answer_over_the_bound_is_refused(server, monkeypatch):
    monkeypatch.setattr(_Handler, "answers", {"/metrics/nodes": (200, NODES.encode() * 10)})
    host, port = server.server_address[:2]
    assert openmetrics.fetch(host, port, "/metrics/nodes", max_bytes=len(NODES) * 10) == NODES * 10
    with pytest.raises(Unavailable, match="more than"):
        openmetrics.fetch(host, port, "/metrics/nodes", max_bytes=len(NODES) * 10 - 1)


def test_a_silent_port_times_out():
    import socket

    with socket.socket() as s:  # listens, never answers (22.05's slurmctld waits for an RPC header)
        s.bind(("127.0.0.1", 0))
        s.listen()
        with pytest.raises(Unavailable, match="timeout|timed out"):
            openmetrics.fetch("127.0.0.1", s.getsockname()[1], "/metrics/nodes", timeout=0.2)


# -- the collector's choice of source ------------------------------------------------------------


def job(part: str, state: str) -> JobRecord:
    return JobRecord(job_id=1, user="u", partition=part, qos="q", account="a", state=job_state(state))


NODES_R = [
    NodeRecord(name="a", state=node_state(["MIXED"])),
    NodeRecord(name="b", state=node_state(["IDLE", "DRAIN"])),
    NodeRecord(name="c", state=node_state(["IDLE"])),
]
JOBS_R = [
    job("shared", "RUNNING"),
    job("shared", "PENDING"),
    job("scavenger", "CANCELLED"),
    job("scavenger", "COMPLETING"),  # 22.05: the base word
    job("scavenger", ["COMPLETED", "COMPLETING"]),  # 23.02+: a flag
]


def test_counts_from_records_count_as_slurmctld_does():
    got = counts_from_records(NODES_R, JOBS_R)
    assert got.jobs == {
        ("shared", "running"): 1,
        ("shared", "pending"): 1,
        ("scavenger", "completing"): 2,  # a finished job (cancelled) is not counted: squeue leaves it out
    }
    assert got.nodes == {"mixed": 1, "idle": 2, "drain": 1}


class FakeSlurm:
    def nodes(self):
        return NODES_R

    def jobs(self):
        return JOBS_R


def scrape(counts) -> str:
    reg = CollectorRegistry()
    reg.register(PoolCollector(FakeSlurm(), slurmctld_counts=counts))  # type: ignore[arg-type]
    return generate_latest(reg).decode()


ENDPOINT = SlurmctldCounts(jobs={("shared", "running"): 7}, nodes={"idle": 9})


@pytest.mark.parametrize(
    "counts, source, line",
    [
        (lambda: ENDPOINT, "openmetrics", 'slurm_pool_slurm_jobs{partition="shared",state="running"} 7.0'),
        (lambda: None, "commands", 'slurm_pool_slurm_jobs{partition="shared",state="running"} 1.0'),
    ],
)
def test_collector_takes_the_endpoint_else_the_records(counts, source, line):
    text = scrape(counts)
    assert line in text.splitlines()
    assert f'slurm_pool_slurm_counts_source{{source="{source}"}} 1.0' in text.splitlines()


def test_collector_without_the_reader_has_no_count_families():
    text = scrape(None)
    assert "slurm_pool_slurm_jobs" not in text and "slurm_pool_slurm_counts_source" not in text


@pytest.mark.parametrize(
    "config, answer, want_read",
    [
        (lambda: CONFIG, ENDPOINT, True),
        (lambda: {**CONFIG, "MetricsType": "(null)"}, ENDPOINT, False),  # endpoint off: never asked
        (lambda: CONFIG, Unavailable("HTTP 403"), True),  # refused: None, the records count
    ],
)
def test_endpoint_reader(config, answer, want_read):
    asked: list[tuple[str, int]] = []

    def read(host: str, port: int) -> SlurmctldCounts:
        asked.append((host, port))
        if isinstance(answer, Exception):
            raise answer
        return answer

    got = EndpointReader(config, read=read)()
    assert bool(asked) == want_read
    assert got == (answer if want_read and isinstance(answer, SlurmctldCounts) else None)


def test_endpoint_reader_asks_the_config_again_after_a_failure():
    calls = []

    def config():
        calls.append(1)
        return CONFIG

    def fail(host: str, port: int) -> SlurmctldCounts:
        raise Unavailable("timed out")

    reader = EndpointReader(config, read=fail, clock=lambda: 0.0)
    reader(), reader()
    assert len(calls) == 2
    ok = EndpointReader(config, read=lambda h, p: ENDPOINT, clock=lambda: 0.0)
    ok(), ok()
    assert len(calls) == 3  # cached within its ttl


def test_count_metrics_shows_label_values_safely():
    (jobs, _, _) = count_metrics(SlurmctldCounts(jobs={("a\x1bb", "running"): 1}), "commands")
    assert "\x1b" not in jobs.samples[0].labels["partition"]


# -- slurm.conf: MetricsType where the spec asks and the release has it -----------------------------

GOLDEN_FILES = ("slurm.conf", "manifest.json")


@pytest.fixture(scope="module")
def spec():
    return load_spec(REPO / "examples" / "pool.yaml")


def test_golden_openmetrics(spec):
    asked = spec.model_copy(update={"cluster": spec.cluster.model_copy(update={"openmetrics": True})})
    plain = golden_view(render_all(spec, Site(), SlurmVersion(26, 5)))
    files = golden_view(render_all(asked, Site(), SlurmVersion(26, 5)))
    gdir = GOLDEN / "openmetrics-26.05"
    if os.environ.get("UPDATE_GOLDEN"):
        gdir.mkdir(parents=True, exist_ok=True)
        for name in GOLDEN_FILES:
            (gdir / name).write_text(files[name])
    assert sorted(p.name for p in gdir.iterdir()) == sorted(GOLDEN_FILES)
    for name, text in files.items():
        want = (gdir / name).read_text() if name in GOLDEN_FILES else plain[name]
        assert text == want, f"openmetrics-26.05/{name} differs"
    assert "MetricsType=metrics/openmetrics\n" in files["slurm.conf"]
    assert "MetricsType" not in plain["slurm.conf"]


@pytest.mark.parametrize("version", ["22.05", "24.11"])
def test_openmetrics_refused_before_25_11(spec, version):
    asked = spec.model_copy(update={"cluster": spec.cluster.model_copy(update={"openmetrics": True})})
    with pytest.raises(SpecError, match="cluster.openmetrics"):
        render_all(asked, Site(), SlurmVersion.parse(version))


@pytest.mark.parametrize("value", ["yes", 1, None])
def test_openmetrics_is_strictly_a_boolean(value):
    from pydantic import ValidationError

    from slurm_pool.spec.model import Cluster

    with pytest.raises(ValidationError):
        Cluster.model_validate({"name": "pool", "openmetrics": value})


def test_the_recorded_answers_of_26_05_3():
    """What slurmctld 26.05.3 answered with two running jobs, a held one, a cancelled one and a drained node
    (recorded by tests/integration/test_openmetrics_e2e.py)."""
    got = openmetrics.parse((RECORDED / "partitions.txt").read_text(), (RECORDED / "nodes.txt").read_text())
    assert got.refused == []
    assert {k: v for k, v in got.jobs.items() if v} == {
        ("shared", "running"): 1,
        ("shared", "pending"): 1,
        ("scavenger", "running"): 1,
    }
    assert {k: v for k, v in got.nodes.items() if v} == {"idle": 2, "mixed": 2, "drain": 1}
    assert {p for p, _ in got.jobs} == {"a-owner", "b-owner", "c-owner", "shared", "scavenger", "k8s-lend"}


@pytest.mark.parametrize("mode, kind", [("auto", EndpointReader), ("commands", "records"), ("off", None)])
def test_exporter_modes(mode, kind):
    from slurm_pool.metrics.openmetrics_source import counts_reader

    reader = counts_reader(mode, lambda: CONFIG)
    if kind is None:
        assert reader is None
    elif kind == "records":
        assert reader is not None and reader() is None  # never the endpoint: the records count
    else:
        assert isinstance(reader, kind)
