"""What the local cluster's nodes need beside the configs, in its state directory.

The node hooks (Prolog, Epilog, HealthCheckProgram) and the node.conf they
read, one MIG Helper and one emulated ``nvidia-smi`` per node, the SPANK plugin
built against this Slurm's headers, and the emulated GPU devices (``mknod``).
Several ``slurmd -N`` share one host, so everything per node is named by node.
"""

from __future__ import annotations

import os
import shlex
import shutil
import stat
import sys
from pathlib import Path

from slurm_pool import nodeconf
from slurm_pool.errors import PoolError
from slurm_pool.mig.features import helper_path
from slurm_pool.outfiles import replace_file
from slurm_pool.spec import PoolSpec
from slurm_pool.spec.hosts import expand

#: The character-device major of NVIDIA GPUs (/dev/nvidia*).
NVIDIA_MAJOR = 195


class NodeFilesError(PoolError, RuntimeError):
    """A node file could not be made."""


def write_node_files(spec: PoolSpec, root: Path, etc: Path, ctx: dict, scontrol: str | None) -> None:
    """Hooks and node.conf, MIG Helpers, nvidia-smi stand-ins and devices for ``spec`` under ``root``."""
    _write_node_programs(spec, root, etc, scontrol)
    _write_mig_helpers(spec, root)
    _write_nvidia_smi(spec, root)
    _make_devices(root, ctx)


def install_spank_plugin(root: Path, include_dir: Path) -> None:
    """Build the SPANK plugin against this Slurm's own headers, into ``root/lib``, where every job user
    can load it (srun inside a job runs as the user; the checkout may not be readable).  A plugin built
    for another Slurm does not load."""
    from slurm_pool.adapters.runner import SubprocessRunner
    from slurm_pool.spank.cli import build, source_dir

    try:
        source = source_dir()
    except PoolError:
        return  # no source here (an installed package without it): the cluster runs without the plugin
    lib = root / "lib"
    lib.mkdir(parents=True, exist_ok=True)
    lib.chmod(0o755)
    try:
        plugin = build(SubprocessRunner(), include_dir, lib / "build", source)
    except PoolError as exc:
        raise NodeFilesError(str(exc)) from None
    tmp = lib / ".slurm_pool_spank.so.tmp"
    shutil.copyfile(plugin, tmp)
    tmp.chmod(0o755)
    os.replace(tmp, lib / "slurm_pool_spank.so")


def _write_mig_helpers(spec: PoolSpec, root: Path) -> None:
    """One ``slurm-pool-mig-helper-<node>`` per node whose group names MIG layouts: the
    slurmds share this host, and slurmd gives its Helper no node name."""
    bindir = root / "bin"
    code = f"import sys; sys.path[:0] = {nodeconf.hook_paths()!r}; from slurm_pool.cli import main; main()"
    for group in spec.node_groups:
        if not (group.gpus and group.gpus.layouts):
            continue
        for node in expand(group.hosts):
            bindir.mkdir(parents=True, exist_ok=True)
            argv = [sys.executable, "-I", "-S", "-c", code, "mig", "helper", "--node", node]
            argv += ["--backend", "slurm_pool.localcluster.mig:helper_device"]
            env = f"SLURM_POOL_STATE_DIR={shlex.quote(str(root))}"
            text = f'#!/bin/sh\n{env} exec {" ".join(shlex.quote(a) for a in argv)} "$@"\n'
            replace_file(Path(helper_path(str(bindir), node)), text, 0o755)


def _write_nvidia_smi(spec: PoolSpec, root: Path) -> None:
    """One emulated ``nvidia-smi-<node>`` per GPU node, for ``mig apply`` over ssh (``localcluster.nvsmi``)."""
    bindir = root / "bin"
    code = (
        f"import sys; sys.path[:0] = {nodeconf.hook_paths()!r}; from slurm_pool.localcluster.nvsmi import main; main()"
    )
    env = f"SLURM_POOL_STATE_DIR={shlex.quote(str(root))}"
    for group in spec.node_groups:
        if not group.gpus:
            continue
        for node in expand(group.hosts):
            bindir.mkdir(parents=True, exist_ok=True)
            argv = [sys.executable, "-I", "-S", "-c", code, "--node", node]
            text = f'#!/bin/sh\n{env} exec {" ".join(shlex.quote(a) for a in argv)} "$@"\n'
            replace_file(bindir / f"nvidia-smi-{node}", text, 0o755)


def _write_node_programs(spec: PoolSpec, root: Path, etc: Path, scontrol: str | None) -> None:
    """The Prolog/Epilog/HealthCheckProgram scripts and the node.conf they read."""
    bindir = root / "bin"
    bindir.mkdir(parents=True, exist_ok=True)
    conf = etc / nodeconf.BESIDE_SLURM_CONF
    state = root / "node-state"
    state.mkdir(parents=True, exist_ok=True)
    state.chmod(0o755)
    # Emulated GPUs have no NVML: "auto" skips the device checks where the
    # library is absent; tests replay snapshots through this same file.
    # The hooks run with slurmd's minimal PATH: name this Slurm's own scontrol.
    text = nodeconf.render(spec, state_dir=str(state), gpus="auto", scontrol=scontrol)
    cfg = nodeconf.NodeConfig(nodeconf.parse(text), str(conf))
    hooks = {
        prog: nodeconf.render_hook(prog, sys.executable, str(conf), paths=nodeconf.hook_paths(), cfg=cfg)
        for prog in ("prolog", "epilog", "healthcheck")
    }  # all rendered before any is written
    replace_file(conf, text, 0o644)
    for prog, hook in hooks.items():
        replace_file(bindir / f"slurm-pool-{prog}", hook, 0o755)


def _make_devices(root: Path, ctx: dict) -> None:
    """One character device per emulated GPU and MIG instance; stale ones of a node go."""
    minor = 0
    for group in ctx["groups"]:
        for node in group["nodes"]:
            wanted = {Path(d.file).name for d in node["devices"]}
            ndir = root / "dev" / node["name"]
            for stale in ndir.glob("nvidia*") if ndir.is_dir() else []:
                if stale.name not in wanted:
                    stale.unlink()
            for dev in node["devices"]:
                path = Path(dev.file)
                path.parent.mkdir(parents=True, exist_ok=True)
                if path.exists():
                    if not stat.S_ISCHR(path.stat().st_mode):
                        raise NodeFilesError(f"{path} exists and is not a character device")
                else:
                    os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(NVIDIA_MAJOR, minor))
                minor += 1
