"""``slurm-pool diff``: the comparison against outputs recorded from real 22.05 and 26.05 daemons."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from slurm_pool.adapters.records import NodeRecord, node_command, parse_config_text, parse_nodes
from slurm_pool.adapters.runner import RecordingRunner
from slurm_pool.diff.cli import differences, probe_site
from slurm_pool.diff.conf import Difference, attributes_needed, compare, norm, parse_conf, site_dependent
from slurm_pool.render import render_all
from slurm_pool.render.site import Site
from slurm_pool.spec import load_spec
from slurm_pool.versions import SlurmVersion

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data" / "slurm"
EXAMPLE = REPO / "examples" / "pool.yaml"
VERSIONS = ["22.05", "26.05"]


def recorded(version: str):
    """What the example cluster reported: partitions text, node records, config."""
    d = DATA / version
    return (
        (d / "scontrol-partitions.txt").read_text(),
        parse_nodes((d / "nodes-idle.json").read_text()),
        parse_config_text((d / "scontrol-config.txt").read_text()),
    )


def spec_with(tmp_path: Path, change) -> Path:
    data = yaml.safe_load(EXAMPLE.read_text())
    change(data)
    path = tmp_path / "pool.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def lines_for(spec, version: str, site: Site | None = None, edit=None) -> list[str]:
    v = SlurmVersion.parse(version)
    rendered = render_all(spec, site or Site(), v)
    if edit:
        rendered = edit(rendered)
    keys = site_dependent(render_all(spec, Site(), v), render_all(spec, probe_site(), v))
    return [d.line() for d in compare(rendered, *recorded(version), site_keys=keys)]


@pytest.mark.parametrize("version", VERSIONS)
def test_the_recorded_cluster_matches_its_spec(version):
    assert lines_for(load_spec(EXAMPLE), version) == []


def _grace(data, part="shared", value=30):
    next(p for p in data["partitions"] if p["name"] == part)["grace_time"] = value


def _tier_grace(data):
    next(t for t in data["tiers"] if t["name"] == "scavenger")["grace_time"] = 40


def _cpus(data):
    next(g for g in data["node_groups"] if g["name"] == "a")["cpus"] = 8


def _max_time(data):
    next(p for p in data["partitions"] if p["name"] == "shared")["max_time"] = "3-00:00:00"


def _new_partition(data):
    data["partitions"].append({"name": "extra", "nodes": ["b"], "tier": "shared", "priority_tier": 5})


def _dropped_partition(data):
    data["partitions"] = [p for p in data["partitions"] if p["name"] != "k8s-lend"]
    del data["bridge"]  # it lends through that partition


def _dropped_group(data):
    data["node_groups"] = [g for g in data["node_groups"] if g["name"] != "b"]
    data["partitions"] = [p for p in data["partitions"] if p["name"] != "b-owner"]
    for p in data["projects"]:
        p["owns"] = [g for g in p.get("owns", []) if g != "b"]


def _accounts(data):
    next(p for p in data["partitions"] if p["name"] == "a-owner")["allow_accounts"] = ["proja", "projb"]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize(
    "change, want",
    [
        (_grace, ["partition shared: GraceTime 20 -> 30"]),
        (_tier_grace, ["partition scavenger: GraceTime 20 -> 40"]),
        (_cpus, ["node a-gpu[1-2]: CPUs 4 -> 8"]),
        (_max_time, ["partition shared: MaxTime 2-00:00:00 -> 3-00:00:00"]),
        (_new_partition, ["partition extra: added"]),
        (_dropped_partition, ["partition k8s-lend: removed"]),
        (_dropped_group, ["partition b-owner: removed", "node b-gpu1: removed"]),
        (_accounts, ["partition a-owner: AllowAccounts proja -> proja,projb"]),
    ],
)
def test_one_change_shows_one_line(tmp_path, version, change, want):
    assert lines_for(load_spec(spec_with(tmp_path, change)), version) == want


def _conf(old: str, new: str):
    def edit(files):
        assert old in files["slurm.conf"]
        return {n: t.replace(old, new) if n.endswith(".conf") else t for n, t in files.items()}

    return edit


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize(
    "old, new, want",
    [
        ("PriorityWeightQOS=10000", "PriorityWeightQOS=20000", ["config: PriorityWeightQOS 10000 -> 20000"]),
        ("SlurmctldTimeout=120", "SlurmctldTimeout=60", ["config: SlurmctldTimeout 120 sec -> 60"]),
        ("PreemptMode=REQUEUE\n", "PreemptMode=CANCEL\n", ["config: PreemptMode REQUEUE -> CANCEL"]),
        ("GresTypes=gpu", "GresTypes=gpu,shard", ["config: GresTypes gpu -> gpu,shard"]),
        ("MinJobAge=300", "MinJobAge=300\nNotAKeySlurmReports=1", []),  # a key the cluster does not report
    ],
)
def test_a_changed_setting_shows(version, old, new, want):
    assert lines_for(load_spec(EXAMPLE), version, edit=_conf(old, new)) == want


@pytest.mark.parametrize("version", VERSIONS)
def test_site_settings_never_show(version):
    site = Site(slurmctld_port=7000, log_dir="/elsewhere", bin_dir="/opt/bin", slurm_user="pool")
    assert lines_for(load_spec(EXAMPLE), version, site=site) == []


@pytest.mark.parametrize(
    "key, cluster, rendered, same",
    [
        ("MaxTime", "UNLIMITED", "INFINITE", True),
        ("MaxTime", "2-00:00:00", "2880", True),  # slurm.conf MaxTime in minutes
        ("MaxTime", "2-00:00:00", "48:00:00", True),
        ("MaxTime", "UNLIMITED", "2-00:00:00", False),
        ("GraceTime", "20", "20", True),
        ("GraceTime", "20", "30", False),
        ("SlurmctldTimeout", "120 sec", "120", True),
        ("SelectTypeParameters", "CR_CORE_MEMORY", "CR_Core_Memory", True),
        ("MpiDefault", "(null)", "none", True),  # 26.05 prints an unset plugin as (null)
        ("TaskPlugin", "(null)", "task/none", True),
        ("PreemptExemptTime", "NONE", "-1", True),
        ("PreemptExemptTime", "00:00:00", "0", True),
        ("PreemptExemptTime", "NONE", "0", False),
        ("PreemptMode", "REQUEUE", "requeue", True),
        ("PreemptMode", "REQUEUE", "OFF", False),
        ("SchedulerParameters", "a=1,b=2", "b=2,a=1", True),
        ("SchedulerParameters", "a=1,b=2", "a=1", False),
        ("SlurmUser", "root(0)", "root", True),
    ],
)
def test_normalised_values(key, cluster, rendered, same):
    assert (norm(key, cluster) == norm(key, rendered)) is same


def test_accounting_tres_may_hold_slurms_own():
    conf = {"slurm.conf": "AccountingStorageTRES=gres/gpu\n"}
    have = {"AccountingStorageTRES": "cpu,mem,energy,node,billing,gres/gpu"}
    assert compare(conf, "", [], have) == []
    assert [d.line() for d in compare(conf, "", [], {"AccountingStorageTRES": "cpu,mem"})] == [
        "config: AccountingStorageTRES cpu,mem -> gres/gpu"
    ]


def test_a_shared_clusters_lists_may_hold_the_sites_items():
    pool = {"slurm-pool.conf": "GresTypes=gpu\n", "site-settings.conf": "SchedulerParameters=nohold_on_prolog_fail\n"}
    have = {"SchedulerParameters": "bf_interval=5,nohold_on_prolog_fail", "GresTypes": "gpu,shard"}
    assert compare(pool, "", [], have) == []
    assert [d.line() for d in compare(pool, "", [], {**have, "SchedulerParameters": "bf_interval=5"})] == [
        "config: SchedulerParameters bf_interval=5 -> nohold_on_prolog_fail"
    ]
    # A whole slurm.conf is the pool's: an item the cluster has beyond it shows.
    whole = {"slurm.conf": "GresTypes=gpu\n"}
    assert [d.line() for d in compare(whole, "", [], have)] == ["config: GresTypes gpu,shard -> gpu"]


def test_nodes_all_is_every_node_and_lists_are_hostlists():
    conf = {"slurm-pool.conf": "PartitionName=p Nodes=ALL\nPartitionName=q Nodes=n[1-2]\n"}
    parts = "PartitionName=p Nodes=n1,n2\nPartitionName=q Nodes=n[1-3]\n"
    nodes = [NodeRecord(name=n, state=None) for n in ("n1", "n2")]  # type: ignore[arg-type]
    assert [d.line() for d in compare(conf, parts, nodes, {})] == ["partition q: Nodes n[1-3] -> n[1-2]"]


def test_partitions_and_nodes_the_render_lacks_are_a_sites():
    conf = {"slurm-pool.conf": "NodeName=n1 CPUs=64\nPartitionName=p Nodes=n1 GraceTime=5\n"}
    parts = "PartitionName=p Nodes=n1 GraceTime=5\nPartitionName=cpu Nodes=c[1-9] GraceTime=99\n"
    nodes = [NodeRecord(name=n, state=None, cpus=64) for n in ("n1", "c1")]  # type: ignore[arg-type]
    assert compare(conf, parts, nodes, {"SiteOnly": "1"}) == []
    # The same lines as a whole slurm.conf: the cluster's others are the pool's, removed by the render.
    whole = [d.line() for d in compare({"slurm.conf": conf["slurm-pool.conf"]}, parts, nodes, {"SiteOnly": "1"})]
    assert whole == ["partition cpu: removed", "node c1: removed"]


def test_slurms_words_are_made_printable():
    d = Difference("partition", "p\x1b[31m", "GraceTime", "1\n2", "3")
    assert "\x1b" not in d.line() and "\n" not in d.line()


def test_parse_conf_later_text_wins_and_comments_go():
    conf = parse_conf("A=1 # c\nNodeName=n1 CPUs=2\n", "A=2\nNodeName=n1 CPUs=4\n# B=3\n")
    assert conf.settings == {"A": "2"}
    assert conf.nodes == [{"NodeName": "n1", "CPUs": "4"}]


def _cluster_runner(version: str) -> RecordingRunner:
    d = DATA / version
    r = RecordingRunner()
    r.on(["scontrol", "show", "config"], (d / "scontrol-config.txt").read_text())
    r.on(["scontrol", "show", "partition", "-o"], (d / "scontrol-partitions.txt").read_text())
    r.on(node_command(SlurmVersion.parse(version)), (d / "nodes-idle.json").read_text())
    return r


@pytest.mark.parametrize("version", VERSIONS)
def test_differences_reads_only_and_includes_accounting(version):
    r = _cluster_runner(version)
    found = differences(load_spec(EXAMPLE), r)
    # sacctmgr answered nothing: the accounting diff adds the cluster and every QOS; nothing else differs.
    assert {d.kind for d in found} == {"accounting"}
    assert "accounting: + cluster pool" in [d.line() for d in found]
    assert not [c for c in r.calls if c[:2] == ("sacctmgr", "-i") or c[:2] == ("scontrol", "update")]


@pytest.mark.parametrize(
    "setup, args, code",
    [
        (None, [], 0),
        (None, ["--json"], 0),
        ("grace", [], 1),
        ("grace", ["--json"], 1),
        ("fail", [], 2),
        ("badspec", [], 2),
    ],
)
def test_exit_status_like_diff(monkeypatch, tmp_path, setup, args, code):
    from slurm_pool.cli import cli
    from slurm_pool.diff import cli as diff_cli

    spec = spec_with(tmp_path, _grace) if setup == "grace" else EXAMPLE
    if setup == "badspec":
        spec = tmp_path / "bad.yaml"
        spec.write_text("version: 1\ncluster: {name: 'x y'}\n")
    r = _cluster_runner("22.05")
    if setup == "fail":
        r.fail(["scontrol", "show", "config"], stderr="slurm_load_ctl_conf error")
    monkeypatch.setattr("slurm_pool.adapters.runner.SubprocessRunner", lambda: r)
    real = diff_cli.differences
    monkeypatch.setattr(
        diff_cli, "differences", lambda s, run, *a: [d for d in real(s, run, *a) if d.kind != "accounting"]
    )
    res = CliRunner().invoke(cli, ["diff", "--spec", str(spec), *args])
    assert res.exit_code == code, res.output
    if setup == "grace":
        if args:
            assert json.loads(res.stdout) == [
                {"kind": "partition", "name": "shared", "field": "GraceTime", "cluster": "20", "rendered": "30"}
            ]
        else:
            assert res.stdout.splitlines() == ["partition shared: GraceTime 20 -> 30"]
    if setup == "fail":
        assert "cannot ask Slurm" in res.stderr


@pytest.mark.parametrize(
    "line, record, want",
    [
        ("Gres=gpu:a100:2", {"gres": "gpu:a100:2(S:0-1)"}, []),
        ("Gres=gpu:a100:2,gpu:1g.5gb:1", {"gres": "gpu:1g.5gb:1,gpu:a100:2"}, []),
        ("Gres=gpu:a100:4", {"gres": "gpu:a100:2"}, ["node n1: Gres gpu:a100:2 -> gpu:a100:4"]),
        ("Features=x,y", {"features": ("y", "x")}, []),
        ("Features=x", {"features": ("x", "mig")}, ["node n1: Features x,mig -> x"]),
        ("RealMemory=8000", {"memory_mb": 16000}, ["node n1: RealMemory 16000 -> 8000"]),
    ],
)
def test_node_fields(line, record, want):
    conf = {"slurm.conf": f"NodeName=n1 {line}\n"}
    rec = NodeRecord(name="n1", state=None, **record)  # type: ignore[arg-type]
    assert [d.line() for d in compare(conf, "", [rec], {})] == want


@pytest.mark.parametrize(
    "line, held, want",
    [
        # a rendered attribute slurmctld holds the same: nothing; otherwise named, nodes with the same together
        ("Sockets=2 CoresPerSocket=4", {"Sockets": "2", "CoresPerSocket": "4"}, []),
        ("Weight=10", {"Weight": "7"}, ["node n[1-2]: Weight 7 -> 10"]),
        ("ThreadsPerCore=2 TmpDisk=4000", {"ThreadsPerCore": "1", "TmpDisk": "4000"},
         ["node n[1-2]: ThreadsPerCore 1 -> 2"]),
        # scontrol prints MemSpecLimit only when a node has one
        ("MemSpecLimit=1000", {}, ["node n[1-2]: MemSpecLimit - -> 1000"]),
        # an attribute the render leaves out is Slurm's default: not compared
        ("CPUs=", {"Weight": "7", "Sockets": "4"}, []),
    ],
)  # fmt: skip
def test_node_attributes(line, held, want):
    conf = {"slurm.conf": f"NodeName=n[1-2] {line}\n"}
    recs = [NodeRecord(name=n, state=None) for n in ("n1", "n2")]  # type: ignore[arg-type]
    assert [d.line() for d in compare(conf, "", recs, {}, attributes={"n1": held, "n2": held})] == want


def test_node_attributes_are_read_only_where_a_line_sets_one():
    r = _cluster_runner("22.05")
    r.on(["scontrol", "show", "node", "-o"], "NodeName=a-gpu1 Sockets=4 Weight=1\nNodeName=bad\x01 Weight=1\n")
    assert not attributes_needed({"slurm.conf": "NodeName=n1 CPUs=4 RealMemory=1\n"})
    assert attributes_needed({"slurm-pool.conf": "NodeName=n1 CPUs=4 Weight=3\n"})
    differences(load_spec(EXAMPLE), r)
    assert ("scontrol", "show", "node", "-o") not in r.calls
    from slurm_pool.adapters.slurm import SlurmClient

    assert SlurmClient(r).node_attributes() == {"a-gpu1": {"Sockets": "4", "Weight": "1"}}


@pytest.mark.parametrize("version", VERSIONS)
def test_a_name_the_site_owns_makes_diff_exit_2_naming_it(monkeypatch, version):
    from slurm_pool.cli import cli
    from tests.unit.test_accounting import FakeSacctmgr

    fake = FakeSacctmgr()
    fake.qos["scavenger"] = {"Description": "the site's spot QOS", "PreemptMode": "CANCEL"}
    r = _cluster_runner(version)
    r.respond(["sacctmgr"], fake)
    monkeypatch.setattr("slurm_pool.adapters.runner.SubprocessRunner", lambda: r)
    res = CliRunner().invoke(cli, ["diff", "--spec", str(EXAMPLE)])
    assert res.exit_code == 2, res.output
    assert res.stderr.startswith(
        "error: qos scavenger: exists in slurmdbd and slurm-pool did not create it; rename the tier 'scavenger'"
    ), res.stderr
    assert not [c for c in r.calls if c[:2] == ("sacctmgr", "-i")]
