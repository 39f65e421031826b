"""``slurm-pool mig helper``: the node side of :mod:`slurm_pool.mig.features`.

Finds the layout table and ``ExecTime`` next to slurm.conf (slurmd runs the
Helper with ``SLURM_CONF`` set), the node's name (``--node``, else the short
host name) and the device seam: ``--backend MODULE:FACTORY`` returning a
:class:`~slurm_pool.mig.features.HelperDevice` for a node, else this host's
GPUs through nvidia-smi.
"""

from __future__ import annotations

import importlib
import os
import socket
from pathlib import Path

from slurm_pool.mig.features import (
    LAYOUTS_FILE,
    SLURM_DEFAULT_EXEC_TIME,
    USAGE,
    HelperDevice,
    HelperResult,
    other_jobs,
    parse_exec_time,
    run_helper,
    table_error,
    unknown_node,
)
from slurm_pool.text import matches
from slurm_pool.textio import read_json


def conf_dir() -> Path:
    """The directory of ``$SLURM_CONF`` (``/etc/slurm`` without it)."""
    conf = os.environ.get("SLURM_CONF")
    return Path(conf).resolve().parent if conf else Path("/etc/slurm")


def exec_time(directory: Path) -> float:
    """helpers.conf's ExecTime there, else Slurm's default."""
    try:
        return parse_exec_time((directory / "helpers.conf").read_text())
    except OSError:
        return SLURM_DEFAULT_EXEC_TIME


def nvidia_smi_device(node: str, model: str) -> HelperDevice:
    """This host's GPUs: nvidia-smi for layouts and processes, squeue for other jobs."""
    from slurm_pool.adapters.runner import SubprocessRunner
    from slurm_pool.adapters.slurmcalls import SlurmCalls
    from slurm_pool.mig.apply import NvidiaSmiBackend

    runner = SubprocessRunner()
    slurm = SlurmCalls(runner)

    def busy(n: str) -> list[str]:
        jobs = slurm.jobs_on_node(n)
        apps = runner.run(
            ["nvidia-smi", "--query-compute-apps=pid,process_name", "--format=csv,noheader"], check=True
        ).stdout
        procs = [f"GPU process {line.strip()}" for line in apps.splitlines() if line.strip()]
        return other_jobs(jobs) + procs

    return HelperDevice(NvidiaSmiBackend(runner, model), busy)


def load_device(spec: str | None, node: str, model: str) -> HelperDevice:
    if spec is None:
        return nvidia_smi_device(node, model)
    module, _, attr = spec.partition(":")
    factory = getattr(importlib.import_module(module), attr or "helper_device")
    return factory(node)


def main(feature: str | None, node: str | None, layouts_path: str | None, backend: str | None) -> HelperResult:
    """Run the Helper; never raises for bad input or a failing device (see the result)."""
    directory = conf_dir()
    path = Path(layouts_path) if layouts_path else directory / LAYOUTS_FILE
    try:
        table = read_json(str(path))
    except Exception as exc:  # noqa: BLE001
        return HelperResult(USAGE, err=[f"cannot read the MIG layout table {path}: {exc}"])
    problem = table_error(table)
    if problem:
        return HelperResult(USAGE, err=[f"MIG layout table {path}: {problem}"])
    node = node or socket.gethostname().split(".")[0]
    if not matches("node", node):
        return HelperResult(USAGE, err=[f"--node: {node!r} is not a node name"])
    unknown = unknown_node(table, node)
    if unknown:
        return unknown
    try:
        device = load_device(backend, node, table["nodes"][node]["model"])
    except Exception as exc:  # noqa: BLE001
        return HelperResult(1, err=[f"cannot load --backend {backend!r}: {exc}"])
    return run_helper(feature, node, table, device, exec_time(directory))
