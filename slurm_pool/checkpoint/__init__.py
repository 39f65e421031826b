"""Checkpoint-on-preempt for jobs in the pool.

* :class:`Checkpointer` -- the training-side API (signals, reason, time left,
  atomic save, resume); see :mod:`slurm_pool.checkpoint.api`.
* :func:`latest`, :func:`load`, :func:`write` -- the on-disk format
  (:mod:`slurm_pool.checkpoint.store`).
* ``slurm-pool run -- CMD`` -- the wrapper for batch scripts
  (:mod:`slurm_pool.checkpoint.supervisor`).
* :func:`save_torch`, :func:`load_torch` -- optional PyTorch helpers.

Names are loaded lazily so that the node hooks can import
:mod:`slurm_pool.checkpoint.slurmjob` without the rest.
"""

from __future__ import annotations

from typing import Any

_EXPORTS = {
    "Checkpointer": "api",
    "checkpointer": "api",
    "restart_count": "api",
    "EXIT_REQUEUE": "control",
    "EXIT_REQUEUE_LIMIT": "control",
    "CheckpointInfo": "store",
    "CorruptCheckpoint": "store",
    "latest": "store",
    "load": "store",
    "write": "store",
    "atomic_write": "store",
    "list_checkpoints": "store",
    "save_torch": "torch_helpers",
    "load_torch": "torch_helpers",
    "PREEMPT": "slurmjob",
    "TIMEOUT": "slurmjob",
    "TERMINATE": "slurmjob",
    "CHECKPOINT": "slurmjob",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    mod = _EXPORTS.get(name)
    if mod is None:
        raise AttributeError(f"module 'slurm_pool.checkpoint' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"slurm_pool.checkpoint.{mod}"), name)
