"""Cluster outputs: GRES Type names, capability minors, mig-parted, nvidia-smi."""

from __future__ import annotations

import pytest
import yaml

from slurm_pool.mig.catalogue import (
    GPU_MODELS,
    mig_device_type,
    mig_gres_type,
    mig_type_by_memory,
    mig_type_by_profile,
    mig_type_verified,
    slurm_gpu_type,
)
from slurm_pool.mig.emit import (
    MigDevice,
    cap_minor,
    gres_conf_autodetect,
    gres_conf_explicit,
    mig_parted_config,
    nvidia_smi_commands,
    parse_mig_minors,
    slurm_gres,
)
from slurm_pool.mig.placement import placement_problem
from slurm_pool.mig.profiles import GEOMETRIES
from slurm_pool.versions import SlurmVersion

OLD = SlurmVersion(22, 5, 8)  # Debian 12
NEW = SlurmVersion(26, 5, 3)  # built from ../shared/slurm in tests
V = SlurmVersion.parse

# Types that Slurm's NVML autodetection produced on real clusters (job scripts), up to 23.02.5:
# gpu_nvml.c _handle_mig, "_%ug.%lugb" with roundl(attributes.memorySizeMB / 1024).
OBSERVED = [
    ("NVIDIA A100 80GB PCIe", 3, 40192, "nvidia_a100_80gb_pcie_3g.39gb"),
    ("NVIDIA A100-SXM4-80GB", 3, 40192, "nvidia_a100_3g.39gb"),
    ("NVIDIA A100-SXM4-80GB", 7, 80896, "nvidia_a100_7g.79gb"),
    ("NVIDIA A100-SXM4-40GB", 3, 19968, "nvidia_a100_3g.20gb"),
    ("A100-SXM4-40GB", 1, 4864, "a100_1g.5gb"),  # pre-R510 driver names had no NVIDIA prefix
]


@pytest.mark.parametrize("nvml,slices,mib,expected", OBSERVED)
def test_memory_naming_matches_observed_names(nvml: str, slices: int, mib: int, expected: str) -> None:
    assert mig_type_by_memory(nvml, slices, mib) == expected


# From 23.02.6 (CHANGELOG/slurm-23.02.md: "Fix some mig profile names in slurm not
# matching nvidia mig profiles"), gpu_nvml.c _handle_mig takes the NVML MIG device name
# ("NVIDIA A100-SXM4-80GB MIG 3g.40gb"), underscorified, from strstr("mig_") + 3.
@pytest.mark.parametrize(
    "nvml,profile,expected",
    [
        ("NVIDIA A100-SXM4-80GB", "3g.40gb", "nvidia_a100_3g.40gb"),
        ("NVIDIA H100 80GB HBM3", "1g.10gb", "nvidia_h100_80gb_hbm3_1g.10gb"),
        ("NVIDIA H200", "1g.18gb", "nvidia_h200_1g.18gb"),
    ],
)
def test_profile_naming_follows_the_nvml_device_name(nvml: str, profile: str, expected: str) -> None:
    assert mig_type_by_profile(nvml, profile) == expected


def test_whole_gpu_types() -> None:
    assert slurm_gpu_type("NVIDIA H100 NVL") == "nvidia_h100_nvl"
    assert GPU_MODELS["A100-40GB"].slurm_type == "nvidia_a100-sxm4-40gb"
    assert GPU_MODELS["H100-80GB"].slurm_type == "nvidia_h100_80gb_hbm3"


# (model, profile, Slurm <= 23.02.5, Slurm >= 23.02.6): the four models sites run MIG on first.
MIG_NAMES = [
    ("A100-40GB", "1g.5gb", "nvidia_a100_1g.5gb", "nvidia_a100_1g.5gb"),
    ("A100-40GB", "1g.10gb", "nvidia_a100_1g.10gb", "nvidia_a100_1g.10gb"),
    ("A100-40GB", "3g.20gb", "nvidia_a100_3g.20gb", "nvidia_a100_3g.20gb"),
    ("A100-40GB", "7g.40gb", "nvidia_a100_7g.39gb", "nvidia_a100_7g.40gb"),
    ("A100-40GB", "1g.5gb+me", "nvidia_a100_1g.5gb", "nvidia_a100_1g.5gb+me"),
    ("A100-80GB", "1g.10gb", "nvidia_a100_1g.10gb", "nvidia_a100_1g.10gb"),
    ("A100-80GB", "3g.40gb", "nvidia_a100_3g.39gb", "nvidia_a100_3g.40gb"),
    ("A100-80GB", "7g.80gb", "nvidia_a100_7g.79gb", "nvidia_a100_7g.80gb"),
    ("H100-80GB", "1g.10gb", "nvidia_h100_80gb_hbm3_1g.10gb", "nvidia_h100_80gb_hbm3_1g.10gb"),
    ("H100-80GB", "3g.40gb", "nvidia_h100_80gb_hbm3_3g.40gb", "nvidia_h100_80gb_hbm3_3g.40gb"),
    ("H100-80GB", "7g.80gb", "nvidia_h100_80gb_hbm3_7g.79gb", "nvidia_h100_80gb_hbm3_7g.80gb"),
    ("H200-141GB", "1g.18gb", "nvidia_h200_1g.16gb", "nvidia_h200_1g.18gb"),
    ("H200-141GB", "1g.35gb", "nvidia_h200_1g.33gb", "nvidia_h200_1g.35gb"),
    ("H200-141GB", "7g.141gb", "nvidia_h200_7g.140gb", "nvidia_h200_7g.141gb"),
    ("H100-94GB", "1g.12gb", "nvidia_h100_nvl_1g.11gb", "nvidia_h100_nvl_1g.12gb"),
    ("A30", "2g.12gb+me", "nvidia_a30_2g.12gb", "nvidia_a30_2g.12gb+me"),
]


@pytest.mark.parametrize("model,profile,old,new", MIG_NAMES)
@pytest.mark.parametrize("version", ["22.05.8", "23.02.5", "23.02.6", "23.11", "24.11.5", "25.11", "26.05.3"])
def test_mig_gres_type_per_slurm_version(model: str, profile: str, old: str, new: str, version: str) -> None:
    v = V(version)
    assert mig_gres_type(model, profile, v) == (new if v.at_least(23, 2, 6) else old)


def test_a_series_without_patch_level_is_its_newest_release() -> None:
    assert mig_gres_type("A100-80GB", "3g.40gb", V("23.02")) == "nvidia_a100_3g.40gb"


def test_device_type_uses_nvml_memory_only_where_slurm_does() -> None:
    assert mig_device_type("A100-80GB", "3g.40gb", 40192, OLD) == "nvidia_a100_3g.39gb"
    assert mig_device_type("A100-80GB", "3g.40gb", 40192, NEW) == "nvidia_a100_3g.40gb"


@pytest.mark.parametrize("version", [OLD, NEW])
def test_every_profile_has_a_distinct_type_per_model(version: SlurmVersion) -> None:
    for model, geo in GEOMETRIES.items():
        plain = [p for p in geo.profiles.values() if not p.media_ext]
        types = {mig_gres_type(model, p.name, version) for p in plain}
        assert len(types) == len(plain), model
    assert mig_type_verified("A100-80GB", "3g.40gb") and not mig_type_verified("B200", "3g.90gb")


def test_cap_minor_formula_matches_documented_examples() -> None:
    # NVIDIA's mig-minors listing: gpu0/gi0/access 3, gpu0/gi0/ci0/access 4, ...,
    # gpu3/gi3/ci3/access 439, gpu6/gi11/ci7/access 920, gpu31/gi14/ci7/access 4322
    assert cap_minor(0, 0) == 3 and cap_minor(0, 0, 0) == 4 and cap_minor(0, 0, 2) == 6
    assert cap_minor(3, 3, 3) == 439
    assert cap_minor(6, 11, 7) == 920
    assert cap_minor(31, 14, 7) == 4322
    with pytest.raises(ValueError):
        cap_minor(0, 15)


def test_cap_minor_prefers_the_minors_file() -> None:
    minors = parse_mig_minors("config 1\nmonitor 2\ngpu0/gi1/access 5\ngpu0/gi1/ci0/access 6\ngarbage\n")
    assert minors["gpu0/gi1/access"] == 5
    assert cap_minor(0, 1, None, minors) == 5 and cap_minor(0, 1, 0, minors) == 6
    assert cap_minor(0, 2, None, minors) == cap_minor(0, 2)  # falls back to the formula


def test_gres_conf_explicit() -> None:
    devs = [MigDevice(0, 2, 0, "3g.40gb"), MigDevice(0, 1, 0, "4g.40gb", memory_mib=40448)]
    lines = gres_conf_explicit("n1", "H100-80GB", devs, OLD, whole_gpus=[(1, 1)])
    assert lines == [
        "NodeName=n1 Name=gpu Type=nvidia_h100_80gb_hbm3_4g.40gb MultipleFiles=/dev/nvidia0,/dev/nvidia-caps/nvidia-cap12,/dev/nvidia-caps/nvidia-cap13",
        "NodeName=n1 Name=gpu Type=nvidia_h100_80gb_hbm3_3g.40gb MultipleFiles=/dev/nvidia0,/dev/nvidia-caps/nvidia-cap21,/dev/nvidia-caps/nvidia-cap22",
        "NodeName=n1 Name=gpu Type=nvidia_h100_80gb_hbm3 File=/dev/nvidia1",
    ]
    assert gres_conf_autodetect("n1") == ["NodeName=n1 AutoDetect=nvml"]


def test_slurm_gres_string() -> None:
    layouts = [("3g.20gb", "2g.10gb", "1g.5gb", "1g.5gb"), None, ()]
    gres = slurm_gres("A100-40GB", layouts, OLD)
    assert (
        gres
        == "gpu:nvidia_a100-sxm4-40gb:1,gpu:nvidia_a100_1g.5gb:2,gpu:nvidia_a100_2g.10gb:1,gpu:nvidia_a100_3g.20gb:1"
    )
    assert slurm_gres("A100-80GB", [("3g.40gb", "3g.40gb")], NEW) == "gpu:nvidia_a100_3g.40gb:2"
    assert slurm_gres("A100-80GB", [("3g.40gb", "3g.40gb")], OLD) == "gpu:nvidia_a100_3g.39gb:2"


def test_mig_parted_config() -> None:
    cfg = mig_parted_config({"n1": {0: ("3g.40gb", "3g.40gb"), 1: ("3g.40gb", "3g.40gb"), 2: None, 3: ()}})
    text = yaml.safe_dump(cfg, sort_keys=False)
    back = yaml.safe_load(text)
    assert back["version"] == "v1"
    entries = back["mig-configs"]["slurm-pool-n1"]
    assert entries[0] == {"devices": [0, 1], "mig-enabled": True, "mig-devices": {"3g.40gb": 2}}
    assert entries[1] == {"devices": [2], "mig-enabled": False}
    assert entries[2] == {"devices": [3], "mig-enabled": True, "mig-devices": {}}


def test_nvidia_smi_commands_use_explicit_valid_placements() -> None:
    cmds = nvidia_smi_commands("A100-40GB", 2, ("1g.5gb", "1g.5gb", "3g.20gb", "2g.10gb"), mig_enabled=False)
    assert cmds[0] == ["nvidia-smi", "-i", "2", "-mig", "1"]
    assert cmds[1][-1] == "-dci" and cmds[2][-1] == "-dgi"
    create = cmds[-1]
    assert create[:5] == ["nvidia-smi", "mig", "-i", "2", "-cgi"] and create[-1] == "-C"
    tuples = [(t.split(":")[0], int(t.split(":")[1])) for t in create[5].split(",")]
    assert tuples[0][0] == "3g.20gb"  # largest first
    for k in range(1, len(tuples) + 1):  # every prefix is accepted in creation order
        assert placement_problem("A100-40GB", tuples[:k]) is None
    assert nvidia_smi_commands("A30", 0, None)[-1] == ["nvidia-smi", "-i", "0", "-mig", "0"]
    assert len(nvidia_smi_commands("A30", 0, ())) == 2
    with pytest.raises(ValueError):
        nvidia_smi_commands("A30", 0, ("4g.24gb", "4g.24gb"))
