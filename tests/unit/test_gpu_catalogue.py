"""The NVIDIA datacenter catalogue, table by table (issue 45, check 2).

One row per model: the name(s) NVML's ``nvmlDeviceGetName`` and ``nvidia-smi
--query-gpu=name`` report, the memory in GB, and the MIG profiles with their
instance counts (``None``: a plain GPU).  Sources, by tag:

* ``guide``: NVIDIA Multi-Instance GPU User Guide, v590, "Supported GPUs"
  (which products have MIG, memory size) and "Supported MIG Profiles"
  (profile names, instance counts);
* ``parted``: NVIDIA mig-parted, ``deployments/systemd/config-default.yaml``
  ("GH200 144G HBM3e": ``1g.18gb`` to ``7g.144gb``, device 0x2348);
* ``sheet``: NVIDIA's product datasheet (memory of a GPU without MIG).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_pool.errors import SpecError
from slurm_pool.mig.catalogue import GPU_MODELS, canonical_model, mig_gres_type
from slurm_pool.mig.inventory import layouts_from_snapshot, model_for_nvml_name
from slurm_pool.mig.placement import canonical, layout_problem
from slurm_pool.mig.planner import gpus_from_count, plan
from slurm_pool.mig.profiles import GEOMETRIES
from slurm_pool.render import Site, SlurmVersion, render_all
from slurm_pool.spec import load_spec_text


def _seven(one: int, two: int, four: int, eight: int) -> dict[str, int]:
    """The guide's 7-compute-slice table: 1g, 1g+me, 1g (double memory), 2g, 3g, 4g, 7g."""
    return {
        f"1g.{one}gb": 7,
        f"1g.{one}gb+me": 1,
        f"1g.{two}gb": 4,
        f"2g.{two}gb": 3,
        f"3g.{four}gb": 2,
        f"4g.{four}gb": 1,
        f"7g.{eight}gb": 1,
    }


A30 = {"1g.6gb": 4, "1g.6gb+me": 1, "2g.12gb": 2, "2g.12gb+me": 1, "4g.24gb": 1}

# model, NVML names (the current one first), memory GB, MIG profiles -> instances (None: plain), source
CATALOGUE: list[tuple[str, tuple[str, ...], int, dict[str, int] | None, str]] = [
    ("A30", ("NVIDIA A30",), 24, A30, "guide"),
    ("A100-40GB", ("NVIDIA A100-SXM4-40GB", "A100-SXM4-40GB"), 40, _seven(5, 10, 20, 40), "guide"),
    ("A100-80GB", ("NVIDIA A100-SXM4-80GB", "A100-SXM4-80GB"), 80, _seven(10, 20, 40, 80), "guide"),
    ("A100-PCIE-40GB", ("NVIDIA A100-PCIE-40GB", "A100-PCIE-40GB"), 40, _seven(5, 10, 20, 40), "guide"),
    ("A100-PCIE-80GB", ("NVIDIA A100 80GB PCIe",), 80, _seven(10, 20, 40, 80), "guide"),
    ("H100-80GB", ("NVIDIA H100 80GB HBM3",), 80, _seven(10, 20, 40, 80), "guide"),
    ("H100-PCIE-80GB", ("NVIDIA H100 PCIe",), 80, _seven(10, 20, 40, 80), "guide"),
    ("H100-94GB", ("NVIDIA H100 NVL",), 94, _seven(12, 24, 47, 94), "guide"),
    ("H200-141GB", ("NVIDIA H200",), 141, _seven(18, 35, 71, 141), "guide"),
    ("H200-NVL", ("NVIDIA H200 NVL",), 141, _seven(18, 35, 71, 141), "guide"),
    ("GH200-96GB", ("NVIDIA GH200 480GB",), 96, _seven(12, 24, 48, 96), "guide"),
    ("GH200-144GB", ("NVIDIA GH200 144G HBM3e",), 144, _seven(18, 36, 72, 144), "parted"),
    ("B200", ("NVIDIA B200",), 180, _seven(23, 45, 90, 180), "guide"),
    ("V100-SXM2-16GB", ("Tesla V100-SXM2-16GB",), 16, None, "sheet"),
    ("V100-SXM2-32GB", ("Tesla V100-SXM2-32GB",), 32, None, "sheet"),
    ("V100-PCIE-16GB", ("Tesla V100-PCIE-16GB",), 16, None, "sheet"),
    ("V100-PCIE-32GB", ("Tesla V100-PCIE-32GB",), 32, None, "sheet"),
    ("T4", ("Tesla T4",), 16, None, "sheet"),
    ("A2", ("NVIDIA A2", "A2"), 16, None, "sheet"),
    ("A10", ("NVIDIA A10", "A10"), 24, None, "sheet"),
    ("A16", ("NVIDIA A16", "A16"), 16, None, "sheet"),
    ("A40", ("NVIDIA A40", "A40"), 48, None, "sheet"),
    ("L4", ("NVIDIA L4",), 24, None, "sheet"),
    ("L40", ("NVIDIA L40",), 48, None, "sheet"),
    ("L40S", ("NVIDIA L40S",), 48, None, "sheet"),
    ("RTX-6000-Ada", ("NVIDIA RTX 6000 Ada Generation",), 48, None, "sheet"),
    ("RTX-A6000", ("NVIDIA RTX A6000",), 48, None, "sheet"),
    ("RTX-A5000", ("NVIDIA RTX A5000",), 24, None, "sheet"),
    ("RTX-A4000", ("NVIDIA RTX A4000",), 16, None, "sheet"),
]
ROWS = {row[0]: row for row in CATALOGUE}

# A layout each MIG model's planner must accept: mig-parted's "all-balanced" for that device.
BALANCED = {
    "A30": ("1g.6gb", "1g.6gb", "2g.12gb"),
    "A100-40GB": ("1g.5gb", "1g.5gb", "2g.10gb", "3g.20gb"),
    "A100-PCIE-40GB": ("1g.5gb", "1g.5gb", "2g.10gb", "3g.20gb"),
    "A100-80GB": ("1g.10gb", "1g.10gb", "2g.20gb", "3g.40gb"),
    "A100-PCIE-80GB": ("1g.10gb", "1g.10gb", "2g.20gb", "3g.40gb"),
    "H100-80GB": ("1g.10gb", "1g.10gb", "2g.20gb", "3g.40gb"),
    "H100-PCIE-80GB": ("1g.10gb", "1g.10gb", "2g.20gb", "3g.40gb"),
    "H100-94GB": ("1g.12gb", "2g.24gb", "3g.47gb"),
    "H200-141GB": ("1g.18gb", "1g.18gb", "2g.35gb", "3g.71gb"),
    "H200-NVL": ("1g.18gb", "1g.18gb", "2g.35gb", "3g.71gb"),
    "GH200-96GB": ("1g.12gb", "1g.12gb", "2g.24gb", "3g.48gb"),
    "GH200-144GB": ("1g.18gb", "1g.18gb", "2g.36gb", "3g.72gb"),
    "B200": ("1g.23gb", "1g.23gb", "2g.45gb", "3g.90gb"),
}
MIG_MODELS = [m for m, row in ROWS.items() if row[3] is not None]


def test_the_table_covers_the_whole_catalogue_and_every_mig_model_has_a_layout():
    assert set(ROWS) == set(GPU_MODELS)
    assert set(MIG_MODELS) == set(GEOMETRIES) == set(BALANCED)


@pytest.mark.parametrize("model,names,memory,profiles,source", CATALOGUE, ids=[r[0] for r in CATALOGUE])
def test_nvml_names_map_to_the_model_its_type_and_memory(model, names, memory, profiles, source):
    entry = GPU_MODELS[model]
    assert entry.nvml_name == names[0] and entry.memory_gib == memory
    # gpu/nvml's whole-GPU Type: the NVML name, lower-cased, spaces to "_"
    assert entry.slurm_type == names[0].lower().replace(" ", "_")
    for name in names:
        for spelled in (name, name.upper(), name.lower(), name.removeprefix("NVIDIA ")):
            assert canonical_model(spelled) == model, spelled
            assert model_for_nvml_name(spelled) == model, spelled
    assert len(names[0].encode()) < 64  # NVML_DEVICE_NAME_BUFFER_SIZE, NUL included


@pytest.mark.parametrize("model,names,memory,profiles,source", CATALOGUE, ids=[r[0] for r in CATALOGUE])
def test_mig_profiles_or_none_match_the_cited_table(model, names, memory, profiles, source):
    entry = GPU_MODELS[model]
    assert entry.mig_capable == (profiles is not None)
    if profiles is None:
        assert model not in GEOMETRIES
        assert "unknown MIG-capable GPU model" in (layout_problem(model, ["1g.10gb"]) or "")
        return
    geo = GEOMETRIES[model]
    assert {p.name: p.max_count for p in geo.profiles.values()} == profiles
    # the full-GPU profile holds the product's memory (the name's GB figure)
    assert max(p.memory_gb for p in geo.profiles.values()) == memory


@pytest.mark.parametrize("model", MIG_MODELS)
def test_the_planner_accepts_the_balanced_layout(model):
    layout = BALANCED[model]
    assert layout_problem(model, layout) is None
    demand = {p: layout.count(p) for p in set(layout)}
    got = plan(model, gpus_from_count(1), demand)
    assert got.unmet == {p: 0 for p in demand} and sorted(got.layouts[0] or ()) == sorted(layout)
    # one profile too many does not fit on one GPU
    over = plan(model, gpus_from_count(1), {**demand, layout[-1]: demand[layout[-1]] + 1})
    assert sum(over.unmet.values()) == 1


@pytest.mark.parametrize("model", MIG_MODELS)
def test_an_nvml_snapshot_of_the_model_reads_back_its_layout(model):
    # what the NVML adapter reports for one GPU: its name and its MIG devices
    name = ROWS[model][1][0]
    devices = [{"gi_id": i + 1, "ci_id": 0, "profile": f"MIG {p}"} for i, p in enumerate(BALANCED[model])]
    got = layouts_from_snapshot(
        model_for_nvml_name(name), [{"index": 0, "name": name, "mig_enabled": True, "mig_devices": devices}]
    )
    assert got == {0: canonical(GEOMETRIES[model], BALANCED[model])}


@pytest.mark.parametrize(
    "model,profile,v22,v26",
    [
        # new forms: gpu/nvml cuts the whole-GPU Type at its first "-" (none in these names)
        ("A100-PCIE-80GB", "3g.40gb", "nvidia_a100_80gb_pcie_3g.40gb", "nvidia_a100_80gb_pcie_3g.40gb"),
        ("A100-PCIE-40GB", "1g.5gb", "nvidia_a100_1g.5gb", "nvidia_a100_1g.5gb"),
        ("H100-PCIE-80GB", "2g.20gb", "nvidia_h100_pcie_2g.20gb", "nvidia_h100_pcie_2g.20gb"),
        ("H200-NVL", "7g.141gb", "nvidia_h200_nvl_7g.141gb", "nvidia_h200_nvl_7g.141gb"),
        ("GH200-96GB", "3g.48gb", "nvidia_gh200_480gb_3g.48gb", "nvidia_gh200_480gb_3g.48gb"),
        ("GH200-144GB", "1g.18gb+me", "nvidia_gh200_144g_hbm3e_1g.18gb", "nvidia_gh200_144g_hbm3e_1g.18gb+me"),
        # existing keys keep their published memory sizes on 22.05
        ("A100-80GB", "3g.40gb", "nvidia_a100_3g.39gb", "nvidia_a100_3g.40gb"),
    ],
)
def test_mig_gres_types_of_the_new_forms(model, profile, v22, v26):
    assert mig_gres_type(model, profile, SlurmVersion(22, 5)) == v22
    assert mig_gres_type(model, profile, SlurmVersion(26, 5)) == v26


SPEC = """
version: 1
cluster: {name: t}
node_groups:
  - {name: g, hosts: "g[1-2]", cpus: 8, memory_mb: 8000, gpus: {model: "MODEL", count: 2}}
tiers:
  - {name: normal, priority: 100}
partitions:
  - {name: p, nodes: [ALL], tier: normal, priority_tier: 10}
projects:
  - {name: team, users: [dora], tiers: [normal]}
"""


@pytest.mark.parametrize("model,names,memory,profiles,source", CATALOGUE, ids=[r[0] for r in CATALOGUE])
def test_a_spec_naming_the_nvml_name_renders_the_type(model, names, memory, profiles, source):
    spec = load_spec_text(SPEC.replace("MODEL", names[0]))
    assert spec.node_groups[0].gpus.model == model
    conf = render_all(spec, Site(), SlurmVersion.parse("26.05"))["slurm.conf"]
    assert f"Gres=gpu:{GPU_MODELS[model].slurm_type}:2 " in conf


@pytest.mark.parametrize("given", ["H100", "A100", "GH200-240GB", "NVIDIA H100 SXM"])
def test_an_unknown_model_is_refused_listing_the_catalogue(given):
    with pytest.raises(SpecError) as exc:
        load_spec_text(SPEC.replace("MODEL", given))
    text = str(exc.value)
    assert "node_groups[0].gpus.model" in text and repr(given) in text
    for model in ("H100-PCIE-80GB", "H200-NVL", "GH200-144GB", "NVIDIA A100 80GB PCIe"):
        assert model in text


def test_the_docs_table_lists_every_mig_model_as_the_catalogue_has_it():
    doc = (Path(__file__).resolve().parents[2] / "docs" / "mig.md").read_text()
    section = doc.split("\n## The GPU catalogue\n", 1)[1].split("\n## ", 1)[0]
    rows = [[c.strip() for c in line.split("|")[1:-1]] for line in section.splitlines() if line.startswith("| ")]
    table = {r[0]: (r[2], r[3], r[4].strip("`"), tuple(r[6].split(", "))) for r in rows[1:]}
    assert table == {
        m: (
            GPU_MODELS[m].nvml_name,
            f"{GPU_MODELS[m].memory_gib} GB",
            GPU_MODELS[m].slurm_type,
            tuple(GEOMETRIES[m].profiles),
        )
        for m in MIG_MODELS
    }
