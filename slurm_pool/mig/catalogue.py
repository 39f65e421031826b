"""GPU models known to slurm-pool and the GRES Type names Slurm gives them.

This module is pure data plus naming rules.  The MIG profile tables for each
model (compute and memory slices, placements, counts, the ``+me`` rule) live
in :mod:`slurm_pool.mig.profiles`; their source is the NVIDIA Multi-Instance
GPU User Guide, "Supported MIG Profiles" (docs.nvidia.com/datacenter/tesla/
mig-user-guide).

Slurm naming rule (SchedMD ``src/plugins/gpu/nvml/gpu_nvml.c``, functions
``_nvml_get_device_name``, ``_handle_mig`` and ``_get_system_gpu_list_nvml``;
``gpu_common_underscorify_tolower`` in ``src/plugins/gpu/common``).  It changed
in 23.02.6 (``mig_type_from_profile`` in :mod:`slurm_pool.versions`):

* whole GPU, every release (also every GPU without MIG, listed in
  :mod:`slurm_pool.mig.plain_gpus`): the NVML device name (``nvmlDeviceGetName``),
  lower-cased, spaces replaced by ``_``.  Current drivers prefix ``NVIDIA``, so
  ``NVIDIA A100-SXM4-40GB`` becomes ``nvidia_a100-sxm4-40gb`` (drivers before
  R510 gave ``A100-SXM4-40GB``, hence ``a100-sxm4-40gb`` on older sites);
* MIG device, every release: that whole-GPU type cut at its first ``-`` (if
  any), then a suffix;
* suffix up to 23.02.5: ``_<GI slices>g.<roundl(memory MiB / 1024)>gb`` from
  ``nvmlDeviceGetAttributes`` of the MIG device.  The memory is what the
  instance really has, so it can differ from the GB figure in NVIDIA's profile
  name: an A100-80GB ``3g.40gb`` has 39.25 GiB and Slurm calls it
  ``nvidia_a100_3g.39gb``.  ``+me`` profiles get the same Type as their plain
  twin;
* suffix from 23.02.6 on: the NVML name of the MIG device (``NVIDIA
  A100-SXM4-80GB MIG 3g.40gb``), underscorified, from its ``mig`` on without
  the ``mig``: ``_3g.40gb``, so the Type is ``nvidia_a100_3g.40gb``, NVIDIA's
  own profile name.  A ``+me`` instance keeps its ``+me`` (assumed from NVML
  naming MIG devices after their GPU instance profile; not seen on hardware).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Iterable

from slurm_pool.mig.plain_gpus import PLAIN_GPUS
from slurm_pool.text import has_control
from slurm_pool.versions import SlurmVersion


@dataclass(frozen=True)
class GpuModel:
    """One GPU model.

    ``slurm_type`` is the GRES Type that Slurm's NVML autodetection reports for
    the whole GPU, so that rendered configs match autodetected ones.
    ``nvml_name`` is what ``nvmlDeviceGetName`` returns on current drivers.
    ``mig_gib`` maps a profile (without ``+me``) to the memory in GiB, as
    Slurm rounds it, that NVML reports for that instance; entries come from
    published ``nvidia-smi mig -lgip`` output.  Profiles missing from it fall
    back to the GB figure of the profile name (see :func:`mig_type_verified`).
    """

    name: str
    memory_gib: int
    slurm_type: str
    mig_capable: bool
    nvml_name: str = ""
    mig_gib: dict[str, int] = field(default_factory=dict, compare=False, hash=False)


def underscorify_tolower(text: str) -> str:
    """Slurm's ``gpu_common_underscorify_tolower``: lower-case, spaces to ``_``."""
    return text.lower().replace(" ", "_")


def slurm_gpu_type(nvml_name: str) -> str:
    """GRES Type of a whole GPU from its NVML device name."""
    return underscorify_tolower(nvml_name)


def mig_type_stem(nvml_name: str) -> str:
    """The part of a MIG GRES Type before its profile: the GPU's Type cut at the first ``-``."""
    return slurm_gpu_type(nvml_name).split("-", 1)[0]


def mig_type_by_memory(nvml_name: str, gi_slices: int, memory_mib: int) -> str:
    """GRES Type of a MIG device as gpu/nvml built it up to 23.02.5 (from its memory)."""
    gib = math.floor(memory_mib / 1024 + 0.5)  # C roundl: halves away from zero
    return f"{mig_type_stem(nvml_name)}_{gi_slices}g.{gib}gb"


def mig_type_by_profile(nvml_name: str, profile: str) -> str:
    """GRES Type of a MIG device as gpu/nvml builds it from 23.02.6 on (from its NVML name)."""
    return f"{mig_type_stem(nvml_name)}_{underscorify_tolower(profile)}"


_PROFILE_RE = re.compile(r"([0-9]+)g\.([0-9]+)gb(\+me)?")


def _gpu(name: str, gib: int, nvml: str, mig: dict[str, int] | None = None) -> GpuModel:
    return GpuModel(name, gib, slurm_gpu_type(nvml), True, nvml, dict(mig or {}))


# Memory (GiB, rounded as Slurm does) per MIG profile, from -lgip listings:
# A100-SXM4-80GB 9.50/19.50/39.25/79.00, H100 80GB HBM3 9.75/19.62/39.50/79.25,
# H100 NVL 10.75/21.62/46.38/93.12, A100-SXM4-40GB 4.75/9.62/19.50/39.25,
# H200 16.00/32.50/140.00 (4-slot profiles not published).
GPU_MODELS: dict[str, GpuModel] = {
    m.name: m
    for m in (
        _gpu(
            "A100-40GB",
            40,
            "NVIDIA A100-SXM4-40GB",
            {"1g.5gb": 5, "1g.10gb": 10, "2g.10gb": 10, "3g.20gb": 20, "4g.20gb": 20, "7g.40gb": 39},
        ),
        _gpu(
            "A100-80GB",
            80,
            "NVIDIA A100-SXM4-80GB",
            {"1g.10gb": 10, "1g.20gb": 20, "2g.20gb": 20, "3g.40gb": 39, "4g.40gb": 39, "7g.80gb": 79},
        ),
        _gpu("A30", 24, "NVIDIA A30"),
        _gpu(
            "H100-80GB",
            80,
            "NVIDIA H100 80GB HBM3",
            {"1g.10gb": 10, "1g.20gb": 20, "2g.20gb": 20, "3g.40gb": 40, "4g.40gb": 40, "7g.80gb": 79},
        ),
        _gpu(
            "H100-94GB",
            94,
            "NVIDIA H100 NVL",
            {"1g.12gb": 11, "1g.24gb": 22, "2g.24gb": 22, "3g.47gb": 46, "4g.47gb": 46, "7g.94gb": 93},
        ),
        _gpu("H200-141GB", 141, "NVIDIA H200", {"1g.18gb": 16, "1g.35gb": 33, "2g.35gb": 33, "7g.141gb": 140}),
        _gpu("B200", 180, "NVIDIA B200"),
        # PCIe, NVL and Grace Hopper forms: an NVML name of their own, so a GRES Type of their
        # own (names as nvidia-smi prints them; memory from the MIG User Guide's "Supported
        # GPUs").  No published -lgip memory figures: 22.05 Types fall back to the profile name.
        _gpu("A100-PCIE-40GB", 40, "NVIDIA A100-PCIE-40GB"),
        _gpu("A100-PCIE-80GB", 80, "NVIDIA A100 80GB PCIe"),
        _gpu("H100-PCIE-80GB", 80, "NVIDIA H100 PCIe"),
        _gpu("H200-NVL", 141, "NVIDIA H200 NVL"),
        _gpu("GH200-96GB", 96, "NVIDIA GH200 480GB"),
        _gpu("GH200-144GB", 144, "NVIDIA GH200 144G HBM3e"),
    )
}
# GPUs without MIG (slurm_pool.mig.plain_gpus): whole GPUs only, Type from the NVML name on every release.
GPU_MODELS.update(
    (g.name, GpuModel(g.name, g.memory_gib, slurm_gpu_type(g.nvml_name), False, g.nvml_name)) for g in PLAIN_GPUS
)


#: Other names the models go by (NVIDIA's product names); what NVML and
#: nvidia-smi print (``NVIDIA A100-SXM4-80GB``) is accepted from ``nvml_name``.
MODEL_ALIASES: dict[str, str] = {
    "A30-24GB": "A30",
    "A100-SXM4-40GB": "A100-40GB",
    "A100-SXM4-80GB": "A100-80GB",
    "H100-SXM5-80GB": "H100-80GB",
    "H100-NVL": "H100-94GB",
    "H200": "H200-141GB",
    "H200-SXM-141GB": "H200-141GB",
    "B200-180GB": "B200",
    "H200-NVL-141GB": "H200-NVL",
    "GH200": "GH200-96GB",
    **{alias: g.name for g in PLAIN_GPUS for alias in g.aliases},
}


def _model_key(name: str) -> str:
    key = " ".join(name.split()).lower()
    return key.removeprefix("nvidia ").replace(" ", "-")


def _model_index() -> dict[str, str]:
    out: dict[str, str] = {}
    for m in GPU_MODELS.values():
        out[_model_key(m.name)] = m.name
        if m.nvml_name:
            out.setdefault(_model_key(m.nvml_name), m.name)
    for alias, name in MODEL_ALIASES.items():
        out.setdefault(_model_key(alias), name)
    return out


_MODEL_INDEX = _model_index()


def canonical_model(name: str) -> str | None:
    """The catalogue name of a GPU model given by its name, an alias or its NVML name (any case); None if unknown."""
    if not isinstance(name, str) or has_control(name):
        return None
    return _MODEL_INDEX.get(_model_key(name))


def known_models(names: Iterable[str] | None = None) -> str:
    """The known models for an error message: ``A30 (also A30-24GB, NVIDIA A30), ...``."""
    out = []
    for name in names if names is not None else GPU_MODELS:
        m = GPU_MODELS[name]
        also = [a for a, n in MODEL_ALIASES.items() if n == name] + ([m.nvml_name] if m.nvml_name else [])
        out.append(f"{name} (also {', '.join(also)})" if also else name)
    return "; ".join(out)


def _split(profile: str) -> tuple[int, int]:
    m = _PROFILE_RE.fullmatch(profile)
    if not m:
        raise ValueError(f"not a MIG profile name: {profile!r} (expected e.g. 3g.40gb or 1g.10gb+me)")
    return int(m.group(1)), int(m.group(2))


def mig_type_verified(model_name: str, profile: str) -> bool:
    """True when :func:`mig_gres_type` uses a published memory size, not the name."""
    return profile.split("+", 1)[0] in GPU_MODELS[model_name].mig_gib


def mig_gres_type(model_name: str, profile: str, version: SlurmVersion) -> str:
    """GRES Type Slurm ``version``'s NVML autodetection reports for ``profile`` on ``model_name``.

    ``mig_gres_type("A100-80GB", "3g.40gb", SlurmVersion(22, 5))`` is
    ``nvidia_a100_3g.39gb``; on 23.02.6 and later it is ``nvidia_a100_3g.40gb``.
    Both the gres.conf and the slurm.conf ``Gres=`` of a node must use this name.
    """
    model = GPU_MODELS[model_name]
    slices, name_gb = _split(profile)
    nvml = model.nvml_name or model.name
    if version.has("mig_type_from_profile"):
        return mig_type_by_profile(nvml, profile)
    gib = model.mig_gib.get(profile.split("+", 1)[0], name_gb)
    return mig_type_by_memory(nvml, slices, gib * 1024)


def mig_device_type(model_name: str, profile: str, memory_mib: int | None, version: SlurmVersion) -> str:
    """GRES Type of one existing MIG device: exact from its NVML memory where the
    release names by memory and it is known, else :func:`mig_gres_type`."""
    model = GPU_MODELS[model_name]
    if memory_mib is not None and model.nvml_name and not version.has("mig_type_from_profile"):
        return mig_type_by_memory(model.nvml_name, _split(profile)[0], memory_mib)
    return mig_gres_type(model_name, profile, version)


def mig_gres_types(model_name: str, profile: str) -> frozenset[str]:
    """Every Type any supported release gives ``profile`` (for reading history)."""
    return frozenset(mig_gres_type(model_name, profile, v) for v in (SlurmVersion(22, 5), SlurmVersion(23, 2, 6)))
