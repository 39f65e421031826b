"""The .deb's venv on the real session cluster: the installed ``slurm-pool doctor`` passes.

The package is built (scripts/dist/build.py, once per session: ``current_dist``) and its postinst
run under a scratch root (tests.support.dist); the doctor is the venv's, not the checkout's.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from slurm_pool import __version__
from tests.support.dist import REPO, deb_in, install_deb

pytestmark = pytest.mark.slurm

EXAMPLE = REPO / "examples" / "pool.yaml"


@pytest.fixture(scope="module")
def venv(current_dist, tmp_path_factory) -> Path:
    return install_deb(deb_in(current_dist, __version__), tmp_path_factory.mktemp("root"))


def test_the_installed_doctor_passes_on_the_cluster(cluster, venv, tmp_path):
    env = {k: v for k, v in {**os.environ, **cluster.env}.items() if k != "PYTHONPATH"}
    where = subprocess.run(
        [venv / "bin/python", "-c", "import slurm_pool; print(slurm_pool.__file__)"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert Path(where.stdout.strip()).is_relative_to(venv)
    res = subprocess.run(
        [venv / "bin/slurm-pool", "doctor", "--spec", EXAMPLE],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    assert "no problems found" in res.stdout
