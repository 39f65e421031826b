"""``slurm-pool status`` against the real local cluster.

A scavenger job and a lend job run, a shared-tier job waits (held), and a
node is drained by a person.  ``status --json`` is compared with a snapshot of
the node records (``sinfo --json`` on 22.05, ``scontrol show nodes --json``
from 23.02) and ``squeue --json`` read just before and just after it, taken
when those two reads agree; and with what the test itself set up.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from slurm_pool.adapters.gres import gpu_counts
from slurm_pool.adapters.records import JobRecord, NodeRecord, node_command, parse_jobs, parse_nodes
from slurm_pool.metrics.parse import job_nodes
from slurm_pool.render.context import gpu_units
from slurm_pool.spec.hosts import expand
from tests.support.patience import wait_for

pytestmark = pytest.mark.slurm

REPO = Path(__file__).resolve().parents[2]
SLEEP = "#!/bin/bash\nsleep 120\n"
STATES = ("allocated", "lent", "idle", "drained", "down")


def status(cluster, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, **cluster.env, "PYTHONPATH": str(REPO), "COLUMNS": "160"}
    return subprocess.run(
        [sys.executable, "-m", "slurm_pool.cli", "status", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def snapshot(cluster) -> tuple[list[NodeRecord], list[JobRecord]]:
    """Node records and squeue --json, straight from the commands."""
    nodes = cluster.run(node_command(cluster.version), check=True).stdout
    jobs = cluster.run(["squeue", "--json"], check=True).stdout
    return parse_nodes(nodes), parse_jobs(jobs)


def summary(snap: tuple[list[NodeRecord], list[JobRecord]]) -> Any:
    """What status reports on, to tell whether two reads saw the same pool."""
    nodes, jobs = snap
    return (
        sorted((n.name, str(n.state), n.gres, n.gres_used) for n in nodes),
        sorted((j.job_id, str(j.state), j.nodes, j.gpus) for j in jobs),
    )


def consistent_status(cluster, timeout: float = 30) -> tuple[dict, tuple[list[NodeRecord], list[JobRecord]]]:
    """``status --json`` between two snapshots that agree."""

    def once():
        before = snapshot(cluster)
        res = status(cluster, "--json")
        assert res.returncode == 0, res.stderr
        after = snapshot(cluster)
        return (json.loads(res.stdout), after) if summary(before) == summary(after) else None

    return wait_for(once, timeout, "two equal snapshots around status --json")


def test_status_json_matches_sinfo_and_squeue(cluster):
    spec = cluster.spec
    units = {n: len(gpu_units(g)) for g in spec.node_groups for n in expand(g.hosts)}
    total = sum(units.values())
    common = ["-o", "/dev/null", "-D", "/tmp"]
    job = cluster.sbatch(
        "-p", "scavenger", "--qos=scavenger", "-A", "proja", "-w", "a-gpu1", "--gres=gpu:2", "--signal=B:USR1@30",
        *common, user="alice", script=SLEEP,
    )  # fmt: skip
    lend = cluster.sbatch(
        "-p", "k8s-lend", "--qos=k8s-lend", "-A", "k8s-bridge", "-w", "b-gpu1", "--gres=gpu:1",
        *common, user="slurmpool", script=SLEEP,
    )  # fmt: skip
    waiting = cluster.sbatch(
        "-p", "shared", "--qos=shared", "-A", "projb", "-t", "10", "--gres=gpu:2", "--hold",
        *common, user="bob", script=SLEEP,
    )  # fmt: skip
    cluster.wait_state(job, ["RUNNING"], timeout=30)
    cluster.wait_state(lend, ["RUNNING"], timeout=30)
    cluster.wait_state(waiting, ["PENDING"], timeout=30)
    drained = "a-gpu2"
    cluster.run(["scontrol", "update", f"NodeName={drained}", "State=DRAIN", "Reason=[bold]swap a fan"], check=True)
    try:
        wait_for(
            lambda: "DRAIN" in next(n for n in snapshot(cluster)[0] if n.name == drained).state,
            20,
            f"{drained} drained",
        )
        got, (nodes, jobs) = consistent_status(cluster)

        # What the test set up.
        assert got["gpus"]["total"] == total
        assert got["gpus"]["states"] == {
            "allocated": 2,
            "lent": 1,
            "idle": total - 3 - units[drained],
            "drained": units[drained],
            "down": 0,
        }
        assert got["gpus"]["allocated_by_tier"] == {"scavenger": 2}
        assert got["gpus"]["allocated_by_project"] == {"proja": 2}
        assert got["pending"] == {"shared": {"jobs": 1, "gpus": 2}}
        assert got["lent_nodes"] == ["b-gpu1"]
        assert got["jobs"] == {"running": 2, "pending": 1}

        # What Slurm said at that moment, node by node and job by job.
        rows = {n["name"]: n for n in got["nodes"]}
        assert sorted(rows) == sorted(n.name for n in nodes) == sorted(units)
        for node in nodes:
            row = rows[node.name]
            assert row["state"] == str(node.state), node.name
            assert row["total"] == sum(gpu_counts(node.gres).values()) == units[node.name], node.name
            assert row["allocated"] + row["lent"] == sum(gpu_counts(node.gres_used).values()), node.name
            assert sum(row[s] for s in STATES) == row["total"], node.name
        assert rows[drained]["drain_owner"] == "human" and rows[drained]["reason"] == "[bold]swap a fan"
        assert rows["b-gpu1"]["lent"] == 1 and rows["b-gpu1"]["lent_out"]
        assert got["jobs"]["running"] == sum(j.on_node for j in jobs)
        assert got["jobs"]["pending"] == sum(j.waiting for j in jobs)
        assert got["lent_nodes"] == sorted(
            {n for j in jobs if j.partition == "k8s-lend" and j.running for n in job_nodes(j)}
        )
        pending: dict[str, dict[str, int]] = {}
        for j in jobs:
            if j.waiting:
                p = pending.setdefault(j.qos, {"jobs": 0, "gpus": 0})
                p["jobs"] += 1
                p["gpus"] += j.gpus
        assert got["pending"] == pending
        assert abs(got["time"] - time.time()) < 120

        # The tables name every state row and every node with its Slurm state.
        res = status(cluster)
        assert res.returncode == 0, res.stderr
        lines = res.stdout.splitlines()
        for state in (*STATES, "total"):
            assert any(line.startswith(f"│ {state} ") for line in lines), (state, res.stdout)
        for node in nodes:
            assert any(f"│ {node.name} " in line and str(node.state) in line for line in lines), (node.name, res.stdout)
        assert "[bold]swap a fan (human)" in res.stdout
        assert "Lent nodes (k8s-lend): b-gpu1" in res.stdout
        assert "shared" in res.stdout and "scavenger" in res.stdout and "proja" in res.stdout
        assert "GPU-hours by tier, last 24 h" in res.stdout

        # Spot pricing: the scavenger job's GPU time, from sacct, charged at its QOS's UsageFactor in slurmdbd.
        def charged() -> dict | None:
            out = status(cluster, "--json")
            assert out.returncode == 0, out.stderr
            usage = json.loads(out.stdout)["usage"]
            assert "error" not in usage, usage
            return usage if "scavenger" in usage["tiers"] else None

        usage = wait_for(charged, 60, "status to charge the scavenger job's GPU time")
        factors = {t.name: t.usage_factor for t in spec.tiers}
        assert usage["tiers"]["scavenger"]["usage_factor"] == factors["scavenger"] == 0.3
        for tier, row in usage["tiers"].items():
            assert row["usage_factor"] == pytest.approx(factors[tier]), tier
            assert row["charged_gpu_hours"] == pytest.approx(row["gpu_hours"] * row["usage_factor"], abs=2e-4), tier
    finally:
        cluster.run(["scontrol", "update", f"NodeName={drained}", "State=RESUME"])


def test_a_job_name_that_is_not_utf8_breaks_no_command(cluster, tmp_path):
    """``sbatch -J $'\\xff'``, as any user may: status, why and checkpoints prune read it, escaped."""
    name = "x\udcffy\udcfe"  # the bytes 0xff and 0xfe on sbatch's command line (os.fsencode)
    job = cluster.sbatch(
        "-p", "shared", "--qos=shared", "-A", "projb", "-t", "10", "--gres=gpu:1", "--hold", "-J", name,
        "-o", "/dev/null", "-D", "/tmp", user="bob", script=SLEEP,
    )  # fmt: skip
    try:
        cluster.wait_state(job, ["PENDING"], timeout=30)
        got = status(cluster, "--json")
        assert got.returncode == 0 and "Traceback" not in got.stderr, got.stderr
        assert json.loads(got.stdout)["jobs"]["pending"] >= 1
        text = status(cluster)
        assert text.returncode == 0 and "Traceback" not in text.stderr, text.stderr
        why = cluster.cli("why", str(job), "--spec", str(cluster.cluster.spec_path), "--json")
        assert why.returncode == 0 and "Traceback" not in why.stderr, why.stderr
        assert json.loads(why.stdout)["job_id"] == job
        (tmp_path / "bob" / str(job)).mkdir(parents=True)
        prune = cluster.cli("checkpoints", "prune", "--base", str(tmp_path), "--dry-run")
        assert prune.returncode == 0 and "Traceback" not in prune.stderr, prune.stderr
        assert f"keep   {tmp_path}/bob/{job}: job still in the queue" in prune.stdout
        # every reader reads the name the same: the narrow text and the JSON, escaped by the one decoder
        (text_rec,) = [j for j in cluster.slurm.jobs() if j.job_id == job]
        (json_rec,) = [j for j in cluster.slurm.jobs_json() if j.job_id == job]
        assert text_rec.name == json_rec.name == "x\\xffy\\xfe"
    finally:
        cluster.run(["scancel", str(job)])
