"""``sacct --json`` job records for the simulator's history tests."""

from __future__ import annotations

from typing import Any


def gpu_job(job_id: int, account: str, submit: int, end: int, gpus: int) -> dict[str, Any]:
    """A job that started when it was submitted and held ``gpus`` untyped GPUs until ``end``."""
    return {
        "job_id": job_id,
        "account": account,
        "time": {"submission": submit, "start": submit, "end": end},
        "tres": {"allocated": [{"type": "gres", "name": "gpu", "count": gpus}]},
    }
