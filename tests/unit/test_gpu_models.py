"""GPUs without MIG (L40S, L4, A40, ...): plain GPUs in every render; a MIG layout on one is refused."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from slurm_pool.cli import cli
from slurm_pool.errors import SpecError
from slurm_pool.mig.catalogue import GPU_MODELS, canonical_model, slurm_gpu_type
from slurm_pool.mig.inventory import model_for_nvml_name
from slurm_pool.mig.plain_gpus import PLAIN_GPUS
from slurm_pool.render import Site, SlurmVersion, render_all
from slurm_pool.spec import load_spec_text

SPEC = """
version: 1
cluster: {name: t}
node_groups:
  - {name: l40s, hosts: "l40s[1-2]", cpus: 32, memory_mb: 256000, gpus: {model: "NVIDIA L40S", count: 4}}
  - {name: l4, hosts: "l4-[1-3]", cpus: 16, memory_mb: 64000, gpus: {model: L4, count: 8SHARDS}}
  - {name: a40, hosts: a40n1, cpus: 16, memory_mb: 64000, gpus: {model: a40-48gb, count: 2}}
tiers:
  - {name: normal, priority: 100}
partitions:
  - {name: p, nodes: [ALL], tier: normal, priority_tier: 10}
projects:
  - {name: team, users: [dora], tiers: [normal]}
"""

NODES = [
    "NodeName=l40s[1-2] CPUs=32 RealMemory=256000 Gres=gpu:nvidia_l40s:4 State=UNKNOWN",
    "NodeName=l4-[1-3] CPUs=16 RealMemory=64000 Gres=gpu:nvidia_l4:8 State=UNKNOWN",
    "NodeName=a40n1 CPUs=16 RealMemory=64000 Gres=gpu:nvidia_a40:2 State=UNKNOWN",
]
GRES = [
    "NodeName=l40s[1-2] AutoDetect=off Name=gpu Type=nvidia_l40s File=/dev/nvidia[0-3]",
    "NodeName=l4-[1-3] AutoDetect=off Name=gpu Type=nvidia_l4 File=/dev/nvidia[0-7]",
    "NodeName=a40n1 AutoDetect=off Name=gpu Type=nvidia_a40 File=/dev/nvidia[0-1]",
]
# Shards on the L4s (23.11.5 and later only): the gpu lines stay, one shard line per GPU follows.
SHARD_NODES = [NODES[0], NODES[1].replace("gpu:nvidia_l4:8", "gpu:nvidia_l4:8,shard:32"), NODES[2]]
SHARD_GRES = [
    GRES[0],
    GRES[1],
    *(f"NodeName=l4-[1-3] Name=shard Count=4 File=/dev/nvidia{i}" for i in range(8)),
    GRES[2],
]


def _lines(text: str, prefix: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(prefix)]


@pytest.mark.parametrize(
    "version,shards,nodes,gres,gres_types",
    [
        ("22.05", "", NODES, GRES, "GresTypes=gpu"),
        ("26.05", "", NODES, GRES, "GresTypes=gpu"),
        ("26.05", ", shards: 4", SHARD_NODES, SHARD_GRES, "GresTypes=gpu,shard"),
    ],
)
def test_plain_gpu_nodes_render_exact_lines(version, shards, nodes, gres, gres_types):
    # Issue 33, check 4: L40S, L4 and A40 nodes on 22.05 and 26.05, the Type gpu/nvml gives them.
    files = render_all(load_spec_text(SPEC.replace("SHARDS", shards)), Site(), SlurmVersion.parse(version))
    for name in ("slurm.conf", "slurm-pool.conf"):
        assert _lines(files[name], "NodeName=") == nodes, name
        assert _lines(files[name], "GresTypes=") == [gres_types], name
    assert _lines(files["gres.conf"], "NodeName=") == gres


@pytest.mark.parametrize("plain", PLAIN_GPUS, ids=lambda g: g.name)
def test_every_plain_gpu_is_a_whole_gpu_named_as_nvml_does(plain):
    model = GPU_MODELS[plain.name]
    assert not model.mig_capable and model.memory_gib == plain.memory_gib
    assert model.slurm_type == plain.nvml_name.lower().replace(" ", "_") == slurm_gpu_type(plain.nvml_name)
    # Slurm before 25.11's fix read the name into NVML_DEVICE_NAME_BUFFER_SIZE (64) bytes, NUL included
    assert len(plain.nvml_name.encode()) < 64
    # what nvidia-smi prints, the catalogue name and every alias name it (doctor, mig inventory)
    for name in (plain.nvml_name, plain.name, plain.name.lower(), *plain.aliases):
        assert canonical_model(name) == plain.name, name
    assert model_for_nvml_name(plain.nvml_name) == plain.name


@pytest.mark.parametrize(
    "given,want",
    [
        ("NVIDIA L40S", "L40S"),
        ("nvidia l4", "L4"),
        ("A40", "A40"),
        ("Tesla T4", "T4"),
        ("Tesla V100-SXM2-32GB", "V100-SXM2-32GB"),
        ("NVIDIA RTX 6000 Ada Generation", "RTX-6000-Ada"),
        ("RTX 6000 Ada", "RTX-6000-Ada"),
        ("NVIDIA RTX A6000", "RTX-A6000"),
        ("V100", None),  # four Types (SXM2/PCIe, 16/32 GB): the name must say which
    ],
)
def test_nvidia_smi_names_of_plain_gpus(given, want):
    assert canonical_model(given) == want


MIG_SPEC = """
version: 1
cluster: {name: t}
node_groups:
  - {name: cpu, hosts: c1, cpus: 8, memory_mb: 8000}
  - {name: g, hosts: "g[1-2]", cpus: 8, memory_mb: 8000, gpus: {model: MODEL, count: 2, MIG}}
tiers:
  - {name: normal, priority: 100}
partitions:
  - {name: p, nodes: [ALL], tier: normal, priority_tier: 10}
projects:
  - {name: team, users: [dora], tiers: [normal]}
"""

MIGS = [
    ("mig", "mig: [[1g.10gb, 1g.10gb], null]"),
    ("mig", "mig: [null, null]"),
    ("layouts", "layouts: {small: [[1g.10gb], null]}"),
]


@pytest.mark.parametrize("model,name", [("NVIDIA L40S", "L40S"), ("L4", "L4"), ("A40", "A40"), ("Tesla T4", "T4")])
@pytest.mark.parametrize("key,mig", MIGS)
def test_a_mig_layout_on_a_gpu_without_mig_names_the_path_and_the_model(model, name, key, mig):
    with pytest.raises(SpecError) as exc:
        load_spec_text(MIG_SPEC.replace("MODEL", f'"{model}"').replace("MIG", mig))
    text = str(exc.value)
    assert f"node_groups[1].gpus.{key}: {name} has no MIG" in text, text
    assert f"Type {GPU_MODELS[name].slurm_type}" in text and "A100-80GB" in text


def test_mig_and_layouts_on_a_gpu_without_mig_are_both_named_and_nothing_else():
    spec = MIG_SPEC.replace("MODEL", "L40S").replace("MIG", "shards: 2, mig: [null, null], layouts: {s: [null, null]}")
    with pytest.raises(SpecError) as exc:
        load_spec_text(spec)
    text = str(exc.value)
    assert "gpus.mig: L40S has no MIG" in text and "gpus.layouts: L40S has no MIG" in text
    assert "gpus.shards" not in text  # the MIG-or-shards rule is moot where there is no MIG


def test_an_unknown_model_is_still_refused_listing_the_known_ones():
    with pytest.raises(SpecError) as exc:
        load_spec_text(MIG_SPEC.replace("MODEL", "V100").replace(", MIG", ""))
    text = str(exc.value)
    assert (
        "node_groups[1].gpus.model: unknown GPU model 'V100'" in text and "L40S (also L40S-48GB, NVIDIA L40S)" in text
    )


def test_a_mig_capable_model_keeps_its_layouts():
    spec = load_spec_text(MIG_SPEC.replace("MODEL", "A100-80GB").replace("MIG", "mig: [[3g.40gb], null]"))
    assert spec.node_groups[1].gpus.mig == [["3g.40gb"], None]


@pytest.mark.parametrize("command,version", [("validate", None), ("render", "22.05"), ("render", "26.05")])
def test_cli_refuses_mig_on_an_l40s_with_exit_2_naming_the_model(tmp_path, command, version):
    spec = tmp_path / "pool.yaml"
    spec.write_text(MIG_SPEC.replace("MODEL", '"NVIDIA L40S"').replace("MIG", MIGS[0][1]))
    out = tmp_path / "out"
    args = ["-o", str(out), "--slurm-version", version] if version else []
    res = CliRunner().invoke(cli, [command, *args, str(spec)])
    assert res.exit_code == 2, res.output
    assert "node_groups[1].gpus.mig: L40S has no MIG" in res.output
    assert "Traceback" not in res.output and not isinstance(res.exception, (KeyError, AssertionError, TypeError))
    assert not out.exists()


def test_the_docs_table_lists_every_plain_gpu_with_its_type():
    doc = (Path(__file__).resolve().parents[2] / "docs" / "mig.md").read_text()
    section = doc.split("\n## GPUs without MIG\n", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|")[1:-1] for line in section.splitlines() if line.startswith("| ")]
    table = {cells[0].strip(): (cells[2].strip(), cells[4].strip().strip("`")) for cells in rows[1:]}
    assert table == {g.name: (g.nvml_name, GPU_MODELS[g.name].slurm_type) for g in PLAIN_GPUS}
