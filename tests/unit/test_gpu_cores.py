"""``slurm-pool gpu-cores``: gres.conf Cores= from NVML's CPU affinity and the node's topology (issue 45)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from slurm_pool.adapters.cputopo import TopologyError, read_cpu_topology
from slurm_pool.adapters.nvml import affinity_cpus
from slurm_pool.cli import cli
from slurm_pool.node.gpucores import GpuCoresError, abstract_cores, gpu_cores
from slurm_pool.spec import parse_spec
from slurm_pool.text import index_ranges

DATA = Path(__file__).resolve().parents[1] / "data" / "nvml"


def sysfs(root: Path, cpus: dict[int, tuple[int, int]], offline: tuple[int, ...] = ()) -> str:
    """A /sys/devices/system/cpu tree: each CPU's package and core id; ``offline`` CPUs have no topology."""
    for cpu, (socket, core) in cpus.items():
        topo = root / f"cpu{cpu}" / "topology"
        topo.mkdir(parents=True)
        (topo / "physical_package_id").write_text(f"{socket}\n")
        (topo / "core_id").write_text(f"{core}\n")
    for cpu in offline:
        (root / f"cpu{cpu}").mkdir(parents=True)
    (root / "cpufreq").mkdir(parents=True, exist_ok=True)  # not a CPU
    return str(root)


def dgx(sockets: int = 2, cores: int = 56, threads: int = 2) -> dict[int, tuple[int, int]]:
    """Linux's numbering on a two-socket server: first every core's first thread, socket by socket, then the rest."""
    out = {}
    for t in range(threads):
        for s in range(sockets):
            for c in range(cores):
                out[t * sockets * cores + s * cores + c] = (s, c)
    return out


@pytest.mark.parametrize(
    "words, want",
    [(None, None), ([], None), ([0], None), ([0b1111], "0-3"), ([0, 1], "64"), ([0b101, 1 << 63], "0,2,127")],
)
def test_nvml_affinity_mask_as_a_cpulist(words, want) -> None:
    assert affinity_cpus(words) == want


@pytest.mark.parametrize(
    "values, want", [([0, 1, 2, 3], "0-3"), ([8, 0, 1, 2, 3], "0-3,8"), ([5], "5"), ([1, 3], "1,3"), ([], "")]
)
def test_index_ranges(values, want) -> None:
    assert index_ranges(values) == want


@pytest.mark.parametrize(
    "name, topology, affinities, want",
    [
        # Linux numbers the first threads socket by socket, then their siblings: one socket per GPU pair.
        ("two sockets", dgx(2, 4, 2), ["0-3,8-11", "4-7,12-15"], ["0-3", "4-7"]),
        # Some firmware interleaves the sockets (even CPUs on socket 0): machine ids are not Slurm's.
        ("interleaved", {c: (c % 2, c // 2) for c in range(8)}, ["0,2,4,6", "1,3,5,7"], ["0-3", "4-7"]),
        # Core ids with holes (Intel numbers them by die position): counted in order.
        ("core id holes", {0: (0, 0), 1: (0, 1), 2: (0, 8), 3: (0, 9)}, ["0-3"], ["0-3"]),
        # A GPU whose affinity spans both sockets gets every core; one CPU of a socket brings the whole socket.
        ("both sockets", dgx(2, 4, 1), ["0-7", "5"], ["0-7", "4-7"]),
    ],
)
def test_each_gpu_gets_the_cores_of_its_sockets(name, topology, affinities, want) -> None:
    gpus = [{"index": i, "cpu_affinity": a} for i, a in enumerate(affinities)]
    assert [cores for _, _, cores in gpu_cores(gpus, topology)] == want, name


def test_abstract_cores_are_counted_socket_by_socket() -> None:
    assert abstract_cores({0: (1, 0), 1: (0, 3), 2: (0, 1), 3: (1, 0)}) == {(0, 1): 0, (0, 3): 1, (1, 0): 2}


@pytest.mark.parametrize(
    "gpu, words",
    [
        ({"index": 0}, "no CPU affinity"),
        ({"index": 0, "cpu_affinity": None}, "no CPU affinity"),
        ({"index": 0, "cpu_affinity": "0-3\n"}, "no CPU affinity"),
        ({"index": 0, "cpu_affinity": "100-103"}, "none of its CPUs (100-103) is online"),
    ],
)
def test_a_gpu_without_a_usable_affinity_is_named(gpu, words) -> None:
    with pytest.raises(GpuCoresError, match=r"GPU 0: .*" + words.replace("(", r"\(").replace(")", r"\)")):
        gpu_cores([gpu], dgx(1, 4, 1))


def test_the_topology_is_read_from_sysfs(tmp_path) -> None:
    root = sysfs(tmp_path, {0: (0, 0), 1: (0, 1), 2: (1, 0)}, offline=(3,))
    assert read_cpu_topology(root) == {0: (0, 0), 1: (0, 1), 2: (1, 0)}
    (tmp_path / "cpu1" / "topology" / "core_id").write_text("one\n")
    with pytest.raises(TopologyError, match=r"cpu1/topology/core_id: 'one' is not a number"):
        read_cpu_topology(root)
    with pytest.raises(TopologyError, match="no CPU with a topology"):
        read_cpu_topology(sysfs(tmp_path / "empty", {}))


def test_the_command_prints_a_group_cores_line_that_the_spec_takes(tmp_path) -> None:
    root = sysfs(tmp_path / "cpu", dgx())
    snap = tmp_path / "node.json"
    shutil.copy(DATA / "h100x8_healthy.json", snap)
    res = CliRunner().invoke(cli, ["gpu-cores", "--snapshot", str(snap), "--sysfs", root])
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert lines[0] == "# GPU 0 (NVIDIA H100 80GB HBM3, 00000000:18:00.0): socket 0"
    assert lines[7].startswith("# GPU 7 ") and lines[7].endswith(": socket 1")
    cores = yaml.safe_load(lines[-1])["cores"]
    assert cores == ["0-55"] * 4 + ["56-111"] * 4
    group = {"name": "g", "hosts": "n1", "cpus": 224, "threads_per_core": 2, "memory_mb": 8000}
    doc = {
        "version": 1,
        "cluster": {"name": "t"},
        "node_groups": [group | {"gpus": {"model": "H100-80GB", "count": 8, "cores": cores}}],
        "tiers": [{"name": "normal", "priority": 10}],
        "partitions": [{"name": "main", "nodes": ["ALL"], "tier": "normal", "priority_tier": 1}],
        "projects": [{"name": "lab", "users": ["alice"], "tiers": ["normal"]}],
    }
    assert parse_spec(doc).node_groups[0].gpus.cores == cores


@pytest.mark.parametrize(
    "snapshot, words",
    [("retired_pages_pending.json", "GPU 0: NVML reports no CPU affinity"), ("nvml_error.json", "NVMLError")],
)
def test_the_command_says_why_it_cannot_tell(tmp_path, snapshot, words) -> None:
    res = CliRunner().invoke(
        cli, ["gpu-cores", "--snapshot", str(DATA / snapshot), "--sysfs", sysfs(tmp_path, dgx(2, 4, 1))]
    )
    assert res.exit_code == 2, res.output
    assert words in res.output and "Traceback" not in res.output
