"""What a checkpointing test job needs on the real cluster: a python its user can run, a copy of the
package it can read, and the node hooks' ``slurm-pool-node.conf`` pointed at the test's own directories."""

from __future__ import annotations

import os
import random
import re
import shutil
import stat
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TRAIN = REPO / "examples" / "train_sim.py"
#: A batch script running train_sim under the checkpoint wrapper, from a :func:`workdir` copy of the package.
TRAIN_SCRIPT = """#!/bin/bash
export PYTHONPATH={repo}
exec {py} -m slurm_pool.checkpoint -- {py} {train} --steps {steps} --every {every} --step-time {dt}
"""


def _reachable(path: str) -> bool:
    """Whether any user may execute ``path`` (every parent directory o+x)."""
    p = Path(path).resolve()
    if not p.is_file() or not p.stat().st_mode & stat.S_IXOTH:
        return False
    return all(d.stat().st_mode & stat.S_IXOTH for d in p.parents)


def job_python() -> str:
    """A python3 the job's user can run (the test's own may live under /root)."""
    if _reachable(sys.executable):
        return sys.executable
    for d in os.defpath.split(os.pathsep) + ["/usr/local/bin", "/usr/bin"]:
        cand = shutil.which("python3", path=d)
        if cand and _reachable(cand):
            return cand
    pytest.fail("no python3 the job's user can execute (install Debian's python3)")


@pytest.fixture
def node_conf(cluster):
    """Write ``slurm-pool-node.conf`` beside the cluster's slurm.conf; restore it afterwards."""
    path = Path(cluster.env["SLURM_CONF"]).parent / "slurm-pool-node.conf"
    old = path.read_bytes() if path.exists() else None

    def write(**values: str) -> Path:
        values.setdefault("scontrol", cluster.scontrol)  # the hooks run with slurmd's minimal PATH
        path.write_text("".join(f"{k} = {v}\n" for k, v in values.items()))
        os.chown(path, 0, 0)
        path.chmod(0o644)
        return path

    yield write
    if old is None:
        path.unlink(missing_ok=True)
    else:
        path.write_bytes(old)


def workdir(tag: str) -> Path:
    """A world-writable work dir holding a copy of the package and train_sim.py.

    The job runs as alice, who may not be able to read the checkout (CI may
    clone under a private home): the click-free wrapper needs only the
    standard library and this copy.
    """
    d = Path("/tmp") / f"sp-{tag}-{int(time.time())}-{random.randrange(10**6)}"
    d.mkdir(mode=0o777)
    d.chmod(0o777)
    shutil.copytree(REPO / "slurm_pool", d / "lib" / "slurm_pool", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(TRAIN, d / "train_sim.py")
    for p in [d / "lib", *(d / "lib").rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    return d


# -- reading a train_sim log ---------------------------------------------------------------


def train_lines(log: Path, event: str) -> list[dict[str, str]]:
    """The ``key=value`` fields of each ``train_sim: EVENT`` line of ``log`` (none while it does not exist)."""
    text = log.read_text() if log.exists() else ""
    return [
        dict(kv.split("=", 1) for kv in line.split()[2:] if "=" in kv)
        for line in text.splitlines()
        if line.startswith(f"train_sim: {event} ")
    ]


def train_runs(log: Path) -> list[list[str]]:
    """The train_sim lines of each run, split at its ``start`` lines."""
    runs: list[list[str]] = []
    for line in log.read_text().splitlines():
        if line.startswith("train_sim: start "):
            runs.append([])
        if runs and line.startswith("train_sim: "):
            runs[-1].append(line)
    return runs


def steps_lost(log: Path) -> list[tuple[int, list[str], list[str]]]:
    """For each run after the first: the steps done before it that it did again (last step of the run before
    less its resume step), the run before and it."""
    runs = train_runs(log)
    out = []
    for before, after in zip(runs, runs[1:], strict=False):
        last = max(int(m.group(1)) for line in before for m in [re.search(r" (?:resume_)?step=(\d+)", line)] if m)
        out.append((last - int(after[0].split("resume_step=")[1].split()[0]), before, after))
    return out


def expected_result(steps: int) -> str:
    """The final state of an uninterrupted run of ``steps`` (train_sim is a script, not a module)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("train_sim", TRAIN)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.expected("slurm-pool", steps)
