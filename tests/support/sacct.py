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


def finished(doc: dict[str, Any]) -> dict[str, Any]:
    """A recorded ``sacct --json`` document with its jobs as finished ones (26.05's were recorded running:
    end 0), its times as plain numbers; changed in place and returned."""
    for k, job in enumerate(doc["jobs"]):
        t = job["time"]
        for key in ("submission", "start", "end"):
            if isinstance(t.get(key), dict):
                t[key] = t[key]["number"]
        t["end"] = t["end"] or t["start"] + 10 + k
    return doc
