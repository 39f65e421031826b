"""Issue 3, check 4: plan, apply on the local cluster, new GRES visible, a job runs on a MIG type.

The emulated A100-40GB GPUs of node c-gpu1 are repartitioned by ``mig apply``
through the same orchestration as real nodes (drain, wait idle, repartition,
rewrite gres.conf/slurm.conf, restart slurmd, resume).  A second apply is a
no-op.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slurm


def _cli(cluster, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, **cluster.env, "SLURM_POOL_STATE_DIR": str(cluster.cluster.layout.root)}
    return subprocess.run(
        [sys.executable, "-m", "slurm_pool", *args], capture_output=True, text=True, env=env, timeout=300
    )


@pytest.fixture
def restore_layouts(cluster):
    """Give the next tests the session cluster as the spec has it: the spec's MIG layouts again."""
    yield
    c = cluster.cluster
    for node in list(c.device_layouts()):
        (c.layout.root / "dev" / node / "mig.json").unlink()
        c.write_configs()
        c.restart_slurmd(node)
    want = {n: cluster.slurm.node(n).gres for n in c.nodes()}
    assert "1g.5gb:7" not in want["c-gpu1"], want


def test_plan_apply_run_on_new_mig_type(cluster, tmp_path, restore_layouts):
    tmp_path.chmod(0o777)
    for parent in list(tmp_path.parents)[:3]:
        parent.chmod(parent.stat().st_mode | 0o011)
    spec_path = str(cluster.cluster.spec_path)
    plan = tmp_path / "plan.json"
    # Demand seven small instances: the planner must repartition GPU(s) of c-gpu1.
    res = _cli(
        cluster,
        "mig",
        "plan",
        "--spec",
        spec_path,
        "--model",
        "A100-40GB",
        "--demand",
        "1g.5gb=7",
        "--json",
        "--out",
        str(plan),
    )
    assert res.returncode == 0, res.stderr
    data = json.loads(plan.read_text())
    assert data["unmet"] in ({}, [], None) or not any(
        data["unmet"].values() if isinstance(data["unmet"], dict) else data["unmet"]
    )

    res = _cli(
        cluster,
        "mig",
        "apply",
        "--plan",
        str(plan),
        "--controls",
        "slurm_pool.localcluster.mig:controls",
        "--timeout",
        "60",
    )
    assert res.returncode == 0, res.stdout + res.stderr
    assert "c-gpu1: applied" in res.stdout

    node = cluster.slurm.node("c-gpu1")
    assert "DRAIN" not in node.state, node
    mig_type = [p for p in node.gres.split(",") if "1g.5gb" in p]
    assert mig_type, node.gres
    typ, count = mig_type[0].split(":")[1], int(mig_type[0].split(":")[2].split("(")[0])
    assert count >= 7, node.gres

    job = cluster.sbatch(
        "-p",
        "c-owner",
        "--qos=guaranteed",
        "-A",
        "projc",
        f"--gres=gpu:{typ}:1",
        "-o",
        str(tmp_path / "out.txt"),
        user="carol",
        script="#!/bin/bash\necho gpus=$CUDA_VISIBLE_DEVICES\n",
    )
    assert cluster.wait_state(job, ["COMPLETED", "FAILED"], timeout=60) == "COMPLETED"

    again = _cli(cluster, "mig", "apply", "--plan", str(plan), "--controls", "slurm_pool.localcluster.mig:controls")
    assert again.returncode == 0, again.stderr
    assert "c-gpu1: applied" not in again.stdout
    assert "DRAIN" not in cluster.slurm.node("c-gpu1").state
