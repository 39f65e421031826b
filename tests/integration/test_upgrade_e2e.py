"""Upgrade and rollback on the real session cluster, with jobs running throughout (docs/upgrade.md).

The earlier package is built from :data:`EARLIER` (this repository's commit before the release's
changes to ``render`` and ``diff``) with today's packaging (``build.py --source``), the current one
from the checkout.  Both are version 0.1.0, so ``generator_version`` in manifest.json does not tell
their renders apart; the packages' files do (the earlier wheel lacks what came after it), and so
does the manifest: only the current render records ``spec_sha256``.  That key is the whole
difference between the two renders (on 22.05 and 26.05): slurm.conf, gres.conf, job_submit.lua and
the rest are byte-identical, so nothing needs slurmctld restarted and the test restarts nothing.

Steps, as an admin runs them on one host (the packages installed under a scratch root, as dpkg
would: the new package's postinst replaces the venv):

1. a long job (``sleep``, an owner's, never preempted) starts;
2. the earlier package is installed; its venv renders the cluster's spec and applies accounting
   (no change: the cluster already runs that spec); a checkpointing job starts under that venv's
   ``slurm-pool run``;
3. the current package is installed over it (the running job's venv replaced beneath it); its
   ``diff`` shows nothing, ``render`` differs from the earlier one by ``spec_sha256`` only, and
   ``apply accounting`` changes nothing; the checkpointing job is preempted and resumes under the
   current venv from the earlier package's checkpoint;
4. rollback: the earlier package again, its render byte-identical to the first, accounting
   unchanged, its ``diff`` empty; the job is preempted again and resumes under the earlier venv
   from the current package's checkpoint;
5. the checkpointing job completes with the result of an uninterrupted run, no more than one
   checkpoint interval lost per preemption; the long job kept running: same id, same start time,
   never requeued.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from slurm_pool import __version__
from tests.support.ckptjob import TRAIN, expected_result, steps_lost, train_lines
from tests.support.dist import build_dist, deb_in, install_deb, upgrade_deb
from tests.support.patience import wait_for
from tests.support.slurm_cluster import job_workdir

pytestmark = pytest.mark.slurm

#: The earlier release: main's commit of 2026-12-07 just before render's manifest gained
#: ``spec_sha256`` and ``diff`` the node attributes; it renders examples/pool.yaml (version 0.1.0).
#: It predates docs/logrotate/, the serve unit and the sudoers drop-in, which its package takes
#: from the checkout (build.py names them).
EARLIER = "1b4b477fec9dbc83abd0fd52effed092349df33f"
NODE = "a-gpu1"
#: The checkpointing job: STEPS steps, a checkpoint every EVERY; each run reads its step time from
#: the file ``pace`` in its directory, so the test keeps it running through an install and then lets
#: the last run finish quickly.
STEPS, EVERY, SLOW, FAST = 4000, 20, 0.25, 0.005
JOB_SCRIPT = """#!/bin/bash
exec {venv}/bin/slurm-pool run -- {venv}/bin/python {work}/train_sim.py \\
    --steps {steps} --every {every} --step-time "$(cat {work}/pace)"
"""


def _own_spec(cluster, path: Path) -> Path:
    """The cluster's spec as its files were rendered: with the state directory's checkpoint base."""
    data = yaml.safe_load(cluster.cluster.spec_path.read_text())
    data.setdefault("checkpoint", {})["base_dir"] = str(cluster.cluster.spec.checkpoint.base_dir)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


class Admin:
    """The installed venv's ``slurm-pool``, run against the cluster as its admin runs it."""

    def __init__(self, cluster, root: Path, spec: Path, cwd: Path):
        self.cluster, self.root, self.spec, self.cwd = cluster, root, spec, cwd
        self.venv = root / "opt" / "slurm-pool"
        self.env = {k: v for k, v in {**os.environ, **cluster.env}.items() if k != "PYTHONPATH"}

    def __call__(self, *args: str | Path, ok: tuple[int, ...] = (0,)) -> str:
        res = subprocess.run(
            [self.venv / "bin" / "slurm-pool", *map(str, args)],
            cwd=self.cwd,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert res.returncode in ok, f"slurm-pool {args}: exit {res.returncode}\n{res.stdout}{res.stderr}"
        return res.stdout

    def package_files(self) -> dict[str, str]:
        """The sha256 of each source file of the slurm_pool package that the venv holds."""
        (site,) = (self.venv / "lib").glob("python3*/site-packages")
        return {
            str(p.relative_to(site)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in (site / "slurm_pool").rglob("*.py")
        }

    def render(self, out: Path) -> dict:
        self("render", self.spec, "-o", out)
        return json.loads((out / "manifest.json").read_text())

    def apply_accounting(self) -> None:
        """``apply accounting``: the cluster already has the spec's objects; nothing changes."""
        said = self("apply", "accounting", self.spec)
        assert "accounting: no changes" in said.splitlines(), said
        again = self("apply", "accounting", self.spec, "--dry-run")
        assert "accounting: no changes" in again.splitlines(), again

    def diff(self) -> None:
        """``diff``: the cluster runs what the spec says, by this release's reading (exit 0, nothing shown)."""
        assert self("diff", "--spec", self.spec) == ""


def _show_job(cluster, job: int) -> dict[str, str]:
    out = cluster.run(["scontrol", "show", "job", "-o", str(job)], check=True).stdout
    return dict(re.findall(r"(\w+)=(\S*)", out))


@pytest.fixture(scope="module")
def earlier_dist(tmp_path_factory) -> Path:
    """The earlier commit's artefacts, built with today's packaging."""
    return build_dist(tmp_path_factory.mktemp("earlier-dist"), source=EARLIER)


@pytest.fixture
def install_root():
    """A scratch root for the packages that the jobs' users can read (the job runs the venv's wrapper)."""
    root = job_workdir("sp-upgrade-root")
    root.chmod(0o755)
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def work():
    """The checkpointing job's directory (its user writes its log there)."""
    work = job_workdir("sp-upgrade-job")
    shutil.copy(TRAIN, work / "train_sim.py")
    (work / "pace").write_text(f"{SLOW}\n")
    yield work
    shutil.rmtree(work, ignore_errors=True)


def test_upgrade_and_rollback_with_jobs_running(
    cluster, node_conf, earlier_dist, current_dist, install_root, work, tmp_path
):
    earlier_deb, current_deb = deb_in(earlier_dist, "0.1.0"), deb_in(current_dist, __version__)
    spec = _own_spec(cluster, tmp_path / "pool.yaml")
    admin = Admin(cluster, install_root, spec, tmp_path)
    # node.conf as the spec renders it (diff compares it), with the job's state in the test's directory
    own = cluster.spec.checkpoint
    node_conf(
        state_dir=str(work / "state"),
        checkpoint_base_dir=str(own.base_dir),
        gpus="none",
        warn_seconds=str(own.warn_seconds),
    )
    log = work / "train.out"

    # 1. the long job: an owner's on its own node, never preempted
    long_job = cluster.sbatch(
        "-p", "b-owner", "--qos=guaranteed", "-A", "projb", "-w", "b-gpu1", "--time=60", "-o", "/dev/null",
        user="bob", script="#!/bin/bash\nsleep 3600\n",
    )  # fmt: skip
    cluster.wait_state(long_job, ["RUNNING"], timeout=60)
    first = _show_job(cluster, long_job)

    def long_job_untouched() -> None:
        now = _show_job(cluster, long_job)
        assert (now["JobId"], now["JobState"], now["Restarts"], now["StartTime"]) == (
            str(long_job), "RUNNING", "0", first["StartTime"],
        ), now  # fmt: skip

    def preempt_and_resume(run: int) -> None:
        """Preempt the checkpointing job with the owner's job; wait for its next run to start."""
        owner = cluster.sbatch(
            "-p", "a-owner", "--qos=guaranteed", "-A", "proja", "-w", NODE, "--gres=gpu:2", "-o", "/dev/null",
            user="alice", script="#!/bin/bash\nsleep 2\n",
        )  # fmt: skip
        cluster.wait_state(ckpt_job, ["PENDING", "REQUEUED"], timeout=60)
        cluster.wait_state(owner, ["COMPLETED"], timeout=90)
        cluster.release_begin_time(ckpt_job)
        cluster.wait_state(ckpt_job, ["RUNNING", "COMPLETED"], timeout=120)
        wait_for(lambda: len(train_lines(log, "start")) >= run + 1, 60, f"run {run} of the checkpointing job to start")

    # 2. the earlier package: render, apply; the checkpointing job starts under its wrapper
    venv = install_deb(earlier_deb, install_root)
    earlier_files = admin.package_files()
    earlier = admin.render(tmp_path / "render-earlier")
    assert "spec_sha256" not in earlier and earlier["generator_version"] == "0.1.0", earlier
    admin.apply_accounting()
    ckpt_job = cluster.sbatch(
        "-p", "shared", "--qos=shared", "-A", "proja", "-w", NODE, "--gres=gpu:2", "--time=30", "--requeue",
        "--signal=B:USR1@60", "--open-mode=append", "-o", str(log), "-D", str(work),
        user="alice", script=JOB_SCRIPT.format(venv=venv, work=work, steps=STEPS, every=EVERY),
    )  # fmt: skip
    cluster.wait_state(ckpt_job, ["RUNNING"], timeout=120)
    wait_for(lambda: train_lines(log, "checkpoint"), 60, "the job's first periodic checkpoint")
    long_job_untouched()

    # 3. upgrade: the current package over the earlier one, under the running job
    upgrade_deb(current_deb, install_root)
    current_files = admin.package_files()
    assert current_files != earlier_files  # the same version, other files
    admin.diff()
    current = admin.render(tmp_path / "render-current")
    assert current["spec_sha256"] == hashlib.sha256(spec.read_bytes()).hexdigest()
    assert {k: v for k, v in current.items() if k != "spec_sha256"} == earlier  # every rendered file the same
    admin.apply_accounting()
    assert train_lines(log, "done") == [], "the job finished before the upgrade was through: make STEPS larger"
    preempt_and_resume(1)
    long_job_untouched()

    # 4. rollback: the earlier package and its render again
    upgrade_deb(earlier_deb, install_root)
    assert admin.package_files() == earlier_files  # the earlier package's files again, every byte
    again = admin.render(tmp_path / "render-rollback")
    assert again == earlier
    for name in earlier["files"]:
        assert (tmp_path / "render-rollback" / name).read_bytes() == (tmp_path / "render-earlier" / name).read_bytes()
    admin.apply_accounting()
    admin.diff()
    assert train_lines(log, "done") == [], "the job finished before the rollback was through: make STEPS larger"
    (work / "pace").write_text(f"{FAST}\n")  # the next run finishes quickly
    preempt_and_resume(2)
    long_job_untouched()

    # 5. the checkpointing job completes as if never interrupted; the long job never noticed
    cluster.wait_state(ckpt_job, ["COMPLETED"], timeout=STEPS * FAST + 120)
    starts = train_lines(log, "start")
    assert [s["restart"] for s in starts] == ["0", "1", "2"], log.read_text()
    assert all(int(s["resume_step"]) > 0 for s in starts[1:]), starts  # from a checkpoint, not from zero
    (done,) = train_lines(log, "done")
    assert done["final"] == expected_result(STEPS)
    for lost, before, after in steps_lost(log):
        assert 0 <= lost <= EVERY, (lost, before[-3:], after[:1])
    long_job_untouched()

    # leave the cluster as it was: the checkout's accounting, and its diff empty
    cluster.run(["scancel", str(long_job)], check=True)
    cluster.cancel_all()  # an empty queue and idle nodes: the epilogs are done with the job's directory
    res = cluster.cli("apply", "accounting", str(spec))
    assert res.returncode == 0 and "accounting: no changes" in res.stdout.splitlines(), res.stdout + res.stderr
    res = cluster.cli("diff", "--spec", str(spec))
    assert (res.returncode, res.stdout) == (0, ""), res.stdout + res.stderr
