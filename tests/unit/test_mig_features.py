"""MIG layouts as node features: the spec, helpers.conf, and the Helper's contract (helpers.conf(5))."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from slurm_pool.errors import SpecError
from slurm_pool.mig.features import FAILED, OK, USAGE, HelperDevice, node_table, other_jobs, parse_exec_time, run_helper
from slurm_pool.mig.placement import Layout
from slurm_pool.render import Site, SlurmVersion, render_all
from slurm_pool.spec import load_spec

REPO = Path(__file__).resolve().parents[2]
SEVEN = ["1g.5gb"] * 7
MIXED = ["3g.20gb", "2g.10gb", "1g.5gb", "1g.5gb"]
TABLE = node_table([(["n1"], "A100-40GB", 2, {"mig_mixed": [MIXED, None], "mig_7x1g": [SEVEN, None]})])


@dataclass
class FakeBackend:
    state: dict[int, Layout | None]
    fail_on: int | None = None
    cost: float = 0.0
    clock: list[float] = field(default_factory=lambda: [0.0])
    applied: list[tuple[int, Layout | None]] = field(default_factory=list)

    def layouts(self, node: str) -> dict[int, Layout | None]:
        return dict(self.state)

    def apply(self, node: str, gpu: int, layout: Layout | None) -> None:
        self.clock[0] += self.cost
        self.applied.append((gpu, layout))
        if gpu == self.fail_on and layout != self.before(gpu):
            self.state[gpu] = ("1g.5gb",)  # half-done
            raise RuntimeError("nvidia-smi: In use by another client")
        self.state[gpu] = None if layout is None else tuple(layout)

    def before(self, gpu: int) -> Layout | None:
        return (tuple(MIXED), None)[gpu]


def _run(feature, backend, busy=(), exec_time=10.0, node="n1"):
    device = HelperDevice(backend, lambda _n: list(busy))
    return run_helper(feature, node, TABLE, device, exec_time, clock=lambda: backend.clock[0])


@pytest.mark.parametrize(
    "state,feature,busy,fail_on,cost,code,out,after",
    [
        # Query: the active layouts, one per line; none active prints nothing (both exit 0).
        ({0: tuple(MIXED), 1: None}, None, (), None, 0, OK, ["mig_mixed"], {0: tuple(MIXED), 1: None}),
        ({0: tuple(reversed(MIXED)), 1: None}, None, (), None, 0, OK, ["mig_mixed"], None),
        ({0: (), 1: None}, None, (), None, 0, OK, [], None),
        # Set: applied; already active is a no-op.
        ({0: tuple(MIXED), 1: None}, "mig_7x1g", (), None, 0, OK, [], {0: tuple(SEVEN), 1: None}),
        ({0: tuple(SEVEN), 1: None}, "mig_7x1g", (), None, 0, OK, [], {0: tuple(SEVEN), 1: None}),
        # Unknown layout: usage error, nothing touched.
        ({0: tuple(MIXED), 1: None}, "mig_nope", (), None, 0, USAGE, [], {0: tuple(MIXED), 1: None}),
        # Other work on the node: refused, nothing touched.
        ({0: tuple(MIXED), 1: None}, "mig_7x1g", ["job 7 is RUNNING"], None, 0, FAILED, [], {0: tuple(MIXED), 1: None}),
        # A failing repartition is rolled back.
        ({0: tuple(MIXED), 1: None}, "mig_7x1g", (), 0, 0, FAILED, [], {0: tuple(MIXED), 1: None}),
        # Past the ExecTime budget before the GPU: not started.
        ({0: tuple(MIXED), 1: ()}, "mig_7x1g", (), None, 7.0, FAILED, [], {0: tuple(MIXED), 1: ()}),
    ],
)
def test_helper_contract(state, feature, busy, fail_on, cost, code, out, after):
    backend = FakeBackend(dict(state), fail_on=fail_on, cost=cost)
    res = _run(feature, backend, busy)
    assert (res.code, res.out) == (code, out), res.err
    if after is not None:
        assert backend.state == after
    if code != OK:
        assert res.err


def test_helper_overrun_rolls_back():
    # GPU 0 and GPU 1 both change; applying GPU 0 uses the budget, so GPU 1 is never started and GPU 0 rolls back.
    table = node_table([(["n1"], "A100-40GB", 2, {"all7": [SEVEN, SEVEN]})])
    backend = FakeBackend({0: tuple(MIXED), 1: tuple(MIXED)}, cost=7.0)
    res = run_helper("all7", "n1", table, HelperDevice(backend, lambda _n: []), 10.0, clock=lambda: backend.clock[0])
    assert res.code == FAILED and "ExecTime" in res.err[0], res.err
    assert backend.state == {0: tuple(MIXED), 1: tuple(MIXED)}
    assert "left as they were" in res.err[-1]


def test_helper_unknown_node_and_unreadable_gpu():
    assert _run(None, FakeBackend({}), node="other").code == USAGE

    class Broken(FakeBackend):
        def layouts(self, node):
            raise OSError("NVML not found")

    assert _run(None, Broken({})).code == FAILED


@pytest.mark.parametrize(
    "jobs,busy",
    [
        ([("12", "CONFIGURING")], []),
        ([("12", "CONFIGURING"), ("13", "RUNNING")], ["job 13 is RUNNING"]),
        ([("14", "COMPLETING"), ("15", "SUSPENDED")], ["job 14 is COMPLETING", "job 15 is SUSPENDED"]),
        ([("16", "PENDING"), ("17", "")], []),  # a line squeue printed without a state is no job known to run
        ([], []),
    ],
)
def test_other_jobs(jobs, busy):
    assert other_jobs(jobs) == busy


@pytest.mark.parametrize("text,want", [("ExecTime=60\n", 60), ("# x\nexectime = 5 # c\n", 5), ("", 10)])
def test_parse_exec_time(text, want):
    assert parse_exec_time(text) == want


def _spec(tmp_path, layouts, features=("projc",)):
    data = yaml.safe_load((REPO / "examples" / "pool.yaml").read_text())
    group = next(g for g in data["node_groups"] if g["name"] == "c")
    group["gpus"]["layouts"] = layouts
    group["features"] = list(features)
    p = tmp_path / "pool.yaml"
    p.write_text(yaml.safe_dump(data, sort_keys=False))
    return p


def test_render_helpers_conf(tmp_path):
    spec = load_spec(_spec(tmp_path, {"mig_mixed": [MIXED, None], "mig_7x1g": [SEVEN, None]}))
    files = render_all(spec, Site(bin_dir="/opt/bin"), SlurmVersion.parse("26.05"))
    assert (
        "NodeName=c-gpu1 Feature=mig_mixed,mig_7x1g Helper=/opt/bin/slurm-pool-mig-helper Flags=rebootless"
        in (files["helpers.conf"])
    )
    assert "ExecTime=60\n" in files["helpers.conf"]
    conf = files["slurm.conf"]
    assert "NodeFeaturesPlugins=node_features/helpers\n" in conf and "RebootProgram=/sbin/reboot\n" in conf
    assert "Features=projc,mig_mixed,mig_7x1g " in conf
    table = json.loads(files["slurm-pool-mig-layouts.json"])
    assert table["nodes"]["c-gpu1"]["layouts"]["mig_7x1g"] == [SEVEN, None]
    # Several slurmd on one host: one Helper per node.
    local = render_all(spec, Site(bin_dir="/b", node_ports={"c-gpu1": 1}), SlurmVersion.parse("24.05"))
    assert "Helper=/b/slurm-pool-mig-helper-c-gpu1 " in local["helpers.conf"]
    # Without layouts nothing changes.
    plain = render_all(load_spec(REPO / "examples" / "pool.yaml"), Site(), SlurmVersion.parse("26.05"))
    assert "helpers.conf" not in plain and "NodeFeaturesPlugins" not in plain["slurm.conf"]


def test_render_refuses_before_24_05(tmp_path):
    spec = load_spec(_spec(tmp_path, {"mig_7x1g": [SEVEN, None]}))
    with pytest.raises(SpecError) as exc:
        render_all(spec, Site(), SlurmVersion.parse("22.05"))
    assert "node_groups[2].gpus.layouts" in str(exc.value) and "24.05" in str(exc.value)


@pytest.mark.parametrize(
    "layouts,features,path,message",
    [
        ({"mig-7x1g": [SEVEN, None]}, ("projc",), "node_groups[2].gpus.layouts", "not a Slurm node feature name"),
        ({"7x1g": [SEVEN, None]}, ("projc",), "node_groups[2].gpus.layouts", "not a Slurm node feature name"),
        ({}, ("projc",), "node_groups[2].gpus.layouts", "at least one layout"),
        ({"mig_7x1g": [SEVEN]}, ("projc",), "node_groups[2].gpus.layouts.mig_7x1g", "count is 2"),
        ({"big": [SEVEN + ["1g.5gb"], None]}, ("projc",), "node_groups[2].gpus.layouts.big[0]", "not a valid"),
        ({"projc": [SEVEN, None]}, ("projc",), "node_groups[2].gpus.layouts.projc", "also one of the group"),
    ],
)
def test_layout_spec_errors(tmp_path, layouts, features, path, message):
    with pytest.raises(SpecError) as exc:
        load_spec(_spec(tmp_path, layouts, features))
    text = str(exc.value)
    assert path in text and message in text, text


@pytest.mark.parametrize(
    "table,message",
    [
        ({"nodes": 5}, "expected an object with a 'nodes' object"),
        ([1, 2], "expected an object with a 'nodes' object"),
        ({"nodes": {"n1": []}}, "nodes.n1: expected an object with 'model' and 'layouts'"),
        ({"nodes": {"n1": {"model": "Z", "layouts": {}}}}, "nodes.n1.model: 'Z' is not a MIG-capable GPU model"),
        ({"nodes": {"n1": {"model": 7, "layouts": {}}}}, "nodes.n1.model: 7 is not a MIG-capable GPU model"),
        (
            {"nodes": {"n1": {"model": "A100-40GB", "layouts": {"m": [["9g.1gb"]]}}}},
            "nodes.n1.layouts.m: expected a list of per-GPU A100-40GB profile lists",
        ),
        ({"nodes": {"n1": {"model": "A100-40GB", "layouts": {"m": "1g.5gb"}}}}, "nodes.n1.layouts.m: expected"),
    ],
)
def test_malformed_layout_table_exits_2_naming_the_field(tmp_path, table, message):
    from slurm_pool.mig.helper import main

    path = tmp_path / "layouts.json"
    path.write_text(json.dumps(table))
    for feature in (None, "m"):
        result = main(feature, "n1", str(path), None)
        assert result.code == USAGE == 2 and message in result.err[0], result.err


def test_rendered_layout_table_is_well_formed():
    from slurm_pool.mig.features import table_error

    assert table_error(json.loads(json.dumps(TABLE))) is None
