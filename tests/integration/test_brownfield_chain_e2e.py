"""Issue 44 on real Slurm: job_submit acts on the pool's jobs only, and the site's script chain fails no worse
than Slurm alone.

On the shared brownfield site (``brownfield_site``, tests/support/brownfield.py): the site's own ``scavenger``
QOS on its partitions runs as it did before slurm-pool (partition, QOS, priority); a pool QOS on the site's
``site-gpu`` (over two pool nodes) is refused; and a syntax error in the site's job_submit script leaves site
and pool jobs accepted under the version that loaded last, with slurmctld's log and ``doctor`` naming the file.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.brownfield import PENDING_SITE_JOBS, SITE_GPU_PARTITION, SiteCluster
from tests.support.patience import wait_for

pytestmark = pytest.mark.slurm


@pytest.fixture
def site(brownfield_site) -> SiteCluster:
    brownfield_site.cancel_all()
    yield brownfield_site
    brownfield_site.cancel_all()


def _job(site: SiteCluster, job: int, fmt: str) -> str:
    return site.handle.run(["squeue", "-h", "-t", "all", "-j", str(job), "-o", fmt], check=True).stdout.strip()


# (sbatch arguments, the partition it runs in)
SCAVENGER = [
    (("--qos=scavenger", "-p", SITE_GPU_PARTITION), SITE_GPU_PARTITION),
    (("--qos=scavenger",), "batch"),
]


@pytest.mark.parametrize("args,partition", SCAVENGER, ids=["site-gpu", "batch"])
def test_the_sites_scavenger_runs_as_without_the_pool(site, args, partition):
    """The site's own QOS, named as the pool's spot tier once was: job_submit leaves the job to the site."""
    job = site.handle.sbatch("-o", "/dev/null", *args, user="dave", script="#!/bin/sh\ntrue\n")
    assert site.handle.wait_state(job, ["COMPLETED"], timeout=90) == "COMPLETED"
    assert (_job(site, job, "%P"), _job(site, job, "%q"), _job(site, job, "%a")) == (partition, "scavenger", "physics")
    assert _job(site, job, "%k") == "site-policy"  # the site's script ran; the pool's rules added nothing


def test_the_sites_scavenger_keeps_its_priority(site):
    """sprio of dave's waiting --qos=scavenger job in batch, before the pool was installed and now."""
    index = PENDING_SITE_JOBS.index(("dave", ("--qos=scavenger",)))
    now = site.pending_priorities()
    assert now[index] == site.sprio_before[index], (site.sprio_before, now)


@pytest.mark.parametrize("user", ["dave", "alice"])
def test_a_pool_qos_on_the_sites_partition_is_refused(site, user):
    res = site.handle.run(
        ["sbatch", "--parsable", f"--uid={user}", "--qos=shared", "-p", SITE_GPU_PARTITION, "--wrap", "true"]
    )
    assert not res.ok, res.stdout
    assert "QOS 'shared' is the pool's and runs only in its partitions (shared)" in res.stderr, res.stderr
    assert "Submit with -p shared (or without -p)" in res.stderr, res.stderr


def _log(site: SiteCluster) -> Path:
    return Path(site.pool.site().log_dir) / "slurmctld.log"


def test_a_broken_site_script_keeps_the_last_that_loaded(site):
    script = site.pool.layout.etc / "site_job_submit.lua"
    good = script.read_text()
    log = _log(site)
    seen = log.stat().st_size
    try:
        script.write_text(good.replace("function slurm_job_modify(", "function slurm_job_modify(,", 1))
        # The site's job: accepted, and the site's rule (the last that loaded) still stamps it.
        job = site.handle.sbatch("-o", "/dev/null", user="dave", script="#!/bin/sh\ntrue\n")
        assert site.handle.wait_state(job, ["COMPLETED"], timeout=90) == "COMPLETED"
        assert _job(site, job, "%k") == "site-policy"
        # The site's refusal still stands, and the pool's job is routed as before.
        res = site.handle.run(["sbatch", "--uid=dave", "--comment=forbidden", "--wrap", "true"])
        assert not res.ok and "site policy" in res.stderr, res
        pool = site.handle.sbatch(
            "-p", "a-owner", "--gres=gpu:1", "-o", "/dev/null", user="alice", script="#!/bin/sh\ntrue\n"
        )
        assert site.handle.wait_state(pool, ["COMPLETED"], timeout=90) == "COMPLETED"
        assert (_job(site, pool, "%a"), _job(site, pool, "%q"), _job(site, pool, "%k")) == (
            "proja",
            "guaranteed",
            "site-policy",
        )

        def logged() -> str | None:
            with log.open("rb") as f:
                f.seek(seen)
                text = f.read().decode("utf-8", "replace")
            return text if f"the site's job_submit script {script} failed to load" in text else None

        text = wait_for(logged, 30, "slurmctld's log to name the broken site script")
        assert "using the one that loaded before" in text, text
        res = site.handle.cli("doctor", "--spec", str(site.spec_path))
        assert res.returncode != 0, res.stdout
        assert f"the site's job_submit script {script} does not load" in res.stdout, res.stdout
        assert f"{script.name}:" in res.stdout and "FAIL  site_script" in res.stdout, res.stdout
    finally:
        script.write_text(good)
    job = site.handle.sbatch("-o", "/dev/null", user="dave", script="#!/bin/sh\ntrue\n")
    assert site.handle.wait_state(job, ["COMPLETED"], timeout=90) == "COMPLETED"
    assert "site_script" not in "\n".join(
        line for line in site.handle.cli("doctor", "--spec", str(site.spec_path)).stdout.splitlines() if "FAIL" in line
    )


def _partition_line(site: SiteCluster) -> str:
    return site.handle.run(["scontrol", "show", "partition", "-o", SITE_GPU_PARTITION], check=True).stdout.strip()


def test_doctor_checks_that_the_sites_partition_denies_the_pool_qos(site):
    """As installed (DenyQos of every tier) it passes; with a pool QOS let in, doctor names it and the line."""
    deny = ",".join(t.name for t in site.pool.spec.tiers)
    before = _partition_line(site)
    assert f"DenyQos={deny}" in before, before
    res = site.handle.cli("doctor", "--spec", str(site.spec_path))
    assert "ok    site_partitions" in res.stdout, res.stdout
    # The pool's nodes as slurmctld holds them are the rendered ones (issue 45, node attributes).
    assert "ok    node_attrs" in res.stdout, res.stdout
    try:
        site.handle.run(["scontrol", "update", f"PartitionName={SITE_GPU_PARTITION}", "DenyQos=guaranteed"], check=True)
        res = site.handle.cli("doctor", "--spec", str(site.spec_path))
        assert res.returncode != 0 and "FAIL  site_partitions" in res.stdout, res.stdout
        assert f"the site's partition {SITE_GPU_PARTITION} holds pool node(s) a-gpu2, b-gpu1" in res.stdout
        assert "takes the pool's QOS shared, spot, k8s-lend:" in res.stdout, res.stdout
        assert f"add DenyQos={deny} to the line PartitionName={SITE_GPU_PARTITION}" in res.stdout, res.stdout
    finally:
        site.handle.run(["scontrol", "update", f"PartitionName={SITE_GPU_PARTITION}", f"DenyQos={deny}"], check=True)
    assert _partition_line(site) == before
