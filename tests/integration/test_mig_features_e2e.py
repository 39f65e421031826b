"""Issue 15, check 1: MIG layouts as rebootless node features, through Slurm itself.

Node c-gpu1's group names two layouts (``mig_mixed``, the spec's, and
``mig_7x1g``).  A job asking ``--constraint=mig_7x1g`` makes slurmctld send
the feature change, and slurmd runs the Helper, which repartitions the
emulated GPU.  What the real daemons do next (measured on 26.05.3):

the node re-registers with ``mig_7x1g`` active, but slurmd still reports
the GRES it read at start, and the job runs on the old layout's GRES:
slurmd does not pick up new MIG GRES without a restart (see docs/mig.md).

Submit-to-start times, against a job needing no change, are printed.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.conftest import EXAMPLE_SPEC, TEST_SLURM
from tests.support.patience import wait_for

pytestmark = pytest.mark.slurm

SEVEN = ["1g.5gb"] * 7
MIXED = ["3g.20gb", "2g.10gb", "1g.5gb", "1g.5gb"]


@pytest.fixture(scope="module")
def features_cluster(tmp_path_factory):
    from slurm_pool.adapters.slurm import installed_version
    from slurm_pool.versions import SlurmVersion
    from tests.support.slurm_cluster import start_session_cluster, stop_session_cluster

    version = SlurmVersion.parse(TEST_SLURM) if TEST_SLURM and "/" not in TEST_SLURM else installed_version()
    assert version is not None, "no Slurm found"
    spec = yaml.safe_load(Path(EXAMPLE_SPEC).read_text())
    group = next(g for g in spec["node_groups"] if g["name"] == "c")
    group["gpus"]["layouts"] = {"mig_mixed": [MIXED, None], "mig_7x1g": [SEVEN, None]}
    d = tmp_path_factory.mktemp("features")
    d.chmod(0o755)
    path = d / "pool.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    if not version.has("rebootless_node_features"):
        yield version, path, None  # nothing to boot: the spec is refused for this release
        return
    handle, state = start_session_cluster(path, slurm=TEST_SLURM)
    yield version, path, handle
    stop_session_cluster(handle, state)


def _node(h) -> dict[str, str]:
    text = h.run([h.scontrol, "show", "node", "c-gpu1"]).stdout
    return dict(f.split("=", 1) for f in text.split() if "=" in f)


def _registered(h) -> dict[str, str] | None:
    """c-gpu1 as slurmctld has it once slurmd registered its active layout (None before)."""
    n = _node(h)
    return n if "mig_mixed" in n.get("ActiveFeatures", "").split(",") else None


def _submit(h, feature: str, gres: str = "gpu:nvidia_a100_1g.5gb:1") -> tuple[int, float]:
    job = h.sbatch(
        "-p",
        "c-owner",
        "--qos=guaranteed",
        "-A",
        "projc",
        f"--constraint={feature}",
        f"--gres={gres}",
        "-o",
        "/dev/null",
        user="carol",
        script="#!/bin/bash\nsleep 2\n",
    )
    return job, time.monotonic()


def _started(h, job: int, t0: float, timeout: float = 90) -> float:
    h.wait_state(job, ["RUNNING", "COMPLETED"], timeout=timeout)
    return time.monotonic() - t0


def _log(h) -> str:
    return (h.cluster.layout.log / "slurmd-c-gpu1.log").read_text(errors="replace")


def _device(h) -> list:
    return h.cluster.device_layouts().get("c-gpu1") or [MIXED, None]


def test_layout_feature_applied_by_slurmd(features_cluster, tmp_path):
    version, spec_path, h = features_cluster
    if h is None:  # before 24.05: render refuses the spec, naming the field, and writes nothing
        res = subprocess.run(
            [sys.executable, "-m", "slurm_pool.cli", "render", str(spec_path), "-o", str(tmp_path / "out"),
             "--slurm-version", str(version)],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert res.returncode == 2, (res.returncode, res.stderr)
        assert "node_groups[2].gpus.layouts" in res.stderr and "24.05" in res.stderr, res.stderr
        assert "Traceback" not in res.stderr and not (tmp_path / "out").exists(), res.stderr
        return
    assert h.version.has("rebootless_node_features")
    # slurmctld has the node's features from slurm.conf first and the Helper's once slurmd has registered with
    # them (and lists them before or after slurm.conf's as it registered): wait for that, not a first read.
    n = wait_for(lambda: _registered(h), 60, "slurmd to register c-gpu1's active layout feature")
    assert sorted(n["AvailableFeatures"].split(",")) == ["mig_7x1g", "mig_mixed", "projc"], n
    assert "mig_7x1g" not in n["ActiveFeatures"].split(","), n
    old_gres = n["Gres"]

    # A job needing no change.
    job, t0 = _submit(h, "mig_mixed")
    no_change = _started(h, job, t0)
    h.wait_state(job, ["COMPLETED"], timeout=60)

    # The Helper: the GPU changes, the feature turns active, GRES stay as slurmd read them at start.
    job, t0 = _submit(h, "mig_7x1g")
    helper_only = _started(h, job, t0)
    assert "Node features change request mig_7x1g being processed" in _log(h)
    assert [list(x) if x else x for x in _device(h)] == [SEVEN, None]
    n = _node(h)
    assert "mig_7x1g" in n["ActiveFeatures"], n
    assert n["Gres"] == old_gres, n  # the old layout's GRES: no pick-up without a restart
    h.wait_state(job, ["COMPLETED"], timeout=60)

    print(f"\nsubmit->start: no change {no_change:.1f}s; layout change by the Helper {helper_only:.1f}s (old GRES)")
