"""GPU models known to slurm-pool.

This module is pure data.  The MIG profile tables for each model are added in
:mod:`slurm_pool.mig.profiles`; here is what every GPU has, MIG or not.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GpuModel:
    """One GPU model.

    ``slurm_type`` is the GRES Type that Slurm's NVML autodetection reports for
    the whole GPU, so that rendered configs match autodetected ones.
    """

    name: str
    memory_gib: int
    slurm_type: str
    mig_capable: bool


GPU_MODELS: dict[str, GpuModel] = {
    m.name: m
    for m in (
        GpuModel("A100-40GB", 40, "a100-sxm4-40gb", True),
        GpuModel("A100-80GB", 80, "a100-sxm4-80gb", True),
        GpuModel("A30", 24, "a30", True),
        GpuModel("H100-80GB", 80, "h100-80gb-hbm3", True),
        GpuModel("H100-94GB", 94, "h100-nvl", True),
        GpuModel("H200-141GB", 141, "h200", True),
        GpuModel("B200", 180, "b200", True),
    )
}
