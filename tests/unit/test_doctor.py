"""``slurm-pool doctor``'s pure diagnosis, on node records recorded from both Slurm releases."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from slurm_pool.adapters.records import parse_config_text, parse_nodes
from slurm_pool.adapters.runner import Result
from slurm_pool.doctor.diagnose import Facts, diagnose, report
from slurm_pool.spec import load_spec
from slurm_pool.versions import SlurmVersion

ROOT = Path(__file__).resolve().parents[2]
SPEC = load_spec(ROOT / "examples" / "pool.yaml")
DATA = ROOT / "tests" / "data" / "slurm"

CONFIG_2605 = """Configuration data as of 2026-12-02T18:00:00
JobSubmitPlugins        = lua
PlugStackConfig         = /etc/slurm/plugstack.conf
Prolog[0]               = /usr/local/bin/slurm-pool-prolog
Epilog[0]               = /usr/local/bin/slurm-pool-epilog
HealthCheckProgram      = /usr/local/bin/slurm-pool-healthcheck
PrologFlags             = Alloc
SLURM_VERSION           = 26.05.3
"""
CONFIG_2205 = """JobSubmitPlugins        = lua
Prolog                  = /usr/local/bin/slurm-pool-prolog
Epilog                  = /usr/local/bin/slurm-pool-epilog
HealthCheckProgram      = /usr/local/bin/slurm-pool-healthcheck
PrologFlags             = Alloc
SLURM_VERSION           = 22.05.8
"""
HELP = Result(("sbatch", "--help"), 0, "      --checkpoint=[DIR]      The job checkpoints when preempted\n", "")


def facts(version: str) -> Facts:
    config = CONFIG_2605 if version == "26.05" else CONFIG_2205
    v = SlurmVersion.parse(parse_config_text(config)["SLURM_VERSION"])
    nodes = parse_nodes((DATA / version / "nodes-idle.json").read_text())
    return Facts(v, v, parse_config_text(config), nodes, HELP, rendered_for=str(v), include_dir="/opt/slurm/include")


@pytest.mark.parametrize("version", ["22.05", "26.05"])
def test_the_recorded_clusters_are_healthy(version):
    f = facts(version)
    assert diagnose(SPEC, f) == []
    assert report([], f)[-1] == "no problems found"


def test_numbered_config_keys_of_26_05_read_like_22_05():
    assert parse_config_text(CONFIG_2605)["Prolog"] == parse_config_text(CONFIG_2205)["Prolog"]
    assert parse_config_text("Prolog[0] = /a\nProlog[1] = /b\nX = (null)\n") == {"Prolog": "/a,/b", "X": ""}


STALE = Result(
    ("sbatch", "--help"),
    0,
    "Usage: sbatch [OPTIONS...] executable [args...]\n",
    "sbatch: plugin_load_from_file: Incompatible Slurm plugin /usr/local/lib/slurm-pool/"
    "slurm_pool_spank.so version (22.05.8)\n",
)

CASES = [
    # (name, change to the 26.05 facts, check, fragment of the problem, fragment of the fix)
    (
        "stale SPANK plugin",
        dict(sbatch_help=STALE),
        "spank",
        "was built for Slurm 22.05.8, not for 26.05.3",
        "make -C spank SLURM_INCLUDE=/opt/slurm/include",
    ),
    (
        "no SPANK plugin",
        dict(sbatch_help=Result(("sbatch",), 0, "Usage", "")),
        "spank",
        "offers no --checkpoint",
        "/etc/slurm/plugstack.conf",
    ),
    (
        "commands of another release",
        dict(commands=SlurmVersion(22, 5, 8)),
        "version",
        "the commands are Slurm 22.05.8, slurmctld is 26.05.3",
        "first on PATH",
    ),
    (
        "configs rendered for another release",
        dict(rendered_for="22.05"),
        "version",
        "rendered for Slurm 22.05",
        "--slurm-version 26.05.3",
    ),
    ("QOS missing", dict(accounting=["+ qos express"]), "accounting", "+ qos express", "apply accounting SPEC"),
    (
        "limits waiting for TRES",
        dict(deferred=["qos shared: MaxTRESPU gres/gpu=4"]),
        "accounting",
        "MaxTRESPU gres/gpu=4",
        "AccountingStorageTRES",
    ),
]


@pytest.mark.parametrize("name,change,check,problem,fix", CASES, ids=[c[0] for c in CASES])
def test_findings(name, change, check, problem, fix):
    found = diagnose(SPEC, replace(facts("26.05"), **change))
    assert [x.check for x in found] == [check], found
    assert problem in found[0].problem and fix in found[0].fix, found[0]


@pytest.mark.parametrize(
    "key,value,fragment",
    [
        ("JobSubmitPlugins", "", "JobSubmitPlugins is empty"),
        ("Prolog", "/usr/bin/site-prolog", "Prolog is /usr/bin/site-prolog, not slurm-pool's slurm-pool-prolog"),
        ("PrologFlags", "", "PrologFlags lacks Alloc"),
    ],
)
def test_config_findings(key, value, fragment):
    f = facts("26.05")
    f.config[key] = value
    found = diagnose(SPEC, f)
    assert len(found) == 1 and fragment in found[0].problem, found


def test_gres_named_the_22_05_way_on_26_05_is_caught():
    """A100-80GB 3g.40gb: 22.05 names it nvidia_a100_3g.39gb, 23.02.6+ nvidia_a100_3g.40gb."""
    data = SPEC.model_dump()
    a = next(g for g in data["node_groups"] if g["name"] == "a")
    a["gpus"]["mig"] = [["3g.40gb", "3g.40gb"], None]
    spec = type(SPEC).model_validate(data)
    f = facts("26.05")
    old = [
        replace(n, gres="gpu:nvidia_a100_3g.39gb:2,gpu:nvidia_a100-sxm4-80gb:1") if n.name.startswith("a-") else n
        for n in f.nodes
    ]
    found = diagnose(spec, replace(f, nodes=old))
    assert [x.check for x in found] == ["gres", "gres"]
    assert "gpu:nvidia_a100_3g.40gb:2" in found[0].problem and "for Slurm 26.05" in found[0].problem


def test_a_node_refused_at_registration():
    f = facts("26.05")
    from slurm_pool.adapters.records import node_state

    nodes = [
        replace(n, state=node_state(["IDLE", "DRAIN", "INVALID_REG"]), reason="gres/gpu count reported lower")
        if n.name == "b-gpu1"
        else n
        for n in f.nodes
    ]
    found = diagnose(SPEC, replace(f, nodes=nodes))
    assert len(found) == 1 and "b-gpu1 was refused at registration" in found[0].problem
