"""``rebalance --dry-run`` with a forecast: real sacct history, Prometheus unreachable (issue 10)."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

pytestmark = pytest.mark.slurm

EXAMPLE_SPEC = Path(__file__).resolve().parents[2] / "examples" / "pool.yaml"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_dry_run_shows_the_forecast_behind_its_plan(bridge, monkeypatch, tmp_path):
    from slurm_pool.cli import cli

    for key, value in bridge.cluster.env.items():
        monkeypatch.setenv(key, value)
    spec = yaml.safe_load(EXAMPLE_SPEC.read_text())
    spec["bridge"]["forecast"] = {"history_days": 2, "prometheus_url": f"http://127.0.0.1:{_closed_port()}"}
    path = tmp_path / "pool.yaml"
    path.write_text(yaml.safe_dump(spec))
    argv = ["rebalance", "--spec", str(path), "--kubeconfig", str(bridge.kubeconfig), "--dry-run"]
    result = CliRunner().invoke(cli, [*argv, "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    fc = out["forecast"]
    assert fc["inference_gpus"] is None and fc["slurm_ahead_seconds"] == 900
    assert fc["slurm_gpus"].keys() == {"a", "b", "c"} and fc["slurm_gpus"]["a"]["capacity"] == 4
    assert any("no inference history" in n for n in out["notes"]), out["notes"]
    text = CliRunner().invoke(cli, argv, catch_exceptions=False)
    assert text.exit_code == 0 and "forecast: inference no history within 600s" in text.output, text.output
    assert bridge.placeholders() == [], "a dry run submits nothing"
