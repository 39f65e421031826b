"""``slurm-pool doctor`` on the real session cluster (22.05, and 26.05 in the second pass).

Each problem is real: a SPANK plugin compiled against the *other* Slurm's
headers, loaded through a copy of the cluster's configs; a spec whose QOS the
accounting database lacks; a spec whose MIG layout the nodes do not have.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.support.slurm_cluster import built_slurm

pytestmark = pytest.mark.slurm

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "pool.yaml"


def doctor(cluster, spec: Path, **env: str) -> subprocess.CompletedProcess:
    full = {**os.environ, **cluster.env, "PYTHONPATH": str(REPO), **env}
    return subprocess.run(
        [sys.executable, "-m", "slurm_pool", "doctor", "--spec", str(spec)],
        env=full,
        capture_output=True,
        text=True,
        timeout=120,
    )


def spec_copy(tmp_path: Path, change) -> Path:
    data = yaml.safe_load(EXAMPLE.read_text())
    change(data)
    path = tmp_path / "pool.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_a_healthy_cluster_passes(cluster):
    res = doctor(cluster, EXAMPLE)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "no problems found" in res.stdout
    assert f"Slurm {cluster.version.series}" in res.stdout


@pytest.fixture
def other_include(cluster) -> str:
    """Headers of the Slurm the cluster does *not* run."""
    if cluster.version.has("json_data_parser"):
        return "/usr/include"  # Debian's libslurm-dev, 22.05
    return str(built_slurm() / "include")


def test_a_plugin_built_for_another_slurm_is_caught(cluster, tmp_path, other_include):
    out = tmp_path / "stale"
    subprocess.run(
        ["make", "-s", "-C", str(REPO / "spank"), f"OUT={out}", f"SLURM_INCLUDE={other_include}"],
        check=True,
        capture_output=True,
    )
    etc = tmp_path / "etc"
    shutil.copytree(Path(cluster.env["SLURM_CONF"]).parent, etc)
    conf = (etc / "slurm.conf").read_text().splitlines()
    conf = [
        f"PlugStackConfig={etc / 'plugstack.conf'}" if line.startswith("PlugStackConfig=") else line for line in conf
    ]
    (etc / "slurm.conf").write_text("\n".join(conf) + "\n")
    (etc / "plugstack.conf").write_text(f"optional {out / 'slurm_pool_spank.so'} base_dir=/tmp\n")
    res = doctor(cluster, EXAMPLE, SLURM_CONF=str(etc / "slurm.conf"))
    assert res.returncode == 1, res.stdout + res.stderr
    assert "FAIL  spank" in res.stdout and "was built for Slurm" in res.stdout, res.stdout
    assert "make -C spank SLURM_INCLUDE=" in res.stdout
    assert "ok    gres" in res.stdout and "ok    accounting" in res.stdout, res.stdout


def test_a_missing_qos_is_caught(cluster, tmp_path):
    def add_tier(d):
        d["tiers"].append({"name": "express", "priority": 700, "preempt_mode": "off"})

    res = doctor(cluster, spec_copy(tmp_path, add_tier))
    assert res.returncode == 1, res.stdout + res.stderr
    assert "FAIL  accounting" in res.stdout and "+ qos express" in res.stdout, res.stdout
    assert "slurm-pool apply accounting SPEC" in res.stdout
    assert "ok    spank" in res.stdout and "ok    gres" in res.stdout, res.stdout


def test_a_gres_type_mismatch_is_caught(cluster, tmp_path):
    def seven_slices(d):
        c = next(g for g in d["node_groups"] if g["name"] == "c")
        c["gpus"]["mig"] = [["1g.5gb"] * 7, None]

    res = doctor(cluster, spec_copy(tmp_path, seven_slices))
    assert res.returncode == 1, res.stdout + res.stderr
    assert "FAIL  gres" in res.stdout, res.stdout
    assert "c-gpu1: Slurm has" in res.stdout and "gpu:nvidia_a100_1g.5gb:7" in res.stdout, res.stdout
    assert "a-gpu1" not in res.stdout.split("FAIL  gres")[1].split("ok  ")[0], res.stdout
