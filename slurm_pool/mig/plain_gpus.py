"""NVIDIA data-centre GPUs without MIG: described as plain GPUs (hardware facts as data).

Each row is one model: its catalogue name, its memory in GiB (the product
figure), the name NVML's ``nvmlDeviceGetName`` and ``nvidia-smi`` print on
current drivers, and other names it goes by.

Sources: NVIDIA's product datasheets for the memory (L40S, L40, L4, A40, A10,
A16, A2, T4, V100, RTX 6000 Ada Generation, RTX A6000, RTX A5000, RTX A4000);
the NVIDIA Multi-Instance GPU User Guide, "Supported GPUs", for which models
have MIG (A30, A100, H100, H200, B200 and later; none of these); the device
names as ``nvidia-smi -L`` prints them.  Only whole GPUs are described: a model
whose memory or form factor changes the NVML name (V100 SXM2/PCIe, 16/32 GB)
is one row per name, because Slurm's GRES Type is that name.

GRES Type per Slurm release: ``gpu/nvml`` names a whole GPU by its NVML device
name, lower-cased with spaces turned into ``_`` (``_nvml_get_device_name`` in
``src/plugins/gpu/nvml/gpu_nvml.c``, ``gpu_common_underscorify_tolower`` in
``src/plugins/gpu/common/gpu_common.c``).  Only MIG devices were renamed
(23.02.6); whole-GPU names are the same from 22.05 to 26.05.  Up to 25.11.x
the name was read into a 64-byte buffer (NVML_DEVICE_NAME_BUFFER_SIZE) and
longer names failed ("Fix Insufficient Size error in NVML library call for long
gpu names", CHANGELOG/slurm-25.11.md); every name here is shorter.  Drivers
before R510 printed some names without the ``NVIDIA`` prefix (``A40``); the
catalogue accepts both, and renders the current one.
"""

from __future__ import annotations

from typing import NamedTuple


class PlainGpu(NamedTuple):
    """One GPU model without MIG."""

    name: str
    memory_gib: int
    nvml_name: str
    aliases: tuple[str, ...] = ()


#: Every NVIDIA data-centre or workstation GPU without MIG the catalogue knows.
PLAIN_GPUS: tuple[PlainGpu, ...] = (
    PlainGpu("L40S", 48, "NVIDIA L40S", ("L40S-48GB",)),
    PlainGpu("L40", 48, "NVIDIA L40", ("L40-48GB",)),
    PlainGpu("L4", 24, "NVIDIA L4", ("L4-24GB",)),
    PlainGpu("A40", 48, "NVIDIA A40", ("A40-48GB",)),
    PlainGpu("A10", 24, "NVIDIA A10", ("A10-24GB",)),
    PlainGpu("A16", 16, "NVIDIA A16", ("A16-16GB",)),  # per GPU: a board holds 4, NVML lists each
    PlainGpu("A2", 16, "NVIDIA A2", ("A2-16GB",)),
    PlainGpu("T4", 16, "Tesla T4", ("T4-16GB",)),
    PlainGpu("V100-SXM2-16GB", 16, "Tesla V100-SXM2-16GB"),
    PlainGpu("V100-SXM2-32GB", 32, "Tesla V100-SXM2-32GB"),
    PlainGpu("V100-PCIE-16GB", 16, "Tesla V100-PCIE-16GB"),
    PlainGpu("V100-PCIE-32GB", 32, "Tesla V100-PCIE-32GB"),
    PlainGpu("RTX-6000-Ada", 48, "NVIDIA RTX 6000 Ada Generation"),
    PlainGpu("RTX-A6000", 48, "NVIDIA RTX A6000"),
    PlainGpu("RTX-A5000", 24, "NVIDIA RTX A5000"),
    PlainGpu("RTX-A4000", 16, "NVIDIA RTX A4000"),
)
