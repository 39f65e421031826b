"""The recorded snapshots in tests/data/nvml are valid and readable by the MIG inventory."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from slurm_pool.adapters import nvml
from slurm_pool.node.health import gpu_units

DATA = Path(__file__).resolve().parents[1] / "data" / "nvml"
SNAPSHOTS = sorted(p.name for p in DATA.glob("*.json"))

EXPECTED = {  # file: (GPU count, GRES units)
    "h100x8_healthy.json": (8, 8),
    "a100_mig.json": (2, 5),
    "ecc_failure.json": (2, 2),
    "row_remap_pending.json": (8, 8),
    "xid_critical.json": (8, 8),
    "xid_app_only.json": (8, 8),
    "gpu_missing.json": (7, 7),
    "retired_pages_pending.json": (4, 4),
    "nvml_error.json": (0, 0),
}


def test_the_set_is_complete():
    assert set(SNAPSHOTS) == set(EXPECTED)


@pytest.mark.parametrize("name", SNAPSHOTS)
def test_snapshot_is_valid(name):
    snap = json.loads((DATA / name).read_text())
    assert nvml.validate_snapshot(snap) == []
    assert (len(snap["gpus"]), gpu_units(snap)) == EXPECTED[name]
    assert [g["index"] for g in snap["gpus"]] == list(range(len(snap["gpus"])))
    for ev in snap["xid_events"]:
        assert nvml.parse_xid(ev["text"]) == (ev["pci"], ev["xid"])


def test_mig_snapshot_carries_the_inventory():
    snap = json.loads((DATA / "a100_mig.json").read_text())
    g0 = snap["gpus"][0]
    assert g0["mig_enabled"] and not snap["gpus"][1]["mig_enabled"]
    assert sorted((d["profile"], d["start"], d["size"]) for d in g0["mig_devices"]) == [
        ("1g.5gb", 2, 1),
        ("1g.5gb", 3, 1),
        ("2g.10gb", 0, 2),
        ("3g.20gb", 4, 4),
    ]
    for d in g0["mig_devices"]:  # capability minors as the driver numbers them (GPU minor 0)
        assert d["gi_access_minor"] == 3 + 9 * d["gi_id"] and d["ci_access_minor"] == d["gi_access_minor"] + 1


def test_mig_inventory_reads_the_snapshot():
    inventory = pytest.importorskip("slurm_pool.mig.inventory")
    snap = json.loads((DATA / "a100_mig.json").read_text())
    layouts = inventory.layouts_from_snapshot("A100-40GB", snap["gpus"])
    assert layouts[1] is None and sorted(layouts[0]) == ["1g.5gb", "1g.5gb", "2g.10gb", "3g.20gb"]
    devs = inventory.devices_from_snapshot("A100-40GB", snap["gpus"])
    assert sorted((d.gi_id, d.start) for d in devs) == [(2, 4), (3, 0), (9, 2), (10, 3)]
