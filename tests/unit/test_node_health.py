"""Health decisions over the recorded snapshots, and the node drain logic (pure)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from slurm_pool.adapters.records import NodeRecord, node_state, parse_node_text
from slurm_pool.node import health, slurmnode
from slurm_pool.node.health import Failure
from slurm_pool.nodeconf import APP_XIDS

DATA = Path(__file__).resolve().parents[1] / "data" / "nvml"


def snap(name: str) -> dict:
    return json.loads((DATA / name).read_text())


def failures(name: str, expected, job_gpus=(), state=None):
    s = snap(name)
    st = health.update_xid_state(state, s, APP_XIDS)
    return health.check_snapshot(s, expected_gpus=expected, job_gpus=job_gpus) + health.xid_failures(st)


TABLE = [
    # snapshot, GRES gpu count, job GPUs, expected drain reason (None: healthy)
    ("h100x8_healthy.json", 8, {0, 7}, None),
    ("h100x8_healthy.json", None, (), None),
    ("a100_mig.json", 5, (), None),
    ("a100_mig.json", 2, {0}, "slurm-pool: gpu-count: NVML sees 5 GPUs, the node's GRES has 2"),
    (
        "ecc_failure.json",
        2,
        (),
        "slurm-pool: ecc: GPU 1 (00000000:4B:00.0) has 2 uncorrected volatile ECC errors; "
        "xid: GPU 1 reported critical XID 48",
    ),
    (
        "row_remap_pending.json",
        8,
        (),
        "slurm-pool: row-remap: GPU 5 (00000000:AB:00.0) has row remapping pending (reset the GPU)",
    ),
    (
        "retired_pages_pending.json",
        4,
        (),
        "slurm-pool: retired-pages: GPU 2 (00000000:88:00.0) has page retirement pending (reset the GPU)",
    ),
    ("xid_critical.json", 8, (), "slurm-pool: xid: GPU 3 reported critical XID 79"),
    ("xid_app_only.json", 8, (), None),
    ("gpu_missing.json", 8, (), "slurm-pool: gpu-count: NVML sees 7 GPUs, the node's GRES has 8"),
    ("gpu_missing.json", None, {6}, "slurm-pool: gpu-count: GPU 6 of the job not visible to NVML"),
    ("nvml_error.json", 8, (), "slurm-pool: nvml: cannot read the GPUs: NVMLError_DriverNotLoaded: Driver Not Loaded"),
    ("nvml_error.json", 0, (), None),  # a CPU node
    ("nvml_error.json", None, (), None),  # unknown node, no GPU job
    (
        "nvml_error.json",
        None,
        {0},
        "slurm-pool: nvml: cannot read the GPUs: NVMLError_DriverNotLoaded: Driver Not Loaded",
    ),
]


@pytest.mark.parametrize("name,expected,job,reason", TABLE, ids=[f"{t[0]}-{t[1]}-{sorted(t[2])}" for t in TABLE])
def test_checks_over_recorded_snapshots(name, expected, job, reason):
    fs = failures(name, expected, set(job))
    assert (health.drain_reason(fs) if fs else None) == reason


@pytest.mark.parametrize("check", health.CHECKS)
def test_every_reason_is_ours(check):
    r = health.drain_reason([Failure(check, 0, "x")])
    assert health.is_ours(r) and not health.is_ours("hw maintenance by bob") and not health.is_ours(None)
    assert not health.is_ours("slurm-pool: mig reconfigure") and not health.is_ours("slurm-pool:")


def test_reason_is_bounded_and_printable():
    fs = [Failure("xid", i, f"GPU {i} reported critical XID 79\n\x1b[31m") for i in range(40)]
    r = health.drain_reason(fs)
    assert len(r) <= health.REASON_MAX and r.isprintable() and r.endswith("...")


def test_xids_are_sticky_until_ack_or_reboot():
    crit = snap("xid_critical.json")
    st = health.update_xid_state(None, crit, APP_XIDS)
    assert [f.detail for f in health.xid_failures(st)] == ["GPU 3 reported critical XID 79"]
    st2 = health.update_xid_state(st, snap("h100x8_healthy.json"), APP_XIDS)  # same boot, no events
    assert health.xid_failures(st2)
    st3 = health.update_xid_state(st2, crit, APP_XIDS)  # the same events again: not new
    assert len(st3["critical"]) == 1 and st3["last_seq"] == 1530
    assert not health.xid_failures(health.update_xid_state(st3, crit, APP_XIDS, ack=True))
    rebooted = dict(snap("h100x8_healthy.json"), boot_id="another-boot")
    assert not health.xid_failures(health.update_xid_state(st3, rebooted, APP_XIDS))


def test_extra_ignored_xids_and_no_xid_source():
    crit = snap("xid_critical.json")
    assert not health.xid_failures(health.update_xid_state(None, crit, set(APP_XIDS) | {79}))
    blind = dict(crit, xid_source="none")
    assert not health.xid_failures(health.update_xid_state(None, blind, APP_XIDS))


def test_app_xid_list_matches_the_k8s_device_plugin():
    assert APP_XIDS == (13, 31, 43, 45, 68, 109)


@pytest.mark.parametrize(
    "gres,n",
    [
        ("gpu:h100:8(S:0-1)", 8),
        ("gpu:8", 8),
        ("gpu", 1),
        ("(null)", 0),
        ("", 0),
        (None, 0),
        ("gpu:a100_3g.20gb:1,gpu:a100_2g.10gb:1,gpu:a100_1g.5gb:2,gpu:a100:1", 5),
        ("gpu:a100:2,shard:8,mps:100", 2),
        ("gpus:3", 0),
    ],
)
def test_gres_gpu_count(gres, n):
    assert health.gres_gpu_count(gres) == n


@pytest.mark.parametrize(
    "value,ids",
    [
        ("0,2", {0, 2}),
        ("0-3", {0, 1, 2, 3}),
        ("", set()),
        (None, set()),
        ("GPU-5a3e-..,MIG-11", set()),
        ("1,x,3-2", {1}),
        # hostile or garbled values: other scripts' digits, '_', controls; ranges past any GPU id
        ("٠,١", set()),
        ("1_0,2", {2}),
        ("0,1\nSLURM_JOB_GPUS=7", {0}),
        ("0-4096", set()),
        ("1,1024-1025", {1}),
        ("0-99999999999,2", {2}),  # before: a range of 10**11 ints filled the root prolog's memory
    ],
)
def test_job_gpu_ids(value, ids):
    assert health.job_gpu_ids(value) == ids


def test_affects_job():
    s = snap("ecc_failure.json")
    f = health.check_snapshot(s, expected_gpus=2)[0]
    assert health.affects_job(f, {1}, s) and not health.affects_job(f, {0}, s)
    assert health.affects_job(Failure("gpu-count", None, "x"), {0}, s)


NODE_2205 = json.dumps(
    {
        "nodes": [
            {
                "name": "b-gpu1",
                "state": "idle",
                "state_flags": ["DRAIN"],
                "reason": "slurm-pool: ecc: old",
                "gres": "gpu:h100:8",
            },
            {"name": "b-gpu2", "state": "mixed", "state_flags": [], "reason": "", "gres": "gpu:h100:8"},
        ]
    }
)
NODE_LATER = json.dumps(
    {"nodes": [{"name": "b-gpu1", "state": ["IDLE", "DRAIN"], "reason": "rma ticket 7", "gres": "gpu:h100:8(S:0-1)"}]}
)
NODE_TEXT = """NodeName=b-gpu1 Arch=x86_64 CoresPerSocket=4
   Gres=gpu:h100:8(S:0-1)
   State=IDLE+DRAIN ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A
   Reason=slurm-pool: xid: GPU 3 reported critical XID 79 [root@2025-12-02T10:00:00]
"""


def test_parse_node_layouts():
    a = slurmnode.parse_node_json(NODE_2205, "b-gpu1")
    assert a.drained and a.reason == "slurm-pool: ecc: old" and a.gres == "gpu:h100:8"
    assert not slurmnode.parse_node_json(NODE_2205, "b-gpu2").drained
    b = slurmnode.parse_node_json(NODE_LATER, "b-gpu1")
    assert b.drained and b.reason == "rma ticket 7"
    c = parse_node_text(NODE_TEXT, "b-gpu1")
    assert c.drained and c.reason == "slurm-pool: xid: GPU 3 reported critical XID 79"
    assert c.gres == "gpu:h100:8(S:0-1)"
    assert slurmnode.parse_node_json(NODE_2205, "zzz") is None and slurmnode.parse_node_json("oops", "x") is None


def node(flags=(), reason=""):
    return NodeRecord("n1", node_state(sorted(flags)), reason, "gpu:8")


R = "slurm-pool: ecc: GPU 1 has 2 uncorrected volatile ECC errors"
DECISIONS = [
    ("unhealthy, idle", node({"IDLE"}), R, True, "drain"),
    ("unhealthy, Slurm unreachable", None, R, True, "drain"),
    ("unhealthy, human drain kept", node({"IDLE", "DRAIN"}, "disk swap -- bob"), R, True, "none"),
    ("unhealthy, our drain, same reason", node({"DRAIN"}, R), R, True, "none"),
    ("unhealthy, our drain, new reason", node({"DRAIN"}, "slurm-pool: xid: old"), R, True, "drain"),
    ("healthy, our drain", node({"IDLE", "DRAIN"}, R), None, True, "undrain"),
    ("healthy, our drain, prolog may not undrain", node({"IDLE", "DRAIN"}, R), None, False, "none"),
    ("healthy, human drain", node({"IDLE", "DRAIN"}, "maintenance"), None, True, "none"),
    ("healthy, human reason that mentions us", node({"DRAIN"}, "bob: slurm-pool: said so"), None, True, "none"),
    ("healthy, another component's drain", node({"DRAIN"}, "slurm-pool: mig reconfigure"), None, True, "none"),
    ("unhealthy, another component's drain kept", node({"DRAIN"}, "slurm-pool: mig reconfigure"), R, True, "none"),
    ("healthy, not drained", node({"IDLE"}), None, True, "none"),
    ("healthy, Slurm unreachable", None, None, True, "none"),
]


@pytest.mark.parametrize("name,state,reason,may,want", DECISIONS, ids=[d[0] for d in DECISIONS])
def test_decide(name, state, reason, may, want):
    assert slurmnode.decide(state, reason, may_undrain=may).kind == want
