"""Session-wide fixtures: one real local Slurm cluster for every test that asks."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import settings

# How the suite is collected (daemon marks, build users last), and the real Kubernetes control plane
# (session-scoped; started only by tests that ask for it).
pytest_plugins = [
    "tests.support.collect",
    "tests.support.k8s_fixtures",
    "tests.support.ckptjob",
    "tests.support.browser",
    "tests.support.narrow_text",
    "tests.support.brownfield",
    # the release's artefacts, built once per session
    "tests.support.dist",
]

# HYPOTHESIS_PROFILE=ci (set by .ci/run): the same examples every run, so that a
# landing never hinges on a random draw; without it each run explores new ones.
settings.register_profile("ci", derandomize=True, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

REPO = Path(__file__).resolve().parent.parent
EXAMPLE_SPEC = REPO / "examples" / "pool.yaml"
#: The Slurm the daemon tests run on: a cached build's version (``26.05``) or a
#: prefix; unset: the Slurm on PATH (Debian's 22.05).  ``make test`` runs both.
TEST_SLURM = os.environ.get("SLURM_POOL_TEST_SLURM") or None


def pytest_configure(config):
    """Give each session its own base temporary directory (unless ``--basetemp`` is given).

    Jobs run as the pool's users and write into ``tmp_path``.  pytest's shared
    ``/tmp/pytest-of-<user>`` is reset to mode 0700 by every session that starts,
    which would cut a running session's jobs off from their paths.  Directories
    of finished sessions are removed, the newest three excepted.
    """
    if config.option.basetemp is not None or hasattr(config, "workerinput"):
        return
    root = Path(tempfile.gettempdir()) / "slurm-pool-pytest"
    root.mkdir(mode=0o711, exist_ok=True)
    root.chmod(0o711)
    finished = [d for d in root.iterdir() if d.is_dir() and not _alive(d.name.split("-", 1)[0])]
    for old in sorted(finished, key=lambda d: d.stat().st_mtime)[:-3]:
        shutil.rmtree(old, ignore_errors=True)
    config.option.basetemp = tempfile.mkdtemp(prefix=f"{os.getpid()}-", dir=root)


def _alive(pid: str) -> bool:
    return pid.isdigit() and Path(f"/proc/{pid}").exists()


def pytest_report_header(config):
    from slurm_pool.adapters.slurm import installed_version

    if TEST_SLURM is None:
        return f"slurm-pool: daemon tests on the Slurm on PATH ({installed_version() or 'none found'})"
    from slurm_pool.localcluster.slurmbuild import resolve_prefix

    prefix = resolve_prefix(TEST_SLURM)
    return f"slurm-pool: daemon tests on Slurm {TEST_SLURM} from {prefix}"


@pytest.fixture(scope="session")
def slurm_cluster():
    """The example pool running as real daemons (munge, MariaDB, slurmdbd, slurmctld, slurmd)."""
    from tests.support.slurm_cluster import start_session_cluster, stop_session_cluster

    handle, state = start_session_cluster(os.environ.get("SLURM_POOL_TEST_SPEC", EXAMPLE_SPEC), slurm=TEST_SLURM)
    yield handle
    stop_session_cluster(handle, state)


@pytest.fixture
def cluster(slurm_cluster):
    """The session cluster with an empty queue before and after the test."""
    slurm_cluster.cancel_all()
    yield slurm_cluster
    slurm_cluster.cancel_all()
