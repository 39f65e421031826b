"""The example pool with a notebook tier: JupyterHub servers on group c's 1g.5gb MIG slices."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "pool.yaml"

NOTEBOOK_TIER = {
    "name": "notebook",
    "description": "JupyterHub notebook servers on a MIG slice; not preempted.",
    "priority": 400,
    "preempt": ["scavenger", "k8s-lend"],
    "preempt_mode": "off",
    "usage_factor": 0.5,
    "max_tres_per_user": {"gres/gpu": 1},
}
NOTEBOOK_PARTITION = {
    "name": "notebook",
    "nodes": ["c"],
    "tier": "notebook",
    "priority_tier": 40,
    "max_time": "12:00:00",
}
NOTEBOOKS = {"partition": "notebook", "gpu": {"mig": "1g.5gb"}, "time_limit": "01:00:00", "idle_timeout": 60,
             "memory_mb": 1000}  # fmt: skip


def notebook_spec(example: Path = EXAMPLE, **notebooks: Any) -> dict[str, Any]:
    """The example spec as data, with the notebook tier appended last (so indexes stay) and ``notebooks``."""
    spec = yaml.safe_load(example.read_text())
    spec["tiers"].append(copy.deepcopy(NOTEBOOK_TIER))
    spec["partitions"].append(copy.deepcopy(NOTEBOOK_PARTITION))
    for proj in spec["projects"]:
        if "guaranteed" in proj["tiers"]:
            proj["tiers"].append("notebook")
    spec["notebooks"] = {**copy.deepcopy(NOTEBOOKS), **notebooks}
    return spec


def notebook_spec_text(**notebooks: Any) -> str:
    return yaml.safe_dump(notebook_spec(**notebooks), sort_keys=False)
