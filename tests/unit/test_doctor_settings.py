"""``doctor``'s ``settings`` check: cluster-wide settings the spec needs that the running slurmctld lacks."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_pool.adapters.records import parse_config_text
from slurm_pool.adapters.runner import Result
from slurm_pool.doctor.diagnose import Facts, diagnose, report
from slurm_pool.render.required import cluster_settings, missing
from slurm_pool.spec import load_spec
from slurm_pool.versions import SlurmVersion

ROOT = Path(__file__).resolve().parents[2]
SPEC = load_spec(ROOT / "examples" / "pool.yaml")
V = SlurmVersion.parse("26.05.3")
HELP = Result(("sbatch", "--help"), 0, "--checkpoint\n", "")
#: What a site's slurm.conf gives before the pool's lines are added, as scontrol show config prints it.
SITE = """SelectType              = select/cons_tres
PriorityType            = priority/multifactor
PriorityWeightQOS       = 0
AccountingStorageType   = accounting_storage/slurmdbd
AccountingStorageEnforce = associations,limits
PreemptType             = preempt/none
JobSubmitPlugins        = lua
Prolog[0]               = /usr/local/bin/slurm-pool-prolog
Epilog[0]               = /usr/local/bin/slurm-pool-epilog
HealthCheckProgram      = /usr/local/bin/slurm-pool-healthcheck
PrologFlags             = Alloc,Contain
SLURM_VERSION           = 26.05.3
"""


def facts(config_text: str) -> Facts:
    config = parse_config_text(config_text)
    return Facts(
        V, V, config, [], HELP, rendered_for=str(V), missing_settings=missing(cluster_settings(SPEC, V), config)
    )


@pytest.mark.parametrize(
    "key, problem, line",
    [
        ("PriorityWeightQOS", "PriorityWeightQOS is 0, not 10000", "put PriorityWeightQOS=10000 in slurm.conf, "),
        (
            "AccountingStorageEnforce",
            "AccountingStorageEnforce is associations,limits, not associations,limits,qos",
            "put AccountingStorageEnforce=associations,limits,qos in slurm.conf (beside the site's own items)",
        ),
        ("PreemptType", "PreemptType is preempt/none, not preempt/qos", "put PreemptType=preempt/qos in slurm.conf"),
        ("JobRequeue", "JobRequeue is not set, not 1", "put JobRequeue=1 in slurm.conf"),
    ],
)
def test_each_missing_setting_is_a_finding_with_its_line(key, problem, line):
    found = {x.problem.split(" is ")[0]: x for x in diagnose(SPEC, facts(SITE)) if x.check == "settings"}
    assert problem in found[key].problem and line in found[key].fix
    assert "SelectType" not in found and "PrologFlags" not in found and "JobSubmitPlugins" not in found


def test_report_lists_the_settings_check():
    f = facts(SITE)
    lines = report(diagnose(SPEC, f), f)
    assert "  FAIL  settings" in lines


def test_no_finding_when_everything_is_set():
    have = {k.strip(): v.strip() for k, v in (line.split("=", 1) for line in SITE.splitlines())}
    have.update((s.key, s.value) for s in cluster_settings(SPEC, V) if s.match != "manual")
    full = "".join(f"{k.strip()} = {v.strip()}\n" for k, v in have.items())
    assert [x for x in diagnose(SPEC, facts(full)) if x.check == "settings"] == []
