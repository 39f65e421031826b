"""``doctor``'s coexist checks: the site's job_submit script loads, and the site's partitions over pool nodes
deny every pool QOS (``scontrol show partition -o`` from a recording fake)."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_pool.adapters.partitions import PartitionRecord, parse_partition_text
from slurm_pool.adapters.records import parse_config_text
from slurm_pool.adapters.runner import RecordingRunner, Result
from slurm_pool.doctor import coexist as doctor_coexist
from slurm_pool.doctor.coexist import CoexistFacts, findings, gather, lua_load_error, luac_error
from slurm_pool.doctor.diagnose import Facts, diagnose, report
from slurm_pool.spec import load_spec, load_spec_text
from slurm_pool.versions import SlurmVersion

ROOT = Path(__file__).resolve().parents[2]
COEXIST = load_spec(ROOT / "examples" / "pool-coexist.yaml")
V = SlurmVersion.parse("22.05.8")
GOOD = b"function slurm_job_submit() return slurm.SUCCESS end\nfunction slurm_job_modify() return 0 end\n"

# (case, the script, the error's fragment (None: it loads))
SCRIPTS = [
    ("good", GOOD, None),
    ("good, returning SUCCESS", GOOD + b"return slurm.SUCCESS\n", None),
    ("syntax error, its line named", GOOD + b"\nif x then\n", "/etc/slurm/site.lua:5: 'end' expected"),
    ("an error while loading", GOOD + b"error('boom')\n", "/etc/slurm/site.lua:3: boom"),
    ("a return code other than SUCCESS", GOOD + b"return 3\n", "/etc/slurm/site.lua: returned 3 on load"),
    ("a function missing", b"function slurm_job_submit() end\n", "missing required function slurm_job_modify"),
    ("a loop at load", GOOD + b"while true do end\n", "still running after"),
    ("bytes that are not UTF-8", GOOD + b"\xff\n", "/etc/slurm/site.lua:3:"),
    ("5.4 syntax that 5.1 lacks", b"local x = 7 // 2\n" + GOOD, None),
]


@pytest.mark.parametrize("case,script,fragment", SCRIPTS, ids=[s[0] for s in SCRIPTS])
def test_the_site_script_loads_as_job_submit_lua_would(case: str, script: bytes, fragment: str | None) -> None:
    err, how = lua_load_error("/etc/slurm/site.lua", script)
    assert how.startswith("lupa.")
    if fragment is None:
        assert err is None, err
    else:
        assert err is not None and fragment in err, err


def test_without_lupa_luac_checks_the_syntax(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(doctor_coexist, "LUA_RUNTIMES", ("lupa.no_such_runtime",))
    assert lua_load_error("/x.lua", b"x = (") == (None, "")
    runner = RecordingRunner()
    runner.on(["luac", "-p"], returncode=1, stderr="luac: /x.lua:1: unexpected symbol near '<eof>'\n")
    assert luac_error("/x.lua", runner) == ("/x.lua:1: unexpected symbol near '<eof>'", "luac")
    assert runner.calls == [("luac", "-p", "/x.lua")]
    runner.on(["luac", "-p"], returncode=127, stderr="No such file or directory: 'luac'")
    assert luac_error("/x.lua", runner) == (None, "")
    runner.on(["luac", "-p"])
    assert luac_error("/x.lua", runner) == (None, "luac")


PARTITIONS = """PartitionName=batch AllowGroups=ALL AllowAccounts=ALL AllowQos=ALL Default=YES Nodes=cpu[1-2] State=UP
PartitionName=site-gpu AllowGroups=ALL AllowAccounts=ALL DenyQos=guaranteed,shared,spot,k8s-lend Nodes=cpu2,a-gpu2,b-gpu1
PartitionName=shared AllowGroups=ALL AllowAccounts=ALL AllowQos=ALL Nodes=a-gpu[1-2],b-gpu1,c-gpu1 State=UP
"""


def test_partitions_are_read_from_scontrol() -> None:
    parts, skipped = parse_partition_text(PARTITIONS + "Nodes=x AllowQos=ALL\n\nPartitionName=bad,name Nodes=y\n")
    assert parts[:2] == [
        PartitionRecord("batch", "cpu[1-2]", None, ()),
        PartitionRecord("site-gpu", "cpu2,a-gpu2,b-gpu1", None, ("guaranteed", "shared", "spot", "k8s-lend")),
    ]
    assert len(skipped) == 2 and all("without a usable PartitionName" in s for s in skipped)
    assert parse_partition_text("PartitionName=p AllowQos=normal,site Nodes=(null)\n")[0] == [
        PartitionRecord("p", "", ("normal", "site"), ())
    ]


# (case, the site-gpu line's QOS words and nodes, the QOS a finding names as open (None: no finding))
SITE_GPU = [
    ("DenyQos covering every pool QOS", "DenyQos=guaranteed,shared,spot,k8s-lend Nodes=cpu2,a-gpu2", None),
    ("DenyQos with the site's own too", "DenyQos=normal,guaranteed,shared,spot,k8s-lend Nodes=a-gpu2", None),
    ("AllowQos of the site's only", "AllowQos=normal,scavenger Nodes=cpu2,a-gpu2,b-gpu1", None),
    ("no pool node", "AllowQos=ALL Nodes=cpu2", None),
    ("no nodes", "AllowQos=ALL Nodes=(null)", None),
    ("AllowQos=ALL", "AllowQos=ALL Nodes=cpu2,a-gpu2,b-gpu1", "guaranteed, shared, spot, k8s-lend"),
    ("DenyQos missing one", "DenyQos=guaranteed,shared,k8s-lend Nodes=a-gpu2", "spot"),
    ("AllowQos naming a pool QOS", "AllowQos=normal,shared Nodes=b-gpu1", "shared"),
    ("Nodes=ALL", "AllowQos=ALL Nodes=ALL", "guaranteed, shared, spot, k8s-lend"),
    ("a folded hostlist", "AllowQos=ALL Nodes=a-gpu[1-2]", "guaranteed, shared, spot, k8s-lend"),
]


@pytest.mark.parametrize("case,words,open_to", SITE_GPU, ids=[s[0] for s in SITE_GPU])
def test_a_site_partition_over_pool_nodes_must_deny_the_pool_qos(case: str, words: str, open_to: str | None) -> None:
    text = f"PartitionName=site-gpu AllowGroups=ALL {words} State=UP\n" + PARTITIONS.splitlines()[2] + "\n"
    parts, skipped = parse_partition_text(text)
    found = findings(COEXIST, CoexistFacts(partitions=parts, skipped=skipped))
    if open_to is None:
        assert found == []
        return
    (f,) = found
    assert f.check == "site_partitions"
    assert "the site's partition site-gpu holds pool node(s)" in f.problem and f"QOS {open_to}:" in f.problem
    assert f.fix == (
        "add DenyQos=guaranteed,shared,spot,k8s-lend to the line PartitionName=site-gpu in slurm.conf "
        "(or keep its AllowQos free of them), then scontrol reconfigure"
    )


def test_a_partition_the_spec_does_not_list_is_checked_too() -> None:
    parts, _ = parse_partition_text("PartitionName=other AllowQos=ALL Nodes=c-gpu1\n")
    (f,) = findings(COEXIST, CoexistFacts(partitions=parts))
    assert "c-gpu1" in f.problem and f.fix.endswith("; list it in coexist.site_partitions, then scontrol reconfigure")


@pytest.mark.parametrize(
    "nodes, site_nodes",
    [
        ("a-gpu[1-2]", None),  # the pool's own partition, as installed
        ("a-gpu1,cpu1", "cpu1"),  # the site's partition under a pool partition's name
        ("cpu[1-2]", "cpu1, cpu2"),
    ],
)
def test_a_pool_partition_name_the_site_uses_is_named(nodes: str, site_nodes: str | None) -> None:
    parts, _ = parse_partition_text(f"PartitionName=a-owner AllowQos=ALL Nodes={nodes}\n")
    found = findings(COEXIST, CoexistFacts(partitions=parts))
    if site_nodes is None:
        assert found == []
    else:
        (f,) = found
        assert f"holds the site's node(s) {site_nodes}: it is the site's partition" in f.problem
        assert f.fix == "rename the spec's partition a-owner to a name the site's slurm.conf does not use"


def test_a_node_list_that_cannot_be_read_is_reported_not_passed() -> None:
    parts, _ = parse_partition_text("PartitionName=odd AllowQos=ALL Nodes=a-gpu[1-\n")
    (f,) = findings(COEXIST, CoexistFacts(partitions=parts))
    assert f.check == "site_partitions" and "odd's node list 'a-gpu[1-' cannot be read" in f.problem


def _spec_with_script(path: Path) -> object:
    text = (ROOT / "examples" / "pool-coexist.yaml").read_text()
    return load_spec_text(text.replace("/etc/slurm/site_job_submit.lua", str(path)))


@pytest.mark.parametrize(
    "script,fragment",
    [
        (GOOD, None),
        (b"function slurm_job_submit(\n  this is not lua\n", ":2:"),
        (None, "cannot read"),
    ],
)
def test_gather_reads_the_site_script_and_the_partitions(tmp_path: Path, script: bytes | None, fragment) -> None:
    site = tmp_path / "site_job_submit.lua"
    if script is not None:
        site.write_bytes(script)
    spec = _spec_with_script(site)
    runner = RecordingRunner()
    runner.on(["scontrol", "show", "partition", "-o"], PARTITIONS)
    facts = gather(spec, runner)
    assert facts is not None and [p.name for p in facts.partitions or []] == ["batch", "site-gpu", "shared"]
    found = findings(spec, facts)
    if fragment is None:
        assert found == []
        return
    (f,) = found
    assert f.check == "site_script" and str(site) in f.problem and fragment in f.problem
    assert f.fix.startswith(f"fix {site} (the line named)")


def test_no_coexist_no_checks() -> None:
    owned = load_spec(ROOT / "examples" / "pool.yaml")
    assert gather(owned, RecordingRunner()) is None
    assert findings(owned, CoexistFacts(site_script_error="x")) == []


def test_the_report_shows_the_checks_for_a_shared_cluster_only() -> None:
    config = parse_config_text("SLURM_VERSION = 22.05.8\n")
    help_res = Result(("sbatch", "--help"), 0, "--checkpoint\n", "")
    parts, _ = parse_partition_text("PartitionName=site-gpu AllowQos=ALL Nodes=a-gpu2\n")
    facts = Facts(
        V, V, config, [], help_res, coexist=CoexistFacts(site_script_error="/s.lua:3: oops", partitions=parts)
    )
    found = [f for f in diagnose(COEXIST, facts) if f.check in ("site_script", "site_partitions")]
    assert [f.check for f in found] == ["site_script", "site_partitions"]
    lines = report(found, facts)
    assert "  FAIL  site_script" in lines and "  FAIL  site_partitions" in lines
    plain = report([], Facts(V, V, config, [], help_res))
    assert not any("site_script" in x or "site_partitions" in x for x in plain)
