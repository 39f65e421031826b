"""``slurm-pool simulate`` on a fresh ``sacct --json`` export of the real local cluster."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slurm

REPO = Path(__file__).resolve().parents[2]


def test_simulate_reads_the_live_accounting(cluster):
    ids = [
        cluster.sbatch(
            "-p",
            "a-owner",
            "--qos=guaranteed",
            "-A",
            "proja",
            "--gres=gpu:2",
            "-o",
            "/dev/null",
            user="alice",
            script="#!/bin/bash\nsleep 2\n",
        ),
        cluster.sbatch(
            "-p",
            "b-owner",
            "--qos=guaranteed",
            "-A",
            "projb",
            "--gres=gpu:1",
            "-o",
            "/dev/null",
            user="bob",
            script="#!/bin/bash\nsleep 1\n",
        ),
    ]
    for job in ids:
        cluster.wait_state(job, ["COMPLETED"], timeout=60)
        cluster.wait_sacct(job, "End", lambda v: v[:1].isdigit())
    export = cluster.run(["sacct", "--json", "-j", ",".join(map(str, ids))], check=True).stdout
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "slurm_pool",
            "simulate",
            "--spec",
            str(REPO / "examples" / "pool.yaml"),
            "--sacct",
            "-",
            "--json",
        ],
        input=export,
        env={**os.environ, **cluster.env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["owner_jobs"] == 2 and out["borrower_jobs"] == 0 and out["skipped"] == {}
    assert out["capacity"] == {"proja": 4, "projb": 2, "projc": 2}
    dedicated = out["results"][0]
    assert dedicated["policy"] == "dedicated" and dedicated["unfinished_owner_jobs"] == 0
    assert 0 < dedicated["utilization"] <= 1
