"""Know the cost as it runs (issue 32): Slurm read times and sizes in the exporter, and each rebalance
run's record on the bridge's Lease, read back by the exporter."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from types import SimpleNamespace
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from slurm_pool.adapters.runner import RecordingRunner
from slurm_pool.adapters.slurm import SlurmClient
from slurm_pool.bridge import lease
from slurm_pool.bridge import reconcile as rec
from slurm_pool.bridge.execute import StepResult
from slurm_pool.bridge.objects import Unreadable
from slurm_pool.metrics import cli as metrics_cli
from slurm_pool.metrics.collector import PoolCollector, read_bytes
from slurm_pool.spec.bridge import Bridge
from tests.support.k8s_fake import FakeK8s

END = datetime(2026, 12, 5, 21, 0, 30, 250000, tzinfo=timezone.utc)
NS, NAME = Bridge().lease_namespace, Bridge().lease_name


def runner() -> RecordingRunner:
    r = RecordingRunner()
    r.on(["sinfo", "--version"], "slurm 22.05.8\n")
    r.on(["sinfo", "--json"], json.dumps({"nodes": [{"name": "n1", "state": "idle", "gres": "gpu:t:2"}]}))
    r.on(["squeue", "--json"], json.dumps({"jobs": []}))
    return r


Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(collector: PoolCollector) -> Samples:
    """One scrape's samples (each collect is a scrape of its own)."""
    reg = CollectorRegistry()
    reg.register(collector)
    return {(s.name, frozenset(s.labels.items())): s.value for fam in reg.collect() for s in fam.samples}


def sample(got: Samples, name: str, labels: dict[str, str] | None = None) -> float | None:
    return got.get((name, frozenset((labels or {}).items())))


def with_record(annotations: dict[str, Any] | None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": NAME, "resourceVersion": "3"}
    if annotations is not None:
        meta["annotations"] = annotations
    return {"metadata": meta, "spec": {"holderIdentity": None}}


# -- the Lease record ------------------------------------------------------------------------------------


def test_a_run_record_reads_back_as_written():
    written = lease.run_annotations(12.3456, END, 4)
    assert written == {
        lease.RUN_SECONDS: "12.346",
        lease.RUN_END: "2026-12-05T21:00:30.250000Z",
        lease.RUN_STEPS: "4",
    }
    assert lease.last_run(with_record(written)) == {"seconds": 12.346, "steps": 4.0, "end": END.timestamp()}


@pytest.mark.parametrize(
    "annotations, want",
    [
        (None, {}),  # no annotations at all: no record yet
        ({}, {}),
        ({"other/x": "y"}, {}),
        ({lease.RUN_SECONDS: "0"}, {"seconds": 0.0}),  # only what was written
        ({lease.RUN_SECONDS: "0.5", lease.RUN_STEPS: "0"}, {"seconds": 0.5, "steps": 0.0}),
        ({lease.RUN_SECONDS: 7}, {}),  # not text: not a record (an API server sends only text)
    ],
)
def test_last_run_reads_what_is_there(annotations, want):
    assert lease.last_run(with_record(annotations)) == want


@pytest.mark.parametrize(
    "key, value",
    [
        (lease.RUN_SECONDS, "-1"),
        (lease.RUN_SECONDS, "nan"),
        (lease.RUN_SECONDS, "inf"),
        (lease.RUN_SECONDS, "1e3"),
        (lease.RUN_SECONDS, " 1"),
        (lease.RUN_SECONDS, "1\n"),
        (lease.RUN_SECONDS, "1.5s"),
        (lease.RUN_SECONDS, ""),
        (lease.RUN_SECONDS, "\uff11"),  # a full-width digit
        (lease.RUN_SECONDS, "1" * 40),
        (lease.RUN_STEPS, "1.5"),
        (lease.RUN_STEPS, "-2"),
        (lease.RUN_END, "2026-13-01T00:00:00Z"),
        (lease.RUN_END, "2026-12-05T21:00:30"),  # no zone
        (lease.RUN_END, "2026-12-05T21:00:30Z\n"),
        (lease.RUN_END, "yesterday"),
    ],
)
def test_a_record_that_does_not_read_is_refused_naming_it(key, value):
    with pytest.raises(Unreadable, match=f"annotation {key}") as err:
        lease.last_run(with_record({key: value, lease.RUN_STEPS if key != lease.RUN_STEPS else "x": "1"}))
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("seconds", [-0.1, float("nan"), float("inf")])
def test_a_run_record_is_a_finite_duration(seconds):
    with pytest.raises(ValueError, match="not a finite number"):
        lease.run_annotations(seconds, END)


def test_claim_keeps_the_record_and_release_writes_over_it():
    old = with_record({lease.RUN_SECONDS: "3.000", "team/owner": "ops"})
    body = lease.claim(old, NAME, "run-b", END, 300)
    assert body["metadata"]["annotations"] == {lease.RUN_SECONDS: "3.000", "team/owner": "ops"}
    held = {**body, "metadata": {**body["metadata"], "resourceVersion": "4"}}
    freed = lease.released(held, "run-b", lease.run_annotations(5, END, 1))
    assert freed is not None and freed["spec"]["holderIdentity"] is None
    assert freed["metadata"]["annotations"] == {
        lease.RUN_SECONDS: "5.000",
        lease.RUN_END: "2026-12-05T21:00:30.250000Z",
        lease.RUN_STEPS: "1",
        "team/owner": "ops",
    }
    assert lease.released(held, "run-c", lease.run_annotations(5, END)) is None  # not ours: left alone


# -- the run leaves its record ---------------------------------------------------------------------------


class FakeExecutor:
    def __init__(self, n: int):
        self.n = n

    def run(self, plan: Any) -> list[StepResult]:
        return [StepResult(f"n{i}", "fence", True) for i in range(self.n)]


@pytest.fixture
def planned(monkeypatch):
    """reconcile with the observing and planning stubbed out: a plan of two steps."""
    monkeypatch.setattr(rec, "observe", lambda *a, **k: None)
    monkeypatch.setattr(
        rec, "plan", lambda *a, **k: SimpleNamespace(steps=["a", "b"], notes=(), unreadable=(), to_dict=dict)
    )


@pytest.mark.parametrize("dry_run, steps", [(False, 2), (False, 0), (True, 2)])
def test_a_run_that_holds_the_lease_leaves_its_record_and_a_dry_run_none(planned, dry_run, steps):
    k8s = FakeK8s()
    report = rec.reconcile(None, k8s, Bridge(), dry_run=dry_run, executor=FakeExecutor(steps), holder="run-a")  # type: ignore[arg-type]
    got = k8s.read_lease(NS, NAME)
    assert report.to_dict()["duration_seconds"] == report.seconds
    if dry_run:
        assert got is None
        return
    record = lease.last_run(got)
    assert got["spec"]["holderIdentity"] is None
    assert set(record) == {"seconds", "end", "steps"} and record["steps"] == steps
    assert 0 <= record["seconds"] < 60 and abs(record["end"] - datetime.now(timezone.utc).timestamp()) < 60


def test_a_run_that_fails_still_leaves_how_long_it_took(monkeypatch):
    def broken(*a: Any, **k: Any) -> None:
        raise OSError("slurmctld is down")

    monkeypatch.setattr(rec, "observe", broken)
    k8s = FakeK8s()
    with pytest.raises(OSError):
        rec.reconcile(None, k8s, Bridge(), holder="run-a")  # type: ignore[arg-type]
    assert set(lease.last_run(k8s.read_lease(NS, NAME))) == {"seconds", "end"}


def test_a_run_that_finds_the_lease_held_leaves_the_record_alone(planned):
    k8s = FakeK8s()
    now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    k8s.leases[(NS, NAME)] = {
        "metadata": {"name": NAME, "resourceVersion": "7", "annotations": {lease.RUN_SECONDS: "9.000"}},
        "spec": {"holderIdentity": "other", "leaseDurationSeconds": 300, "renewTime": now},
    }
    with pytest.raises(lease.LeaseHeld):
        rec.reconcile(None, k8s, Bridge(), holder="run-a")  # type: ignore[arg-type]
    assert lease.last_run(k8s.read_lease(NS, NAME)) == {"seconds": 9.0}


# -- the exporter ----------------------------------------------------------------------------------------


def test_each_scrape_exports_how_long_each_slurm_read_took_and_what_the_client_says_it_read():
    client = SlurmClient(runner())
    reg = scrape(PoolCollector(client))
    for source in ("nodes", "jobs"):
        took = sample(reg, "slurm_pool_slurm_read_seconds", {"source": source})
        assert took is not None and 0 <= took < 60
        said = getattr(client, "last_read", {}).get(source)
        assert sample(reg, "slurm_pool_slurm_read_bytes", {"source": source}) == (None if said is None else said[0])


class FixedClient:
    """A Slurm client that reads nothing and says ``last_read`` is what it was given."""

    def __init__(self, last_read: Any):
        self.last_read = last_read

    def nodes(self) -> list[Any]:
        return []

    def jobs(self) -> list[Any]:
        return []


def test_a_failed_read_still_has_its_time():
    r = runner()
    for prefix in (["env"], ["squeue"], ["sinfo", "--json"], ["scontrol"]):  # every read, JSON or narrow
        r.fail(prefix, returncode=1, stderr="slurm_load_jobs error")
    reg = scrape(PoolCollector(SlurmClient(r)))
    assert sample(reg, "slurm_pool_up") == 0
    for source in ("nodes", "jobs"):
        assert sample(reg, "slurm_pool_scrape_errors_total", {"source": source}) == 1
        assert sample(reg, "slurm_pool_slurm_read_seconds", {"source": source}) is not None


def test_a_failed_read_exports_no_size_of_the_read_before():
    # The client's last_read still holds the previous (successful) read: it is not this read's size.
    r = runner()
    client = SlurmClient(r)
    client.last_read.update({"nodes": (111, 0.1), "jobs": (222, 0.1)})  # what the read before said
    for prefix in (["env"], ["squeue"], ["sinfo", "--json"], ["scontrol"]):
        r.fail(prefix, returncode=1, stderr="slurm_load_jobs error")
    reg = scrape(PoolCollector(client))
    for source in ("nodes", "jobs"):
        assert sample(reg, "slurm_pool_slurm_read_seconds", {"source": source}) is not None
        assert sample(reg, "slurm_pool_slurm_read_bytes", {"source": source}) is None


@pytest.mark.parametrize(
    "last_read, want",
    [
        ({"nodes": (1234, 0.5), "jobs": (0, 0.1)}, {"nodes": 1234.0, "jobs": 0.0}),
        ({"nodes": (1234, 0.5)}, {"nodes": 1234.0, "jobs": None}),
        ({"nodes": (-1, 0.5), "jobs": (True, 0.1)}, {"nodes": None, "jobs": None}),  # not a size
        ({"nodes": "1234"}, {"nodes": None, "jobs": None}),
        ("garbage", {"nodes": None, "jobs": None}),
        (None, {"nodes": None, "jobs": None}),
    ],
)
def test_read_sizes_come_from_the_client_when_it_says(last_read, want):
    client = FixedClient(last_read)
    assert {s: read_bytes(client, s) for s in ("nodes", "jobs")} == {
        s: None if v is None else int(v) for s, v in want.items()
    }
    reg = scrape(PoolCollector(client))  # type: ignore[arg-type]
    assert {s: sample(reg, "slurm_pool_slurm_read_bytes", {"source": s}) for s in want} == want


REBALANCE_FAMILIES = (
    ("seconds", "slurm_pool_rebalance_duration_seconds"),
    ("end", "slurm_pool_rebalance_last_end_timestamp_seconds"),
    ("steps", "slurm_pool_rebalance_steps"),
)


@pytest.mark.parametrize(
    "annotations, want, errors",
    [
        (lease.run_annotations(2.5, END, 3), {"seconds": 2.5, "end": END.timestamp(), "steps": 3.0}, 0),
        (lease.run_annotations(2.5, END), {"seconds": 2.5, "end": END.timestamp()}, 0),
        (None, {}, 0),  # no run yet: nothing, and nothing wrong
        ({lease.RUN_SECONDS: "-3"}, {}, 1),  # tampered with: a gap, and a kubernetes error
        ({lease.RUN_SECONDS: "1\x1b[2J"}, {}, 1),
    ],
)
def test_the_exporter_reads_the_last_run_off_the_lease(annotations, want, errors):
    k8s = FakeK8s()
    if annotations is not None:
        k8s.leases[(NS, NAME)] = with_record(annotations)
    reader = metrics_cli.rebalance_reader(k8s, NS, NAME)
    reg = scrape(PoolCollector(SlurmClient(runner()), rebalance=reader))
    assert {k: sample(reg, name) for k, name in REBALANCE_FAMILIES if sample(reg, name) is not None} == want
    assert sample(reg, "slurm_pool_scrape_errors_total", {"source": "kubernetes"}) == errors
    assert sample(reg, "slurm_pool_up") == 1  # Slurm's health is Slurm's alone


def test_no_bridge_means_no_rebalance_families():
    reg = scrape(PoolCollector(SlurmClient(runner())))
    assert all(sample(reg, name) is None for _, name in REBALANCE_FAMILIES)
