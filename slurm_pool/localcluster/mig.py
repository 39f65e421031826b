"""MIG on the local cluster: emulated devices and Slurm node control.

The emulated "hardware" state of a node's GPUs lives next to its device files
(``dev/<node>/mig.json``), just as a real GPU keeps its own MIG state; Slurm's
view is then re-rendered from it, exactly as ``mig apply`` does on a real node
with gres.conf and slurm.conf.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path
from typing import Sequence

from slurm_pool.adapters.gres import gpu_counts
from slurm_pool.adapters.slurm import SlurmClient
from slurm_pool.localcluster.cluster import LocalCluster, saved_record
from slurm_pool.mig.emit import MigDevice
from slurm_pool.mig.features import HelperDevice, other_jobs
from slurm_pool.mig.placement import Layout, find_placement
from slurm_pool.mig.remote import SlurmNodes


def _counts(gres: str) -> Counter[str]:
    return Counter(gpu_counts(gres))


class EmulatedMigBackend:
    """The local cluster's emulated GPUs, which hold MIG layouts like real ones."""

    def __init__(self, cluster: LocalCluster):
        self.cluster = cluster

    def _group(self, node: str):
        from slurm_pool.spec.hosts import expand

        for g in self.cluster.spec.node_groups:
            if node in expand(g.hosts):
                return g
        raise KeyError(f"unknown node {node!r}")

    def model(self, node: str) -> str:
        group = self._group(node)
        assert group.gpus is not None
        return group.gpus.model

    def layouts(self, node: str) -> dict[int, Layout | None]:
        stored = self.cluster.device_layouts().get(node)
        group = self._group(node)
        assert group.gpus is not None
        spec_layouts = group.gpus.mig or [None] * group.gpus.count
        base = stored if stored is not None else spec_layouts
        return {i: (tuple(lay) if lay is not None else None) for i, lay in enumerate(base)}

    def apply(self, node: str, gpu: int, layout: Layout | None) -> None:
        group = self._group(node)
        assert group.gpus is not None
        if layout is not None and find_placement(group.gpus.model, list(layout)) is None:
            raise ValueError(f"{','.join(layout)} cannot be placed on a {group.gpus.model}")
        current = self.layouts(node)
        current[gpu] = tuple(layout) if layout is not None else None
        self.cluster.set_device_layouts(node, [current[i] for i in sorted(current)])

    def mig_minors(self, node: str) -> dict[str, int] | None:
        return None  # no driver: minors are derived from the GPU and instance ids

    def devices(self, node: str) -> list[MigDevice]:
        group = self._group(node)
        assert group.gpus is not None
        out = []
        for idx, layout in sorted(self.layouts(node).items()):
            placement = find_placement(group.gpus.model, list(layout)) if layout else None
            for gi, (prof, start) in enumerate(placement or ()):
                out.append(MigDevice(idx, gi + 1, 0, prof, start=start))
        return out


class LocalNodeControl(SlurmNodes):
    """Drain, resume and reconfigure one node of the local cluster through Slurm."""

    def __init__(self, cluster: LocalCluster, poll: float = 0.5):
        super().__init__(SlurmClient(cluster.runner), poll)
        self.cluster = cluster

    def write_gres(self, node: str, gres_conf: Sequence[str], gres: str) -> None:
        """Re-render the cluster's configs from device state; check they agree with ``gres``."""
        self.cluster.write_configs()
        rendered = self.cluster.node_gres(node)
        if _counts(rendered) != _counts(gres):
            raise RuntimeError(f"rendered Gres {rendered!r} for {node} disagrees with the plan's {gres!r}")

    def restart_slurmd(self, node: str) -> None:
        self.cluster.restart_slurmd(node)


def controls(plan: object = None) -> tuple[LocalNodeControl, EmulatedMigBackend]:
    """``mig apply --controls slurm_pool.localcluster.mig:controls``.

    The cluster is the one ``SLURM_POOL_STATE_DIR`` (or ``SLURM_CONF``'s
    state directory) names.
    """
    import os

    state = os.environ.get("SLURM_POOL_STATE_DIR")
    if not state and os.environ.get("SLURM_CONF"):
        state = str(Path(os.environ["SLURM_CONF"]).resolve().parent.parent)
    if not state:
        raise RuntimeError("set SLURM_POOL_STATE_DIR (or SLURM_CONF) to the local cluster's state directory")
    saved = saved_record(Path(state))
    if "spec" not in saved:
        raise RuntimeError(f"{state}: no local cluster recorded there (cluster.json)")
    cluster = LocalCluster(saved["spec"], state_dir=state)
    return LocalNodeControl(cluster), EmulatedMigBackend(cluster)


# ------------------------------------------------------- node-feature Helper


def _device_users(dev_dir: Path) -> list[str]:
    """Processes holding one of the node's emulated GPU or MIG device files open."""
    files = {str(p) for p in dev_dir.glob("nvidia*")}
    out = []
    for fd_dir in Path("/proc").glob("[0-9]*/fd"):
        try:
            held = {os.readlink(fd_dir / fd) for fd in os.listdir(fd_dir)}
        except OSError:
            continue
        if held & files:
            out.append(f"process {fd_dir.parent.name} holds a GPU device open")
    return out


def helper_device(node: str) -> HelperDevice:
    """``mig helper --backend slurm_pool.localcluster.mig:helper_device`` on the local cluster.

    After a change slurmd re-registers with its old GRES: it reads gres.conf only when it
    starts (see docs/mig.md), so on this path a job runs on the GRES it already had.
    """
    state = os.environ.get("SLURM_POOL_STATE_DIR")
    if not state:
        raise RuntimeError("set SLURM_POOL_STATE_DIR to the local cluster's state directory")
    cluster = LocalCluster(saved_record(Path(state))["spec"], state_dir=state)

    def busy(n: str) -> list[str]:
        return other_jobs(cluster.slurm.jobs_on_node(n)) + _device_users(cluster.layout.root / "dev" / n)

    return HelperDevice(EmulatedMigBackend(cluster), busy)
