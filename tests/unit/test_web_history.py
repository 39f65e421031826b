"""The console's utilisation history (Prometheus, else the service's own) and the nodes' last reclaims,
on JSON recorded from real Slurm 22.05 and 26.05 and a fake Prometheus behind the adapter's seam."""

from __future__ import annotations

import copy
import json
import logging
from pathlib import Path
from typing import Any, Mapping

import pytest

from slurm_pool.adapters.prometheus import QueryError
from slurm_pool.adapters.records import JobRecord
from slurm_pool.adapters.runner import RecordingRunner
from slurm_pool.adapters.slurm import SlurmClient
from slurm_pool.spec.load import load_spec_text
from slurm_pool.web import models, views
from slurm_pool.web.reader import PoolReader, history_samples, reclaim_times, utilisation_query

pytestmark = pytest.mark.usefixtures("narrow_from_json")


REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data" / "slurm"
NODE_COMMAND = {"22.05": ["sinfo", "--json"], "26.05": ["scontrol", "show", "nodes", "--json"]}
URL = "http://prometheus.example:9090"
NOW = 1_796_235_500.0


class Clock:
    def __init__(self, now: float = NOW):
        self.now = now

    def __call__(self) -> float:
        return self.now


def matrix(series: Mapping[str, list[tuple[float, str]]]) -> dict[str, Any]:
    """A ``query_range`` answer's data: one series per state."""
    return {
        "resultType": "matrix",
        "result": [{"metric": {"state": st}, "values": [[t, v] for t, v in pts]} for st, pts in series.items()],
    }


class FakePrometheus:
    """The adapter's seam (``api``): records the calls, answers ``data`` or raises ``error``."""

    def __init__(self, data: Any = None, error: Exception | None = None):
        self.data, self.error = data, error
        self.calls: list[tuple[str, str, dict[str, str], float]] = []

    def __call__(self, url: str, endpoint: str, params: Mapping[str, str], timeout: float) -> Any:
        self.calls.append((url, endpoint, dict(params), timeout))
        if self.error is not None:
            raise self.error
        return self.data


SERIES = {
    "allocated": [(100.0, "6"), (130.0, "7")],
    "idle": [(100.0, "3"), (130.0, "2")],
    "drained": [(100.0, "1"), (130.0, "1")],
    "lent": [(130.0, "2")],
}


def lend_run(base: dict[str, Any], version: str, job_id: int, node: str, start: int, end: int) -> dict[str, Any]:
    rec = copy.deepcopy(base)
    rec.update(job_id=job_id, partition="k8s-lend", nodes=node)
    rec["time"].update(submission=start - 1, start=start, end=end)
    rec["state"]["current"] = "COMPLETED" if version == "22.05" else ["COMPLETED"]
    return rec


def sacct_answer(version: str, runs: list[tuple[int, str, int, int]]) -> str:
    """The recorded ``sacct --json`` plus lend-partition jobs (id, node, start, end)."""
    recorded = json.loads((DATA / version / "sacct.json").read_text())
    extra = [lend_run(recorded["jobs"][0], version, *run) for run in runs]
    return json.dumps({**recorded, "jobs": recorded["jobs"] + extra})


def replay(version: str, sacct: str | None = None) -> RecordingRunner:
    r = RecordingRunner()
    r.on(["sinfo", "--version"], f"slurm {version}.0\n")
    r.on(NODE_COMMAND[version], (DATA / version / "nodes-requeued.json").read_text())
    r.on(["squeue", "--json"], (DATA / version / "squeue-requeued.json").read_text())
    r.on(["sacct"], sacct if sacct is not None else json.dumps({"jobs": []}))
    return r


def reader(runner: RecordingRunner, clock: Clock, **kw: Any) -> PoolReader:
    return PoolReader(SlurmClient(runner), 10, clock, **kw)


# -- Prometheus' answer as samples -------------------------------------------------------
def test_history_samples_take_lent_out_of_allocated() -> None:
    got = history_samples(matrix(SERIES))
    assert got == [
        models.Sample(time=100.0, allocated=6, lent=0, idle=3, total=10),
        models.Sample(time=130.0, allocated=5, lent=2, idle=2, total=10),
    ]


@pytest.mark.parametrize(
    "data",
    [
        {"resultType": "vector", "result": []},
        "not a matrix",
        {"resultType": "matrix", "result": [{"metric": {"state": "idle"}, "values": [[1, "1_0"]]}]},
    ],
)
def test_history_samples_refuse_what_is_not_a_matrix(data: Any) -> None:
    with pytest.raises(QueryError):
        history_samples(data)


@pytest.mark.parametrize(
    "partition, inside",
    [("k8s-lend", 'partition="k8s-lend"'), ('a"b\\c', 'partition="a\\"b\\\\c"')],
)
def test_utilisation_query_quotes_the_lend_partition(partition: str, inside: str) -> None:
    q = utilisation_query(partition)
    assert "sum by (state) (slurm_pool_gpus)" in q and inside in q and '"state", "lent"' in q


# -- where the chart's points come from ------------------------------------------------------
@pytest.mark.parametrize("version", ["22.05", "26.05"])
def test_history_from_prometheus_one_query_per_interval(version: str) -> None:
    fake = FakePrometheus(matrix(SERIES))
    clock = Clock()
    r = reader(replay(version), clock, prometheus_url=URL, prometheus_api=fake)
    for _ in range(50):
        r.snapshot()
    r.wait_idle()
    assert len(fake.calls) == 1
    url, endpoint, params, timeout = fake.calls[0]
    assert (url, endpoint) == (URL, "query_range") and timeout <= 10
    assert params["query"] == utilisation_query("k8s-lend")
    start, end, step = float(params["start"]), float(params["end"]), float(params["step"])
    assert end <= NOW and NOW - end < step and end - start == 3 * 3600 and step == 30
    assert [s.lent for s in r.history] == [0, 2]  # Prometheus', not the one own sample
    clock.now += 9
    r.snapshot()
    r.wait_idle()
    assert len(fake.calls) == 1
    clock.now += 2
    r.snapshot()
    r.wait_idle()
    assert len(fake.calls) == 2


def test_history_without_prometheus_is_the_services_own() -> None:
    clock = Clock()
    r = reader(replay("26.05"), clock)
    r.snapshot()
    r.wait_idle()
    clock.now += 11
    r.snapshot()
    r.wait_idle()
    assert [s.time for s in r.history] == [NOW, NOW + 11]
    assert r.history[0].total > 0


@pytest.mark.parametrize(
    "error, data",
    [
        (QueryError("http://prometheus.example:9090: [Errno 111] Connection refused"), None),
        (None, {"resultType": "scalar", "result": [0, "1"]}),
        (RuntimeError("anything else"), None),
    ],
)
def test_prometheus_failing_falls_back_to_own_history(
    error: Exception | None, data: Any, caplog: pytest.LogCaptureFixture
) -> None:
    fake = FakePrometheus(matrix(SERIES))
    clock = Clock()
    r = reader(replay("26.05"), clock, prometheus_url=URL, prometheus_api=fake)
    r.snapshot()
    r.wait_idle()
    assert len(r.history) == 2  # Prometheus'
    fake.data, fake.error = data, error
    clock.now += 11
    with caplog.at_level(logging.WARNING, logger="slurm_pool.web.reader"):
        r.snapshot()
        r.wait_idle()
    assert [s.time for s in r.history] == [NOW, NOW + 11]  # the service's own two samples
    assert "Prometheus failed" in caplog.text
    fake.data, fake.error = matrix(SERIES), None
    clock.now += 11
    r.snapshot()
    r.wait_idle()
    assert [s.time for s in r.history] == [100.0, 130.0]  # Prometheus' again once it answers


# -- the nodes' last reclaims ---------------------------------------------------------------
def record(job_id: int, partition: str, nodes: str, start: float | None, end: float | None) -> JobRecord:
    return JobRecord(job_id, partition=partition, nodes=nodes, start_time=start, end_time=end)


RECLAIMS = [
    # runs, node -> last reclaim
    ([], {}),
    ([record(1, "k8s-lend", "b-gpu1", 100, 200)], {"b-gpu1": 200.0}),
    (
        [record(1, "k8s-lend", "b-gpu1", 100, 200), record(2, "k8s-lend", "b-gpu1", 300, 400)],
        {"b-gpu1": 400.0},
    ),
    ([record(1, "k8s-lend", "b-gpu[1-2]", 100, 250)], {"b-gpu1": 250.0, "b-gpu2": 250.0}),
    ([record(1, "b-owner", "b-gpu1", 100, 200)], {}),  # not the lend partition
    ([record(1, "k8s-lend", "b-gpu1", 100, None)], {}),  # still lent: not reclaimed yet
    ([record(1, "k8s-lend", "b-gpu1", None, 200)], {}),  # cancelled before it started: never lent
]


@pytest.mark.parametrize("runs, expected", RECLAIMS)
def test_reclaim_times(runs: list[JobRecord], expected: dict[str, float]) -> None:
    assert reclaim_times(runs, "k8s-lend") == expected


@pytest.mark.parametrize("version", ["22.05", "26.05"])
def test_last_reclaims_from_the_shared_accounting_read(version: str) -> None:
    start = int(NOW) - 7200
    runner = replay(
        version,
        sacct_answer(version, [(901, "a-gpu1", start, start + 600), (902, "a-gpu1", start + 900, start + 1500)]),
    )
    clock = Clock()
    r = reader(runner, clock)
    assert r.last_reclaims() == {}
    for _ in range(20):
        r.snapshot()
    r.wait_idle()
    assert r.last_reclaims() == {"a-gpu1": float(start + 1500)}
    assert len(runner.commands("sacct")) == 1
    r.accounting(24)  # the projects page's read: the same cached answer
    assert len(runner.commands("sacct")) == 1
    clock.now += 11  # a pool read, but the accounting is a minute old at most
    r.snapshot()
    r.wait_idle()
    assert len(runner.commands("sacct")) == 1


def test_last_reclaims_survive_a_failed_sacct(caplog: pytest.LogCaptureFixture) -> None:
    runner = replay("26.05", sacct_answer("26.05", [(901, "a-gpu1", int(NOW) - 600, int(NOW) - 60)]))
    clock = Clock()
    r = reader(runner, clock, slow_seconds=5)
    r.snapshot()
    r.wait_idle()
    assert r.last_reclaims() == {"a-gpu1": NOW - 60}
    runner.fail(["sacct"], stderr="sacct: error: Problem talking to the database")
    clock.now += 11
    with caplog.at_level(logging.WARNING, logger="slurm_pool.web.reader"):
        r.snapshot()
        r.wait_idle()
    assert r.last_reclaims() == {"a-gpu1": NOW - 60}
    assert "last reclaims" in caplog.text


def test_no_reclaim_read_when_switched_off() -> None:
    runner = replay("26.05")
    r = reader(runner, Clock(), reclaim_hours=None)
    r.snapshot()
    r.wait_idle()
    assert runner.commands("sacct") == []


@pytest.mark.parametrize("version", ["22.05", "26.05"])
def test_pool_view_shows_last_reclaim(version: str) -> None:
    from slurm_pool.adapters.records import parse_jobs, parse_nodes

    spec = load_spec_text((REPO / "examples" / "pool.yaml").read_text(), "pool.yaml")
    nodes = parse_nodes((DATA / version / "nodes-requeued.json").read_text())
    jobs = parse_jobs((DATA / version / "squeue-requeued.json").read_text())
    who = views.viewer(spec, "alice")
    view = views.pool(spec, who, nodes, jobs, now=NOW, reclaims={nodes[0].name: 123.0})
    got = {n.name: n.last_reclaim for n in view.nodes}
    assert got[nodes[0].name] == 123.0
    assert all(v is None for name, v in got.items() if name != nodes[0].name)
    assert models.Pool.model_validate_json(view.model_dump_json()).nodes[0].last_reclaim == 123.0


def test_default_seam_is_the_adapters_api_looked_up_late(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without ``prometheus_api`` the reader asks :func:`slurm_pool.adapters.prometheus.api` (what the service uses)."""
    fake = FakePrometheus(matrix(SERIES))
    monkeypatch.setattr("slurm_pool.adapters.prometheus.api", fake)
    r = reader(replay("26.05"), Clock(), prometheus_url=URL)
    r.snapshot()
    r.wait_idle()
    assert len(fake.calls) == 1 and [s.time for s in r.history] == [100.0, 130.0]
