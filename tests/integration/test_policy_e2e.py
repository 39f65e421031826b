"""Issue 4 end to end: job_submit.lua and the SPANK plugin in the real local cluster.

Every job goes through the real sbatch (with the plugin loaded from
plugstack.conf) and the real slurmctld (with the rendered job_submit.lua).
Needs the plugin built first: ``make -C spank``.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import time
from pathlib import Path

import pytest

from slurm_pool.policy.tables import build_tables

pytestmark = pytest.mark.slurm

HOLD = "#!/bin/bash\ntrue\n"


def submit(cluster, *args: str, user: str = "alice", script: str = HOLD):
    """sbatch as ``user``; returns the Result (no exception on rejection)."""
    argv = ["sbatch", "--parsable", f"--uid={user}", *args]
    return cluster.cluster.runner.run(argv, input=script, check=False, timeout=60)


def job_id(res) -> int:
    assert res.returncode == 0, res.stderr
    return int(res.stdout.strip().split(";")[0])


def show(cluster, job: int) -> dict[str, str]:
    out = cluster.run(["scontrol", "show", "job", "-o", str(job)], check=True).stdout
    return dict(f.split("=", 1) for f in out.split() if "=" in f)


@pytest.fixture(scope="module", autouse=True)
def plugin_built():
    if not (Path(__file__).resolve().parents[2] / "spank" / "slurm_pool_spank.so").exists():
        pytest.fail("build the SPANK plugin first: make -C spank")


def test_routes_to_the_projects_default_tier(cluster):
    job = job_id(submit(cluster, "--hold", "-A", "proja"))
    info = show(cluster, job)
    assert (info["Partition"], info["QOS"], info["Account"]) == ("a-owner", "guaranteed", "proja")


def test_account_filled_in_for_the_user(cluster):
    info = show(cluster, job_id(submit(cluster, "--hold", user="bob")))
    assert (info["Account"], info["Partition"], info["QOS"]) == ("projb", "b-owner", "guaranteed")


def test_qos_routes_to_its_partition(cluster):
    info = show(cluster, job_id(submit(cluster, "--hold", "-A", "proja", "--qos=shared", "-t", "10")))
    assert (info["Partition"], info["QOS"]) == ("shared", "shared")


def test_forbidden_tier_lists_the_allowed_ones(cluster):
    res = submit(cluster, "--hold", "-A", "proja", "--qos=k8s-lend")
    assert res.returncode != 0
    assert (
        "slurm-pool: account 'proja' may not use tier 'k8s-lend'. Tiers account 'proja' may use: guaranteed "
        "(partition a-owner), shared (partition shared), scavenger (partition scavenger)."
    ) in res.stderr
    assert "Access/permission denied" in res.stderr


def test_someone_elses_partition(cluster):
    res = submit(cluster, "--hold", "-A", "proja", "-p", "b-owner")
    assert res.returncode != 0 and "may not use partition 'b-owner'" in res.stderr


def test_time_limit_required(cluster):
    res = submit(cluster, "--hold", "-A", "proja", "--qos=shared")
    assert res.returncode != 0 and "tier 'shared' requires a time limit" in res.stderr


@pytest.mark.parametrize("declare", [["--checkpoint"], ["--checkpoint-signal=USR2"], ["--signal=B:USR1@30"]])
def test_checkpoint_contract_met(cluster, declare):
    info = show(cluster, job_id(submit(cluster, "--hold", "-A", "proja", "--qos=scavenger", *declare)))
    assert (info["Partition"], info["Requeue"]) == ("scavenger", "1")


def test_checkpoint_declared_in_script(cluster):
    script = "#!/bin/bash\n#SBATCH --signal=B:USR1@30\ntrue\n"
    assert job_id(submit(cluster, "--hold", "-A", "proja", "--qos=scavenger", script=script))


def test_checkpoint_contract_rejects(cluster):
    res = submit(cluster, "--hold", "-A", "proja", "--qos=scavenger")
    assert res.returncode != 0
    assert "tier 'scavenger' is preemptible" in res.stderr and "To comply, submit with --checkpoint[=DIR]" in res.stderr
    res = submit(cluster, "--hold", "-A", "proja", "--qos=scavenger", "--checkpoint", "--no-requeue")
    assert res.returncode != 0 and "its requeue is turned off (--no-requeue)" in res.stderr


def test_add_requeue_warns_and_requeues(cluster):
    res = submit(cluster, "--hold", "-A", "proja", "--qos=shared", "-t", "10", "--no-requeue")
    info = show(cluster, job_id(res))
    assert info["Requeue"] == "1"
    assert "--no-requeue was overridden" in res.stderr and "declares no checkpointing" in res.stderr


def test_unknown_gpu_type(cluster):
    res = submit(cluster, "--hold", "-A", "projc", "--gres=gpu:v100:1", user="carol")
    assert res.returncode != 0 and "GPU type 'v100' does not exist in this pool. Available types: " in res.stderr


def test_right_sized_to_mig(cluster):
    tables = build_tables(cluster.spec, cluster.version)
    part = next(p for p in tables.partitions if p.name == "c-owner")
    sizes = {g.name: g.mem_mb for g in tables.gpu_types}
    want = next(t for t in tables.mig_by_size if t in part.gpu_types and sizes[t] >= 5120)
    res = submit(cluster, "--hold", "-A", "projc", "--gres=gpu:1", "--gpu-mem=5G", user="carol")
    job = job_id(res)
    assert f"this job gets one {want}" in res.stderr
    assert f"gpu:{want}:1" in cluster.job_field(job, "%b")


def test_bad_gpu_mem_stops_sbatch(cluster):
    res = submit(cluster, "--hold", "-A", "projc", "--gres=gpu:1", "--gpu-mem=lots", user="carol")
    assert res.returncode != 0 and "slurm-pool: --gpu-mem: 'lots' is not a size" in res.stderr


def test_modify_guard(cluster):
    job = job_id(submit(cluster, "--hold", "-A", "proja"))
    for change in (["QOS=k8s-lend"], ["Partition=b-owner"], ["QOS=scavenger"], ["Partition=shared"]):
        res = cluster.run(["scontrol", "update", f"JobId={job}", *change])
        assert res.returncode != 0, change
    assert show(cluster, job)["Partition"] == "a-owner"
    ok = job_id(submit(cluster, "--hold", "-A", "proja", "--checkpoint"))
    cluster.run(["scontrol", "update", f"JobId={ok}", "QOS=scavenger"], check=True)
    info = show(cluster, ok)
    assert (info["Partition"], info["QOS"], info["Requeue"]) == ("scavenger", "scavenger", "1")


def test_checkpoint_directory_and_task_environment(cluster):
    workdir = Path("/tmp") / f"sp-policy-{int(time.time() * 1000)}"
    workdir.mkdir(mode=0o777)
    workdir.chmod(0o777)
    out = workdir / "env.txt"
    script = "#!/bin/bash\nenv | grep '^SLURM_POOL_' | sort\nsrun printenv SLURM_POOL_CHECKPOINT_DIR > step.txt\n"
    job = job_id(
        submit(
            cluster, "-A", "proja", "--checkpoint", "--gpu-mem=2G", "-o", str(out), "-D", str(workdir), script=script
        )
    )
    assert cluster.wait_state(job, ["COMPLETED", "FAILED"], timeout=60) == "COMPLETED"
    env = dict(line.split("=", 1) for line in out.read_text().splitlines() if "=" in line)
    ckpt = Path(env["SLURM_POOL_CHECKPOINT_DIR"])
    assert ckpt.parts[-2:] == ("alice", str(job))
    assert (workdir / "step.txt").read_text().strip() == str(ckpt)  # steps inside the job agree
    assert ckpt.is_dir() and ckpt.stat().st_uid == pwd.getpwnam("alice").pw_uid
    assert oct(ckpt.stat().st_mode & 0o777) == oct(0o700)
    assert env["SLURM_POOL_CHECKPOINT"] == "1" and env["SLURM_POOL_GPU_MEM_MB"] == "2048"
    assert env["SLURM_POOL_CHECKPOINT_SIGNAL"] == cluster.spec.checkpoint.signal.removeprefix("SIG")
    assert env["SLURM_POOL_CHECKPOINT_WARN_SECONDS"] == str(cluster.spec.checkpoint.warn_seconds)
    os.rmdir(ckpt)
    with contextlib.suppress(OSError):
        os.rmdir(ckpt.parent)
