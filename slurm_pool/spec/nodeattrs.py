"""A node group's Slurm node attributes: the rules across them, and the ``NodeName=`` words they become.

The attributes keep slurm.conf(5)'s names and types (ranges:
:mod:`slurm_pool.spec.ranges`); they are spelled and read alike from 22.05 to
26.05 (slurm.conf(5) and gres.conf(5) of 22.05.8 and 26.05.3;
src/common/read_config.c).
"""

from __future__ import annotations

from typing import Iterator

from slurm_pool.errors import Issue
from slurm_pool.spec.model import NodeGroup, core_indexes

#: (slurm.conf key, NodeGroup field) of the topology words, rendered after ``CPUs=`` in this order.
TOPOLOGY_KEYS = (("Sockets", "sockets"), ("CoresPerSocket", "cores_per_socket"), ("ThreadsPerCore", "threads_per_core"))
#: (slurm.conf key, NodeGroup field) of the words rendered after ``RealMemory=`` in this order.
MEMORY_KEYS = (("MemSpecLimit", "mem_spec_limit"), ("TmpDisk", "tmp_disk"), ("Weight", "weight"))


def attribute_words(group: NodeGroup, keys: tuple[tuple[str, str], ...]) -> str:
    """`` Key=value`` for each of ``keys`` the group sets (empty when it sets none)."""
    return "".join(f" {key}={getattr(group, field)}" for key, field in keys if getattr(group, field) is not None)


def node_attributes(group: NodeGroup) -> dict[str, str]:
    """Every attribute the ``NodeName=`` line of ``group`` names, by slurm.conf key (Features joined by ',')."""
    out = {"CPUs": str(group.cpus), "RealMemory": str(group.memory_mb)}
    for key, field in (*TOPOLOGY_KEYS, *MEMORY_KEYS):
        if getattr(group, field) is not None:
            out[key] = str(getattr(group, field))
    names = [*group.features, *(group.gpus.layouts or {} if group.gpus else {})]
    if names:
        out["Features"] = ",".join(names)
    return out


def gpu_cores(group: NodeGroup) -> list[str] | None:
    """gres.conf ``Cores=`` of each GPU index of ``group`` (None: the spec gives none)."""
    if group.gpus is None or not group.gpus.cores:
        return None
    cores = group.gpus.cores
    return list(cores) if len(cores) == group.gpus.count else [cores[0]] * group.gpus.count


def check_node_attrs(group: NodeGroup, gi: int) -> Iterator[Issue]:
    """The rules across a group's attributes (slurm.conf(5) CPUs and MemSpecLimit, gres.conf(5) Cores)."""
    base = f"node_groups[{gi}]"
    s, c, t = group.sockets, group.cores_per_socket, group.threads_per_core
    if s is not None and c is not None:
        threads = s * c * (t or 1)
        if group.cpus not in (threads, s * c):
            yield Issue(
                f"{base}.cpus",
                f"CPUs={group.cpus} is neither the threads ({threads} = Sockets x CoresPerSocket x ThreadsPerCore) "
                f"nor the cores ({s * c}) of the node (slurm.conf(5) CPUs)",
            )
    elif any(v is not None for v in (s, c, t)):
        known = (s or 1) * (c or 1) * (t or 1)
        if group.cpus % known:
            yield Issue(
                f"{base}.cpus",
                f"CPUs={group.cpus} is not a multiple of {known} (the Sockets, CoresPerSocket and ThreadsPerCore "
                "given); Slurm infers the others from CPUs (slurm.conf(5) Sockets)",
            )
    if group.mem_spec_limit is not None and group.mem_spec_limit >= group.memory_mb:
        yield Issue(
            f"{base}.mem_spec_limit",
            f"MemSpecLimit={group.mem_spec_limit} must be less than the node's RealMemory (memory_mb "
            f"{group.memory_mb}; slurm.conf(5) MemSpecLimit)",
        )
    gpus = group.gpus
    if gpus is None or gpus.cores is None:
        return
    path = f"{base}.gpus.cores"
    if gpus.mig is not None or gpus.layouts is not None:
        yield Issue(path, "GPUs with MIG are found through NVML (AutoDetect=nvml), which gives their cores too")
        return
    if len(gpus.cores) not in (1, gpus.count):
        yield Issue(path, f"give one core list per GPU ({gpus.count}) or one for all, not {len(gpus.cores)}")
        return
    ncores = group.core_count()
    for ci, value in enumerate(gpus.cores):
        beyond = [i for i in core_indexes(value) if i >= ncores]
        if beyond:
            yield Issue(
                f"{path}[{ci}]",
                f"{value!r} names core {beyond[0]}, but the node has {ncores} cores (0-{ncores - 1}); gres.conf(5) "
                "Cores are core indexes of the node",
            )
