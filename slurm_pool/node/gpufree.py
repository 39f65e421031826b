"""Free a node's GPUs of processes that are not Slurm's, without Kubernetes' API.

When Slurm takes a lent node back, the placeholder's fence removes the
inference pods through the API server.  If that server is down, the pods'
processes may still hold the GPUs as the owner's job starts.  So the epilog of
every job of the lend partition (root, on the node, before Slurm gives the node
to the next job) runs :func:`free_gpus`:

1. list the compute processes on the node's GPUs through the NVML seam
   (``nvmlDeviceGetComputeRunningProcesses``); none: done;
2. run node.conf's ``lend_stop_command`` (say, stop the kubelet, so it
   does not start the containers again);
3. SIGTERM every one of those processes (never this one or its ancestors),
   SIGKILL what is left after ``term_wait`` seconds, and list them again.

Only what NVML reports is touched.  The prolog's GPU check (a job's GPUs
free at its start) is the second line.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from typing import Callable

from slurm_pool.node.procinfo import alive, ancestors

#: Reads GPU index -> pids of its compute processes (None: NVML cannot say).
Reader = Callable[[], "dict[int, list[int]] | None"]


@dataclass
class Freed:
    ok: bool
    detail: str
    found: list[int] = field(default_factory=list)
    killed: list[int] = field(default_factory=list)
    left: list[int] = field(default_factory=list)


def _signal(pid: int, sig: int, kill: Callable[[int, int], None]) -> bool:
    try:
        kill(pid, sig)
        return True
    except ProcessLookupError:
        return False


def free_gpus(
    read: Reader,
    *,
    command: str = "",
    term_wait: float = 5.0,
    protect: set[int] | None = None,
    kill: Callable[[int, int], None] = os.kill,
    is_alive: Callable[[int], bool] = alive,
    run: Callable[[str], int] | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> Freed:
    """Stop the processes on the node's GPUs; ``ok`` once NVML lists none."""
    protect = ancestors() if protect is None else protect
    found = read()
    if found is None:
        return Freed(False, "NVML cannot list the GPUs' processes")
    pids = sorted({p for ps in found.values() for p in ps} - protect)
    if not pids:
        return Freed(True, "no process on the GPUs")
    notes = []
    if command:
        rc = (run or _shell)(command)
        notes.append(f"{command!r} exited {rc}")
    signalled = [p for p in pids if _signal(p, signal.SIGTERM, kill)]
    deadline = clock() + term_wait
    while any(is_alive(p) for p in signalled) and clock() < deadline:
        sleep(0.1)
    stubborn = [p for p in signalled if is_alive(p)]
    for p in stubborn:
        _signal(p, signal.SIGKILL, kill)
    deadline = clock() + 2.0
    while any(is_alive(p) for p in stubborn) and clock() < deadline:
        sleep(0.1)
    after = read() or {}
    left = sorted(p for p in {p for ps in after.values() for p in ps} - protect if is_alive(p))  # NVML may lag
    notes.append(f"SIGTERM {','.join(map(str, signalled)) or 'none'}")
    if stubborn:
        notes.append(f"SIGKILL {','.join(map(str, stubborn))}")
    if left:
        notes.append(f"still on the GPUs: {','.join(map(str, left))}")
    return Freed(not left, "; ".join(notes), pids, signalled, left)


def _shell(command: str) -> int:
    try:
        return subprocess.run(["/bin/sh", "-c", command], timeout=30, check=False).returncode
    except (OSError, subprocess.TimeoutExpired):
        return -1
