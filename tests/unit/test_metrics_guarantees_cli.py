"""The exporter reads floating guarantees from a spec that has them, and from no other."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_pool.metrics.cli import guarantees_reader

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.mark.parametrize(
    ("example", "floating"),
    [("pool.yaml", False), ("pool-coexist.yaml", False), ("pool-floating.yaml", True)],
)
def test_guarantees_reader_follows_the_spec(example: str, floating: bool):
    reader = guarantees_reader(str(EXAMPLES / example), "k8s-lend")
    assert (reader is not None) is floating
    if reader is not None:
        status = reader([])  # no jobs: every guarantee is unused
        assert status is not None
        assert [(r["project"], r["in_use_gpus"]) for r in status["projects"]] == [("projd", 0), ("proje", 0)]
