"""Optional PyTorch helpers; torch is imported only when these are called."""

from __future__ import annotations

import io
from typing import Any, Mapping

from slurm_pool.checkpoint.api import Checkpointer
from slurm_pool.checkpoint.store import CheckpointInfo

TORCH_FILE = "state.pt"


def _torch() -> Any:
    try:
        import torch
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("save_torch/load_torch need PyTorch; plain bytes work without it") from exc
    return torch


def save_torch(
    ck: Checkpointer, step: int, obj: Any, *, name: str = TORCH_FILE, meta: Mapping[str, Any] | None = None
) -> CheckpointInfo:
    """``torch.save(obj)`` into a checkpoint for ``step`` (e.g. a dict of state_dicts)."""
    torch = _torch()
    return ck.save(step, {name: lambda fh: torch.save(obj, fh)}, meta=meta)


def load_torch(
    ck: Checkpointer,
    info: CheckpointInfo | None = None,
    *,
    name: str = TORCH_FILE,
    map_location: Any = "cpu",
    weights_only: bool = False,
) -> Any:
    """The object saved by :func:`save_torch` (None when there is no checkpoint)."""
    torch = _torch()
    data = ck.load(info, name)
    if data is None:
        return None
    return torch.load(io.BytesIO(data), map_location=map_location, weights_only=weights_only)
