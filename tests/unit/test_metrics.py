"""The metrics exporter: the collector on JSON recorded from real Slurm 22.05 and 26.05, outcome counters, CLI.

``tests/data/slurm/22.05/{nodes,squeue}-lent.json`` are real ``--json`` output
of the example pool on the local cluster (22.05.8): a-gpu1 runs an a-owner job
on both GPUs, a-gpu2 is drained by a person ("disk swap", idle), b-gpu1 is lent
(a k8s-lend job on both GPUs), c-gpu1 is draining by slurm-pool with two of its
five MIG/GPU units in use by c-owner jobs, and a scavenger job is pending.
``<version>/{nodes,squeue}-{idle,busy}.json`` are the scene of
``tests/record_slurm_fixtures.py`` on each Slurm.  GRES and record parsing
itself is pinned in ``test_slurm_vocabulary.py``.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner
from prometheus_client import CollectorRegistry, generate_latest

from slurm_pool.adapters.records import JobRecord
from slurm_pool.adapters.runner import RecordingRunner, Result
from slurm_pool.adapters.slurm import SlurmClient
from slurm_pool.metrics import cli as metrics_cli
from slurm_pool.metrics.collector import PoolCollector
from slurm_pool.metrics.outcomes import AGE_BUCKETS, OutcomeTally, parse_record
from slurm_pool.metrics.parse import job_nodes, node_gpu_states
from slurm_pool.text import control_chars
from tests.support.narrow_text import as_json_calls

pytestmark = pytest.mark.usefixtures("narrow_from_json")


ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "slurm"
A100 = "nvidia_a100-sxm4-80gb"
VERSIONS = ("22.05", "26.05")
NODE_COMMAND = {"22.05": ["sinfo", "--json"], "26.05": ["scontrol", "show", "nodes", "--json"]}


def recorded(name: str, version: str = "22.05") -> str:
    return (DATA / version / name).read_text()


@pytest.mark.parametrize(
    "nodes, want",
    [
        ("a-gpu[1-2],c-gpu1", ["a-gpu1", "a-gpu2", "c-gpu1"]),
        ("b-gpu1", ["b-gpu1"]),
        ("", []),
    ],
)
def test_job_nodes(nodes, want):
    assert job_nodes(JobRecord(1, nodes=nodes)) == want


Z = {"allocated": 0, "idle": 0, "drained": 0, "down": 0}


@pytest.mark.parametrize(
    "state, gres, used, want",
    [
        (("IDLE",), "gpu:a:2", "gpu:a:0(IDX:N/A)", {"a": {**Z, "idle": 2}}),
        (("MIXED",), "gpu:a:2", "gpu:a:1(IDX:0)", {"a": {**Z, "allocated": 1, "idle": 1}}),
        (("ALLOCATED",), "gpu:a:2", "gpu:a:2(IDX:0-1)", {"a": {**Z, "allocated": 2}}),
        (("MIXED", "DRAIN"), "gpu:a:2", "gpu:a:1(IDX:0)", {"a": {**Z, "allocated": 1, "drained": 1}}),
        (("IDLE", "DRAIN"), "gpu:a:2", "gpu:a:0(IDX:N/A)", {"a": {**Z, "drained": 2}}),
        (("DOWN",), "gpu:a:2", "", {"a": {**Z, "down": 2}}),
        (("IDLE", "NOT_RESPONDING"), "gpu:a:2", "", {"a": {**Z, "down": 2}}),
        (("DOWN", "DRAIN"), "gpu:a:2", "", {"a": {**Z, "drained": 2}}),
        (
            ("IDLE",),
            "gpu:a:1,gpu:b:2",
            "gpu:b:1(IDX:2)",
            {"a": {**Z, "idle": 1}, "b": {**Z, "allocated": 1, "idle": 1}},
        ),
        (("MIXED",), "gpu:a:1", "gpu:a:3(IDX:0-2)", {"a": {**Z, "allocated": 3}}),  # never negative
        (("IDLE",), "", "", {}),
    ],
)
def test_node_gpu_states(state, gres, used, want):
    assert node_gpu_states(state, gres, used) == want


# -- the collector on recorded output ------------------------------------------


def make_registry(runner: RecordingRunner, state_dir: str | None = None) -> tuple[CollectorRegistry, PoolCollector]:
    reg = CollectorRegistry()
    coll = PoolCollector(SlurmClient(runner), state_dir=state_dir)
    reg.register(coll)
    return reg, coll


def replay(tag: str, version: str = "22.05") -> RecordingRunner:
    """A runner answering as the recorded Slurm ``version`` did in scene ``tag``."""
    r = RecordingRunner()
    r.on(["sinfo", "--version"], f"slurm {version}.0\n")
    r.on(NODE_COMMAND[version], recorded(f"nodes-{tag}.json", version))
    r.on(["squeue", "--json"], recorded(f"squeue-{tag}.json", version))
    return r


@pytest.mark.parametrize("version", VERSIONS)
def test_registering_queries_nothing_and_each_scrape_queries_once(version):
    r = replay("busy", version)
    reg, _ = make_registry(r)
    assert r.calls == []
    generate_latest(reg)
    generate_latest(reg)
    nodes = tuple(NODE_COMMAND[version])
    assert as_json_calls(r.calls) == [("sinfo", "--version"), nodes, ("squeue", "--json"), nodes, ("squeue", "--json")]


@pytest.mark.parametrize("version", VERSIONS)
def test_every_gpu_by_state_on_each_slurm(version):
    """The recorder's busy scene: an owner job on a-gpu1, a MIG job on c-gpu1, a-gpu2 drained by
    slurm-pool, b-gpu1 by a person, one held and one dependent job pending."""
    reg, _ = make_registry(replay("busy", version))
    v = reg.get_sample_value
    assert v("slurm_pool_up") == 1
    assert v("slurm_pool_gpus", {"node": "a-gpu1", "type": A100, "state": "allocated"}) == 1
    assert v("slurm_pool_gpus", {"node": "a-gpu1", "type": A100, "state": "idle"}) == 1
    assert v("slurm_pool_gpus", {"node": "a-gpu2", "type": A100, "state": "drained"}) == 2
    assert v("slurm_pool_gpus", {"node": "b-gpu1", "type": "nvidia_h100_80gb_hbm3", "state": "drained"}) == 2
    assert v("slurm_pool_gpus", {"node": "c-gpu1", "type": "nvidia_a100_1g.5gb", "state": "allocated"}) == 1
    assert v("slurm_pool_gpus", {"node": "c-gpu1", "type": "nvidia_a100_1g.5gb", "state": "idle"}) == 1
    assert v("slurm_pool_gpus", {"node": "c-gpu1", "type": "nvidia_a100_3g.20gb", "state": "idle"}) == 1
    assert v("slurm_pool_gpu_utilization_ratio") == pytest.approx(2 / 11)
    assert v("slurm_pool_drained_nodes", {"owner": "human"}) == 1
    assert v("slurm_pool_drained_nodes", {"owner": "slurm-pool"}) == 1
    assert v("slurm_pool_jobs", {"partition": "a-owner", "tier": "guaranteed", "state": "running"}) == 1
    assert v("slurm_pool_jobs", {"partition": "a-owner", "tier": "guaranteed", "state": "pending"}) == 1
    assert v("slurm_pool_jobs", {"partition": "shared", "tier": "shared", "state": "pending"}) == 1
    assert v("slurm_pool_allocated_gpus", {"partition": "c-owner", "tier": "guaranteed"}) == 1


def test_busy_pool_gpus_and_states():
    reg, _ = make_registry(replay("lent"))
    v = reg.get_sample_value
    assert v("slurm_pool_up") == 1
    assert v("slurm_pool_gpus", {"node": "a-gpu1", "type": A100, "state": "allocated"}) == 2
    assert v("slurm_pool_gpus", {"node": "a-gpu1", "type": A100, "state": "idle"}) == 0
    assert v("slurm_pool_gpus", {"node": "a-gpu2", "type": A100, "state": "drained"}) == 2
    assert v("slurm_pool_gpus", {"node": "b-gpu1", "type": "nvidia_h100_80gb_hbm3", "state": "allocated"}) == 2
    mig = {
        "nvidia_a100_3g.20gb": (1, 0),
        "nvidia_a100_2g.10gb": (0, 1),
        "nvidia_a100_1g.5gb": (1, 1),
        "nvidia_a100-sxm4-40gb": (0, 1),
    }
    for gtype, (alloc, drained) in mig.items():
        assert v("slurm_pool_gpus", {"node": "c-gpu1", "type": gtype, "state": "allocated"}) == alloc, gtype
        assert v("slurm_pool_gpus", {"node": "c-gpu1", "type": gtype, "state": "drained"}) == drained, gtype
        assert v("slurm_pool_gpus", {"node": "c-gpu1", "type": gtype, "state": "idle"}) == 0, gtype
    # 11 units (2 + 2 + 2 + 5), 6 allocated.
    assert v("slurm_pool_gpu_utilization_ratio") == pytest.approx(6 / 11)


def test_busy_pool_jobs_tiers_and_partitions():
    reg, _ = make_registry(replay("lent"))
    v = reg.get_sample_value
    assert v("slurm_pool_jobs", {"partition": "a-owner", "tier": "guaranteed", "state": "running"}) == 1
    assert v("slurm_pool_jobs", {"partition": "c-owner", "tier": "guaranteed", "state": "running"}) == 2
    assert v("slurm_pool_jobs", {"partition": "scavenger", "tier": "scavenger", "state": "pending"}) == 1
    assert v("slurm_pool_jobs", {"partition": "a-owner", "tier": "guaranteed", "state": "cancelled"}) == 1
    assert v("slurm_pool_allocated_gpus", {"partition": "a-owner", "tier": "guaranteed"}) == 2
    assert v("slurm_pool_allocated_gpus", {"partition": "c-owner", "tier": "guaranteed"}) == 2
    assert v("slurm_pool_allocated_gpus", {"partition": "k8s-lend", "tier": "k8s-lend"}) == 2
    assert v("slurm_pool_allocated_gpus", {"partition": "scavenger", "tier": "scavenger"}) is None
    assert v("slurm_pool_partition_gpu_utilization_ratio", {"partition": "a-owner"}) == pytest.approx(2 / 4)
    assert v("slurm_pool_partition_gpu_utilization_ratio", {"partition": "c-owner"}) == pytest.approx(2 / 5)
    assert v("slurm_pool_partition_gpu_utilization_ratio", {"partition": "b-owner"}) == 0
    assert v("slurm_pool_partition_gpu_utilization_ratio", {"partition": "k8s-lend"}) == pytest.approx(2 / 11)
    assert v("slurm_pool_partition_gpu_utilization_ratio", {"partition": "scavenger"}) == 0
    assert v("slurm_pool_tier_gpu_utilization_ratio", {"tier": "guaranteed"}) == pytest.approx(4 / 11)
    assert v("slurm_pool_tier_gpu_utilization_ratio", {"tier": "k8s-lend"}) == pytest.approx(2 / 11)


def test_busy_pool_drains_and_lending():
    reg, _ = make_registry(replay("lent"))
    v = reg.get_sample_value
    assert v("slurm_pool_node_drained", {"node": "a-gpu2", "owner": "human", "reason": "disk swap"}) == 1
    assert (
        v("slurm_pool_node_drained", {"node": "c-gpu1", "owner": "slurm-pool", "reason": "slurm-pool: xid 79 on gpu 0"})
        == 1
    )
    assert v("slurm_pool_drained_nodes", {"owner": "human"}) == 1
    assert v("slurm_pool_drained_nodes", {"owner": "slurm-pool"}) == 1
    text = generate_latest(reg).decode()
    assert 'slurm_pool_node_drained{node="a-gpu1"' not in text
    assert v("slurm_pool_lent_nodes") == 1
    assert v("slurm_pool_node_lent", {"node": "b-gpu1"}) == 1
    assert v("slurm_pool_node_lent", {"node": "a-gpu1"}) == 0


def test_idle_pool():
    reg, _ = make_registry(replay("idle"))
    v = reg.get_sample_value
    assert v("slurm_pool_up") == 1
    assert v("slurm_pool_gpu_utilization_ratio") == 0
    assert v("slurm_pool_gpus", {"node": "b-gpu1", "type": "nvidia_h100_80gb_hbm3", "state": "idle"}) == 2
    assert v("slurm_pool_drained_nodes", {"owner": "human"}) == 0
    assert v("slurm_pool_drained_nodes", {"owner": "slurm-pool"}) == 0
    assert v("slurm_pool_lent_nodes") == 0
    assert "slurm_pool_jobs{" not in generate_latest(reg).decode()


def test_lend_partition_is_configurable():
    reg = CollectorRegistry()
    reg.register(PoolCollector(SlurmClient(replay("lent")), lend_partition="c-owner"))
    assert reg.get_sample_value("slurm_pool_lent_nodes") == 1
    assert reg.get_sample_value("slurm_pool_node_lent", {"node": "c-gpu1"}) == 1


def test_every_metric_is_prefixed_and_families_are_fresh_per_scrape():
    r = replay("lent")
    reg, _ = make_registry(r)
    text = generate_latest(reg).decode()
    names = {line.split()[2] for line in text.splitlines() if line.startswith("# TYPE")}
    assert names and all(n.startswith("slurm_pool_") for n in names), names
    # The queue empties: yesterday's job series are gone from the next scrape.
    r.on(["squeue", "--json"], recorded("squeue-idle.json"))
    r.on(["sinfo", "--json"], recorded("nodes-idle.json"))
    after = generate_latest(reg).decode()
    assert 'slurm_pool_jobs{partition="a-owner"' in text
    assert "slurm_pool_jobs{" not in after
    assert "slurm_pool_node_drained{" not in after


@pytest.mark.parametrize(
    "failing, source, present, absent",
    [
        ("sinfo", "nodes", ["slurm_pool_jobs"], ["slurm_pool_gpus", "slurm_pool_lent_nodes"]),
        (
            "squeue",
            "jobs",
            ["slurm_pool_gpus", "slurm_pool_node_drained"],
            ["slurm_pool_jobs", "slurm_pool_lent_nodes"],
        ),
    ],
)
def test_a_failing_slurm_query_is_a_metric_not_an_error(failing, source, present, absent):
    r = replay("lent")
    reg, _ = make_registry(r)
    v = reg.get_sample_value
    assert v("slurm_pool_scrape_errors_total", {"source": source}) == 0
    r.fail([failing, "--json"], stderr="slurm_load_partitions: Unable to contact slurm controller")
    text = generate_latest(reg).decode()
    assert "slurm_pool_up 0.0" in text
    for name in present:
        assert f"\n{name}{{" in text, name
    for name in absent:
        assert f"\n{name}{{" not in text and f"\n{name} " not in text, name
    assert v("slurm_pool_up") == 0
    # get_sample_value scraped again: the counter keeps counting.
    assert v("slurm_pool_scrape_errors_total", {"source": source}) == 3
    r.on([failing, "--json"], recorded(f"{'nodes' if failing == 'sinfo' else failing}-lent.json"))
    assert v("slurm_pool_up") == 1
    assert v("slurm_pool_scrape_errors_total", {"source": source}) == 3


@pytest.mark.parametrize(
    "stdout", ["not json", '{"nodes": [{"name": 1, "state": {}}]}x', "[1, 2]", recorded("sinfo-busy.json", "26.05")]
)
def test_garbage_node_records_count_as_an_error(stdout):
    r = replay("lent")
    r.on(["sinfo", "--json"], stdout)
    reg, _ = make_registry(r)
    text = generate_latest(reg).decode()
    assert "slurm_pool_up 0.0" in text
    assert 'slurm_pool_scrape_errors_total{source="nodes"} 1.0' in text
    assert 'slurm_pool_scrape_errors_total{source="jobs"} 0.0' in text


# -- outcome records -----------------------------------------------------------


def rec(**kw) -> str:
    base = {
        "v": 1,
        "time": 1.0,
        "node": "x",
        "job_id": "1",
        "user": "alice",
        "reason": None,
        "preempted": False,
        "checkpointed": False,
        "checkpoint_age_s": None,
    }
    base.update(kw)
    return json.dumps(base) + "\n"


@pytest.mark.parametrize(
    "line, want",
    [
        (rec(), {"reason": None, "preempted": False, "checkpointed": False, "checkpoint_age_s": None}),
        (
            rec(reason="preempt", preempted=True, checkpointed=True, checkpoint_age_s=12.5),
            {"reason": "preempt", "preempted": True, "checkpointed": True, "checkpoint_age_s": 12.5},
        ),
        (
            rec(reason="bogus", preempted="yes", checkpoint_age_s=-1),
            {"reason": None, "preempted": False, "checkpointed": False, "checkpoint_age_s": None},
        ),
        (
            rec(checkpoint_age_s=True)[:-1],
            {"reason": None, "preempted": False, "checkpointed": False, "checkpoint_age_s": None},
        ),
        (rec(v=2), None),
        ("[1]", None),
        ("{not json", None),
        (b"\xff\xfe", None),
        ('{"v": 1, "checkpoint_age_s": ' + "9" * 70000 + "}", None),
    ],
)
def test_parse_record(line, want):
    assert parse_record(line) == want


def write_outcomes(root: Path, node: str, *lines: str) -> Path:
    d = root / node
    d.mkdir(parents=True, exist_ok=True)
    path = d / "outcomes.jsonl"
    with open(path, "a") as fh:
        fh.write("".join(lines))
    return path


def test_outcome_counters_are_read_incrementally(tmp_path):
    write_outcomes(
        tmp_path,
        "a-gpu1",
        rec(reason="preempt", preempted=True, checkpointed=True, checkpoint_age_s=3.0),
        rec(),
        rec(reason="timeout", checkpoint_age_s=100.0),
    )
    path = write_outcomes(tmp_path, "b-gpu1", rec(reason="preempt", preempted=True), "garbage\n")
    reg, coll = make_registry(replay("idle"), state_dir=str(tmp_path))
    v = reg.get_sample_value
    assert v("slurm_pool_preemptions_total", {"node": "a-gpu1", "checkpointed": "true"}) == 1
    assert v("slurm_pool_preemptions_total", {"node": "b-gpu1", "checkpointed": "false"}) == 1
    assert v("slurm_pool_job_runs_total", {"node": "a-gpu1", "reason": "none"}) == 1
    assert v("slurm_pool_job_runs_total", {"node": "a-gpu1", "reason": "timeout"}) == 1
    assert v("slurm_pool_outcome_bad_records_total") == 1
    assert v("slurm_pool_checkpoint_age_seconds_count", {"reason": "preempt"}) == 1
    assert v("slurm_pool_checkpoint_age_seconds_sum", {"reason": "preempt"}) == 3.0
    assert v("slurm_pool_checkpoint_age_seconds_bucket", {"reason": "preempt", "le": "1.0"}) == 0
    assert v("slurm_pool_checkpoint_age_seconds_bucket", {"reason": "preempt", "le": "5.0"}) == 1
    assert v("slurm_pool_checkpoint_age_seconds_bucket", {"reason": "timeout", "le": "60.0"}) == 0
    assert v("slurm_pool_checkpoint_age_seconds_bucket", {"reason": "timeout", "le": "+Inf"}) == 1
    # Nothing new: nothing changes, however often it is scraped.
    assert v("slurm_pool_preemptions_total", {"node": "b-gpu1", "checkpointed": "false"}) == 1
    # A half-written line waits for its newline.
    line = rec(reason="preempt", preempted=True, checkpointed=True, checkpoint_age_s=0.0)
    with open(path, "a") as fh:
        fh.write(line[:20])
    assert v("slurm_pool_preemptions_total", {"node": "b-gpu1", "checkpointed": "true"}) is None
    with open(path, "a") as fh:
        fh.write(line[20:])
    assert v("slurm_pool_preemptions_total", {"node": "b-gpu1", "checkpointed": "true"}) == 1
    assert v("slurm_pool_outcome_bad_records_total") == 1
    # Rotation: a new, shorter file is read from its start; earlier counts stay.
    # (The rotated file lands in the state directory itself: a stray file there is no error.)
    os.rename(path, tmp_path / "old")
    write_outcomes(tmp_path, "b-gpu1", rec(reason="preempt", preempted=True))
    assert v("slurm_pool_preemptions_total", {"node": "b-gpu1", "checkpointed": "false"}) == 2
    assert v("slurm_pool_scrape_errors_total", {"source": "outcomes"}) == 0


def test_outcome_files_are_not_followed_through_symlinks(tmp_path):
    real = write_outcomes(tmp_path / "elsewhere", "n", rec(reason="preempt", preempted=True))
    (tmp_path / "state" / "a-gpu1").mkdir(parents=True)
    (tmp_path / "state" / "a-gpu1" / "outcomes.jsonl").symlink_to(real)
    (tmp_path / "state" / "..hidden").mkdir()
    reg, _ = make_registry(replay("idle"), state_dir=str(tmp_path / "state"))
    text = generate_latest(reg).decode()
    assert "slurm_pool_preemptions_total{" not in text
    assert 'slurm_pool_scrape_errors_total{source="outcomes"} 1.0' in text
    assert "slurm_pool_up 1.0" in text


def test_missing_state_dir_is_no_error_and_none_means_no_outcome_metrics(tmp_path):
    reg, _ = make_registry(replay("idle"), state_dir=str(tmp_path / "missing"))
    assert reg.get_sample_value("slurm_pool_scrape_errors_total", {"source": "outcomes"}) == 0
    assert reg.get_sample_value("slurm_pool_outcome_bad_records_total") == 0
    reg, _ = make_registry(replay("idle"), state_dir=None)
    assert "slurm_pool_job_runs" not in generate_latest(reg).decode()


def test_histogram_buckets_are_cumulative():
    tally = OutcomeTally("unused")
    for age in (0.5, 1.0, 4.0, 7200.0, 9000.0):
        tally.add("n", rec(reason="terminate", checkpoint_age_s=age))
    buckets = dict(tally.ages["terminate"].buckets())
    assert buckets["1.0"] == 2 and buckets["5.0"] == 3 and buckets[repr(AGE_BUCKETS[-1])] == 4
    assert buckets["+Inf"] == 5
    assert list(buckets.values()) == sorted(buckets.values())


# -- CLI -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value, want",
    [
        ("127.0.0.1:9877", ("127.0.0.1", 9877)),
        (":9100", ("127.0.0.1", 9100)),
        ("[::1]:9877", ("::1", 9877)),
        ("0.0.0.0:0", ("0.0.0.0", 0)),
    ],
)
def test_parse_listen(value, want):
    assert metrics_cli.parse_listen(value) == want


@pytest.mark.parametrize(
    "value",
    [
        "9877",
        "host:",
        "host:port",
        "h:70000",
        "h:1_0",
        "h:٩٠",
        "h\n:80",
        "[fe80::1%\x1b[31m]:80",  # before: ipaddress takes any IPv6 scope id
        "[fe80::1%eth0\nx]:80",
        "[fe80::1%eth0 x]:80",
        "[fe80::1%\u202e]:80",
    ],
)
def test_parse_listen_rejects(value):
    with pytest.raises(ValueError):
        metrics_cli.parse_listen(value)


def test_listen_default_is_loopback():
    assert metrics_cli.DEFAULT_LISTEN.startswith("127.0.0.1:")


def test_exporter_once_prints_one_scrape(monkeypatch, tmp_path):
    r = replay("lent")
    monkeypatch.setattr("slurm_pool.adapters.runner.SubprocessRunner", lambda **kw: r)
    res = CliRunner().invoke(metrics_cli.exporter, ["--once", "--state-dir", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert "slurm_pool_up 1.0" in res.output
    assert f'slurm_pool_gpus{{node="a-gpu1",state="allocated",type="{A100}"}} 2.0' in res.output
    assert "slurm_pool_job_runs_total" in res.output
    bad = CliRunner().invoke(metrics_cli.exporter, ["--once", "--listen", "nowhere"])
    assert bad.exit_code == 2 and "HOST:PORT" in bad.output


def test_state_dir_follows_node_conf_beside_slurm_conf(tmp_path):
    (tmp_path / "slurm.conf").write_text("")
    env = {"SLURM_CONF": str(tmp_path / "slurm.conf")}
    assert metrics_cli.default_state_dir(env) == "/var/lib/slurm-pool/state"
    conf = tmp_path / "slurm-pool-node.conf"
    conf.write_text(f"state_dir = {tmp_path}/state\n")
    assert metrics_cli.default_state_dir(env) == f"{tmp_path}/state"
    conf.write_text("nonsense = 1\n")
    assert metrics_cli.default_state_dir(env) == "/var/lib/slurm-pool/state"


def _mutated(version: str, edit) -> RecordingRunner:
    r = RecordingRunner()
    r.on(["sinfo", "--version"], f"slurm {version}.0\n")
    doc = json.loads(recorded("nodes-busy.json", version))
    edit(doc["nodes"][0])
    r.on(NODE_COMMAND[version], json.dumps(doc))
    r.on(["squeue", "--json"], recorded("squeue-busy.json", version))
    return r


ODD_VALUES = [
    ("numeric-reason", lambda n: n.update(reason=5)),
    ("null-name", lambda n: n.update(name=None)),
    ("gres-inf", lambda n: n.update(gres="gpu:nvidia_a100-sxm4-80gb:inf")),
    ("gres-used-inf", lambda n: n.update(gres_used="gpu:nvidia_a100-sxm4-80gb:inf(IDX:0)")),
    ("state-number", lambda n: n.update(state=7)),
    ("partitions-string", lambda n: n.update(partitions="a-owner")),
    ("gres-list", lambda n: n.update(gres=["gpu:2"])),
]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("edit", [e for _, e in ODD_VALUES], ids=[i for i, _ in ODD_VALUES])
def test_well_formed_output_with_odd_values_never_fails_the_scrape(version, edit):
    # Issue 11, defect 7: an unexpected type escaped the collector and the scrape had no slurm_pool_up.
    reg, _ = make_registry(_mutated(version, edit))
    text = generate_latest(reg).decode()
    assert "slurm_pool_up " in text
    assert reg.get_sample_value("slurm_pool_up") in (0.0, 1.0)


class HungSlurm:
    """A Slurm whose node query blocks until released; counts the queries that reached it."""

    def __init__(self, version: str = "22.05"):
        self.release = threading.Event()
        self.entered = threading.Event()
        self.calls = 0
        self.version = version

    def __call__(self, argv, _input):
        self.calls += 1
        self.entered.set()
        self.release.wait()
        return Result(tuple(argv), 0, recorded("nodes-busy.json", self.version))


def test_a_hung_slurm_gives_up_0_within_the_deadline_and_scrapes_share_one_read():
    # Issue 11, defect 7: no whole-scrape deadline, and scrapes queued behind one lock.
    hung = HungSlurm()
    r = RecordingRunner()
    r.on(["sinfo", "--version"], "slurm 22.05.0\n")
    r.respond(NODE_COMMAND["22.05"], hung)
    r.on(["squeue", "--json"], recorded("squeue-busy.json"))
    coll = PoolCollector(SlurmClient(r), deadline=0.05)
    reg = CollectorRegistry()
    reg.register(coll)
    try:
        outs: list[str] = []
        threads = [threading.Thread(target=lambda: outs.append(generate_latest(reg).decode())) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(outs) == 3 and all("slurm_pool_up 0.0" in o for o in outs)
        assert hung.entered.wait(30) and hung.calls == 1  # three scrapes, one query in flight
        assert reg.get_sample_value("slurm_pool_scrape_errors_total", {"source": "deadline"}) >= 3
    finally:
        hung.release.set()
    # Once Slurm answers, the next scrape that finds the read done starts a fresh one and is healthy.
    coll.deadline = 30.0
    coll._inflight.result(timeout=30)
    assert reg.get_sample_value("slurm_pool_up") == 1.0


# -- reclaims of lent nodes ----------------------------------------------------------------------


def _acct(job_id, partition, node, submit, start, end=None):
    from slurm_pool.adapters.records import JobRecord

    return JobRecord(job_id, partition=partition, nodes=node, submit_time=submit, start_time=start, end_time=end)


@pytest.mark.parametrize(
    "jobs, expected",
    [
        # The owner waited 3 s: submitted at 100, the placeholder ended at 102, the owner started at 103.
        ([_acct(1, "k8s-lend", "b-gpu1", 0, 1, 102), _acct(2, "b-owner", "b-gpu1", 100, 103)], {2: 3.0}),
        # Submitted after the placeholder ended: it did not take the node back.
        ([_acct(1, "k8s-lend", "b-gpu1", 0, 1, 102), _acct(2, "b-owner", "b-gpu1", 105, 106)], {}),
        # Started long after the placeholder ended: something else held the node meanwhile.
        ([_acct(1, "k8s-lend", "b-gpu1", 0, 1, 102), _acct(2, "b-owner", "b-gpu1", 100, 200)], {}),
        # Another node.
        ([_acct(1, "k8s-lend", "b-gpu1", 0, 1, 102), _acct(2, "a-owner", "a-gpu1", 100, 103)], {}),
        # A multi-node job that took one lent node back; a placeholder still running ended nothing.
        (
            [
                _acct(1, "k8s-lend", "a-gpu2", 0, 1, 50),
                _acct(3, "k8s-lend", "a-gpu1", 0, 1),
                _acct(2, "shared", "a-gpu[1-2]", 40, 52),
            ],
            {2: 12.0},
        ),
    ],
)
def test_reclaim_latencies(jobs, expected):
    from slurm_pool.metrics.parse import reclaim_latencies

    assert reclaim_latencies(jobs, "k8s-lend") == expected


def test_reclaim_tally_counts_each_reclaim_once_reads_at_most_every_interval_and_forgets_old_ids():
    from slurm_pool.metrics.reclaims import ReclaimTally

    now = [1000.0]
    reads = []
    jobs = [_acct(1, "k8s-lend", "b-gpu1", 0, 900, 990), _acct(2, "b-owner", "b-gpu1", 985, 992)]

    def read(since):
        reads.append(since)
        return jobs

    tally = ReclaimTally(read, "k8s-lend", window=600, interval=60, clock=lambda: now[0])
    tally.refresh()
    tally.refresh()  # within the interval: no read
    now[0] += 60
    tally.refresh()  # the same reclaim again: not counted twice
    assert reads == ["now-600seconds", "now-600seconds"] and tally.seen == {2: 1000.0}
    samples = {s.name + str(s.labels.get("le", "")): s.value for s in tally.metric().samples}
    assert samples["slurm_pool_reclaim_latency_seconds_bucket5.0"] == 0
    assert samples["slurm_pool_reclaim_latency_seconds_bucket10.0"] == 1
    assert (
        samples["slurm_pool_reclaim_latency_seconds_count"] == 1
        and samples["slurm_pool_reclaim_latency_seconds_sum"] == 7
    )
    now[0] += 1300  # older than two windows: forgotten, and too old to be read again
    tally.refresh()
    assert tally.seen == {} and samples["slurm_pool_reclaim_latency_seconds_count"] == 1


def test_a_failing_reclaim_read_is_a_scrape_error_and_the_histogram_stays():
    from prometheus_client import CollectorRegistry

    from slurm_pool.adapters.slurm import SlurmClient
    from slurm_pool.metrics.collector import PoolCollector
    from slurm_pool.metrics.reclaims import ReclaimTally

    def read(_since):
        raise OSError("slurmdbd is down")

    runner = RecordingRunner()
    runner.on(["sinfo", "--version"], "slurm 22.05.8\n")
    runner.on(["sinfo", "--json"], json.dumps({"nodes": []}))
    runner.on(["squeue", "--json"], json.dumps({"jobs": []}))
    reg = CollectorRegistry()
    reg.register(PoolCollector(SlurmClient(runner), reclaims=ReclaimTally(read, "k8s-lend")))
    assert reg.get_sample_value("slurm_pool_scrape_errors_total", {"source": "reclaims"}) == 1
    assert reg.get_sample_value("slurm_pool_reclaim_latency_seconds_count") == 0


# -- the inference tier's demand (the exporter given the bridge) ---------------------------------------------


def test_inference_demand_is_exported_per_resource_and_a_failed_read_leaves_a_gap():
    answers: list[object] = [{"nvidia.com/gpu": 3, "nvidia.com/mig-1g.10gb": 2}, RuntimeError("API server down"), {}]

    def read():
        a = answers.pop(0)
        if isinstance(a, Exception):
            raise a
        return a

    reg = CollectorRegistry()
    reg.register(PoolCollector(SlurmClient(replay("lent")), inference=read))
    first = generate_latest(reg).decode()
    assert "\nslurm_pool_inference_demand_gpus 3.0" in first
    assert 'slurm_pool_inference_demand{resource="nvidia.com/mig-1g.10gb"} 2.0' in first
    assert 'slurm_pool_inference_demand{resource="nvidia.com/gpu"} 3.0' in first
    assert 'slurm_pool_scrape_errors_total{source="kubernetes"} 0.0' in first
    second = generate_latest(reg).decode()
    assert "\nslurm_pool_inference_demand_gpus " not in second and 'resource="nvidia.com/gpu"' not in second
    assert 'slurm_pool_scrape_errors_total{source="kubernetes"} 1.0' in second
    assert "slurm_pool_up 1.0" in second  # Slurm's health is Slurm's alone
    third = generate_latest(reg).decode()
    assert "\nslurm_pool_inference_demand_gpus 0.0" in third  # nothing wanted is a 0, not a gap


def test_no_bridge_means_no_inference_families():
    text = generate_latest(make_registry(replay("lent"))[0]).decode()
    assert "slurm_pool_inference_demand" not in text


def _spec_without_bridge(tmp_path: Path) -> Path:
    import yaml

    data = yaml.safe_load((ROOT / "examples" / "pool.yaml").read_text())
    data.pop("bridge", None)
    out = tmp_path / "pool.yaml"
    out.write_text(yaml.safe_dump(data))
    return out


@pytest.mark.parametrize(
    "args, hint",
    [
        (["--kubeconfig", "k.yaml"], "needs --spec"),
        (["--spec", "{nobridge}"], "has no bridge section"),
        (["--spec", "examples/pool.yaml", "--kubeconfig", "{garbage}"], "no usable Kubernetes configuration"),
    ],
)
def test_exporter_inference_options_reject(args, hint, tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    garbage = tmp_path / "kubeconfig"
    garbage.write_text("clusters: 7\n")
    args = [a.format(nobridge=_spec_without_bridge(tmp_path), garbage=garbage) for a in args]
    res = CliRunner().invoke(metrics_cli.exporter, ["--once", *args])
    assert res.exit_code == 2 and hint in res.output and "Traceback" not in res.output, res.output


# -- issue 30: label values and help texts never carry a control character ---------------------------

HOSTILE = "\x1b[2J\x1b]0;pwned\x07\x9b31m\u202eevil\u2028x"


def _hostile_runner(**where: str) -> RecordingRunner:
    node = {"name": "n1", "state": ["IDLE"], "state_flags": ["DRAIN"], "reason": "r", "gres": "gpu:t:2"}
    node.update({k: v for k, v in where.items() if k in ("name", "reason", "gres")})
    job = {"job_id": 7, "job_state": "RUNNING", "qos": "q", "account": "a", "partition": "p", "nodes": "n1"}
    job.update({k: v for k, v in where.items() if k in ("qos", "account", "partition", "nodes")})
    job["tres_alloc_str"] = "gres/gpu=1"
    r = RecordingRunner()
    r.on(["sinfo", "--version"], "slurm 22.05.8\n")
    r.on(["sinfo", "--json"], json.dumps({"nodes": [{**node, "partitions": [job["partition"]]}]}))
    r.on(["squeue", "--json"], json.dumps({"jobs": [job]}))
    return r


@pytest.mark.parametrize(
    "where",
    [
        {"name": HOSTILE, "nodes": HOSTILE},
        {"reason": HOSTILE},
        {"gres": f"gpu:{HOSTILE}:2"},
        {"qos": HOSTILE},
        {"account": HOSTILE},
        {"partition": HOSTILE},
    ],
    ids=lambda w: next(iter(w)),
)
def test_slurms_text_reaches_no_label_raw(where):
    reg, _ = make_registry(_hostile_runner(**where))
    text = generate_latest(reg).decode()
    assert "slurm_pool_up 1.0" in text
    assert control_chars(text.replace("\n", "")) == [] and "\\\\x1b" in text  # shown: \x1b, escaped once more


def test_the_lend_partition_and_kubernetes_resources_reach_no_help_or_label_raw():
    reg = CollectorRegistry()
    reg.register(
        PoolCollector(
            SlurmClient(_hostile_runner()),
            lend_partition=HOSTILE,
            inference=lambda: {HOSTILE: 2},
            gpu_resource=HOSTILE,
        )
    )
    text = generate_latest(reg).decode()
    assert control_chars(text.replace("\n", "")) == [] and "slurm_pool_inference_demand_gpus 2.0" in text


@pytest.mark.parametrize(
    "args, hint",
    [
        (["--lend-partition", "k8s\x1b[2J"], "--lend-partition"),
        (["--lend-partition", "k8s\nlend"], "--lend-partition"),
        (["--listen", "bad host:9877"], "not a host name or address"),
        (["--listen", "h\x1b[2J:9877"], "not a host name or address"),
        (["--listen", "[::1\n]:9877"], "not a host name or address"),
        (["--listen", "127.0.0.1:٩٨٧٧"], "HOST:PORT"),
    ],
)
def test_exporter_refuses_options_with_control_characters(args, hint, tmp_path):
    res = CliRunner().invoke(metrics_cli.exporter, ["--once", "--state-dir", str(tmp_path), *args])
    assert res.exit_code == 2 and hint in res.output and "Traceback" not in res.output, res.output
    assert "\x1b" not in res.output
