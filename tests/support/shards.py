"""The example pool with GPU shards: node group b shares its H100s, 4 shards each, and a dev tier routes to them."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "pool.yaml"

DEV_TIER = {
    "name": "dev",
    "description": "Small inference and development jobs on a shard of a shared GPU.",
    "priority": 300,
    "preempt": ["scavenger", "k8s-lend"],
    "preempt_mode": "requeue",
    "grace_time": 20,
    "usage_factor": 0.25,
    "policy": {"gpu_shards": 1, "max_gpus_per_job": 1, "require_time_limit": True},
}
DEV_PARTITION = {"name": "dev", "nodes": ["b"], "tier": "dev", "priority_tier": 30, "max_time": "08:00:00"}


def shard_spec(example: Path = EXAMPLE) -> dict[str, Any]:
    """The example spec as data, with shards on group b and the dev tier (last, so indexes stay)."""
    spec = yaml.safe_load(example.read_text())
    spec["node_groups"][1]["gpus"]["shards"] = 4
    spec["tiers"].append(copy.deepcopy(DEV_TIER))
    next(t for t in spec["tiers"] if t["name"] == "guaranteed")["preempt"].append("dev")
    spec["partitions"].append(copy.deepcopy(DEV_PARTITION))
    for proj in spec["projects"]:
        if "guaranteed" in proj["tiers"]:
            proj["tiers"].append("dev")
    return spec


def shard_spec_text() -> str:
    return yaml.safe_dump(shard_spec(), sort_keys=False)
