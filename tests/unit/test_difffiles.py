"""``slurm-pool diff`` against the installed files: job_submit.lua's policy, node.conf, every rendered file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from slurm_pool import nodeconf
from slurm_pool.diff.cli import file_differences
from slurm_pool.diff.files import compare_files, policy_differences, shown_value
from slurm_pool.policy.lua import lua_value, policy_code, policy_data, render_job_submit
from slurm_pool.policy.luaread import read_policy
from slurm_pool.policy.tables import build_tables
from slurm_pool.render import render_all
from slurm_pool.render.site import Site
from slurm_pool.spec import load_spec
from slurm_pool.versions import SlurmVersion

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
V22 = SlurmVersion.parse("22.05")
#: A site unlike the default one in every way the local cluster differs (ports, paths, devices, extra lines).
LOCAL_LIKE = dict(
    dev_dir="/srv/dev",
    emulated_devices=True,
    slurmctld_port=1234,
    node_ports={"a-gpu1": 17000, "a-gpu2": 17001, "b-gpu1": 17002, "c-gpu1": 17003},
    extra_slurm_conf=("SlurmdParameters=config_overrides",),
    jwt_key="/srv/jwt.key",
    bin_dir="/srv/bin",
    spank_plugin="/srv/lib/slurm_pool_spank.so",
    control_host="head1",
)


def install(spec_path: Path, tmp_path: Path, version: SlurmVersion = V22) -> Path:
    """The files of ``spec_path`` rendered for a local-cluster-like site, installed in ``tmp_path/etc``."""
    etc = tmp_path / "etc"
    etc.mkdir()
    spec = load_spec(spec_path)
    for name, text in render_all(spec, Site(conf_dir=str(etc), **LOCAL_LIKE), version).items():
        (etc / name).write_text(text)
    (etc / nodeconf.BESIDE_SLURM_CONF).write_text(
        nodeconf.render(spec, state_dir="/srv/state", gpus="auto", scontrol="/srv/bin/scontrol")
    )
    return etc


def edited(tmp_path: Path, example: str, change) -> Path:
    data = yaml.safe_load((EXAMPLES / example).read_text())
    change(data)
    path = tmp_path / "changed.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def tier(data, name):
    return next(t for t in data["tiers"] if t["name"] == name)


def set_policy(name, key, value):
    return lambda data: tier(data, name).setdefault("policy", {}).__setitem__(key, value)


def checkpoint_warn(data):
    data.setdefault("checkpoint", {})["warn_seconds"] = 99


def no_prolog(data):
    data.setdefault("health", {})["prolog"] = False


def site_health(data):
    data["coexist"]["health_check"] = "/usr/sbin/nhc"


@pytest.mark.parametrize(
    "example, version",
    [
        *((e, v) for e in ("pool.yaml", "pool-coexist.yaml", "pool-floating.yaml") for v in ("22.05", "26.05")),
        ("pool-full.yaml", "26.05"),  # GPU shards: 23.11.5 and later
    ],
)
def test_the_installed_render_of_the_same_spec_shows_nothing(tmp_path, example, version):
    v = SlurmVersion.parse(version)
    etc = install(EXAMPLES / example, tmp_path, v)
    assert [d.line() for d in file_differences(load_spec(EXAMPLES / example), v, etc)] == []


@pytest.mark.parametrize(
    "example, change, want",
    [
        (
            "pool-coexist.yaml",
            set_policy("shared", "checkpoint", "reject"),
            ["tier shared: policy.checkpoint add_requeue -> reject"],
        ),
        ("pool.yaml", set_policy("guaranteed", "max_gpus_per_job", 3), ["tier guaranteed: policy.max_gpus - -> 3"]),
        (
            "pool-coexist.yaml",
            set_policy("shared", "require_time_limit", False),
            ["tier shared: policy.require_time true -> false"],
        ),
        (
            "pool-coexist.yaml",
            no_prolog,
            [
                "file site-settings.conf: SchedulerParameters nohold_on_prolog_fail,preempt_reorder_count=3,"
                "preempt_strict_order -> preempt_reorder_count=3,preempt_strict_order",
                "file site-settings.conf: PrologFlags Alloc -> -",
                "file site-settings.conf: Prolog PROLOG_DIR/* -> -",
            ],
        ),
        (
            "pool-coexist.yaml",
            checkpoint_warn,
            [
                "file plugstack-slurm-pool.conf: optional /srv/lib/slurm_pool_spank.so base_dir=/var/lib/slurm-pool/"
                "checkpoints signal=USR1 warn_seconds=60 -> /srv/lib/slurm_pool_spank.so base_dir=/var/lib/slurm-pool/"
                "checkpoints signal=USR1 warn_seconds=99",
                "policy: pool.warn_seconds 60 -> 99",
                "node.conf: warn_seconds 60 -> 99",
            ],
        ),
        ("pool-coexist.yaml", site_health, ["node.conf: site_health_check - -> /usr/sbin/nhc"]),
        (
            "pool.yaml",
            no_prolog,
            [
                "file slurm.conf: SchedulerParameters sched_interval=2,sched_min_interval=100000,bf_interval=5,"
                "nohold_on_prolog_fail,preempt_reorder_count=3,preempt_strict_order -> sched_interval=2,"
                "sched_min_interval=100000,bf_interval=5,preempt_reorder_count=3,preempt_strict_order",
                "file slurm.conf: Prolog /srv/bin/slurm-pool-prolog -> -",
                "file slurm.conf: PrologFlags Alloc -> -",
                "file slurm.conf: PrologEpilogTimeout 60 -> -",
            ],
        ),
    ],
)
def test_one_change_is_named(tmp_path, example, change, want):
    etc = install(EXAMPLES / example, tmp_path)
    spec = load_spec(edited(tmp_path, example, change))
    prolog_dir = spec.coexist.prolog_dir if spec.coexist else ""
    got = [d.line() for d in file_differences(spec, V22, etc)]
    assert got == [w.replace("PROLOG_DIR", prolog_dir) for w in want]


def test_files_not_installed_and_a_job_submit_lua_not_the_pools(tmp_path):
    etc = install(EXAMPLES / "pool-coexist.yaml", tmp_path)
    (etc / "gres-a.conf").unlink()
    (etc / "site-settings.conf").unlink()  # merged into slurm.conf: compared only where installed
    (etc / "job_submit.lua").write_text("function slurm_job_submit() return slurm.SUCCESS end\n")
    (etc / nodeconf.BESIDE_SLURM_CONF).unlink()
    got = [d.line() for d in file_differences(load_spec(EXAMPLES / "pool-coexist.yaml"), V22, etc)]
    assert got == [
        "file gres-a.conf: not installed",
        "file job_submit.lua: not slurm-pool's",
        "file node.conf: not installed",
    ]


def test_another_releases_code_is_one_line(tmp_path):
    etc = install(EXAMPLES / "pool-coexist.yaml", tmp_path)
    path = etc / "job_submit.lua"
    path.write_text(path.read_text() + "-- one more line\n")
    [d] = file_differences(load_spec(EXAMPLES / "pool-coexist.yaml"), V22, etc)
    assert (d.kind, d.name, d.field) == ("file", "job_submit.lua", "code") and d.cluster != d.rendered


def test_the_site_own_slurm_conf_lines_and_node_conf_paths_never_show(tmp_path):
    etc = install(EXAMPLES / "pool.yaml", tmp_path)
    with (etc / "slurm.conf").open("a") as f:
        f.write("MailProg=/usr/bin/mail\n")  # not a key the pool's template writes
    with (etc / nodeconf.BESIDE_SLURM_CONF).open("a") as f:
        f.write("log = stderr\n")  # a setting the render does not make: shown, the render would drop it
    got = [d.line() for d in file_differences(load_spec(EXAMPLES / "pool.yaml"), V22, etc)]
    assert got == ["node.conf: log stderr -> syslog"]


@pytest.mark.parametrize(
    "installed, rendered, want",
    [
        ({"tiers": {"a": {"max_gpus": None}}}, {"tiers": {"a": {"max_gpus": 4}}}, ["tier a: policy.max_gpus - -> 4"]),
        ({"tiers": {"a": {}}}, {"tiers": {"a": {}, "b": {}}}, ["tier b: policy added"]),
        ({"tiers": {"a": {}, "b": {}}}, {"tiers": {"a": {}}}, ["tier b: policy removed"]),
        (
            {"partitions": {"p": {"accounts": {"x": True}}}},
            {"partitions": {"p": {"accounts": {"x": True, "y": True}}}},
            ["partition p: policy.accounts x -> x,y"],
        ),
        (
            {"projects": {"p": {"route": {"shared": "s1"}}}},
            {"projects": {"p": {"route": {"shared": "s2"}}}},
            ["project p: policy.route.shared s1 -> s2"],
        ),
        ({"user_project": {"alice": "p"}}, {"user_project": {"alice": "q"}}, ["user alice: policy p -> q"]),
        ({"enabled": True}, {"enabled": False}, ["policy: enabled true -> false"]),
        ({"mig_by_size": []}, {"mig_by_size": ["1g.5gb"]}, ["policy: mig_by_size - -> 1g.5gb"]),
    ],
)
def test_policy_rules_in_words(installed, rendered, want):
    assert [d.line() for d in policy_differences(installed, rendered)] == want


@pytest.mark.parametrize(
    "value, shown",
    [
        (None, "-"),
        (True, "true"),
        (3, "3"),
        ({"a": True, "b": True}, "a,b"),
        ([1, 2], "1,2"),
        ([{"a": 1}], '[{"a":1}]'),
    ],
)
def test_shown_value(value, shown):
    assert shown_value(value) == shown


@pytest.mark.parametrize("example", ["pool.yaml", "pool-coexist.yaml", "pool-full.yaml", "pool-floating.yaml"])
def test_read_policy_reads_back_what_the_render_wrote(example):
    spec = load_spec(EXAMPLES / example)
    data, code = read_policy(render_job_submit(spec, V22))  # type: ignore[misc]
    want = json.loads(json.dumps(policy_data(build_tables(spec, V22), V22, spec.policy.job_submit)))
    assert code == policy_code()
    # An empty table is written "{}" whether it was a list or a mapping: both read back as {}.
    assert {k: v for k, v in data.items() if v != {}} == {k: v for k, v in want.items() if v not in ({}, [])}


@pytest.mark.parametrize(
    "value", ['a"b\\c\n\t\r', "é ü \x01", -5, 0, True, None, {"and": 1, "x y": [1, "2"]}, [[1], {"k": False}]]
)
def test_read_policy_round_trips_every_literal(value):
    data = {"v": value}
    assert read_policy("-- head\nlocal SLURM_POOL = " + lua_value(data, multiline=2) + "\n\ncode\n") == (
        json.loads(json.dumps(data)),
        "code\n",
    )


@pytest.mark.parametrize(
    "text", ["", "local SLURM_POOL = {", "\nlocal SLURM_POOL = { a = os.exit() }\n", "\nlocal SLURM_POOL = 5\n"]
)
def test_read_policy_refuses_what_is_not_data(text):
    assert read_policy(text) is None


def test_compare_files_skips_digests_and_the_accounting_plan():
    rendered = {"manifest.json": "{}", "accounting.json": "{}", "x.conf": "A=1\n"}
    assert compare_files(rendered, rendered, {"x.conf": "A=1\n"}) == []
    assert [d.line() for d in compare_files(rendered, rendered, {"x.conf": "A=2\n"})] == ["file x.conf: A 2 -> 1"]


def test_diff_cli_compares_the_installed_directory(monkeypatch, tmp_path):
    from slurm_pool.cli import cli
    from slurm_pool.diff import cli as diff_cli

    etc = install(EXAMPLES / "pool-coexist.yaml", tmp_path)
    spec = edited(tmp_path, "pool-coexist.yaml", set_policy("shared", "checkpoint", "reject"))
    monkeypatch.setattr(diff_cli, "compare", lambda *a, **k: [])
    monkeypatch.setattr("slurm_pool.accounting.apply.diff", lambda *a, **k: [])
    runner = _runner(etc)
    monkeypatch.setattr("slurm_pool.adapters.runner.SubprocessRunner", lambda: runner)
    res = CliRunner().invoke(cli, ["diff", "--spec", str(spec), "--installed", str(etc), "--json"])
    assert res.exit_code == 1, res.output
    assert json.loads(res.stdout) == [
        {"kind": "tier", "name": "shared", "field": "policy.checkpoint", "cluster": "add_requeue", "rendered": "reject"}
    ]
    # Without --installed: the directory of the cluster's SLURM_CONF.
    res = CliRunner().invoke(cli, ["diff", "--spec", str(spec)])
    assert (res.exit_code, res.stdout) == (1, "tier shared: policy.checkpoint add_requeue -> reject\n"), res.output
    # A directory this machine lacks: said, not a difference.
    runner = _runner(tmp_path / "absent")
    res = CliRunner().invoke(cli, ["diff", "--spec", str(spec)])
    assert (res.exit_code, res.stdout) == (0, "")
    assert "installed files were not compared" in res.stderr


def _runner(etc: Path):
    from slurm_pool.adapters.records import node_command
    from slurm_pool.adapters.runner import RecordingRunner

    data = REPO / "tests" / "data" / "slurm" / "22.05"
    config = (data / "scontrol-config.txt").read_text().replace("/srv/pool/etc/slurm.conf", str(etc / "slurm.conf"))
    r = RecordingRunner()
    r.on(["scontrol", "show", "config"], config)
    r.on(["scontrol", "show", "partition", "-o"], (data / "scontrol-partitions.txt").read_text())
    r.on(node_command(V22), (data / "nodes-idle.json").read_text())
    return r


def test_slurm_conf_lines_the_cluster_already_shows_are_not_repeated():
    from slurm_pool.diff.conf import Difference as D
    from slurm_pool.diff.files import not_seen

    cluster = [
        D("config", "", "PreemptMode", "CANCEL", "REQUEUE"),
        D("partition", "shared", "GraceTime", "20", "30"),
        D("node", "a-gpu1", "CPUs", "2", "4"),
    ]
    files = [
        D("file", "slurm.conf", "PreemptMode", "CANCEL", "REQUEUE"),
        D("file", "slurm-pool.conf", "PartitionName=shared", "GraceTime=20", "GraceTime=30"),
        D("file", "slurm-pool.conf", "PartitionName=other", "", "State=UP"),
        D("file", "slurm-pool.conf", "NodeName=a-gpu[1-2]", "CPUs=2", "CPUs=4"),
        D("file", "slurm-pool.conf", "NodeName=b-gpu1", "Weight=1", "Weight=2"),
        D("file", "site-settings.conf", "Prolog", "/p/*", ""),
        D("file", "plugstack.conf", "PreemptMode", "x", "y"),  # not a slurm.conf file: kept
    ]
    assert [d.field for d in not_seen(files, cluster)] == [
        "PartitionName=other",
        "NodeName=b-gpu1",
        "Prolog",
        "PreemptMode",
    ]
    assert not_seen(files, []) == files
