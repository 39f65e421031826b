"""Property-based fuzzing of every parser that takes outside input (hypothesis; derandomized in CI).

Each reader gets real documents -- the example spec, JSON recorded from each
Slurm, a real plan -- with one value swapped for something odd, and must
either accept it or refuse it with its own error type: never another
exception, never a hang.  What it accepts must still be safe: every line the
renderer writes parses back as Slurm ``key=value`` words, and a scrape always
carries ``slurm_pool_up``.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, generate_latest

from slurm_pool.adapters.records import RecordError, parse_jobs, parse_nodes
from slurm_pool.adapters.runner import RecordingRunner
from slurm_pool.adapters.slurm import SlurmClient
from slurm_pool.errors import SpecError
from slurm_pool.metrics.collector import PoolCollector
from slurm_pool.mig.placement import find_placement, layout_problem
from slurm_pool.mig.planner import Gpu, PlanError, plan, plan_from_dict
from slurm_pool.mig.profiles import GEOMETRIES
from slurm_pool.node import outcome
from slurm_pool.nodeconf import ConfigError, parse
from slurm_pool.render import Site, SlurmVersion, render_all
from slurm_pool.spec import parse_spec
from slurm_pool.spec.hosts import expand
from tests.support.mutation import paths, replaced

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = yaml.safe_load((ROOT / "examples" / "pool.yaml").read_text())
DATA = ROOT / "tests" / "data" / "slurm"
VERSIONS = ("22.05", "26.05")
NODE_FILE = {"22.05": "nodes-busy.json", "26.05": "nodes-busy.json"}
NODE_COMMAND = {"22.05": ["sinfo", "--json"], "26.05": ["scontrol", "show", "nodes", "--json"]}
FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Values of every JSON/YAML type, odd ones first in mind: huge and non-finite
# numbers, control characters, separators Slurm's files care about.
ODD_TEXT = st.sampled_from(["", " ", "\n", "a\nNodeName=x", "x=y", "#", "a b", "é", "\x00", "|", ",", "[1-3]", "-1"])
LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=True, allow_infinity=True),
    ODD_TEXT,
    st.text(max_size=12),
)
VALUES = st.recursive(
    LEAVES,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)),
    max_leaves=6,
)


@st.composite
def mutated(draw: st.DrawFn, doc: Any) -> Any:
    """``doc`` with one to three values swapped for odd ones (or a key dropped)."""
    out = doc
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(paths(out)))
        if path and draw(st.booleans()) and isinstance(_get(out, path[:-1]), dict):
            parent = copy.deepcopy(out)
            del _get(parent, path[:-1])[path[-1]]
            out = parent
        else:
            out = replaced(out, path, draw(VALUES))
    return out


def _get(doc: Any, path: tuple) -> Any:
    for p in path:
        doc = doc[p]
    return doc


# -- the spec loader and the renderer -----------------------------------------

# A slurm.conf line: a comment, or KEY=VALUE words (values may be quoted).
CONF_LINE = re.compile(r'^(#.*|\s*|([A-Za-z][A-Za-z0-9]*=("[^"\n]*"|[^\s"]*)\s*)+)$')


@FUZZ
@given(doc=mutated(EXAMPLE))
def test_spec_loader_accepts_or_names_the_problem_and_renders_only_key_value_lines(doc: Any) -> None:
    try:
        spec = parse_spec(doc)
    except SpecError as exc:
        assert exc.issues and all(str(i) for i in exc.issues)
        return
    hosts = {h for g in spec.node_groups for h in expand(g.hosts)}
    partitions = {p.name for p in spec.partitions}
    for version in ("22.05", "26.05"):
        files = render_all(spec, Site(), SlurmVersion.parse(version))
        for name in ("slurm.conf", "slurm-pool.conf", "gres.conf"):
            for no, line in enumerate(files[name].splitlines(), 1):
                assert CONF_LINE.match(line), f"{version} {name}:{no}: {line!r}"
                # No spec value starts a line of its own: every node and partition line is one of the spec's.
                if m := re.match(r"NodeName=(\S+)", line):
                    assert m.group(1) == "DEFAULT" or set(expand(m.group(1))) <= hosts, line
                if m := re.match(r"PartitionName=(\S+)", line):
                    assert m.group(1) in partitions | {"DEFAULT"}, line


# -- the Slurm JSON readers ---------------------------------------------------


def _recorded(version: str, name: str) -> Any:
    return json.loads((DATA / version / name).read_text())


@FUZZ
@given(data=st.data(), version=st.sampled_from(VERSIONS))
def test_node_and_job_readers_accept_or_raise_record_error(data: st.DataObject, version: str) -> None:
    nodes = data.draw(mutated(_recorded(version, NODE_FILE[version])))
    jobs = data.draw(mutated(_recorded(version, "squeue-busy.json")))
    for parse_fn, doc in ((parse_nodes, nodes), (parse_jobs, jobs)):
        try:
            records = parse_fn(json.dumps(doc))
        except RecordError:
            continue
        for r in records:
            assert isinstance(r.name if hasattr(r, "name") else r.job_id, (str, int))


@FUZZ
@given(text=st.text(max_size=200))
def test_readers_refuse_any_text_that_is_not_their_json(text: str) -> None:
    for parse_fn in (parse_nodes, parse_jobs):
        try:
            parse_fn(text)
        except RecordError:
            pass


# -- the exporter's collector -------------------------------------------------


@FUZZ
@given(data=st.data(), version=st.sampled_from(VERSIONS))
def test_a_scrape_always_carries_slurm_pool_up(data: st.DataObject, version: str) -> None:
    nodes = data.draw(mutated(_recorded(version, NODE_FILE[version])))
    jobs = data.draw(mutated(_recorded(version, "squeue-busy.json")))
    r = RecordingRunner()
    r.on(["sinfo", "--version"], f"slurm {version}.0\n")
    r.on(NODE_COMMAND[version], json.dumps(nodes))
    r.on(["squeue", "--json"], json.dumps(jobs))
    reg = CollectorRegistry()
    reg.register(PoolCollector(SlurmClient(r), deadline=60.0))
    generate_latest(reg)
    assert reg.get_sample_value("slurm_pool_up") in (0.0, 1.0)


# -- MIG layouts and plans ----------------------------------------------------

PROFILES = sorted({p for g in GEOMETRIES.values() for p in g.profiles} | {"0g.0gb", "", "7g.40gb+me", "x"})


@FUZZ
@given(model=st.sampled_from(sorted(GEOMETRIES) + ["V100", ""]), layout=st.lists(st.sampled_from(PROFILES), max_size=9))
def test_layout_checks_never_raise_and_agree(model: str, layout: list[str]) -> None:
    problem = layout_problem(model, layout)
    assert problem is None or isinstance(problem, str)
    if model in GEOMETRIES and problem is None:
        assert find_placement(model, layout) is not None


def _plan_doc() -> dict[str, Any]:
    gpus = [Gpu("n1", 0, ()), Gpu("n1", 1, ("7g.40gb",), busy=True), Gpu("n2", 0, None)]
    return plan("A100-40GB", gpus, {"3g.20gb": 1, "1g.5gb": 2}).to_dict()


PLAN = _plan_doc()


@FUZZ
@given(doc=mutated(PLAN))
def test_plans_read_back_or_raise_plan_error(doc: Any) -> None:
    try:
        p = plan_from_dict(doc)
    except PlanError:
        return
    assert all(0 <= g.index < 64 for g in p.gpus)
    assert len({(g.node, g.index) for g in p.gpus}) == len(p.gpus)


# -- outcome.json and node.conf -----------------------------------------------

WRAPPER = {
    "job_id": "42",
    "restart_count": 1,
    "reason": "preempt",
    "checkpointed": True,
    "requeued": True,
    "exit_code": 0,
    "self_requeues": 0,
    "signal_time": 1_800_000_000.0,
    "time": 1_800_000_010.0,
}


@FUZZ
@given(wrapper=mutated(WRAPPER), newest=st.one_of(st.none(), st.tuples(st.integers(0, 10**12), st.floats(0, 2e9))))
def test_outcome_records_are_always_json_with_believable_numbers(wrapper: Any, newest: Any) -> None:
    rec = outcome.build(
        job_id="42",
        user="alice",
        node="n1",
        now=1_800_000_020.0,
        info=None,
        wrapper=wrapper if isinstance(wrapper, dict) else None,
        newest=newest,
    )
    text = json.dumps(rec, allow_nan=False)  # what the epilog appends: strict JSON
    assert json.loads(text)["job_id"] == "42"


@FUZZ
@given(text=st.text(max_size=300))
def test_node_conf_parses_or_raises_config_error(text: str) -> None:
    try:
        values = parse(text)
    except ConfigError:
        return
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in values.items())
