"""Issue 15, check 2: ``mig apply --controls ssh`` against a real sshd and the real cluster.

A real sshd (Debian's openssh-server) listens on a loopback port with key
authentication, and the client config maps the nodes' names to it.  The
remote NodeControl then drives node c-gpu1 as it would a real one: Slurm's
commands here; nvidia-smi, gres.conf and the restart over ClusterShell's ssh.
The node's nvidia-smi is the local cluster's emulated one (its GPUs are
emulated), writing device files where a real node has them.  Slurm takes the
new GRES by ``scontrol reconfigure`` on 26.05 and by restarting slurmctld and
the node's slurmd on 22.05 (Fact ``reconfigure_restarts_daemons``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from slurm_pool.localcluster.mig import EmulatedMigBackend
from tests.support.patience import wait_for
from tests.support.sshd import start_sshd

pytestmark = pytest.mark.slurm

NODE = "c-gpu1"
OURS = "slurm-pool: mig reconfigure"


@pytest.fixture(scope="module")
def sshd(slurm_cluster, tmp_path_factory):
    server = start_sshd(tmp_path_factory.mktemp("sshd"), slurm_cluster.cluster.nodes())
    yield server
    server.stop()


@pytest.fixture
def restore(cluster):
    """Give the next tests the cluster as the spec has it: layouts, configs, no drain."""
    yield
    c = cluster.cluster
    (c.layout.root / "nodedev" / NODE / "fail-cgi").unlink(missing_ok=True)
    for node in list(c.device_layouts()):
        (c.layout.root / "dev" / node / "mig.json").unlink()
    c.write_configs()
    c.restart_slurmd(NODE)
    if cluster.slurm.node(NODE).drained:
        cluster.slurm.resume(NODE)
    assert "1g.5gb:7" not in cluster.slurm.node(NODE).gres


def _env(cluster) -> dict[str, str]:
    return {**os.environ, **cluster.env, "SLURM_POOL_STATE_DIR": str(cluster.cluster.layout.root)}


def _plan(cluster, tmp_path: Path) -> Path:
    """Seven 1g.5gb instances: the planner must repartition GPU(s) of c-gpu1."""
    plan = tmp_path / "plan.json"
    argv = ["mig", "plan", "--spec", str(cluster.cluster.spec_path), "--model", "A100-40GB"]
    argv += ["--demand", "1g.5gb=7", "--json", "--out", str(plan)]
    res = subprocess.run([sys.executable, "-m", "slurm_pool", *argv], capture_output=True, text=True, env=_env(cluster))
    assert res.returncode == 0, res.stderr
    assert [g["node"] for g in json.loads(plan.read_text())["gpus"] if g["node"] == NODE]
    return plan


def _apply_argv(cluster, sshd, plan: Path) -> list[str]:
    state = cluster.cluster.layout.root
    etc = cluster.cluster.layout.etc
    argv = [sys.executable, "-m", "slurm_pool", "mig", "apply", "--plan", str(plan), "--controls", "ssh"]
    argv += ["--ssh-options", sshd.ssh_options, "--timeout", "180"]
    argv += ["--nvidia-smi", f"{state}/bin/nvidia-smi-{{node}}", "--dev-dir", f"{state}/nodedev/{{node}}"]
    argv += ["--gres-conf", str(etc / "gres.conf"), "--slurm-conf", str(etc / "slurm.conf")]
    if not cluster.version.has("reconfigure_restarts_daemons"):
        # The site's `systemctl restart slurmctld` and `... slurmd`: here one command restarts both.
        restart = f"{sys.executable} -m slurm_pool cluster restart --state-dir {state} --node {{node}}"
        argv += ["--restart-slurmctld", "", "--restart-slurmd", restart]
    return argv


def _layouts(cluster) -> dict:
    return EmulatedMigBackend(cluster.cluster).layouts(NODE)


def test_ssh_apply_drains_repartitions_verifies_resumes(cluster, sshd, tmp_path, restore):
    tmp_path.chmod(0o777)
    for parent in list(tmp_path.parents)[:3]:
        parent.chmod(parent.stat().st_mode | 0o011)
    plan = _plan(cluster, tmp_path)
    res = subprocess.run(
        _apply_argv(cluster, sshd, plan), capture_output=True, text=True, env=_env(cluster), timeout=600
    )
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"{NODE}: applied" in res.stdout
    steps = res.stdout.split(f"{NODE}: applied", 1)[1]
    order = [f"drain {NODE}", f"wait until {NODE} is idle", "set GPU", "verify layouts", "write gres.conf", "restart"]
    order.append(f"resume {NODE}")
    assert [steps.index(s) for s in order] == sorted(steps.index(s) for s in order), steps

    node = cluster.slurm.node(NODE)
    assert not node.drained, node
    mine = [ln for ln in (cluster.cluster.layout.etc / "gres.conf").read_text().splitlines() if NODE in ln]
    assert mine and all(f"/nodedev/{NODE}/" in ln for ln in mine), mine  # written over ssh, device paths of the node
    small = [p for p in node.gres.split(",") if "1g.5gb" in p]
    assert small and int(small[0].split(":")[2].split("(")[0]) >= 7, node.gres
    job = cluster.sbatch(
        "-p",
        "c-owner",
        "--qos=guaranteed",
        "-A",
        "projc",
        f"--gres=gpu:{small[0].split(':')[1]}:1",
        "-o",
        str(tmp_path / "out.txt"),
        user="carol",
        script="#!/bin/bash\necho gpus=$CUDA_VISIBLE_DEVICES\n",
    )
    assert cluster.wait_state(job, ["COMPLETED", "FAILED"], timeout=90) == "COMPLETED"
    assert "gpus=" in (tmp_path / "out.txt").read_text()


def test_a_human_drain_set_mid_apply_survives(cluster, sshd, tmp_path, restore):
    tmp_path.chmod(0o777)
    plan = _plan(cluster, tmp_path)
    hold = cluster.sbatch(
        "-p", "c-owner", "--qos=guaranteed", "-A", "projc", "-w", NODE, "-o", "/dev/null",
        user="carol", script="#!/bin/bash\nsleep 600\n",
    )  # fmt: skip
    cluster.wait_state(hold, ["RUNNING"], timeout=60)
    apply = subprocess.Popen(
        _apply_argv(cluster, sshd, plan), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(cluster)
    )
    try:
        wait_for(lambda: cluster.slurm.node(NODE).reason.startswith(OURS), 120, "apply to drain the node")
        cluster.run(["scontrol", "update", f"NodeName={NODE}", "State=DRAIN", "Reason=admin: fan check"], check=True)
        cluster.run(["scancel", str(hold)], check=True)
        out, err = apply.communicate(timeout=600)
    finally:
        apply.kill()
    assert apply.returncode == 0, out + err
    assert "not resumed: drained by someone else meanwhile: admin: fan check" in out, out
    node = cluster.slurm.node(NODE)
    assert node.drained and node.reason == "admin: fan check", node


def test_a_failing_repartition_leaves_the_node_drained_and_the_gpus_as_they_were(cluster, sshd, tmp_path, restore):
    tmp_path.chmod(0o777)
    plan = _plan(cluster, tmp_path)
    before, gres_before = _layouts(cluster), cluster.slurm.node(NODE).gres
    fault = cluster.cluster.layout.root / "nodedev" / NODE / "fail-cgi"
    fault.parent.mkdir(parents=True, exist_ok=True)
    fault.write_text("1")  # the driver refuses the first create: the new layout
    res = subprocess.run(
        _apply_argv(cluster, sshd, plan), capture_output=True, text=True, env=_env(cluster), timeout=600
    )
    assert res.returncode == 1, res.stdout + res.stderr
    assert f"{NODE}: failed (set GPU" in res.stdout and "Insufficient Resources" in res.stdout, res.stdout
    assert "rolled back GPU" in res.stdout, res.stdout
    assert fault.read_text() == "0"  # the fault was hit, and the roll back ran the driver again
    assert _layouts(cluster) == before
    node = cluster.slurm.node(NODE)
    assert node.drained and node.reason.startswith(f"{OURS} failed: set GPU"), node
    assert node.gres == gres_before  # nothing was written: Slurm's view is the one it had
