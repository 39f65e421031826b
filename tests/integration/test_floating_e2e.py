"""Issue 28, check 1: floating guarantees on real Slurm (22.05, and 26.05 in the second pass).

``examples/pool-floating.yaml`` boots as a cluster of its own: proja owns
``a-gpu1``; projd (4 GPUs of any type) and proje (2 H100s) are promised GPUs
anywhere on ``f-gpu[1-3]``, nobody's servers, through a QOS each whose
GrpTRES is the guarantee.  A borrower (xavier, scavenger tier) holds every GPU
there; an owner's job within its guarantee preempts one of those and starts
within GraceTime + 5 s; its next job beyond the guarantee is routed to the
shared tier with a message; two owners bursting at once both get their
guarantee; a burst's overflowed job moves back into the guarantee once it frees
(``guarantees reconcile``); and ``doctor`` flags the guarantees once a node is drained.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path
from typing import Iterator

import pytest

from slurm_pool.policy.overflow import overflow_tag
from slurm_pool.spec.guarantees import guarantee_qos
from tests.conftest import TEST_SLURM
from tests.support.patience import wait_for
from tests.support.slurm_cluster import (
    ClusterHandle,
    job_workdir,
    self_requeue,
    start_session_cluster,
    stop_session_cluster,
)

pytestmark = pytest.mark.slurm

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "pool-floating.yaml"
FLOATING_NODES = ("f-gpu1", "f-gpu2", "f-gpu3")

#: A borrower that leaves at once on the preemption signal and is requeued (the scavenger tier's PreemptMode;
#: before 24.05 a job that exits within GraceTime completes unless it requeues itself: ``self_requeue``), and
#: ends on scancel's TERM.
HOLDER = """#!/bin/bash
trap '{requeue}exit 0' USR1
trap 'exit 0' TERM
echo started > {mark}
sleep 600 &
wait
"""


@pytest.fixture(scope="module")
def floating() -> Iterator[ClusterHandle]:
    handle, state = start_session_cluster(EXAMPLE, slurm=TEST_SLURM)
    try:
        yield handle
    finally:
        stop_session_cluster(handle, state)


@pytest.fixture
def pool(floating: ClusterHandle) -> Iterator[ClusterHandle]:
    yield floating
    floating.cancel_all()


@pytest.fixture
def workdir() -> Iterator[Path]:
    """A directory the jobs' users can write (pytest's tmp_path is root's alone)."""
    path = job_workdir("sp-floating")
    yield path
    shutil.rmtree(path, ignore_errors=True)


def submit(cluster: ClusterHandle, user: str, *args: str, script: str = "#!/bin/bash\nsleep 300\n"):
    """sbatch as ``user``; the job id and what sbatch told the user (job_submit.lua's messages)."""
    argv = ["sbatch", "--parsable", f"--uid={user}", "-o", "/dev/null", *args]
    res = cluster.cluster.runner.run(argv, input=script, check=False)
    if res.returncode != 0:
        raise AssertionError(f"sbatch {args} as {user} failed: {res.stderr}")
    return int(res.stdout.strip().split(";")[0]), res.stderr


def hold(cluster: ClusterHandle, node: str, tier: str, workdir: Path, mark: Path) -> int:
    """Submit a job of xavier's in ``tier`` holding every GPU of ``node``; it touches ``mark`` once running."""
    job, _ = submit(
        cluster,
        "xavier",
        "-p",
        tier,
        f"--qos={tier}",
        "-A",
        "projx",
        "-w",
        node,
        "--gres=gpu:2",
        "--requeue",
        "--signal=B:USR1@30",
        "-D",
        str(workdir),
        script=HOLDER.format(mark=mark, requeue=self_requeue(cluster.version)),
    )
    return job


def hold_floating_nodes(
    cluster: ClusterHandle, workdir: Path, tier: str = "scavenger", nodes: tuple[str, ...] = FLOATING_NODES
) -> dict[str, int]:
    """A job of xavier's in ``tier`` on every GPU of each of ``nodes``; wait until each script runs."""
    holders = {node: hold(cluster, node, tier, workdir, workdir / f"{node}.started") for node in nodes}
    for node, job in holders.items():
        cluster.wait_state(job, ["RUNNING"], timeout=60)
        mark = workdir / f"{node}.started"
        wait_for(mark.is_file, 60, f"{node}: holder script started")
    return holders


def started_within(cluster: ClusterHandle, job: int, submitted: float) -> float:
    """Seconds from ``submitted`` to the job's start as slurmdbd records it (one-second resolution)."""
    started = cluster.wait_sacct(job, "Start", lambda v: v[:1].isdigit())
    return time.mktime(time.strptime(started, "%Y-%m-%dT%H:%M:%S")) - submitted


def where(cluster: ClusterHandle, job: int) -> tuple[str, str, str]:
    """The job's partition, QOS and nodes, as squeue shows them."""
    part, qos, nodes = (cluster.job_field(job, "%P %q %N") + "  ").split(" ")[:3]
    return part, qos, nodes


def test_a_guarantee_preempts_a_borrower_anywhere_and_the_next_job_overflows(pool: ClusterHandle, workdir: Path):
    grace = pool.spec.tier("scavenger").grace_time
    holders = hold_floating_nodes(pool, workdir)
    idle = pool.run(["sinfo", "-h", "-N", "-p", "floating", "-o", "%N %t"]).stdout
    assert "idle" not in idle, idle

    submitted = time.time()
    mine, _ = submit(pool, "dave", "-A", "projd", "--gres=gpu:2")  # no partition, no QOS: the default tier
    pool.wait_state(mine, ["RUNNING"], timeout=grace + 30)
    assert started_within(pool, mine, submitted) <= grace + 5
    part, qos, nodes = where(pool, mine)
    assert (part, qos) == ("floating", guarantee_qos("guaranteed", "projd")), (part, qos)
    assert nodes in FLOATING_NODES, nodes  # a node projd does not own: nobody does
    victim = holders[nodes]
    assert pool.wait_state(victim, ["PENDING", "REQUEUED"], timeout=30) in ("PENDING", "REQUEUED")
    other = next(j for n, j in holders.items() if n != nodes)
    assert pool.job_field(other, "%T") == "RUNNING"  # one victim was enough

    # 2 of projd's 4 are in use: a job of 2 nodes x 2 GPUs goes beyond, so it runs in the shared tier,
    # and sbatch says so.
    beyond, told = submit(pool, "dave", "-A", "projd", "-N", "2", "--gres=gpu:2", "-t", "10")
    part, qos, _ = where(pool, beyond)
    assert (part, qos) == ("shared", "shared"), (part, qos, told)
    assert "guarantee" in told and "shared" in told, told

    # The owner of a named server still gets it (the spec mixes both designs).
    owned, _ = submit(pool, "alice", "-A", "proja", "--gres=gpu:1")
    pool.wait_state(owned, ["RUNNING"], timeout=60)
    assert where(pool, owned)[0] == "a-owner"


def test_two_owners_bursting_at_once_both_get_their_guarantee(pool: ClusterHandle, workdir: Path):
    grace = pool.spec.tier("scavenger").grace_time
    hold_floating_nodes(pool, workdir)
    submitted = time.time()
    dave, _ = submit(pool, "dave", "-A", "projd", "--gres=gpu:2")
    erin, _ = submit(pool, "erin", "-A", "proje", "--gres=gpu:nvidia_h100_80gb_hbm3:2")
    for job, project in ((dave, "projd"), (erin, "proje")):
        pool.wait_state(job, ["RUNNING"], timeout=grace + 30)
        assert started_within(pool, job, submitted) <= grace + 5, project
        part, qos, nodes = where(pool, job)
        assert (part, qos) == ("floating", guarantee_qos("guaranteed", project)), (project, part, qos)
        assert nodes in FLOATING_NODES
    assert where(pool, dave)[2] != where(pool, erin)[2]


def admin_comment(cluster: ClusterHandle, job: int) -> str:
    """The job's admin comment, as squeue --json shows it (22.05 lists every job, whatever -j says)."""
    jobs = json.loads(cluster.run(["squeue", "--json", "-j", str(job)], check=True).stdout)["jobs"]
    return next(str(j.get("admin_comment") or "") for j in jobs if j.get("job_id") == job)


def reconcile(cluster: ClusterHandle) -> subprocess.CompletedProcess:
    return cluster.cli("guarantees", "reconcile", "--spec", str(EXAMPLE))


def test_a_burst_overflows_and_reconcile_moves_it_back_once_the_guarantee_frees(pool: ClusterHandle, workdir: Path):
    """Borrowers in the shared tier hold every node, so the overflowed job waits (shared preempts no shared job)."""
    grace = pool.spec.tier("shared").grace_time
    own = guarantee_qos("guaranteed", "projd")
    hold_floating_nodes(pool, workdir, tier="shared", nodes=(*FLOATING_NODES, "a-gpu1"))
    burst = [submit(pool, "dave", "-A", "projd", "--gres=gpu:2")[0] for _ in range(3)]  # projd's guarantee: 4
    first, second, third = burst
    assert [where(pool, j)[:2] for j in burst] == [("floating", own), ("floating", own), ("shared", "shared")]
    assert admin_comment(pool, third) == overflow_tag(own)
    assert (admin_comment(pool, first), admin_comment(pool, second)) == ("", "")
    for job in (first, second):
        pool.wait_state(job, ["RUNNING"], timeout=grace + 30)
    assert pool.job_field(third, "%T") == "PENDING"
    assert reconcile(pool).returncode == 0  # the guarantee is full: nothing moves
    assert where(pool, third)[:2] == ("shared", "shared")

    # Free the guarantee, not the GPUs: a borrower waiting (first in line) for first's node takes it.
    node = where(pool, first)[2]
    blocker = hold(pool, node, "shared", workdir, workdir / "blocker.started")
    pool.run(["scontrol", "update", f"JobId={blocker}", "Priority=1000000"], check=True)
    pool.run(["scancel", str(first)], check=True)
    pool.wait_state(blocker, ["RUNNING"], timeout=60)
    assert (pool.job_field(third, "%T"), where(pool, third)[:2]) == ("PENDING", ("shared", "shared"))

    moved_at = time.time()
    out = reconcile(pool)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"moved job {third} of projd (2 GPUs) into {own} (partition floating)" in out.stdout, out.stdout
    assert where(pool, third)[:2] == ("floating", own)
    assert admin_comment(pool, third) == ""  # not moved twice
    pool.wait_state(third, ["RUNNING"], timeout=grace + 30)
    assert started_within(pool, third, moved_at) <= grace + 10
    again = reconcile(pool)
    assert (again.returncode, again.stdout.splitlines()[-1]) == (
        0,
        "guarantees reconcile: moved 0 of 0 overflowed pending jobs",
    ), again.stdout


def doctor(cluster: ClusterHandle) -> subprocess.CompletedProcess:
    return cluster.cli("doctor", "--spec", str(EXAMPLE))


def test_doctor_flags_guarantees_over_capacity_once_a_node_is_drained(pool: ClusterHandle):
    before = doctor(pool)
    assert "guarantees" in before.stdout + before.stderr, before.stdout + before.stderr
    assert "f-gpu2" not in before.stdout, before.stdout
    pool.run(["scontrol", "update", "NodeName=f-gpu2", "State=DRAIN", "Reason=test maintenance"], check=True)
    try:
        after = doctor(pool)
        out = after.stdout + after.stderr
        assert after.returncode != 0, out
        flagged = [ln for ln in out.splitlines() if "guarantee" in ln and "f-gpu2" in ln]
        assert flagged, out
    finally:
        pool.run(["scontrol", "update", "NodeName=f-gpu2", "State=RESUME"], check=True)
