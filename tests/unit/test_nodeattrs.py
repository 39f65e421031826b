"""Node attributes pass through (issue 45): validation with paths, the NodeName= words per release, gres.conf
Cores=, and goldens of examples/pool-nodeattrs.yaml."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from slurm_pool.errors import SpecError
from slurm_pool.render import Site, SlurmVersion, render_all
from slurm_pool.spec import load_spec, parse_spec
from tests.support.golden import check_golden, golden_view

REPO = Path(__file__).resolve().parents[2]
NODEATTRS = REPO / "examples" / "pool-nodeattrs.yaml"
VERSIONS = ("22.05", "23.02", "24.11", "26.05")

BASE: dict[str, Any] = {
    "version": 1,
    "cluster": {"name": "t"},
    "node_groups": [
        {"name": "g", "hosts": "n[1-2]", "cpus": 16, "memory_mb": 8000, "gpus": {"model": "H100-80GB", "count": 2}}
    ],
    "tiers": [{"name": "normal", "priority": 10}],
    "partitions": [{"name": "main", "nodes": ["ALL"], "tier": "normal", "priority_tier": 1}],
    "projects": [{"name": "lab", "users": ["alice"], "tiers": ["normal"]}],
}


def _spec(group: dict[str, Any] | None = None, gpus: dict[str, Any] | None = None) -> dict[str, Any]:
    doc = copy.deepcopy(BASE)
    doc["node_groups"][0].update(group or {})
    doc["node_groups"][0]["gpus"].update(gpus or {})
    return doc


def _errors(doc: dict[str, Any]) -> list[str]:
    with pytest.raises(SpecError) as exc:
        parse_spec(doc)
    return exc.value.lines()


@pytest.mark.parametrize(
    "group, gpus, path, words",
    [
        ({"sockets": 0}, {}, "node_groups[0].sockets", "too small"),
        ({"sockets": 65534}, {}, "node_groups[0].sockets", "Sockets"),
        ({"cores_per_socket": 0}, {}, "node_groups[0].cores_per_socket", "too small"),
        ({"threads_per_core": 70000}, {}, "node_groups[0].threads_per_core", "ThreadsPerCore"),
        ({"weight": -1}, {}, "node_groups[0].weight", "negative"),
        ({"weight": 2**32 - 2}, {}, "node_groups[0].weight", "Weight"),
        ({"tmp_disk": 2**32}, {}, "node_groups[0].tmp_disk", "TmpDisk"),
        ({"mem_spec_limit": 0}, {}, "node_groups[0].mem_spec_limit", "too small"),
        ({"weight": "10"}, {}, "node_groups[0].weight", "integer"),
        ({"real_memory": 8000}, {}, "node_groups[0].real_memory", "unknown key"),
        # Cross-field: CPUs are the node's threads or its cores (slurm.conf(5) CPUs).
        ({"sockets": 2, "cores_per_socket": 4, "threads_per_core": 2, "cpus": 12}, {}, "node_groups[0].cpus",
         "neither the threads (16"),
        ({"sockets": 2, "cores_per_socket": 4, "cpus": 16}, {}, "node_groups[0].cpus", "cores (8)"),
        ({"threads_per_core": 3}, {}, "node_groups[0].cpus", "not a multiple of 3"),
        ({"mem_spec_limit": 8000}, {}, "node_groups[0].mem_spec_limit", "less than the node's RealMemory"),
        # gres.conf Cores=.
        ({}, {"cores": ["0-3", "x"]}, "node_groups[0].gpus.cores[1]", "core indexes"),
        ({}, {"cores": ["3-0"]}, "node_groups[0].gpus.cores[0]", "backwards"),
        ({}, {"cores": ["0-3,"]}, "node_groups[0].gpus.cores[0]", "core indexes"),
        ({}, {"cores": ["0", "1", "2"]}, "node_groups[0].gpus.cores", "one core list per GPU (2)"),
        ({"sockets": 2, "cores_per_socket": 4}, {"cores": ["0-3", "4-8"]}, "node_groups[0].gpus.cores[1]",
         "names core 8, but the node has 8 cores"),
        ({}, {"cores": ["16"]}, "node_groups[0].gpus.cores[0]", "has 16 cores"),
        ({"threads_per_core": 2}, {"cores": ["8"]}, "node_groups[0].gpus.cores[0]", "has 8 cores"),
        ({}, {"model": "A100-80GB", "mig": [["7g.80gb"], None], "cores": ["0-3"]}, "node_groups[0].gpus.cores",
         "NVML"),
    ],
)  # fmt: skip
def test_bad_attributes_are_named_by_path(group, gpus, path, words) -> None:
    errors = _errors(_spec(group, gpus))
    assert any(e.startswith(path + ":") and words in e for e in errors), errors


@pytest.mark.parametrize(
    "group, gpus",
    [
        ({"sockets": 2, "cores_per_socket": 4, "threads_per_core": 2}, {}),
        ({"sockets": 2, "cores_per_socket": 8}, {}),  # CPUs as cores
        ({"sockets": 2, "cores_per_socket": 4, "threads_per_core": 2, "cpus": 8}, {}),  # CPUs as cores
        ({"sockets": 4}, {}),  # the rest inferred from CPUs
        ({"weight": 0, "tmp_disk": 0, "mem_spec_limit": 7999}, {}),
        ({}, {"cores": ["0-7,15"]}),  # one list for every GPU
        ({}, {"cores": ["0-7", "8-15"]}),
    ],
)
def test_good_attributes_pass(group, gpus) -> None:
    parse_spec(_spec(group, gpus))


def _node_line(files: dict[str, str]) -> str:
    (line,) = [x for x in files["slurm-pool.conf"].splitlines() if x.startswith("NodeName=")]
    return line


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize(
    "group, line",
    [
        ({}, "NodeName=n[1-2] CPUs=16 RealMemory=8000 Gres=gpu:nvidia_h100_80gb_hbm3:2 State=UNKNOWN"),
        ({"sockets": 2, "cores_per_socket": 4, "threads_per_core": 2, "weight": 5, "features": ["ib"]},
         "NodeName=n[1-2] CPUs=16 Sockets=2 CoresPerSocket=4 ThreadsPerCore=2 RealMemory=8000 Weight=5 "
         "Gres=gpu:nvidia_h100_80gb_hbm3:2 Features=ib State=UNKNOWN"),
        ({"threads_per_core": 2, "mem_spec_limit": 512, "tmp_disk": 0},
         "NodeName=n[1-2] CPUs=16 ThreadsPerCore=2 RealMemory=8000 MemSpecLimit=512 TmpDisk=0 "
         "Gres=gpu:nvidia_h100_80gb_hbm3:2 State=UNKNOWN"),
    ],
)  # fmt: skip
def test_node_line_carries_the_attributes(version, group, line) -> None:
    files = render_all(parse_spec(_spec(group)), Site(), SlurmVersion.parse(version))
    assert _node_line(files) == line


def _gres_lines(files: dict[str, str]) -> list[str]:
    return [x for x in files["gres.conf"].splitlines() if x.startswith("NodeName=")]


@pytest.mark.parametrize(
    "gpus, site, lines",
    [
        ({}, Site(), ["NodeName=n[1-2] AutoDetect=off Name=gpu Type=nvidia_h100_80gb_hbm3 File=/dev/nvidia[0-1]"]),
        ({"cores": ["0-7", "8-15"]}, Site(),
         ["NodeName=n[1-2] AutoDetect=off Name=gpu Type=nvidia_h100_80gb_hbm3 File=/dev/nvidia0 Cores=0-7",
          "NodeName=n[1-2] AutoDetect=off Name=gpu Type=nvidia_h100_80gb_hbm3 File=/dev/nvidia1 Cores=8-15"]),
        ({"cores": ["0-15"], "shards": 4}, Site(),
         ["NodeName=n[1-2] AutoDetect=off Name=gpu Type=nvidia_h100_80gb_hbm3 File=/dev/nvidia0 Cores=0-15",
          "NodeName=n[1-2] AutoDetect=off Name=gpu Type=nvidia_h100_80gb_hbm3 File=/dev/nvidia1 Cores=0-15",
          "NodeName=n[1-2] Name=shard Count=4 File=/dev/nvidia0 Cores=0-15",
          "NodeName=n[1-2] Name=shard Count=4 File=/dev/nvidia1 Cores=0-15"]),
        ({"cores": ["0-7", "8-15"], "count": 2}, Site(emulated_devices=True),
         ["NodeName=n1 Name=gpu Type=nvidia_h100_80gb_hbm3 File=/dev/n1/nvidia0 Cores=0-7",
          "NodeName=n1 Name=gpu Type=nvidia_h100_80gb_hbm3 File=/dev/n1/nvidia1 Cores=8-15",
          "NodeName=n2 Name=gpu Type=nvidia_h100_80gb_hbm3 File=/dev/n2/nvidia0 Cores=0-7",
          "NodeName=n2 Name=gpu Type=nvidia_h100_80gb_hbm3 File=/dev/n2/nvidia1 Cores=8-15"]),
    ],
)  # fmt: skip
def test_gres_conf_cores(gpus, site, lines) -> None:
    files = render_all(parse_spec(_spec(gpus=gpus)), site, SlurmVersion.parse("26.05"))
    assert _gres_lines(files) == lines


def test_a_gpu_less_group_renders_on_emulated_devices() -> None:
    doc = _spec()
    doc["node_groups"].append({"name": "c", "hosts": "c1", "cpus": 2, "memory_mb": 1000, "weight": 100})
    files = render_all(parse_spec(doc), Site(emulated_devices=True), SlurmVersion.parse("22.05"))
    assert "NodeName=c1 CPUs=2 RealMemory=1000 Weight=100 State=UNKNOWN" in files["slurm-pool.conf"]
    assert not any(x.startswith("NodeName=c1") for x in _gres_lines(files))


@pytest.mark.parametrize("version", ["22.05", "26.05"])
def test_golden_nodeattrs(version) -> None:
    """``UPDATE_GOLDEN=1`` rewrites them, as for the seed example's goldens."""
    files = golden_view(render_all(load_spec(NODEATTRS), Site(), SlurmVersion.parse(version)))
    check_golden(files, f"nodeattrs-{version}")
