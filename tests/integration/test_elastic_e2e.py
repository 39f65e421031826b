"""Issue 14, check 3: elastic training grows into idle GPUs and shrinks when an owner takes one back.

``slurm-pool elastic submit --min 1 --max 3`` on the session cluster: the
core runs in alice's guaranteed tier on a-gpu1; two extensions wait in the
scavenger tier for a-gpu2, which a shared-tier job of bob's holds.  The
training (examples/elastic_train.py, gloo on CPU, torch 2.15.0 from the cached
test environment) starts at one node; when bob's job ends, both extensions
start and it grows to three; alice's guaranteed job on a-gpu2 then preempts
one, and it re-forms at two from its last checkpoint.  Its final weights
equal those of an uninterrupted one-process run of the same global batch, to
the rounding of floating-point sums in a different order (1e-5).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from slurm_pool.adapters.records import parse_jobs
from tests.support.elastic_env import TORCH, progress, worlds
from tests.support.patience import wait_for
from tests.support.slurm_cluster import job_workdir

pytestmark = pytest.mark.slurm

REPO = Path(__file__).resolve().parents[2]
TRAIN = REPO / "examples" / "elastic_train.py"
STEPS = 400
SLEEP = "#!/bin/sh\nsleep 600\n"


@pytest.fixture(scope="module")
def torchrun() -> str:
    return str(TORCH.build().bin / "torchrun")


@pytest.fixture
def workdir() -> Path:
    return job_workdir("sp-elastic")


def _reference(torchrun: str, workdir: Path) -> list[list[float]]:
    """The same training, uninterrupted, in one process."""
    ref = workdir / "reference"
    ref.mkdir()
    env = {**os.environ, "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
    subprocess.run(
        [torchrun, "--standalone", "--nnodes=1", "--nproc-per-node=1", str(TRAIN), "--checkpoint-dir", str(ref),
         "--steps", str(STEPS)],
        check=True, capture_output=True, timeout=300, env=env,
    )  # fmt: skip
    return json.loads((ref / "final.json").read_text())["weights"]


def _wait_progress(workdir: Path, what: str, check, timeout: float = 240) -> list[dict]:
    try:
        return wait_for(lambda: (lambda rows: rows if check(rows) else None)(progress(workdir)), timeout, what)
    except TimeoutError as exc:
        rows = progress(workdir)
        outs = "\n".join(
            f"--- {p.name}\n{p.read_text(errors='replace')[-2500:]}" for p in sorted(workdir.glob("*.out"))
        )
        raise AssertionError(f"{exc}; worlds so far {worlds(rows)}, {len(rows)} steps\n{outs}") from None


def test_elastic_training_grows_into_idle_gpus_and_reforms_when_preempted(cluster, workdir, torchrun):
    common = ["-o", "/dev/null", "-D", "/tmp"]
    blocker = cluster.sbatch(
        "-p", "shared", "--qos=shared", "-A", "projb", "-t", "10", "-w", "a-gpu2", "--gres=gpu:2", *common,
        user="bob", script=SLEEP,
    )  # fmt: skip
    cluster.wait_state(blocker, ["RUNNING"], timeout=60)
    env = {**os.environ, **cluster.env, "PYTHONPATH": str(REPO)}
    res = subprocess.run(
        [sys.executable, "-m", "slurm_pool.cli", "elastic", "submit", "--min", "1", "--max", "3",
         "--core", "-p a-owner --qos=guaranteed -A proja -w a-gpu1",
         "--extension", "-p scavenger --qos=scavenger -A proja -w a-gpu2",
         "--sbatch", f"--uid=alice --gres=gpu:1 -o {workdir}/%j.out -D {workdir}",
         "--torchrun", torchrun, "--leave-seconds", "15",
         "--", str(TRAIN), "--checkpoint-dir", str(workdir), "--steps", str(STEPS), "--step-seconds", "0.3"],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    ids = json.loads(res.stdout)
    core, extensions = ids["core"], ids["extensions"]
    assert len(extensions) == 2 and ids["extension_name"] == f"elastic-{core}-ext"

    # One node while a-gpu2 is busy: the extensions wait.
    _wait_progress(workdir, "the core to train alone", lambda rows: len(rows) >= 3 and rows[-1]["world"] == 1)
    for ext in extensions:
        assert cluster.job_field(ext, "%T") == "PENDING"
    # a-gpu2's GPUs come free: both extensions start and the job grows to three nodes.
    cluster.run(["scancel", str(blocker)], check=True)
    grown = _wait_progress(workdir, "the job to grow to 3 nodes", lambda rows: rows and rows[-1]["world"] == 3)
    assert worlds(grown)[0] == 1

    # An owner takes one GPU of a-gpu2 back: one extension leaves, the job re-forms at two.
    owner = cluster.sbatch(
        "-p", "a-owner", "--qos=guaranteed", "-A", "proja", "-w", "a-gpu2", "--gres=gpu:1", *common,
        user="alice", script=SLEEP,
    )  # fmt: skip
    cluster.wait_state(owner, ["RUNNING"], timeout=120)
    _wait_progress(workdir, "the job to re-form at 2 nodes", lambda rows: worlds(rows)[-1:] == [2])
    wait_for(lambda: (workdir / "final.json").is_file(), 300, "the training to finish")
    cluster.wait_state(core, ["COMPLETED"], timeout=120)

    rows = progress(workdir)
    assert worlds(rows)[:3] == [1, 3, 2] and rows[-1]["step"] == STEPS, worlds(rows)
    final = json.loads((workdir / "final.json").read_text())
    assert final["step"] == STEPS
    want = _reference(torchrun, workdir)
    diff = max(
        abs(a - b)
        for got_p, want_p in zip(final["weights"], want, strict=True)
        for a, b in zip(got_p, want_p, strict=True)
    )
    assert diff <= 1e-5, f"final weights differ from the uninterrupted run by {diff}"

    # The core's end cancels its extensions (a requeued one too): none is left.
    def extensions_gone() -> bool:
        out = cluster.run(["squeue", "--json"], check=True).stdout
        return not [j for j in parse_jobs(out) if j.name == ids["extension_name"] and j.state.base in
                    ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING")]  # fmt: skip

    wait_for(extensions_gone, 60, "the extensions to be gone once the core finished")
