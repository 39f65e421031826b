"""The plan of a site read as ``rebalance`` reads it equals the recorded plan of its JSON documents.

``bench/scale_bridge.py`` measures planning after the real read: the narrow ``sinfo``/``squeue``
text through :class:`~slurm_pool.bridge.slurm_side.SlurmSide`, and ``squeue --json`` for the jobs
text cannot say, by id or, past ``FALLBACK_LIST_MAX``, the whole document streamed with only
those jobs kept.  On the seeded sites of ``tests/unit/test_bridge_scale_equal.py`` each way makes
the plan ``tests/golden/bridge-scale/plans.json`` recorded from the JSON records.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from bench.scale_bridge import BridgeRunner, Inputs, load_answers, record_answers, run_plan, world, write_document
from slurm_pool.adapters import narrow

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "bridge-scale" / "plans.json"
#: Seeds of sites with jobs text cannot say, and (WITHOUT) of sites read from text alone.
SEEDS = (0, 3, 7, 11, 17, 23, 29, 37, 42, 50)
WITHOUT = frozenset({11, 29})


@pytest.fixture(scope="module")
def golden():
    return json.loads(GOLDEN.read_text())


def site(seed: int, where: Path) -> Path:
    """Seed ``seed``'s site of the scale test, written as the bench writes it, with its narrow answers."""
    rng = random.Random(f"size-{seed}")
    nodes = rng.randrange(5, 61)
    docs = world(seed, nodes, rng.randrange(0, rng.choice([nodes // 2, 301]))).documents()
    for name, doc in docs.items():
        write_document(where / name, doc)
    record_answers(where, (docs["nodes.json"], docs["squeue.json"]))
    return where


@pytest.mark.parametrize("whole", [False, True], ids=["by-id", "streamed"])
@pytest.mark.parametrize("seed", SEEDS)
def test_plan_of_the_read_equals_the_recorded_one(seed, whole, golden, tmp_path, monkeypatch):
    if whole:
        monkeypatch.setattr(narrow, "FALLBACK_LIST_MAX", 0)
    where = site(seed, tmp_path)
    runner = BridgeRunner(where, load_answers(where))
    inputs = Inputs.read(runner, where)
    assert not runner.parsed_late  # every narrow read was answered from the recorded text
    if seed in WITHOUT:
        assert runner.json_reads == []
    elif whole:
        assert runner.json_reads == ["squeue --json (streamed)"]
    else:
        assert len(runner.json_reads) == 1 and runner.json_reads[0].startswith("squeue --json --jobs=(")
    assert json.loads(json.dumps(run_plan(inputs).to_dict())) == golden[str(seed)]
