"""Issue 14, check 2: GPU sharing without MIG, on the real cluster.

The example pool with shards (tests/support/shards.py): node group b (b-gpu1,
two H100s) carries 4 Slurm shards per GPU, and a dev tier turns a job's one GPU
into one shard.  Four such jobs run at
once on one GPU: Slurm packs shards onto the first GPU with room
(``_pick_shared_gres_topo`` in src/plugins/select/cons_tres/gres_select_filter.c,
unless SelectTypeParameters has LL_SHARED_GRES).  A whole-GPU job of a tier
that cannot preempt them waits for them; the owner's guaranteed tier preempts
them.  The cluster booting on the rendered configs is the check that they boot.

Before Slurm 23.11.5 a GPU could be allocated whole while shard jobs still ran
on it (CHANGELOG 23.11.5; seen here on 22.05.8 once one of four shard jobs
ended), so the spec is refused there, and on 22.05 the check is that the
cluster refuses to start on it, naming the field.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_pool.adapters.records import parse_jobs
from slurm_pool.errors import SpecError
from tests.conftest import TEST_SLURM
from tests.support.patience import wait_for
from tests.support.shards import shard_spec_text
from tests.support.slurm_cluster import job_workdir

pytestmark = pytest.mark.slurm

NODE = "b-gpu1"
SHARD_JOB = """#!/bin/sh
echo "gpus=$CUDA_VISIBLE_DEVICES shards=$SLURM_SHARDS_ON_NODE" > {log}
sleep 600
"""
SLEEP = "#!/bin/sh\nsleep 600\n"


def _version():
    from slurm_pool.adapters.slurm import installed_version
    from slurm_pool.versions import SlurmVersion

    version = SlurmVersion.parse(TEST_SLURM) if TEST_SLURM and "/" not in TEST_SLURM else installed_version()
    assert version is not None, "no Slurm found"
    return version


@pytest.fixture(scope="module")
def shard_spec_path(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("shards")
    d.chmod(0o755)
    path = d / "pool.yaml"
    path.write_text(shard_spec_text())
    return path


@pytest.fixture(scope="module")
def shards_cluster(shard_spec_path):
    """A cluster of the pool with shards (its own: the session cluster runs the plain example)."""
    from tests.support.slurm_cluster import start_session_cluster, stop_session_cluster

    if not _version().has("shard_excludes_gpu"):
        yield None
        return
    handle, state = start_session_cluster(shard_spec_path, slurm=TEST_SLURM)
    yield handle
    stop_session_cluster(handle, state)


@pytest.fixture
def cluster(shards_cluster):
    """The shards cluster with an empty queue before and after the test (None: this Slurm refuses shards)."""
    if shards_cluster is not None:
        shards_cluster.cancel_all()
    yield shards_cluster
    if shards_cluster is not None:
        shards_cluster.cancel_all()


def _refused(path: Path) -> bool:
    """On a Slurm without shards that exclude their GPU: the cluster refuses to start, naming the field."""
    from tests.support.slurm_cluster import start_session_cluster

    with pytest.raises(SpecError) as exc:
        start_session_cluster(path, slurm=TEST_SLURM)
    assert "node_groups[1].gpus.shards: GPU shards need Slurm 23.11.5 or later" in str(exc.value)
    return True


@pytest.fixture
def workdir() -> Path:
    return job_workdir("sp-shards")


def _dev_jobs(cluster, workdir: Path, n: int = 4) -> dict[int, Path]:
    """``n`` one-GPU jobs of bob's in the dev tier (the policy makes each one shard), all running."""
    jobs = {}
    for i in range(n):
        log = workdir / f"shard{i}.log"
        job = cluster.sbatch(
            "-A", "projb", "--qos=dev", "--time=10", "--gres=gpu:1", "-o", "/dev/null", "-D", str(workdir),
            user="bob", script=SHARD_JOB.format(log=log),
        )  # fmt: skip
        jobs[job] = log
    for job, log in jobs.items():
        cluster.wait_state(job, ["RUNNING"], timeout=90)
        wait_for(lambda log=log: log.is_file() and log.read_text().strip(), 60, f"{log.name} written")
    return jobs


def _wait_pending(cluster, job: int, what: str) -> None:
    """Wait until ``job`` is PENDING for Resources; the error shows what it was last."""
    seen: list[str] = []

    def check() -> bool:
        seen.append(cluster.job_field(job, "%T %r"))
        return seen[-1] == "PENDING Resources"

    try:
        wait_for(check, 60, what)
    except TimeoutError as exc:
        raise AssertionError(f"{exc}: job {job} was {seen[-1]!r}") from None


def _records(cluster, jobs) -> dict[int, object]:
    res = cluster.run(["squeue", "--json", "--jobs", ",".join(map(str, jobs))], check=True)
    return {j.job_id: j for j in parse_jobs(res.stdout)}


def test_four_shard_jobs_share_one_gpu_and_a_whole_gpu_job_waits(cluster, workdir, shard_spec_path):
    if cluster is None and _refused(shard_spec_path):
        return
    gres = cluster.run(["scontrol", "show", "node", NODE], check=True).stdout
    assert "gres/shard=8" in gres, gres  # 2 GPUs x 4 shards, as rendered (Slurm types them as the GPU)
    jobs = _dev_jobs(cluster, workdir)
    seen = {log.read_text().strip() for log in jobs.values()}
    assert len(seen) == 1, f"the four jobs were spread over GPUs: {seen}"
    (line,) = seen
    assert line.startswith("gpus=") and line.endswith(" shards=1") and "," not in line, line
    # The policy turned the one GPU into one shard: no job holds a whole GPU.
    for job, rec in _records(cluster, jobs).items():
        assert (rec.partition, rec.qos, rec.shards, rec.gpus) == ("dev", "dev", 1, 0), (job, rec.raw)

    # Two whole GPUs in the shared tier, which does not preempt dev: they wait for every shard job.
    whole = cluster.sbatch(
        "-A", "projb", "--qos=shared", "--time=10", "--checkpoint", f"--nodelist={NODE}", "--gres=gpu:2",
        "-o", "/dev/null", user="bob", script=SLEEP,
    )  # fmt: skip
    _wait_pending(cluster, whole, "the whole-GPU job to wait for the shards")
    ids = list(jobs)
    for job in ids[:3]:
        cluster.run(["scancel", str(job)], check=True)
    for job in ids[:3]:
        cluster.wait_state(job, ["CANCELLED"], timeout=60)
    # One shard job still holds a shard of the GPU: the whole-GPU job still waits, and is not let in.
    _wait_pending(cluster, whole, "the whole-GPU job to wait for the last shard")
    assert cluster.job_field(ids[3], "%T") == "RUNNING"
    cluster.run(["scancel", str(ids[3])], check=True)
    cluster.wait_state(whole, ["RUNNING"], timeout=90)


def test_the_owner_preempts_shard_jobs_for_its_whole_gpus(cluster, workdir, shard_spec_path):
    if cluster is None and _refused(shard_spec_path):
        return
    jobs = _dev_jobs(cluster, workdir)
    owner = cluster.sbatch(
        "-A", "projb", "-p", "b-owner", "--gres=gpu:2", "-o", "/dev/null", user="bob", script=SLEEP,
    )  # fmt: skip
    # dev's GraceTime (20 s) and the requeue bound the owner's wait.
    cluster.wait_state(owner, ["RUNNING"], timeout=120)
    for job in jobs:
        state = cluster.wait_state(job, ["PENDING", "REQUEUED", "PREEMPTED"], timeout=60)
        assert state != "RUNNING", job
    assert all(rec.shards == 1 for rec in _records(cluster, jobs).values())
