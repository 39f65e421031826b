"""Demand sources: sacct --json history, needs files, GRES Type mapping; inventory snapshots."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_pool.mig.demand import demand_from_needs_text, demand_from_sacct, parse_needs, profile_for_gres_type
from slurm_pool.mig.emit import MigDevice
from slurm_pool.mig.inventory import devices_from_snapshot, layouts_from_snapshot, model_for_nvml_name
from slurm_pool.mig.planner import PlanError

DATA = Path(__file__).resolve().parents[1] / "data" / "mig"


@pytest.mark.parametrize(
    "model,gres_type,expected",
    [
        ("A100-40GB", "nvidia_a100_1g.5gb", "1g.5gb"),
        ("A100-40GB", "gpu:a100-sxm4-40gb_1g.5gb", "1g.5gb"),
        ("A100-40GB", "a100_2g.10gb", "2g.10gb"),
        ("A100-40GB", "nvidia_a100_1g.10gb", "1g.10gb"),
        ("A100-40GB", "nvidia_a100_7g.39gb", "7g.40gb"),
        ("A100-80GB", "nvidia_a100_3g.39gb", "3g.40gb"),
        ("A100-80GB", "3g.40gb", "3g.40gb"),
        ("A100-40GB", "nvidia_a100-sxm4-40gb", None),
        ("A100-40GB", "nvidia_a100_5g.30gb", None),
    ],
)
def test_profile_for_gres_type(model: str, gres_type: str, expected: str | None) -> None:
    assert profile_for_gres_type(model, gres_type) == expected


def test_sacct_peak_concurrency() -> None:
    demand, other = demand_from_sacct("A100-40GB", (DATA / "sacct_a100.json").read_text())
    assert demand == {"1g.5gb": 3, "3g.20gb": 1, "2g.10gb": 1}
    assert other == {"nvidia_a100-sxm4-40gb": 2}


def test_sacct_tres_strings_without_times_sum_up() -> None:
    demand, other = demand_from_sacct("A100-40GB", (DATA / "sacct_old_strings.json").read_text())
    assert demand == {"1g.5gb": 3, "3g.20gb": 1} and other == {}


def test_sacct_bad_json() -> None:
    with pytest.raises(PlanError, match="sacct JSON"):
        demand_from_sacct("A100-40GB", "{not json")


def test_needs_csv_and_json() -> None:
    demand, too_big = demand_from_needs_text("A100-40GB", (DATA / "needs.csv").read_text())
    assert demand == {"1g.5gb": 5, "1g.10gb": 2, "3g.20gb": 1} and too_big == 1
    assert parse_needs('[{"gpu_mem_gb": 3, "count": 2}]') == [(3.0, 0.0, 2)]
    with pytest.raises(PlanError, match="has no gpu_mem_gb column"):
        parse_needs("job,compute\nx,0.5\n")
    with pytest.raises(PlanError, match="row 1: gpu_mem_gb: .lots. is not a number"):
        parse_needs("gpu_mem_gb\nlots\n")


SNAPSHOT = [
    {
        "index": 0,
        "minor": 0,
        "name": "NVIDIA H100 80GB HBM3",
        "mig_mode": "Enabled",
        "mig_devices": [
            {"gpu_instance_id": 1, "compute_instance_id": 0, "gpu_instance_slice_count": 3, "memory_size_mb": 40448},
            {"gpu_instance_id": 5, "compute_instance_id": 0, "gpu_instance_slice_count": 1, "memory_size_mb": 20096},
            {"gpu_instance_id": 13, "compute_instance_id": 0, "profile": "MIG 1g.10gb"},
        ],
    },
    {"index": 1, "minor": 1, "name": "NVIDIA H100 80GB HBM3", "mig_enabled": False},
    {"index": 2, "minor": 2, "name": "NVIDIA H100 80GB HBM3", "mig_enabled": True, "mig_devices": []},
]


def test_inventory_layouts_and_devices() -> None:
    assert model_for_nvml_name("NVIDIA H100 80GB HBM3") == "H100-80GB"
    assert model_for_nvml_name("A100-SXM4-40GB") == "A100-40GB"
    assert model_for_nvml_name("Tesla V100") is None
    assert layouts_from_snapshot("H100-80GB", SNAPSHOT) == {0: ("3g.40gb", "1g.20gb", "1g.10gb"), 1: None, 2: ()}
    devs = devices_from_snapshot("H100-80GB", SNAPSHOT)
    assert devs[0] == MigDevice(0, 1, 0, "3g.40gb", gpu_minor=0, memory_mib=40448)
    assert [d.profile for d in devs] == ["3g.40gb", "1g.20gb", "1g.10gb"]
