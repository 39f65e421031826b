"""``docs/grafana/slurm-pool.json``: its structure, that it uses only metrics the exporter exports,
and the matplotlib renderer (:mod:`slurm_pool.metrics.panels`) against a fake query API."""

from __future__ import annotations

import json
import re
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from click.testing import CliRunner
from prometheus_client import CollectorRegistry

from slurm_pool.adapters.runner import RecordingRunner
from slurm_pool.adapters.slurm import SlurmClient
from slurm_pool.cli import cli
from slurm_pool.errors import InputError
from slurm_pool.metrics import panels as pn
from slurm_pool.metrics.collector import PoolCollector

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "docs" / "grafana" / "slurm-pool.json"
DATA = REPO / "tests" / "data" / "slurm" / "22.05"
METRIC = re.compile(r"\b(slurm_[A-Za-z0-9_]*)")
#: What the issue asks the dashboard to show, by the metric that shows it.
REQUIRED = {
    "pool utilisation": "slurm_pool_gpu_utilization_ratio",
    "per-tier allocation": "slurm_pool_allocated_gpus",
    "per-project allocation": "slurm_pool_project_allocated_gpus",
    "lent capacity": "slurm_pool_lent_nodes",
    "preemptions and checkpoint outcomes": "slurm_pool_preemptions_total",
    "job runs by reason": "slurm_pool_job_runs_total",
    "drains": "slurm_pool_drained_nodes",
    "inference demand": "slurm_pool_inference_demand_gpus",
}


@pytest.fixture(scope="module")
def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def exported_names(tmp_path: Path) -> set[str]:
    """Every family and sample name the collector exports (outcome counters included)."""
    (tmp_path / "a-gpu1").mkdir()
    (tmp_path / "a-gpu1" / "outcomes.jsonl").write_text(
        json.dumps({"v": 1, "reason": "preempt", "preempted": True, "checkpoint_age_s": 1.0}) + "\n"
    )
    r = RecordingRunner()
    r.on(["sinfo", "--version"], "slurm 22.05.8\n")
    r.on(["sinfo", "--json"], (DATA / "nodes-lent.json").read_text())
    r.on(["squeue", "--json"], (DATA / "squeue-lent.json").read_text())
    reg = CollectorRegistry()
    inference = lambda: {"nvidia.com/gpu": 2, "nvidia.com/mig-3g.20gb": 1}  # noqa: E731 - the bridge's reader
    rebalance = lambda: {"seconds": 12.5, "end": 1.8e9, "steps": 3.0}  # noqa: E731 - the Lease's run record
    reg.register(PoolCollector(SlurmClient(r), state_dir=str(tmp_path), inference=inference, rebalance=rebalance))
    names = set()
    for fam in reg.collect():
        names.add(fam.name)
        names.update(s.name for s in fam.samples)
    return names


def test_dashboard_is_an_importable_grafana_export(dashboard):
    assert 36 <= dashboard["schemaVersion"] <= 41
    assert dashboard["uid"] == "slurm-pool" and dashboard["title"]
    assert [i["name"] for i in dashboard["__inputs"]] == ["DS_PROMETHEUS"]
    assert dashboard["__inputs"][0]["pluginId"] == "prometheus"
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for p in dashboard["panels"]:
        g = p["gridPos"]
        assert g["x"] + g["w"] <= 24 and g["w"] > 0 and g["h"] > 0, p["title"]


def test_every_panel_has_a_title_and_prometheus_targets(dashboard):
    panels = list(pn.panels(dashboard))
    assert len(panels) >= 10
    for p in panels:
        assert p["title"].strip(), p
        assert p["type"] in ("timeseries", "stat", "table"), p["title"]
        assert p["datasource"] == {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}, p["title"]
        refs = [t["refId"] for t in p["targets"]]
        assert len(refs) == len(set(refs)), p["title"]
        for t in p["targets"]:
            assert t["expr"].strip() and t["expr"].count("(") == t["expr"].count(")"), (p["title"], t)
            assert t["datasource"]["uid"] == "${DS_PROMETHEUS}", p["title"]


def test_exprs_use_only_metrics_the_collector_exports(dashboard, tmp_path):
    names = exported_names(tmp_path)
    used = set()
    for p in pn.panels(dashboard):
        for t in p["targets"]:
            found = set(METRIC.findall(t["expr"]))
            assert found, (p["title"], t["expr"])
            assert found <= names, (p["title"], found - names)
            used |= found
    for what, metric in REQUIRED.items():
        assert metric in used, what


def test_exprs_use_only_known_variables(dashboard):
    values = pn.variables(dashboard)
    assert values["lend_partition"] == "k8s-lend"
    for p in pn.panels(dashboard):
        for t in p["targets"]:
            assert "$" not in pn.expand(t["expr"], values), t["expr"]


@pytest.mark.parametrize(
    "expr, want",
    [
        ("rate(x[$__rate_interval])", "rate(x[2m])"),
        ('x{p="$lend_partition"}', 'x{p="k8s-lend"}'),
        ('x{p="${lend_partition}"}', 'x{p="k8s-lend"}'),
        ("increase(x[$__range]) / $__interval", "increase(x[1h]) / 2m"),
    ],
)
def test_expand(expr, want):
    values = {"__rate_interval": "2m", "__interval": "2m", "__range": "1h", "lend_partition": "k8s-lend"}
    assert pn.expand(expr, values) == want


@pytest.mark.parametrize(
    "fmt, labels, want",
    [
        ("{{tier}}", {"tier": "guaranteed"}, "guaranteed"),
        ("checkpointed={{ checkpointed }}", {"checkpointed": "true"}, "checkpointed=true"),
        ("{{missing}}x", {}, "x"),
        ("{{missing}}", {"a": "1"}, "a=1"),
        ("", {"__name__": "m", "b": "2", "a": "1"}, "a=1,b=2"),
        ("", {}, "value"),
    ],
)
def test_legend(fmt, labels, want):
    assert pn.legend(fmt, labels) == want


def test_panels_of_collapsed_rows_count():
    d = {"panels": [{"type": "row", "panels": [{"id": 1, "targets": [{"expr": "a"}]}]}, {"id": 2, "targets": []}]}
    assert [p["id"] for p in pn.panels(d)] == [1]


@pytest.mark.parametrize("text, message", [("{", "not JSON"), ("[]", "no 'panels' list"), ('{"panels": 1}', "panels")])
def test_load_dashboard_rejects(tmp_path, text, message):
    path = tmp_path / "d.json"
    path.write_text(text)
    with pytest.raises(InputError, match=message):
        pn.load_dashboard(path)


class FakePrometheus(BaseHTTPRequestHandler):
    """``/api/v1/query_range``: two series for any query, an error for ``bad``."""

    queries: list[dict[str, str]] = []
    tiers: tuple[str, ...] = ("a", "b")

    def do_GET(self) -> None:  # noqa: N802 -- http.server's name
        q = dict(urllib.parse.parse_qsl(urllib.parse.urlparse(self.path).query))
        type(self).queries.append(q)
        if "bad" in q.get("query", ""):
            code, body = 400, {"status": "error", "errorType": "bad_data", "error": "parse error"}
        else:
            start = float(q["start"])
            values = [[start + i, str(i % 3)] for i in range(10)]
            result = [{"metric": {"tier": t}, "values": values} for t in type(self).tiers]
            code, body = 200, {"status": "success", "data": {"resultType": "matrix", "result": result}}
        raw = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def fake_prometheus():
    FakePrometheus.queries = []
    FakePrometheus.tiers = ("a", "b")
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakePrometheus)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    server.server_close()


def test_render_panels_writes_one_png_per_panel(dashboard, fake_prometheus, tmp_path):
    pytest.importorskip("matplotlib")
    done = pn.render_panels(dashboard, fake_prometheus, tmp_path, range_s=600, end=1_700_000_000.0)
    want = list(pn.panels(dashboard))
    assert [r.title for r in done] == [p["title"] for p in want]
    assert len({r.path for r in done}) == len(done)
    for r in done:
        assert r.path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and r.path.stat().st_size > 2000, r
        assert r.series >= 2
    queries = FakePrometheus.queries
    assert len(queries) == sum(len(p["targets"]) for p in want)
    assert all("$" not in q["query"] for q in queries)
    assert {q["start"] for q in queries} == {str(1_700_000_000.0 - 600)}


def test_dashboard_png_command(fake_prometheus, tmp_path):
    pytest.importorskip("matplotlib")
    res = CliRunner().invoke(
        cli, ["dashboard-png", str(DASHBOARD), "--prometheus", fake_prometheus, "--out", str(tmp_path)]
    )
    assert res.exit_code == 0, res.output
    assert len(list(tmp_path.glob("*.png"))) == len(list(pn.panels(json.loads(DASHBOARD.read_text()))))
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"panels": [{"id": 1, "title": "t", "targets": [{"expr": "bad("}]}]}))
    res = CliRunner().invoke(cli, ["dashboard-png", str(bad), "--prometheus", fake_prometheus, "--out", str(tmp_path)])
    assert res.exit_code == 1 and "error: 'bad(': bad_data: parse error" in res.output, res.output
    res = CliRunner().invoke(cli, ["dashboard-png", str(bad), "--prometheus", "http://127.0.0.1:1", "--out", "x"])
    assert res.exit_code == 1 and res.output.startswith("error: http://127.0.0.1:1"), res.output


def test_dashboard_png_writes_every_panel_or_none(fake_prometheus, tmp_path):
    # A query that fails on the second panel leaves no PNG of the first.
    pytest.importorskip("matplotlib")
    two = tmp_path / "two.json"
    targets = [[{"expr": "up"}], [{"expr": "bad("}]]
    two.write_text(json.dumps({"panels": [{"id": i, "title": f"p{i}", "targets": t} for i, t in enumerate(targets)]}))
    out = tmp_path / "out"
    res = CliRunner().invoke(cli, ["dashboard-png", str(two), "--prometheus", fake_prometheus, "--out", str(out)])
    assert res.exit_code == 1, res.output
    assert not out.exists() or not list(out.iterdir())


@pytest.mark.parametrize(
    "label,want",
    [("a-gpu1", "a-gpu1"), ("$x$", r"\$x\$"), ("_hidden", " _hidden"), ("a\x1b[2J", "a\\x1b[2J")],
    ids=ascii,
)
def test_plot_text_is_shown_literally(label, want):
    assert pn.plot_text(label) == want


def test_label_values_are_never_read_as_mathtext(dashboard, fake_prometheus, tmp_path):
    # Issue 30: a label value from Slurm (a node name, a reason) with "$" made matplotlib parse mathtext,
    # and a malformed one ended the drawing in a traceback.
    pytest.importorskip("matplotlib")
    FakePrometheus.tiers = ("$\\frac{$", "_x", "a\x1b[2J$")
    done = pn.render_panels(dashboard, fake_prometheus, tmp_path, range_s=600, end=1_700_000_000.0)
    assert done and all(r.series >= 3 for r in done)
