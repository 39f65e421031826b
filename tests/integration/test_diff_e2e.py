"""``slurm-pool diff`` against the real session cluster (22.05, and 26.05 with SLURM_POOL_TEST_SLURM=26.05).

The cluster's own spec renders what the cluster runs and has installed: no difference, exit 0.
The same spec with one partition's GraceTime changed shows exactly that line, exit 1.
The local cluster keeps checkpoints in its state directory (it sets ``checkpoint.base_dir``, which
node.conf and plugstack.conf carry), so "its own spec" is the spec file with that directory.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.slurm

REPO = Path(__file__).resolve().parents[2]


def slurm_pool_diff(cluster, spec: Path, *args: str) -> subprocess.CompletedProcess:
    full = {**os.environ, **cluster.env, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "slurm_pool", "diff", "--spec", str(spec), *args],
        env=full,
        capture_output=True,
        text=True,
        timeout=120,
    )


def own_spec(cluster) -> dict:
    """The cluster's spec as it renders its files: with the state directory's checkpoint base."""
    data = yaml.safe_load(cluster.cluster.spec_path.read_text())
    data.setdefault("checkpoint", {})["base_dir"] = str(cluster.cluster.spec.checkpoint.base_dir)
    return data


def test_the_cluster_own_spec_shows_nothing(cluster, tmp_path):
    spec = tmp_path / "pool.yaml"
    spec.write_text(yaml.safe_dump(own_spec(cluster), sort_keys=False))
    res = slurm_pool_diff(cluster, spec)
    assert (res.returncode, res.stdout) == (0, ""), res.stdout + res.stderr


@pytest.mark.parametrize("partition, grace", [("shared", 30), ("k8s-lend", 45)])
def test_a_changed_grace_time_is_the_only_line(cluster, tmp_path, partition, grace):
    data = own_spec(cluster)
    part = next(p for p in data["partitions"] if p["name"] == partition)
    tier = next(t for t in data["tiers"] if t["name"] == part["tier"])
    part["grace_time"] = grace
    spec = tmp_path / "pool.yaml"
    spec.write_text(yaml.safe_dump(data, sort_keys=False))

    res = slurm_pool_diff(cluster, spec)
    assert res.returncode == 1, res.stdout + res.stderr
    assert res.stdout.splitlines() == [f"partition {partition}: GraceTime {tier.get('grace_time', 0)} -> {grace}"]

    res = slurm_pool_diff(cluster, spec, "--json")
    assert res.returncode == 1, res.stdout + res.stderr
    assert json.loads(res.stdout) == [
        {
            "kind": "partition",
            "name": partition,
            "field": "GraceTime",
            "cluster": str(tier.get("grace_time", 0)),
            "rendered": str(grace),
        }
    ]
