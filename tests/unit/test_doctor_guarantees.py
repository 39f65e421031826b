"""``doctor``'s ``guarantees`` check on node records recorded from Slurm 22.05 and 26.05.

The floating partition's nodes ``f-gpu1`` and ``f-gpu2`` are the recorded H100
node ``b-gpu1`` of a scene (idle: usable; busy: drained by a person, "disk
check by ops"; 22.05's lent scene: lent to Kubernetes) under another name, in
partition ``floating`` instead of ``b-owner``; states no scene recorded are
written in the shape of each release.  They reach the check as ``doctor``
reads them: the narrow ``sinfo --Format`` text made from that JSON.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from slurm_pool.accounting.plan import guarantee_grp_tres
from slurm_pool.adapters.records import parse_config_text, parse_nodes
from slurm_pool.adapters.runner import RecordingRunner, Result
from slurm_pool.cli import cli
from slurm_pool.doctor import diagnose as doctor
from slurm_pool.doctor.diagnose import Facts, diagnose, gather, report
from slurm_pool.guarantees.check import OUT_STATES, out_why, qos_findings
from slurm_pool.spec import load_spec
from slurm_pool.spec.load import parse_spec
from slurm_pool.spec.model import PoolSpec
from slurm_pool.versions import SlurmVersion

pytestmark = pytest.mark.usefixtures("narrow_from_json")

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "slurm"
H100 = "nvidia_h100_80gb_hbm3"
NODE_COMMAND = {"22.05": ["sinfo", "--json"], "26.05": ["scontrol", "show", "nodes", "--json"]}
RELEASE = {"22.05": "22.05.8", "26.05": "26.05.3"}
HELP = Result(("sbatch", "--help"), 0, "      --checkpoint=[DIR]      The job checkpoints when preempted\n", "")


def spec_dict(projd: dict[str, int] | None = None, proje: dict[str, int] | None = None, overcommit: float = 1.0):
    """``examples/pool-floating.yaml`` with f-gpu[1-2] (2 x 2 H100) and the guarantees given."""
    d = yaml.safe_load((ROOT / "examples" / "pool-floating.yaml").read_text())
    next(g for g in d["node_groups"] if g["name"] == "f")["hosts"] = "f-gpu[1-2]"
    projects = {p["name"]: p for p in d["projects"]}
    projects["projd"]["guarantee"] = projd or {"gres/gpu": 2}
    projects["proje"]["guarantee"] = proje or {f"gres/gpu:{H100}": 2}
    d["guarantees"]["overcommit"] = overcommit
    return d


def spec(**kw: Any) -> PoolSpec:
    return parse_spec(spec_dict(**kw))


def recorded_node(version: str, scene: str, name: str) -> dict[str, Any]:
    doc = json.loads((DATA / version / f"nodes-{scene}.json").read_text())
    return copy.deepcopy(next(n for n in doc["nodes"] if n["name"] == name))


def with_state(node: dict[str, Any], version: str, words: list[str], reason: str) -> dict[str, Any]:
    """``node`` in state ``words`` (base first), as each release writes it."""
    if version == "22.05":
        node["state"], node["state_flags"] = words[0].lower(), words[1:]
    else:
        node["state"] = words
    node["reason"] = reason
    return node


#: How f-gpu2 looks: a recorded scene's b-gpu1, or b-gpu1 of the idle scene in a state of its release.
F2 = {
    "usable": lambda v: recorded_node(v, "idle", "b-gpu1"),
    "drained": lambda v: recorded_node(v, "busy", "b-gpu1"),
    "not responding": lambda v: with_state(recorded_node(v, "idle", "b-gpu1"), v, ["DOWN", "NOT_RESPONDING"], ""),
    "lent": lambda v: (
        recorded_node(v, "lent", "b-gpu1")
        if v == "22.05"
        else with_state(recorded_node(v, "idle", "b-gpu1"), v, ["MIXED"], "") | {"gres_used": f"gpu:{H100}:2(IDX:0-1)"}
    ),
    "an a100": lambda v: recorded_node(v, "idle", "a-gpu2"),
}


def nodes_json(version: str, f2: str = "usable", floating: bool = True) -> str:
    """a-gpu1 (proja's), f-gpu1 (usable) and f-gpu2 (``F2[f2]``) as the release's node command prints them."""
    doc = json.loads((DATA / version / "nodes-idle.json").read_text())
    nodes = [recorded_node(version, "idle", "a-gpu1")]
    for name, node in (("f-gpu1", F2["usable"](version)), ("f-gpu2", F2[f2](version))):
        node["name"] = node["hostname"] = name
        node["partitions"] = ["floating" if p in ("a-owner", "b-owner") and floating else p for p in node["partitions"]]
        nodes.append(node)
    return json.dumps({**doc, "nodes": nodes})


def replay(version: str, nodes: str, qos: str = "") -> RecordingRunner:
    r = RecordingRunner()
    r.on(["sinfo", "--version"], f"slurm {RELEASE[version]}\n")
    r.on(["scontrol", "show", "config"], f"SLURM_VERSION = {RELEASE[version]}\n")
    r.on(NODE_COMMAND[version], nodes)
    r.respond(
        ["sacctmgr", "-n", "-P", "show", "qos"],
        lambda argv, _in: Result(argv, 0, qos if argv[-1] == "format=Name,GrpTRES" else "", ""),
    )
    return r


def qos_of(s: PoolSpec) -> str:
    """``sacctmgr -n -P show qos format=Name,GrpTRES`` of a cluster where the guarantees' QOS are as ``s`` says."""
    rows = ["guaranteed|", *(f"guaranteed-{p.name}|" + ",".join(f"{k}={n}" for k, n in guarantee_grp_tres(s, p).items())
                             for p in s.projects if p.guarantee)]  # fmt: skip
    return "".join(r + "\n" for r in rows)


#: A typed guarantee's QOS also caps gres/gpu at its sum (accounting.plan.guarantee_grp_tres).
QOS_OK = "guaranteed|\nguaranteed-projd|gres/gpu=2\n" + f"guaranteed-proje|gres/gpu=2,gres/gpu:{H100}=2\n"
OVER = "guarantees of gres/gpu sum to 4 GPUs, over 1.0 x 2 GPUs usable in partition 'floating'"

CASES = [
    # (name, f-gpu2, spec changes, the guarantees problems)
    ("all usable", "usable", {}, []),
    ("lent to Kubernetes still counts", "lent", {}, []),
    ("drained", "drained", {}, [f"{OVER} (f-gpu2 drained: disk check by ops)"]),
    ("not responding", "not responding", {}, [f"{OVER} (f-gpu2 not responding)"]),
    ("overcommit covers a drained node", "drained", {"overcommit": 2.0}, []),
    (
        "typed guarantee over its type",
        "drained",
        {"projd": {"gres/gpu": 1}, "proje": {f"gres/gpu:{H100}": 3}},
        [
            f"{OVER} (f-gpu2 drained: disk check by ops)",
            f"guarantees of gres/gpu:{H100} sum to 3 GPUs, over 1.0 x 2 GPUs usable in partition 'floating' "
            "(f-gpu2 drained: disk check by ops)",
        ],
    ),
    (
        "typed guarantee, the node of its type swapped for another",
        "an a100",
        {"projd": {"gres/gpu": 1}, "proje": {f"gres/gpu:{H100}": 3}},
        [
            f"guarantees of gres/gpu:{H100} sum to 3 GPUs, over 1.0 x 2 GPUs usable in partition 'floating' "
            "(every node usable)"
        ],
    ),
]


@pytest.mark.parametrize("version", ["22.05", "26.05"])
@pytest.mark.parametrize("name, f2, change, want", CASES, ids=[c[0] for c in CASES])
def test_capacity_from_what_slurm_prints(version, name, f2, change, want):
    s = spec(**change)
    facts = gather(s, replay(version, nodes_json(version, f2), qos_of(s)))
    assert {n.name: "floating" in n.partitions for n in facts.nodes} == {
        "a-gpu1": False,
        "f-gpu1": True,
        "f-gpu2": True,
    }
    found = [x for x in diagnose(s, facts) if x.check == "guarantees"]
    assert [x.problem for x in found] == want
    if want and f2 == "drained":
        assert "scontrol update NodeName=f-gpu2 State=RESUME" in found[0].fix
        assert "projd " in found[0].fix and "guarantees.overcommit" in found[0].fix


@pytest.mark.parametrize("version", ["22.05", "26.05"])
def test_a_type_slurm_does_not_have_there_and_a_partition_slurm_lacks(version):
    s = spec()
    facts = gather(s, replay(version, nodes_json(version, "an a100"), QOS_OK))
    facts.nodes = [n for n in facts.nodes if n.name != "f-gpu1"]
    assert [x.problem for x in diagnose(s, facts) if x.check == "guarantees"] == [
        "guarantees of gres/gpu sum to 4 GPUs, over 1.0 x 2 GPUs usable in partition 'floating' (every node usable)",
        f"guarantees of gres/gpu:{H100} sum to 2 GPUs, over 1.0 x 0 GPUs usable in partition 'floating' "
        f"(no GPU there has GRES type {H100}; its types: nvidia_a100-sxm4-80gb)",
    ]
    facts = gather(s, replay(version, nodes_json(version, floating=False), QOS_OK))
    problems = [x.problem for x in diagnose(s, facts) if x.check == "guarantees"]
    assert len(problems) == 2 and all("(no node in Slurm is in partition 'floating')" in p for p in problems)


@pytest.mark.parametrize(
    "qos, want",
    [
        (QOS_OK, []),
        (QOS_OK.replace("gres/gpu=2", "cpu=8,gres/gpu=2"), []),  # only the GPUs are the guarantee's
        (
            "guaranteed|\n" + f"guaranteed-proje|gres/gpu=2,gres/gpu:{H100}=2\n",
            [
                "QOS guaranteed-projd of project projd's guarantee is not in Slurm, so its jobs cannot run in "
                "partition 'floating'"
            ],
        ),  # fmt: skip
        (
            QOS_OK.replace("gres/gpu=2", "gres/gpu=3", 1),
            ["QOS guaranteed-projd has GrpTRES gres/gpu=3, project projd's guarantee is gres/gpu=2"],
        ),
        (
            QOS_OK.replace(f"gres/gpu=2,gres/gpu:{H100}=2", "gres/gpu=2"),
            [f"QOS guaranteed-proje has GrpTRES gres/gpu=2, project proje's guarantee is gres/gpu=2,gres/gpu:{H100}=2"],
        ),
        (
            QOS_OK.replace(f"gres/gpu=2,gres/gpu:{H100}=2", ""),
            [f"QOS guaranteed-proje has GrpTRES unset, project proje's guarantee is gres/gpu=2,gres/gpu:{H100}=2"],
        ),
    ],
)
def test_guarantee_qos_as_sacctmgr_shows_it(qos, want):
    s = spec()
    facts = gather(s, replay("26.05", nodes_json("26.05"), qos))
    assert [x.problem for x in diagnose(s, facts) if x.check == "guarantees"] == want
    assert all("slurm-pool apply accounting" in x.fix for x in qos_findings(s, facts.qos or {}))


def test_no_guarantees_no_check_and_no_qos_read():
    s = load_spec(ROOT / "examples" / "pool.yaml")
    r = replay("26.05", nodes_json("26.05"), "x|y\n")
    facts = gather(s, r)
    assert facts.qos is None and not facts.guarantees
    assert ("sacctmgr", "-n", "-P", "show", "qos", "format=Name,GrpTRES") not in r.calls
    assert not any("guarantees" in line for line in report(diagnose(s, facts), facts))


@pytest.mark.parametrize(
    "state, flags, why",
    [
        ("IDLE", [], None),
        ("MIXED", [], None),  # a lent node: its placeholder job is preempted when Slurm wants it
        ("ALLOCATED", ["COMPLETING"], None),
        ("IDLE", ["POWERED_DOWN"], None),  # power saving: Slurm powers it up for a job
        ("IDLE", ["DRAIN"], "drained"),
        ("MIXED", ["DRAIN"], "draining"),  # jobs still run there: sinfo says "drng"
        ("ALLOCATED", ["DRAINING"], "draining"),
        ("DOWN", [], "down"),
        ("DOWN", ["NOT_RESPONDING"], "not responding"),
        ("IDLE", ["FAIL"], "failed"),
        ("FUTURE", [], "future"),
        ("UNKNOWN", [], "unknown"),
        ("IDLE", ["INVALID_REG"], "refused at registration"),
    ],
)
def test_out_why(state, flags, why):
    for version in ("22.05", "26.05"):
        node = with_state(recorded_node(version, "idle", "b-gpu1"), version, [state, *flags], "")
        (rec,) = parse_nodes(json.dumps({"nodes": [node]}))
        assert out_why(rec) == why, (version, rec.state)
    assert {"DRAIN", "DOWN", "NOT_RESPONDING", "FUTURE"} <= OUT_STATES


# -- the command: exit status 1 on a finding, as for every check -------------------------------------------


def healthy(s: PoolSpec, version: str, f2: str) -> Facts:
    """Facts on which every other check passes."""
    v = SlurmVersion.parse(RELEASE[version])
    text = (
        "JobSubmitPlugins = lua\nProlog = /usr/local/bin/slurm-pool-prolog\n"
        "Epilog = /usr/local/bin/slurm-pool-epilog\nHealthCheckProgram = /usr/local/bin/slurm-pool-healthcheck\n"
        f"PrologFlags = Alloc\nSLURM_VERSION = {v}\n"
    )
    nodes = parse_nodes(nodes_json(version, f2))
    return Facts(v, v, parse_config_text(text), nodes, HELP, qos={}, guarantees=True, rendered_for=str(v))


@pytest.mark.parametrize("version", ["22.05", "26.05"])
@pytest.mark.parametrize(
    "f2, code, line",
    [
        ("usable", 0, "  ok    guarantees"),
        ("drained", 1, f"        problem: {OVER} (f-gpu2 drained: disk check by ops)"),
    ],
)
def test_doctor_command(monkeypatch, tmp_path, version, f2, code, line):
    path = tmp_path / "pool.yaml"
    path.write_text(yaml.safe_dump(spec_dict()))
    s = load_spec(path)
    facts = healthy(s, version, f2)
    facts.qos = {"guaranteed-projd": "gres/gpu=2", "guaranteed-proje": f"gres/gpu=2,gres/gpu:{H100}=2"}
    monkeypatch.setattr(doctor, "gather", lambda _spec, _runner: facts)
    res = CliRunner().invoke(cli, ["doctor", "--spec", str(path)])
    assert res.exit_code == code, res.output
    assert line in res.output.splitlines(), res.output
    assert res.stdout.splitlines()[-1] == ("no problems found" if code == 0 else "1 problem(s)")
    # a failing run (cron, monitoring) also says so in one line on stderr
    assert res.stderr == ("" if code == 0 else "error: doctor: 1 problem(s) found, each printed above with its fix\n")
