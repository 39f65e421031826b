"""gres.conf ``Cores=`` for each GPU, from NVML's CPU affinity and the node's topology.  Pure.

Slurm's own NVML autodetection does the same (src/plugins/gpu/nvml/gpu_nvml.c,
26.05.3): it takes ``nvmlDeviceGetCpuAffinity``'s machine CPU ids and converts
them to Slurm's abstract numbering (``xcpuinfo_mac_to_abs``), in which cores
are counted socket by socket.  gres.conf(5) asks that a ``Cores=`` list hold
every core of each socket it names (Slurm co-allocates GPUs and CPUs per
socket), so each GPU gets all the cores of every socket its affinity touches.

A site whose GRES come from the spec (``AutoDetect=off``) runs
``slurm-pool gpu-cores`` on one node of a group and copies the printed
``cores:`` into the group's ``gpus``.
"""

from __future__ import annotations

from typing import Any, Sequence

from slurm_pool import text
from slurm_pool.errors import InputError
from slurm_pool.spec.model import CORE_LIST_RE, core_indexes


class GpuCoresError(InputError):
    """A GPU's cores cannot be told from what NVML and the kernel report."""


def abstract_cores(topology: dict[int, tuple[int, int]]) -> dict[tuple[int, int], int]:
    """(socket, core id) -> Slurm's abstract core index: sockets in order, each socket's cores in order."""
    out: dict[tuple[int, int], int] = {}
    for key in sorted(set(topology.values())):
        out[key] = len(out)
    return out


def gpu_cores(gpus: Sequence[dict[str, Any]], topology: dict[int, tuple[int, int]]) -> list[tuple[int, list[int], str]]:
    """Per GPU of a snapshot, in index order: (index, the sockets its affinity touches, its ``Cores=`` list)."""
    index = abstract_cores(topology)
    out = []
    for gpu in sorted(gpus, key=lambda g: g.get("index", -1)):
        cpulist = gpu.get("cpu_affinity")
        where = f"GPU {gpu.get('index')}"
        if not isinstance(cpulist, str) or not text.matches(CORE_LIST_RE, cpulist):
            raise GpuCoresError(f"{where}: NVML reports no CPU affinity (a snapshot without cpu_affinity)")
        sockets = sorted({topology[c][0] for c in core_indexes(cpulist) if c in topology})
        if not sockets:
            raise GpuCoresError(f"{where}: none of its CPUs ({cpulist}) is online here")
        cores = [i for (sock, _), i in index.items() if sock in sockets]
        out.append((int(gpu["index"]), sockets, text.index_ranges(cores)))
    return out
