"""Slurm's auth/jwt on the real daemons: the ground ``slurm-pool serve`` stands on (issue 27).

``cluster up`` always turns auth/jwt on with a key of its own.  The service
mints a short token for the user it acts for and runs the Slurm command as
that user with ``SLURM_JWT`` set, so Slurm itself decides what the user may
do.  These tests prove that on both Slurm versions: a token names its user
to slurmctld, a user's token cannot touch another user's job, and a token
signed with another key, or expired, is refused.
"""

from __future__ import annotations

import os
import pwd
import secrets
import shutil
import subprocess
import time
from pathlib import Path

import jwt as pyjwt
import pytest

from slurm_pool.adapters.records import parse_jobs
from tests.support.slurm_cluster import job_workdir

pytestmark = pytest.mark.slurm

SLEEP = "#!/bin/sh\nsleep 300\n"


def ids(user: str) -> dict:
    """subprocess arguments that run a command as ``user``: uid, primary gid and groups (Slurm 22.05's
    sbatch sends getuid() and getgid(), and slurmctld refuses either when it is not the token's user's)."""
    ent = pwd.getpwnam(user)
    return {"user": ent.pw_uid, "group": ent.pw_gid, "extra_groups": os.getgrouplist(user, ent.pw_gid)}


def slurm(cluster, argv, *, token: str | None, user: str | None = None, script: str | None = None, cwd="/tmp"):
    """Run one of the cluster's Slurm commands, as ``user`` (default root), with ``token`` as SLURM_JWT."""
    env = {k: v for k, v in os.environ.items() if k != "SLURM_JWT"}
    env.update(cluster.env)
    if token is not None:
        env["SLURM_JWT"] = token
    extra = ids(user) if user else {}
    return subprocess.run(argv, input=script, env=env, cwd=cwd, capture_output=True, text=True, timeout=60, **extra)


def token_for(cluster, user: str) -> str:
    res = cluster.run(["scontrol", "token", f"username={user}", "lifespan=60"], check=True)
    name, _, token = res.stdout.strip().partition("=")
    assert name == "SLURM_JWT", res.stdout
    return token


def key(cluster) -> bytes:
    return Path(cluster.cluster.jwt_key_path).read_bytes()


def mint(secret: bytes, user: str, lifespan: int = 60) -> str:
    now = int(time.time())
    return pyjwt.encode({"iat": now, "exp": now + lifespan, "sun": user}, secret, algorithm="HS256")


def owner(cluster, job_id: str) -> str:
    return cluster.job_field(int(job_id), "%u")


def test_up_makes_a_private_key_and_turns_jwt_on(cluster):
    path = Path(cluster.cluster.jwt_key_path)
    st = path.stat()
    assert (st.st_mode & 0o777, st.st_uid) == (0o600, pwd.getpwnam(cluster.cluster.site().slurm_user).pw_uid)
    assert len(path.read_bytes()) >= 32
    conf = cluster.cluster.layout.slurm_conf.read_text().splitlines()
    assert "AuthAltTypes=auth/jwt" in conf and f"AuthAltParameters=jwt_key={path}" in conf


def test_scontrol_token_names_the_user_and_is_signed_with_the_cluster_key(cluster):
    claims = pyjwt.decode(token_for(cluster, "alice"), key(cluster), algorithms=["HS256"])
    assert claims["sun"] == "alice" and 0 < claims["exp"] - claims["iat"] <= 60


def test_a_token_reads_the_queue(cluster):
    res = slurm(cluster, ["squeue", "--json"], token=token_for(cluster, "alice"), user="alice")
    assert res.returncode == 0, res.stderr
    # the queue is empty (the fixture's promise); squeue also lists jobs that ended a moment ago
    active = [j for j in parse_jobs(res.stdout) if j.state.base in ("PENDING", "RUNNING", "SUSPENDED")]
    assert active == [], active


@pytest.fixture
def work():
    """A directory the job user may write, removed afterwards."""
    d = job_workdir("jwt")
    yield d
    shutil.rmtree(d, ignore_errors=True)


def test_a_user_submits_with_her_own_token(cluster, work):
    # What the service does: the command runs as the user, with a token minted for her.
    script = f"#!/bin/sh\necho ${{SLURM_JWT:+present}} > {work}/jwt\nsrun -n1 true; echo $? > {work}/srun\n"
    res = slurm(
        cluster,
        ["sbatch", "--parsable", "-p", "shared", "-t", "5", "-o", "/dev/null"],
        token=mint(key(cluster), "alice"),
        user="alice",
        script=script,
        cwd=work,
    )
    assert res.returncode == 0, res.stderr
    job = res.stdout.strip().split(";")[0]
    cluster.wait_state(int(job), ["COMPLETED"])
    assert cluster.sacct_field(int(job), "User") == "alice"
    # Slurm 26.05's sbatch drops SLURM_JWT from the job's environment; 22.05's passes it on.
    # There srun tries the token, and slurmd refuses it: a job submitted with SLURM_JWT on 22.05 must
    # unset it before srun (or be submitted without it: as the user, munge says who she is).
    scrubbed = cluster.version.has("sbatch_scrubs_slurm_jwt")
    assert (work / "jwt").read_text().strip() == ("" if scrubbed else "present")
    assert ((work / "srun").read_text().strip() == "0") == scrubbed


@pytest.mark.parametrize("process_user", ["root", "bob"])
def test_a_job_submitted_with_alices_token_is_alices_or_refused(cluster, process_user):
    # 22.05: sbatch sends its own uid/gid, and slurmctld refuses any other than the token's ("Invalid user
    # id"); 26.05: sbatch sends none, and slurmctld takes the token's.  Never is the job anyone else's.
    res = slurm(
        cluster,
        ["sbatch", "--parsable", "-p", "shared", "-t", "5", "-o", "/dev/null"],
        token=token_for(cluster, "alice"),
        user=None if process_user == "root" else process_user,
        script=SLEEP,
    )
    if res.returncode == 0:
        assert owner(cluster, res.stdout.strip().split(";")[0]) == "alice"
    else:
        assert "Invalid user id" in res.stderr


#: What alice's token may not do to bob's job, and how Slurm says so (both versions alike).
REFUSED = [
    ("scancel {job}", "Access/permission denied"),
    ("scontrol hold {job}", "Invalid user id"),
    ("scontrol requeue {job}", "Access/permission denied"),
    ("scontrol update JobId={job} TimeLimit=1", "Invalid user id"),
]


def test_alices_token_cannot_touch_bobs_job(cluster):
    bobs = cluster.sbatch("-p", "shared", "-t", "5", "-o", "/dev/null", user="bob", script=SLEEP)
    cluster.wait_state(bobs, ["RUNNING"])
    token = token_for(cluster, "alice")
    for command, refusal in REFUSED:
        for process_user in ("alice", None):  # None: root, whom the token overrides
            argv = command.format(job=bobs).split()
            res = slurm(cluster, argv, token=token, user=process_user)
            assert res.returncode != 0 and refusal in res.stderr, (argv, process_user, res.returncode, res.stderr)
    assert cluster.job_field(bobs, "%T %r %l") == "RUNNING None 5:00"


def test_alices_token_cancels_her_own_job(cluster):
    hers = cluster.sbatch("-p", "shared", "-t", "5", "-o", "/dev/null", user="alice", script=SLEEP)
    res = slurm(cluster, ["scancel", str(hers)], token=mint(key(cluster), "alice"), user="alice")
    assert res.returncode == 0, res.stderr
    cluster.wait_state(hers, ["CANCELLED"])


@pytest.mark.parametrize(
    "which, lifespan, ok",
    [
        ("cluster", 60, True),  # the control: the same claims, signed with the right key, pass
        ("other", 60, False),  # signed with another key
        ("cluster", -60, False),  # expired
        ("garbage", 60, False),  # not a JWT at all
    ],
)
def test_only_a_live_token_signed_with_the_cluster_key_is_accepted(cluster, which, lifespan, ok):
    if which == "garbage":
        token = "not-a-token"
    else:
        token = mint(key(cluster) if which == "cluster" else secrets.token_bytes(64), "alice", lifespan)
    res = slurm(cluster, ["squeue", "-h"], token=token, user="alice")
    assert (res.returncode == 0) == ok, res.stderr
    if not ok:
        # 22.05: "Zero Bytes were transmitted or received"; 26.05: "Protocol authentication error".
        assert "Zero Bytes" in res.stderr or "authentication" in res.stderr, res.stderr
