"""Issue 2, check 1: the example pool boots as real daemons, as the spec says."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from slurm_pool.render.context import gres_string
from slurm_pool.spec.hosts import expand

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slurm


def _gres_counts(gres: str) -> Counter:
    out: Counter = Counter()
    for part in gres.split(","):
        bits = part.split("(")[0].split(":")
        if bits[0] == "gpu" and len(bits) == 3:
            out[bits[1]] += int(bits[2])
    return out


def test_every_node_idle_with_configured_gres(slurm_cluster):
    nodes = {n.name: n for n in slurm_cluster.slurm.nodes()}
    for group in slurm_cluster.spec.node_groups:
        want = _gres_counts(gres_string(group, slurm_cluster.version))
        for name in expand(group.hosts):
            node = nodes[name]
            assert "IDLE" in node.state, (name, node.state)
            assert _gres_counts(node.gres) == want, (name, node.gres)
    mig_types = {
        t
        for g in slurm_cluster.spec.node_groups
        for t in _gres_counts(gres_string(g, slurm_cluster.version))
        if "g." in t
    }
    assert mig_types, "the example pool has MIG types"


def test_qos_match_spec(slurm_cluster):
    rows = {
        r["Name"]: r
        for r in slurm_cluster.slurm.sacctmgr_show(
            "qos", ["Name", "Priority", "Preempt", "PreemptMode", "GraceTime", "UsageFactor", "MaxTRES"]
        )
    }
    for tier in slurm_cluster.spec.tiers:
        row = rows[tier.name]
        assert int(row["Priority"]) == tier.priority
        assert sorted(filter(None, row["Preempt"].split(","))) == sorted(tier.preempt)
        mode = row["PreemptMode"].upper()
        assert mode == (tier.preempt_mode.upper() if tier.preempt_mode != "off" else "CLUSTER")
        h, m, s = (int(x) for x in row["GraceTime"].split(":"))
        assert h * 3600 + m * 60 + s == tier.grace_time
        assert float(row["UsageFactor"]) == pytest.approx(tier.usage_factor)
        limit = tier.policy.max_gpus_per_job
        assert row["MaxTRES"] == (f"gres/gpu={limit}" if limit else ""), row


def test_partitions_match_spec(slurm_cluster):
    out = slurm_cluster.run(["scontrol", "show", "partition", "-o"], check=True).stdout
    parts = {}
    for line in out.splitlines():
        kv = dict(f.split("=", 1) for f in line.split() if "=" in f)
        parts[kv["PartitionName"]] = kv
    for p in slurm_cluster.spec.partitions:
        got = parts[p.name]
        assert int(got["PriorityTier"]) == p.priority_tier
        assert got["AllowQos"] == p.tier
        tier = slurm_cluster.spec.tier(p.tier)
        assert got["PreemptMode"] == (p.preempt_mode or tier.preempt_mode).upper()


def test_up_twice_is_safe(slurm_cluster):
    before = {p.name: p.pid for p in slurm_cluster.cluster.procs.all()}
    slurm_cluster.cluster.up()
    after = {p.name: p.pid for p in slurm_cluster.cluster.procs.all()}
    assert before == after


def test_accounting_second_apply_changes_nothing(slurm_cluster):
    """Issue 2, check 5: a second apply reports no changes and runs no sacctmgr modification."""
    from slurm_pool.accounting.apply import apply_accounting
    from slurm_pool.adapters.runner import SubprocessRunner
    from slurm_pool.adapters.slurm import SlurmClient

    class Spy(SubprocessRunner):
        calls: list = []

        def run(self, argv, **kw):
            self.calls.append(list(argv))
            return super().run(argv, **kw)

    spy = Spy(env=slurm_cluster.env)
    lines: list[str] = []
    changes = apply_accounting(slurm_cluster.spec, SlurmClient(spy), echo=lines.append)
    assert changes == []
    assert lines == ["accounting: no changes"]
    assert spy.calls and all(c[:1] == ["sacctmgr"] and "show" in c for c in spy.calls)


def test_a_line_break_in_a_sites_account_shifts_nothing(slurm_cluster):
    """Hardening, third round: sacctmgr prints a line break in a description or
    organisation raw; the account is read whole, and apply (with --prune) leaves it."""
    from slurm_pool.accounting.apply import apply_accounting
    from slurm_pool.adapters.runner import SubprocessRunner
    from slurm_pool.adapters.slurm import SlurmClient

    runner = SubprocessRunner(env=slurm_cluster.env)
    slurm = SlurmClient(runner)
    add = ["sacctmgr", "-i", "add", "account", "zz-site", "Description=the site\nown", "Organization=physics\ndept"]
    runner.run(add)
    try:
        descr = {r["Account"]: r["Descr"] for r in slurm.sacctmgr_show("account", ["Descr", "Account"])}
        org = {r["Account"]: r["Org"] for r in slurm.sacctmgr_show("account", ["Org", "Account"])}
        assert (descr["zz-site"].lower(), org["zz-site"].lower()) == ("the site\nown", "physics\ndept")
        assert set(descr) == set(org) and all("\n" not in name for name in descr)
        lines: list[str] = []
        assert apply_accounting(slurm_cluster.spec, slurm, prune=True, dry_run=True, echo=lines.append) == []
    finally:
        runner.run(["sacctmgr", "-i", "delete", "account", "zz-site"], check=False)


def _cli(slurm_cluster, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, **slurm_cluster.env, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "slurm_pool", *args], env=env, capture_output=True, text=True, timeout=120
    )


def test_cluster_status_shows_every_node(slurm_cluster):
    res = _cli(slurm_cluster, "cluster", "status", "--state-dir", str(slurm_cluster.cluster.layout.root))
    assert res.returncode == 0, res.stdout + res.stderr
    lines = res.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.split() == ["NODE", "STATE", "GRES"]) + 1
    table = [
        line.split()
        for line in lines[start : start + len(slurm_cluster.cluster.nodes()) + 1]
        if line.strip() and not line.startswith("PARTITION")
    ]
    assert {row[0] for row in table} == set(slurm_cluster.cluster.nodes()), res.stdout
    for group in slurm_cluster.spec.node_groups:
        for name in expand(group.hosts):
            row = next(r for r in table if r[0] == name)
            assert _gres_counts(row[2]) == _gres_counts(gres_string(group, slurm_cluster.version)), row


def test_exporter_reports_every_gpu_by_state(slurm_cluster):
    res = _cli(slurm_cluster, "exporter", "--once")
    assert res.returncode == 0, res.stderr
    assert "slurm_pool_up 1.0" in res.stdout, res.stdout[-2000:]
    for group in slurm_cluster.spec.node_groups:
        for name in expand(group.hosts):
            for gtype, count in _gres_counts(gres_string(group, slurm_cluster.version)).items():
                line = f'slurm_pool_gpus{{node="{name}",state="idle",type="{gtype}"}} {float(count)}'
                assert line in res.stdout, line
