"""The handshake between ``slurm-pool run`` and its child, as small JSON files.

They live in ``<checkpoint dir>/.slurm-pool/`` and are written atomically:

``request.json`` (wrapper -> child, written *before* the signal is forwarded)
    ``{"id", "run", "reason", "evidence", "signal", "time", "deadline",
    "baseline_step"}`` -- why the child is asked to checkpoint and until when.
``ack.json`` (child -> wrapper, written by :meth:`Checkpointer.save`)
    ``{"request_id", "run", "step", "time", "pid"}`` -- "checkpoint done".
    The wrapper also treats a newly committed checkpoint (step above
    ``baseline_step``) or the child's exit as done.
``outcome.json`` (wrapper, at exit; read by the epilog as root)
    ``{"job_id", "restart_count", "reason", "evidence", "signal_time",
    "checkpointed", "checkpoint_step", "checkpoint_time", "requeued",
    "self_requeues", "exit_code", "time"}``

``run`` is ``<job id>.<restart count>``, so a file left by an earlier run of
the same job is never mistaken for this run's.
"""

from __future__ import annotations

import json
import os
from typing import Any

from slurm_pool.checkpoint.store import atomic_write

#: ``slurm-pool run`` (and :meth:`Checkpointer.exit`) exit with this after a
#: checkpoint when the job should be requeued; list it in RequeueExit.
EXIT_REQUEUE = 85
#: ``slurm-pool run`` gave up: the time limit came and the self-requeue budget
#: (``max_self_requeues``) is spent.
EXIT_REQUEUE_LIMIT = 86

CONTROL_DIR = ".slurm-pool"
REQUEST = "request.json"
ACK = "ack.json"
OUTCOME = "outcome.json"


def run_id(job_id: str | None, restart_count: int) -> str:
    return f"{job_id or 'local'}.{restart_count}"


def path(checkpoint_dir: str, name: str) -> str:
    return os.path.join(checkpoint_dir, CONTROL_DIR, name)


def write(checkpoint_dir: str, name: str, data: dict[str, Any]) -> None:
    os.makedirs(os.path.join(checkpoint_dir, CONTROL_DIR), 0o700, exist_ok=True)
    atomic_write(path(checkpoint_dir, name), json.dumps(data, sort_keys=True).encode() + b"\n", 0o644)


def read(checkpoint_dir: str, name: str) -> dict[str, Any] | None:
    try:
        with open(path(checkpoint_dir, name), "rb") as fh:
            data = json.loads(fh.read(65536))
    except (OSError, ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


def remove(checkpoint_dir: str, name: str) -> None:
    try:
        os.unlink(path(checkpoint_dir, name))
    except OSError:
        pass
