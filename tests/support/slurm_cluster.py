"""Helpers for tests that run against the real local cluster.

One cluster per test session: a private state directory and a free block of
loopback ports, so several sessions on one machine do not collide.
"""

from __future__ import annotations

import fcntl
import functools
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from slurm_pool.adapters.runner import Result
from slurm_pool.adapters.slurm import SlurmClient
from slurm_pool.errors import SpecError
from slurm_pool.localcluster.cluster import LocalCluster
from slurm_pool.versions import SlurmVersion
from tests.support.patience import patience

REPO = Path(__file__).resolve().parents[2]


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _ephemeral_low(path: str = "/proc/sys/net/ipv4/ip_local_port_range") -> int:
    """The lowest port the kernel hands out to outgoing connections and ``bind(0)`` (Linux's default 32768)."""
    try:
        return int(Path(path).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


#: Lock files of the port blocks this process has taken (held open, so locked, until it exits).
_HELD: dict[int, int] = {}


def _reserve(base: int) -> bool:
    """Take the machine-wide lock of the block at ``base`` for this process; False if another holds it.

    Test sessions running side by side (``make test``'s streams) each start clusters: a block checked
    free by one may be picked by the other before either's daemons bind it, so each block is claimed
    first.  The lock goes with the process.
    """
    d = Path(tempfile.gettempdir()) / "slurm-pool-ports"
    d.mkdir(mode=0o700, exist_ok=True)
    if d.is_symlink() or d.stat().st_uid != os.geteuid():
        raise RuntimeError(f"{d} is not a directory of this user's")
    fd = os.open(d / f"{base}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return False
    _HELD[base] = fd
    return True


def free_port_base(n_nodes: int, tries: int = 50) -> int:
    """A base port whose service and node ports are all free, below the kernel's ephemeral range: a port
    free when checked there can be taken by any outgoing connection before the daemon binds it (seen: a
    slurmd of a second cluster refused with "Address already in use").  Each block is taken by one
    process at a time (:func:`_reserve`), and once only by this one."""
    top = max(12000, min(40000, _ephemeral_low()) - 100 - n_nodes)
    for _ in range(tries):
        base = random.randrange(10000, top, 200)
        if base in _HELD:
            continue
        ports = [base + o for o in (6, 17, 18, 19, 30, 31, 32, 33)] + [base + 100 + i for i in range(n_nodes)]
        if all(_port_free(p) for p in ports) and _reserve(base):
            return base
    raise RuntimeError("no free block of loopback ports found")


def built_slurm(variant: str = "") -> Path:
    """The install prefix of the shared Slurm source's build (``variant``: ``nolua``), waiting for the build
    that holds its lock (``make test`` starts it beside the tests) or building it now; fails, never skips."""
    import pytest

    from slurm_pool.localcluster.slurmbuild import BuildError, SlurmBuild, default_source, variant_flags

    source = default_source()
    if source is None:
        pytest.fail("this test needs the newer Slurm's source tarball (see slurm_pool.localcluster.slurmbuild)")
    try:
        build = SlurmBuild.for_source(source, flags=variant_flags(variant))
        if not build.is_built():
            print(f"\nwaiting for Slurm {build.version} {variant} to be built ({build.prefix})", file=sys.__stderr__)
        build.build(log=sys.__stderr__)
    except BuildError as exc:
        pytest.fail(f"cannot build Slurm {variant}: {exc}")
    return build.prefix


def job_workdir(prefix: str) -> Path:
    """A fresh directory under /tmp that every job user may write (their jobs' logs and files)."""
    d = Path("/tmp") / f"{prefix}-{time.time_ns()}"
    d.mkdir(mode=0o777)
    d.chmod(0o777)
    return d


def self_requeue(version: SlurmVersion) -> str:
    """What a preempted job's trap runs before it leaves, as `slurm-pool run` does: before 24.05 a
    job that exits in its grace time ends COMPLETED, so it requeues itself; from 24.05 slurmctld
    requeues it, and a self-requeue as well would requeue the *next* run when it ends (seen on 26.05.3)."""
    return "" if version.has("preempt_requeues_exited_job") else "scontrol requeue $SLURM_JOB_ID; "


@dataclass
class ClusterHandle:
    """A running local cluster, as tests see it."""

    cluster: LocalCluster

    @property
    def env(self) -> dict[str, str]:
        return self.cluster.layout.env()

    @property
    def slurm(self) -> SlurmClient:
        return SlurmClient(self.cluster.runner)

    @property
    def spec(self):
        return self.cluster.spec

    @property
    def scontrol(self) -> str:
        """This cluster's scontrol (its Slurm's, not whichever is first on PATH)."""
        return self.cluster.layout.which("scontrol") or "scontrol"

    @functools.cached_property
    def version(self) -> SlurmVersion:
        """The Slurm this cluster runs."""
        return self.cluster.slurm_version()

    def run(self, argv: Sequence[str], check: bool = False, timeout: float = 60) -> Result:
        return self.cluster.runner.run(list(argv), check=check, timeout=timeout)

    def cli(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        """``python -m slurm_pool ARGS`` against this cluster (its Slurm's commands and config), as an admin runs it."""
        env = {**os.environ, **self.env, "PYTHONPATH": str(REPO)}
        return subprocess.run(
            [sys.executable, "-m", "slurm_pool", *args], env=env, capture_output=True, text=True, timeout=timeout
        )

    def sbatch(self, *args: str, user: str | None = None, script: str | None = None) -> int:
        """Submit a batch job; return its id.  ``script`` is the batch script text."""
        argv = ["sbatch", "--parsable"]
        if user:
            argv.append(f"--uid={user}")
        argv.extend(args)
        res = self.cluster.runner.run(argv, input=script, check=True)
        return int(res.stdout.strip().split(";")[0])

    def job_field(self, job_id: int, field: str) -> str:
        res = self.run(["squeue", "-h", "-j", str(job_id), "-o", field])
        return res.stdout.strip()

    def wait_state(self, job_id: int, states: Sequence[str], timeout: float = 60) -> str:
        """Wait until squeue (or sacct, once gone) shows one of ``states`` (``timeout`` stretched by
        :func:`~tests.support.patience.patience`); on a timeout say what the job and the nodes were."""
        timeout = patience(timeout)
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            last = self.job_field(job_id, "%T") or self.sacct_state(job_id)
            if last in states:
                return last
            time.sleep(0.25)
        raise AssertionError(
            f"job {job_id} is {last!r}, not one of {list(states)}, after {timeout:g}s\n{self.seen(job_id)}"
        )

    def seen(self, job_id: int | None = None) -> str:
        """The job (state, reason, nodes) and every node (state, reason), for a failed wait's message."""
        lines = []
        if job_id is not None:
            job = self.run(["squeue", "-h", "-j", str(job_id), "-o", "%i %T %r %N %q %P"]).stdout.strip()
            lines.append(f"squeue: {job or '(gone) sacct: ' + self.sacct_field(job_id, 'State,Reason,NodeList')}")
        lines += ["sinfo: " + n for n in self.run(["sinfo", "-h", "-N", "-o", "%N %T %E"]).stdout.splitlines()]
        return "\n".join(lines)

    def sacct_state(self, job_id: int) -> str:
        return self.sacct_field(job_id, "State").split(" ")[0]

    def sacct_field(self, job_id: int, field: str) -> str:
        """One field of the job's accounting record ("" while slurmdbd has none)."""
        res = self.run(["sacct", "-n", "-X", "-P", "-j", str(job_id), "-o", field])
        lines = [line.strip() for line in res.stdout.splitlines() if line.strip()]
        return lines[-1] if lines else ""

    def wait_sacct(self, job_id: int, field: str, accept: Callable[[str], bool], timeout: float = 30) -> str:
        """Poll ``sacct`` until ``field`` passes ``accept``: slurmctld sends records to slurmdbd
        asynchronously, so accounting lags what squeue already shows."""
        timeout = patience(timeout)
        deadline = time.monotonic() + timeout
        value = ""
        while time.monotonic() < deadline:
            value = self.sacct_field(job_id, field)
            if accept(value):
                return value
            time.sleep(0.25)
        raise AssertionError(f"sacct {field} of job {job_id} is {value!r} after {timeout}s")

    def cancel_all(self, timeout: float = 60) -> None:
        """Cancel every job and wait for an empty queue and idle nodes."""
        jobs = self.run(["squeue", "-h", "-o", "%A"]).stdout.split()  # everyone's: the site's users too
        if jobs:
            self.run(["scancel", "--full", *jobs])
        deadline = time.monotonic() + patience(timeout)
        while time.monotonic() < deadline:
            q = self.run(["squeue", "-h", "-o", "%i %T"]).stdout.split()
            nodes = self.run(["sinfo", "-h", "-N", "-o", "%t"]).stdout.split()
            if not q and all(s.rstrip("*~#") in ("idle", "drain", "drained") for s in nodes):
                return
            time.sleep(0.25)
        queue = self.run(["squeue", "-h", "-o", "%i %T %r %N"]).stdout.strip()
        raise AssertionError(f"cluster did not drain its jobs in time\nsqueue: {queue}\n{self.seen()}")

    def release_begin_time(self, job_id: int, timeout: float = 60) -> None:
        """Slurm delays a requeued job's start by 120 s; tests skip the wait.

        Waits first until the previous run has fully ended (no node still
        COMPLETING, i.e. its epilog is done), and a few seconds past the
        requeue: slurmd revokes the old run's credential with one-second
        resolution, and a launch within that second is killed as "Job
        credential revoked" (seen on 22.05) -- the race the 120 s hold avoids.
        """
        deadline = time.monotonic() + patience(timeout)
        while time.monotonic() < deadline:
            states = self.run(["sinfo", "-h", "-N", "-o", "%t"]).stdout.split()
            if not any(s.startswith("comp") for s in states):
                break
            time.sleep(0.25)
        time.sleep(3)
        self.run(["scontrol", "update", f"JobId={job_id}", "StartTime=now"], check=True)


def start_session_cluster(spec_path: str | Path, slurm: str | None = None) -> tuple[ClusterHandle, Path]:
    """Bring up a cluster in a fresh state directory on free ports.

    ``slurm``: a cached build's version or an install prefix (``cluster up --slurm``);
    None: the Slurm on PATH.
    """
    state = Path(tempfile.mkdtemp(prefix="slurm-pool-test-", dir="/var/tmp"))
    state.chmod(0o755)
    cluster = LocalCluster(
        spec_path, state_dir=state, port_base=free_port_base(8 + 4), slurm=slurm, patience=patience(1)
    )
    try:
        cluster.up()
    except SpecError:  # the spec is refused for this Slurm: nothing started
        cluster.down()
        shutil.rmtree(state, ignore_errors=True)
        raise
    except BaseException as exc:
        logs = daemon_logs(state)
        cluster.down()
        raise RuntimeError(f"local cluster failed to start: {exc!r}; logs:\n{logs}") from None
    return ClusterHandle(cluster), state


def daemon_logs(state: Path, tail: int = 3000) -> str:
    """The end of every daemon log of the cluster in ``state``, for a failed start's message."""
    return "\n".join(
        f"--- {f.name}\n{f.read_text(errors='replace')[-tail:]}"
        for f in sorted((state / "log").glob("*"))
        if f.is_file()
    )


def stop_session_cluster(handle: ClusterHandle, state: Path) -> None:
    """Stop the daemons; remove the state dir unless SLURM_POOL_KEEP_STATE is set (for its logs)."""
    import os

    handle.cluster.down()
    subprocess.run(["pkill", "-f", f"{state}/"], check=False)
    if not os.environ.get("SLURM_POOL_KEEP_STATE"):
        shutil.rmtree(state, ignore_errors=True)
