"""The robustness sweep (bench/robustness.py) on a small sample: no CLI or parser mishandles malformed input.

The full sweep, whose table is docs/robustness.md, runs the same code with more inputs per target.
"""

from __future__ import annotations

import importlib.util
import sys
import types
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


@pytest.mark.parametrize("seed", [21, 22])
def test_hostile_values_are_refused_or_come_out_harmless(robustness, seed):
    # The third round (bench/hostile.py) on a sample of each target's cases; docs/robustness.md has all of them.
    results = robustness.hostile.run(per_target=12, seed=seed, timeout=60.0)
    assert len(results) >= 8 and all(t.tried for t in results.values())
    failures = [f"{name}: {f}" for name, t in results.items() for f in t.failures]
    assert failures == []


@pytest.mark.parametrize(
    "output,code,accept,problem",
    [
        ("nodes: a-gpu1\n", 0, None, None),
        ("node \x1b[2J\n", 0, None, "raw control character"),
        ("x\u2028y", 0, None, "raw control character"),
        ("error: bad\n", 2, None, None),
        ("bad\n", 2, None, "without an error message"),
        ("Traceback (most recent call last):\n", 1, None, "traceback"),
        ("ok\n", 0, lambda r: "wrote a line it should not", "should not"),
    ],
)
def test_the_hostile_sweep_can_fail(robustness, output, code, accept, problem):
    res = types.SimpleNamespace(output=output, exit_code=code, exception=None)
    got = robustness.hostile.verdict(res, accept or (lambda r: None))
    assert (got is None) if problem is None else (problem in got), got


def test_the_sweep_can_fail(robustness):
    # A CLI that prints a traceback and a parser that raises a foreign error are counted as failures.
    t = robustness.Tally()
    robustness.check_parser(t, "boom", lambda: 1 / 0, (ValueError,))
    robustness.check_cli(t, ["validate", str(ROOT / "examples" / "pool.yaml")], 60.0)
    assert (t.tried, t.clean, len(t.failures)) == (2, 1, 1) and "ZeroDivisionError" in t.failures[0]
