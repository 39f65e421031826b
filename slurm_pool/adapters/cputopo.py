"""The node's CPU topology as Linux reports it: each online CPU's socket and core.

Read from ``/sys/devices/system/cpu/cpu<N>/topology/{physical_package_id,core_id}``
(Documentation/ABI/stable/sysfs-devices-system-cpu in the kernel); an offline
CPU has no ``topology`` directory and is left out.  Read-only; a value that is
not a whole number is an error naming the file, never read as 0.
"""

from __future__ import annotations

import os
import re

from slurm_pool.errors import InputError

SYSFS_CPU = "/sys/devices/system/cpu"
_CPU_DIR = re.compile(r"cpu([0-9]{1,6})")
_NUMBER = re.compile(r"-?[0-9]{1,9}")


class TopologyError(InputError):
    """The CPU topology could not be read."""


def _number(path: str) -> int:
    try:
        with open(path, encoding="ascii", errors="replace") as fh:
            raw = fh.read(64).strip()
    except OSError as exc:
        raise TopologyError(f"{path}: {exc.strerror or exc}") from None
    if not _NUMBER.fullmatch(raw):
        raise TopologyError(f"{path}: {raw[:20]!r} is not a number")
    return max(0, int(raw))  # -1: the kernel knows no package (some virtual machines): one socket


def read_cpu_topology(root: str = SYSFS_CPU) -> dict[int, tuple[int, int]]:
    """Machine CPU id -> (socket, core id) for every online CPU under ``root``."""
    try:
        names = os.listdir(root)
    except OSError as exc:
        raise TopologyError(f"{root}: {exc.strerror or exc}") from None
    out: dict[int, tuple[int, int]] = {}
    for name in names:
        m = _CPU_DIR.fullmatch(name)
        topo = os.path.join(root, name, "topology")
        if m is None or not os.path.isdir(topo):
            continue
        out[int(m.group(1))] = (
            _number(os.path.join(topo, "physical_package_id")),
            _number(os.path.join(topo, "core_id")),
        )
    if not out:
        raise TopologyError(f"{root}: no CPU with a topology directory")
    return dict(sorted(out.items()))
