"""The robustness sweep (bench/robustness.py) on a small sample: no CLI or parser mishandles malformed input.

The full sweep, whose table is docs/robustness.md, runs the same code with more inputs per target.
"""

from __future__ import annotations

import importlib.util
import json
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


@pytest.mark.parametrize("seed", [31, 32])
def test_bad_input_to_every_api_endpoint_is_a_4xx_naming_the_field(robustness, seed):
    # The REST API's rows of docs/robustness.md on a sample: POST bodies, path values, GET queries.
    results = robustness.run_api(per_target=40, seed=seed, timeout=60.0)
    assert len(results) >= 6 and all(t.tried == 40 for t in results.values())
    failures = [f"{name}: {f}" for name, t in results.items() for f in t.failures]
    assert failures == []


@pytest.mark.parametrize(
    "status,body,field,problem",
    [
        (200, b'{"ok": true}', None, None),
        (422, b'{"status": 422, "message": "body.gpus: too big", "field": "body.gpus"}', "body.gpus", None),
        (422, b'{"status": 422, "message": "x", "field": "body.k..."}', "body.kkkk", None),  # cut when long
        (404, b'{"status": 404, "message": "no job", "field": "job_id"}', "path.job_id", None),  # only a 422 names
        (500, b'{"status": 500, "message": "internal error"}', None, "HTTP 500"),
        (400, b"Traceback (most recent call last):", None, "traceback"),
        (400, b"<html>bad</html>", None, "not JSON"),
        (422, b'{"status": 422, "message": ""}', None, "message"),
        (422, b'{"status": 422, "message": "x", "field": "body.tier"}', "body.gpus", "not the changed"),
        (422, json.dumps({"status": 422, "message": "x", "field": "body.x\\x1b"}).encode(), "body.x\x1b", None),
        (422, b'{"status": 422, "message": "x", "field": "body.x\\u001b"}', None, "control character"),
        (422, b'{"status": 422, "message": "' + b"k" * 5000 + b'"}', None, "echoing"),
    ],
)
def test_the_api_sweep_can_fail(robustness, status, body, field, problem):
    got = robustness.http_verdict(status, body, field)
    assert (got is None) if problem is None else (problem in got), got


def test_the_api_sweep_catches_a_500(robustness, monkeypatch):
    # A view that raises makes the service answer 500: every explain and submit request is then a failure.
    from slurm_pool.web import submitting

    def broken(*_args, **_kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(submitting, "explain", broken)
    results = robustness.run_api(per_target=20, seed=1, timeout=60.0)
    bad = results["REST API: POST /api/v1/jobs/explain body"].failures
    assert bad and any("HTTP 500" in f for f in bad)
    assert results["REST API: POST /api/v1/login body"].failures == []


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


NUMBER_OPTIONS = [
    (["run"], "--warn-seconds", "1_0"),
    (["run"], "--max-self-requeues", "١٢"),
    (["status"], "--last", "1_0"),
    (["rebalance"], "--force-after", "٣"),
    (["fence-node"], "--seconds", "nan"),
    (["fence-node"], "--seconds", "inf"),
    (["elastic", "submit"], "--min", "1_0"),
    (["elastic", "submit"], "--leave-seconds", "٢٠"),
    (["elastic", "node"], "--core", "1_0"),
    (["elastic", "node"], "--min", "0"),
    (["elastic", "node"], "--last-call-timeout", "-1"),
    (["cluster", "up"], "--port-base", "-1"),
    (["cluster", "up"], "--port-base", "99999"),
    (["cluster", "up"], "--port-base", "1_6800"),
]


@pytest.mark.parametrize("path,option,value", NUMBER_OPTIONS)
def test_number_options_refuse_what_int_reads_too_kindly(path, option, value):
    # click's int() takes 1_0 and other scripts' digits; its FloatRange takes nan and inf
    # (fence-node --seconds nan never reached its deadline).
    import click

    from slurm_pool.cli import cli

    cmd: click.Command = cli
    ctx = click.Context(cli)
    for name in path:
        assert isinstance(cmd, click.Group)
        cmd = cmd.get_command(ctx, name)  # type: ignore[assignment]
    param = next(p for p in cmd.params if option in p.opts)
    with pytest.raises(click.BadParameter):
        param.type.convert(value, param, ctx)


@pytest.mark.parametrize("value", ["abc", "-1", "1_6800", "99999", "16800\\nSlurmctldPort=1"])
def test_local_cluster_port_base_from_the_environment_is_checked(monkeypatch, tmp_path, value):
    from slurm_pool.localcluster.cluster import ClusterError, LocalCluster

    monkeypatch.setenv("SLURM_POOL_PORT_BASE", value.replace("\\n", "\n"))
    with pytest.raises(ClusterError, match="port base"):
        LocalCluster(ROOT / "examples" / "pool.yaml", tmp_path / "state")
