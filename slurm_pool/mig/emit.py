"""Outputs for real clusters: mig-parted config, nvidia-smi commands, GRES lines.

* mig-parted: ``version: v1`` with one named config per node under
  ``mig-configs`` (``devices`` lists GPU indices, ``mig-devices`` counts).
* nvidia-smi: ``-cgi`` takes profile tuples ``<profile name or ID>[:<start>]``;
  with an explicit start every instance lands where the checker placed it, so
  creation order cannot block a later instance.  ``-C`` creates the default
  compute instance in each new GPU instance.
* gres.conf: either ``AutoDetect=nvml`` or one explicit line per MIG device
  with ``MultipleFiles=/dev/nvidia<minor>,/dev/nvidia-caps/nvidia-cap<GI>,
  /dev/nvidia-caps/nvidia-cap<CI>``, the two capability minors that Slurm's
  gpu/nvml plugin reads from ``/proc/driver/nvidia-caps/mig-minors`` (lines
  ``gpu<minor>/gi<id>/access N`` and ``gpu<minor>/gi<id>/ci<id>/access N``).
  The driver numbers them predictably: ``config`` 1, ``monitor`` 2, then for
  each GPU minor ``g`` (32 max) and GPU instance ``i`` (15 per GPU) the GI
  minor ``3 + 9 * (15 * g + i)`` followed by its 8 CI minors.  GI IDs are
  chosen by the driver at creation, so explicit lines need the devices as
  they exist (see :class:`MigDevice`), not just the plan.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

from slurm_pool.mig.catalogue import GPU_MODELS, mig_device_type, mig_gres_type
from slurm_pool.mig.placement import Layout, find_placement
from slurm_pool.mig.profiles import geometry
from slurm_pool.text import check, check_path
from slurm_pool.versions import SlurmVersion

GIS_PER_GPU = 15
CIS_PER_GI = 8


@dataclass(frozen=True)
class MigDevice:
    """One MIG device as it exists on a node (a GI with one CI)."""

    gpu_index: int
    gi_id: int
    ci_id: int
    profile: str
    gpu_minor: int | None = None
    start: int | None = None
    memory_mib: int | None = None

    @property
    def minor(self) -> int:
        return self.gpu_index if self.gpu_minor is None else self.gpu_minor


def mig_parted_config(
    node_layouts: Mapping[str, Mapping[int, Layout | None]], prefix: str = "slurm-pool"
) -> dict[str, object]:
    """A mig-parted config with one named config ``<prefix>-<node>`` per node."""
    configs: dict[str, list[dict[str, object]]] = {}
    for node in sorted(node_layouts):
        groups: dict[Layout | None, list[int]] = defaultdict(list)
        for idx in sorted(node_layouts[node]):
            groups[node_layouts[node][idx]].append(idx)
        entries: list[dict[str, object]] = []
        for layout, devices in groups.items():
            entry: dict[str, object] = {"devices": devices, "mig-enabled": layout is not None}
            if layout is not None:
                entry["mig-devices"] = dict(Counter(layout))
            entries.append(entry)
        configs[f"{prefix}-{node}"] = entries
    return {"version": "v1", "mig-configs": configs}


def nvidia_smi_commands(model: str, gpu_index: int, layout: Layout | None, mig_enabled: bool = True) -> list[list[str]]:
    """Commands that turn GPU ``gpu_index`` into ``layout`` (None: MIG off).

    Existing compute and GPU instances are destroyed first; the new GPU
    instances are created with explicit placements, largest first.
    """
    i = str(gpu_index)
    cmds: list[list[str]] = []
    if layout is not None and not mig_enabled:
        cmds.append(["nvidia-smi", "-i", i, "-mig", "1"])
    cmds.append(["nvidia-smi", "mig", "-i", i, "-dci"])
    cmds.append(["nvidia-smi", "mig", "-i", i, "-dgi"])
    if layout is None:
        cmds.append(["nvidia-smi", "-i", i, "-mig", "0"])
        return cmds
    if layout:
        placement = find_placement(model, layout)
        if placement is None:
            raise ValueError(f"{','.join(layout)} is not a valid {model} layout")
        geo = geometry(model)
        order = sorted(placement, key=lambda t: (-geo.profiles[t[0]].memory, t[1]))
        cmds.append(["nvidia-smi", "mig", "-i", i, "-cgi", ",".join(f"{p}:{s}" for p, s in order), "-C"])
    return cmds


_MINOR_RE = re.compile(r"(\S+)\s+([0-9]+)")


def parse_mig_minors(text: str) -> dict[str, int]:
    """``/proc/driver/nvidia-caps/mig-minors`` as ``{"gpu0/gi1/access": 12, ...}``."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        m = _MINOR_RE.fullmatch(line.strip())
        if m:
            out[m.group(1)] = int(m.group(2))
    return out


def cap_minor(gpu_minor: int, gi_id: int, ci_id: int | None = None, minors: Mapping[str, int] | None = None) -> int:
    """Minor of ``/dev/nvidia-caps/nvidia-cap<N>`` for a GI (or one of its CIs)."""
    key = f"gpu{gpu_minor}/gi{gi_id}/access" if ci_id is None else f"gpu{gpu_minor}/gi{gi_id}/ci{ci_id}/access"
    if minors is not None and key in minors:
        return minors[key]
    if not (0 <= gi_id < GIS_PER_GPU) or (ci_id is not None and not 0 <= ci_id < CIS_PER_GI):
        raise ValueError(f"no capability minor for {key}")
    base = 3 + (CIS_PER_GI + 1) * (GIS_PER_GPU * gpu_minor + gi_id)
    return base if ci_id is None else base + 1 + ci_id


def gres_conf_explicit(
    node: str,
    model: str,
    devices: Iterable[MigDevice],
    version: SlurmVersion,
    whole_gpus: Iterable[tuple[int, int]] = (),
    minors: Mapping[str, int] | None = None,
    dev_dir: str = "/dev",
) -> list[str]:
    """Explicit gres.conf lines: ``MultipleFiles`` per MIG device, ``File`` per whole GPU.

    ``whole_gpus`` lists ``(index, minor)`` of GPUs with MIG off; ``dev_dir`` is where the
    node keeps its device files.  ValueError for a node name or directory that gres.conf cannot hold.
    """
    check("node", node, "node")
    check_path(dev_dir, "dev_dir")
    lines = []
    rows: list[tuple[int, int, str]] = []
    for idx, minor in whole_gpus:
        rows.append(
            (idx, -1, f"NodeName={node} Name=gpu Type={GPU_MODELS[model].slurm_type} File={dev_dir}/nvidia{minor}")
        )
    for dev in devices:
        files = ",".join(
            [
                f"{dev_dir}/nvidia{dev.minor}",
                f"{dev_dir}/nvidia-caps/nvidia-cap{cap_minor(dev.minor, dev.gi_id, None, minors)}",
                f"{dev_dir}/nvidia-caps/nvidia-cap{cap_minor(dev.minor, dev.gi_id, dev.ci_id, minors)}",
            ]
        )
        rows.append(
            (
                dev.gpu_index,
                dev.gi_id,
                f"NodeName={node} Name=gpu Type={mig_device_type(model, dev.profile, dev.memory_mib, version)} MultipleFiles={files}",
            )
        )
    for _, _, line in sorted(rows):
        lines.append(line)
    return lines


def gres_conf_autodetect(node: str | None = None) -> list[str]:
    """gres.conf for NVML autodetection (Types then come from the rule in catalogue)."""
    if node is not None:
        check("node", node, "node")
    return [f"NodeName={node} AutoDetect=nvml" if node else "AutoDetect=nvml"]


def slurm_gres(model: str, layouts: Sequence[Layout | None], version: SlurmVersion) -> str:
    """slurm.conf ``Gres=`` value (without ``Gres=``) for one node's GPUs."""
    counts: Counter[str] = Counter()
    for layout in layouts:
        if layout is None:
            counts[GPU_MODELS[model].slurm_type] += 1
        else:
            counts.update(mig_gres_type(model, p, version) for p in layout)
    return ",".join(f"gpu:{t}:{n}" for t, n in sorted(counts.items()))
