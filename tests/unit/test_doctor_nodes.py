"""``doctor``'s node_attrs check (issue 45): the rendered node attributes against ``scontrol show node -o``
(a recording fake), each difference named."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_pool.adapters.nodeattrs import parse_node_attributes
from slurm_pool.adapters.records import parse_config_text
from slurm_pool.adapters.runner import RecordingRunner, Result
from slurm_pool.doctor.diagnose import Facts, diagnose, report
from slurm_pool.doctor.nodes import NodeAttrFacts, findings, gather
from slurm_pool.spec import load_spec, load_spec_text
from slurm_pool.versions import SlurmVersion

ROOT = Path(__file__).resolve().parents[2]
TEXT = (ROOT / "examples" / "pool-coexist.yaml").read_text()
A_GROUP = "    memory_mb: 8000\n    gpus: {model: A100-80GB, count: 2}\n"
assert A_GROUP in TEXT
SPEC = load_spec_text(
    TEXT.replace(A_GROUP, A_GROUP + "    sockets: 1\n    cores_per_socket: 4\n    weight: 10\n    tmp_disk: 100\n")
)
V = SlurmVersion.parse("22.05.8")


def _line(name: str, features: str, **over: str) -> str:
    """A ``scontrol show node -o`` line of 22.05 (src/api/node_info.c's order), with ``over`` replacing values."""
    v = {
        "CoresPerSocket": "4",
        "CPUTot": "4",
        "RealMemory": "8000",
        "Sockets": "1",
        "ThreadsPerCore": "1",
        "TmpDisk": "100",
        "Weight": "10",
        "OS": "Linux 6.1.0-18-amd64 #1 SMP PREEMPT_DYNAMIC Debian",
    }
    v.update(over)
    return (
        f"NodeName={name} Arch=x86_64 CoresPerSocket={v['CoresPerSocket']} CPUAlloc=0 CPUTot={v['CPUTot']} "
        f"CPULoad=0.00 AvailableFeatures={features} ActiveFeatures={features} Gres=gpu:x:2 NodeAddr={name} "
        f"NodeHostName={name} Version=22.05.8 OS={v['OS']} RealMemory={v['RealMemory']} AllocMem=0 "
        f"FreeMem=N/A Sockets={v['Sockets']} Boards=1 State=IDLE ThreadsPerCore={v['ThreadsPerCore']} "
        f"TmpDisk={v['TmpDisk']} Weight={v['Weight']} Owner=N/A MCS_label=N/A Partitions=shared "
        f"BootTime=None SlurmdStartTime=None {v.get('tail', '')}"
    )


def _output(**a1: str) -> str:
    lines = [
        _line("a-gpu1", "proja", **a1),
        _line("a-gpu2", "proja"),
        _line("b-gpu1", "projb", TmpDisk="0", Weight="1"),
        _line("c-gpu1", "projc", TmpDisk="0", Weight="1"),
    ]
    return "\n".join(lines) + "\n"


# (case, a-gpu1's values, the problems found (each: the words of one finding))
CASES = [
    ("all as rendered", {}, []),
    ("weight", {"Weight": "1"}, ["node group a, a-gpu1: Weight: slurmctld has 1, the render 10"]),
    ("topology and memory", {"Sockets": "2", "CPUTot": "8", "RealMemory": "7000"},
     ["a-gpu1: CPUs: slurmctld has 8, the render 4; RealMemory: slurmctld has 7000, the render 8000; "
      "Sockets: slurmctld has 2, the render 1"]),
    ("an OS text posing as attributes is not read", {"OS": "Linux Weight=99 Sockets=9"}, []),
]  # fmt: skip


@pytest.mark.parametrize("case,a1,problems", CASES, ids=[c[0] for c in CASES])
def test_differences_are_named(case: str, a1: dict[str, str], problems: list[str]) -> None:
    runner = RecordingRunner()
    runner.on(["scontrol", "show", "node", "-o"], _output(**a1))
    found = findings(SPEC, gather(SPEC, runner))
    assert [f.check for f in found] == ["node_attrs"] * len(problems)
    for f, words in zip(found, problems, strict=True):
        assert words in f.problem and "restart slurmctld" in f.fix


def test_features_compare_as_sets_and_a_missing_one_is_named() -> None:
    nodes, _ = parse_node_attributes(_line("a-gpu1", "x,proja") + "\n" + _line("b-gpu1", "projb"))
    facts = NodeAttrFacts(nodes | {"a-gpu2": dict(nodes["a-gpu1"], Features="proja")})
    found = findings(SPEC, facts)
    words = [f.problem for f in found]
    assert any("a-gpu1: Features: slurmctld has x,proja, the render proja" in w for w in words), words
    assert any("node group c, c-gpu1: slurmctld does not know the node" in w for w in words), words
    assert not any("a-gpu2" in w for w in words)


def test_mem_spec_limit_not_reported_by_slurmctld_is_named() -> None:
    spec = load_spec_text(TEXT.replace(A_GROUP, A_GROUP + "    mem_spec_limit: 500\n"))
    # A Reason (free text, after every attribute) that looks like one is not read as one.
    text = _output(tail="Reason=was MemSpecLimit=500 [root@2026-12-07T10:00:00]")
    nodes, _ = parse_node_attributes(text)
    found = [f.problem for f in findings(spec, NodeAttrFacts(nodes))]
    assert found[0].startswith("node group a, a-gpu[1-2]: MemSpecLimit: slurmctld has none, the render 500")


def test_lines_without_a_usable_name_are_skipped_and_said() -> None:
    nodes, skipped = parse_node_attributes("CPUTot=4\nNodeName=a,b CPUTot=4\n\n" + _line("a-gpu1", "(null)"))
    assert list(nodes) == ["a-gpu1"] and nodes["a-gpu1"]["Features"] == ""
    assert len(skipped) == 2 and all("without a usable NodeName" in s for s in skipped)


def test_a_failed_read_is_a_finding_and_no_coexist_no_check() -> None:
    runner = RecordingRunner()
    runner.fail(["scontrol", "show", "node"], stderr="slurm_load_node error: Unable to contact slurm controller")
    (f,) = findings(SPEC, gather(SPEC, runner))
    assert "Unable to contact" in f.problem
    owned = load_spec(ROOT / "examples" / "pool.yaml")
    assert gather(owned, RecordingRunner()) is None and findings(owned, None) == []


def test_the_report_names_node_attrs_for_a_shared_cluster_only() -> None:
    config = parse_config_text("SLURM_VERSION = 22.05.8\n")
    help_res = Result(("sbatch", "--help"), 0, "--checkpoint\n", "")
    nodes, _ = parse_node_attributes(_output(Weight="3"))
    facts = Facts(V, V, config, [], help_res, node_attrs=NodeAttrFacts(nodes))
    found = [f for f in diagnose(SPEC, facts) if f.check == "node_attrs"]
    assert len(found) == 1 and "Weight: slurmctld has 3" in found[0].problem
    assert "  FAIL  node_attrs" in report(found, facts)
    plain = report([], Facts(V, V, config, [], help_res))
    assert not any("node_attrs" in x for x in plain)
