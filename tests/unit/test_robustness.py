"""The robustness sweep (bench/robustness.py) on a small sample: no CLI or parser mishandles malformed input.

The full sweep, whose table is docs/robustness.md, runs the same code with more inputs per target.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def robustness():
    spec = importlib.util.spec_from_file_location("robustness", ROOT / "bench" / "robustness.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["robustness"] = mod  # dataclasses look their module up while the class is made
    spec.loader.exec_module(mod)
    yield mod
    sys.modules.pop("robustness", None)


@pytest.mark.parametrize("seed", [11, 12])
def test_every_malformed_input_is_handled_cleanly(robustness, seed):
    results = robustness.run(per_target=25, seed=seed, timeout=60.0)
    assert len(results) >= 15 and all(t.tried for t in results.values())
    failures = [f"{name}: {f}" for name, t in results.items() for f in t.failures]
    assert failures == []


def test_the_sweep_can_fail(robustness):
    # A CLI that prints a traceback and a parser that raises a foreign error are counted as failures.
    t = robustness.Tally()
    robustness.check_parser(t, "boom", lambda: 1 / 0, (ValueError,))
    robustness.check_cli(t, ["validate", str(ROOT / "examples" / "pool.yaml")], 60.0)
    assert (t.tried, t.clean, len(t.failures)) == (2, 1, 1) and "ZeroDivisionError" in t.failures[0]
