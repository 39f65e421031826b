"""Issue 33 on real Slurm: a site that already runs Slurm adopts the pool without handing it the cluster.

The site boots first with its own slurm.conf (a CPU partition on CPU-only
nodes), job_submit.lua, prolog, and QOS, accounts and users in slurmdbd; then
slurm-pool is installed the way docs/adoption.md says (tests/support/brownfield.py).
Afterwards: the site's jobs run as before, untouched by the pool's policy; the
site's job rule and prolog still apply, to the pool's jobs too; borrow,
preempt, checkpoint, requeue and resume work on the GPU nodes; and the site's
accounting objects are byte-identical after ``apply accounting --prune``.

One site cluster per session (``brownfield_site``; a different cluster from the session's), shared by
every ``test_brownfield*`` module.
"""

from __future__ import annotations

import json

import pytest

from tests.support.brownfield import SiteCluster
from tests.support.ckptjob import TRAIN_SCRIPT, job_python, workdir
from tests.support.patience import wait_for

pytestmark = pytest.mark.slurm

STEPS, EVERY, STEP_TIME = 300, 50, 0.1


@pytest.fixture
def site(brownfield_site):
    return brownfield_site


@pytest.fixture
def handle(site):
    site.cancel_all()
    yield site.handle
    site.cancel_all()


def _job(handle, job: int, fmt: str) -> str:
    """A field of a job as slurmctld has it (it keeps finished jobs for MinJobAge; sacct lags, and keeps
    comments only with AccountingStoreFlags=job_comment)."""
    return handle.run(["squeue", "-h", "-t", "all", "-j", str(job), "-o", fmt], check=True).stdout.strip()


def _mark(site: SiteCluster, job: int) -> bool:
    return (site.marks / str(job)).exists()


def test_the_site_needed_settings_before_and_has_them_after(site):
    assert "PreemptType" in site.missing_before and "AccountingStorageTRES" in site.missing_before
    assert site.missing_settings() == []


def test_site_job_in_site_partition_runs_untouched(site, handle):
    job = handle.sbatch("-o", "/dev/null", user="dave", script="#!/bin/sh\ntrue\n")
    assert handle.wait_state(job, ["COMPLETED"], timeout=60) == "COMPLETED"
    assert _job(handle, job, "%P") == "batch"
    assert _job(handle, job, "%a") == "physics"
    assert _job(handle, job, "%k") == "site-policy"
    wait_for(lambda: _mark(site, job), 30, "the site's prolog mark")


def test_pool_user_with_site_default_account_runs_site_job(site, handle):
    """alice was the site's user first: without a partition her job is still the site's."""
    job = handle.sbatch("-o", "/dev/null", user="alice", script="#!/bin/sh\ntrue\n")
    handle.wait_state(job, ["COMPLETED"], timeout=60)
    assert _job(handle, job, "%P") == "batch" and _job(handle, job, "%a") == "physics"


def test_pool_job_is_routed_and_runs_both_prologs(site, handle):
    job = handle.sbatch("-p", "a-owner", "--gres=gpu:1", "-o", "/dev/null", user="alice", script="#!/bin/sh\ntrue\n")
    assert handle.wait_state(job, ["COMPLETED"], timeout=90) == "COMPLETED"
    assert _job(handle, job, "%a") == "proja"
    assert _job(handle, job, "%q") == "guaranteed"
    assert _job(handle, job, "%k") == "site-policy"
    wait_for(lambda: _mark(site, job), 30, "the site's prolog mark on a pool node")
    node = _job(handle, job, "%N")
    outcomes = site.state / "node-state" / node / "outcomes.jsonl"
    wait_for(
        lambda: (
            outcomes.exists() and any(json.loads(x)["job_id"] == str(job) for x in outcomes.read_text().splitlines())
        ),
        30,
        "the pool's epilog to record the job",
    )


@pytest.mark.parametrize(
    "args,user,says",
    [
        (("--comment=forbidden",), "dave", "site policy: the comment 'forbidden' is forbidden here"),
        (("-p", "a-owner", "--gres=gpu:1", "--comment=forbidden"), "alice", "site policy"),
        (("-p", "shared", "-A", "physics", "--gres=gpu:1", "--time=5"), "dave", "is not a project of this pool"),
        (("-p", "a-owner,batch", "--gres=gpu:1"), "alice", "a job may not mix the pool's partitions with the site's"),
    ],
)
def test_refusals(site, handle, args, user, says):
    res = handle.run(["sbatch", "--parsable", f"--uid={user}", *args, "--wrap", "true"])
    assert not res.ok, res.stdout
    assert says in res.stderr, res.stderr


def test_borrow_preempt_checkpoint_requeue_resume(site, handle):
    work = workdir("brownfield")
    py = job_python()
    log = work / "train.out"
    victim = handle.sbatch(
        "-p",
        "shared",
        "--qos=shared",
        "-A",
        "projb",
        "-w",
        "a-gpu1",
        "--gres=gpu:2",
        "--time=30",
        "--requeue",
        "--signal=B:USR1@30",
        "--open-mode=append",
        "-o",
        str(log),
        "-D",
        str(work),
        user="bob",
        script=TRAIN_SCRIPT.format(
            repo=work / "lib", py=py, train=work / "train_sim.py", steps=STEPS, every=EVERY, dt=STEP_TIME
        ),
    )
    handle.wait_state(victim, ["RUNNING"], timeout=120)
    wait_for(lambda: log.exists() and "train_sim: checkpoint " in log.read_text(), 90, "a first checkpoint")
    owner = handle.sbatch(
        "-p", "a-owner", "-w", "a-gpu1", "--gres=gpu:2", "-o", "/dev/null", user="alice", script="#!/bin/sh\nsleep 2\n"
    )
    handle.wait_state(victim, ["PENDING", "REQUEUED"], timeout=60)
    handle.wait_state(owner, ["COMPLETED"], timeout=90)
    handle.release_begin_time(victim)
    handle.wait_state(victim, ["COMPLETED"], timeout=STEPS * STEP_TIME + 300)
    text = log.read_text()
    starts = [line for line in text.splitlines() if line.startswith("train_sim: start ")]
    assert len(starts) == 2 and "restart=1" in starts[1], text
    resumed = int(starts[1].split("resume_step=")[1].split()[0]) if "resume_step=" in starts[1] else 0
    assert resumed >= EVERY, text  # it went on from its checkpoint, not from step 0
    assert "train_sim: done " in text


def test_accounting_left_the_site_objects_byte_identical(site):
    """After adoption (two `apply accounting --prune` runs) and once more now, every pre-existing row is the same."""
    again = site.apply_accounting()
    assert site.snapshot() == site.before, (site.adoption, again)
    users = site.handle.run(["sacctmgr", "-P", "-n", "show", "user", "alice", "format=DefaultAccount"]).stdout
    assert users.strip() == "physics"
