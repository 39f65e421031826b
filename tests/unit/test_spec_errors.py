"""Bad specs: each exits 2, names the path, and writes nothing."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from slurm_pool.cli import cli, main

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "pool.yaml"


def base() -> dict:
    return yaml.safe_load(EXAMPLE.read_text())


def mutate(fn):
    d = base()
    fn(d)
    return yaml.safe_dump(d, sort_keys=False)


def _set(path, value):
    def f(d):
        cur = d
        for p in path[:-1]:
            cur = cur[p]
        cur[path[-1]] = value

    return f


# (case id, spec text, path the message must name, words it must contain)
CASES = [
    ("unknown-key", mutate(_set(["cluster", "nmae"], "x")), "cluster.nmae", "unknown key"),
    ("unknown-nested-key", mutate(_set(["partitions", 2, "gracetime"], 5)), "partitions[2].gracetime", "unknown key"),
    ("bad-hostlist", mutate(_set(["node_groups", 0, "hosts"], "a-gpu[1-")), "node_groups[0].hosts", "hostlist"),
    (
        "unknown-gpu-model",
        mutate(_set(["node_groups", 0, "gpus", "model"], "V100-16GB")),
        "node_groups[0].gpus.model",
        "V100-16GB",
    ),
    (
        "mig-invalid-layout",
        mutate(_set(["node_groups", 2, "gpus", "mig", 0], ["4g.20gb", "4g.20gb"])),
        "node_groups[2].gpus.mig[0]",
        "4g.20gb",
    ),
    (
        "mig-unknown-profile",
        mutate(_set(["node_groups", 2, "gpus", "mig", 0], ["1g.10gb", "9g.99gb"])),
        "node_groups[2].gpus.mig[0]",
        "9g.99gb",
    ),
    ("mig-count-mismatch", mutate(_set(["node_groups", 2, "gpus", "mig"], [None])), "node_groups[2].gpus.mig", "count"),
    (
        "partition-unknown-node",
        mutate(_set(["partitions", 0, "nodes"], ["z-gpu9"])),
        "partitions[0].nodes[0]",
        "z-gpu9",
    ),
    ("partition-unknown-tier", mutate(_set(["partitions", 1, "tier"], "gold")), "partitions[1].tier", "gold"),
    ("preemption-cycle", mutate(_set(["tiers", 3, "preempt"], ["guaranteed"])), "tiers", "cycle"),
    ("negative-grace", mutate(_set(["partitions", 2, "grace_time"], -5)), "partitions[2].grace_time", "-5 is negative"),
    ("negative-tier-grace", mutate(_set(["tiers", 1, "grace_time"], -1)), "tiers[1].grace_time", "negative"),
    ("duplicate-nodes", mutate(_set(["node_groups", 1, "hosts"], "a-gpu2")), "node_groups[1].hosts", "a-gpu2"),
    ("duplicate-partition", mutate(_set(["partitions", 1, "name"], "a-owner")), "partitions[1].name", "twice"),
    ("broken-yaml", "version: 1\ncluster: {name: pool\n", "", "broken YAML"),
    ("empty-file", "", "", "empty"),
    ("wrong-version", mutate(_set(["version"], 2)), "version", "2"),
    ("string-version", mutate(_set(["version"], "1")), "version", "'1'"),
    ("wrong-type", mutate(_set(["node_groups", 0, "cpus"], "four")), "node_groups[0].cpus", "four"),
    ("bad-time", mutate(_set(["partitions", 3, "max_time"], "two days")), "partitions[3].max_time", "two days"),
    (
        "project-unknown-tier",
        mutate(_set(["projects", 0, "tiers"], ["guaranteed", "platinum"])),
        "projects[0].tiers[1]",
        "platinum",
    ),
    (
        "preempted-tier-mode-off",
        mutate(_set(["tiers", 2, "preempt_mode"], "off")),
        "tiers[2].preempt_mode",
        "scavenger",
    ),
    ("bad-tres", mutate(_set(["tiers", 1, "max_tres_per_user"], {"gpus": 4})), "tiers[1].max_tres_per_user", "gpus"),
    ("not-a-mapping", "- 1\n- 2\n", "", "mapping"),
    ("missing-section", mutate(lambda d: d.pop("tiers")), "tiers", "required"),
    ("bridge-unknown-account", mutate(_set(["bridge", "account"], "nobody")), "bridge.account", "nobody"),
    ("bridge-unknown-key", mutate(_set(["bridge", "lend_everything"], True)), "bridge.lend_everything", "unknown key"),
    (
        "mig-on-whole-only-count",
        mutate(_set(["node_groups", 0, "gpus", "count"], -2)),
        "node_groups[0].gpus.count",
        "negative",
    ),
    # Issue 11, defect 4: values that reached slurm.conf or the hooks unchecked.
    (
        "feature-with-newline",
        mutate(_set(["node_groups", 0, "features"], ["ok", "x\nNodeName=evil"])),
        "node_groups[0].features[1]",
        "does not match",
    ),
    ("relative-base-dir", mutate(_set(["checkpoint", "base_dir"], "ckpt/dir")), "checkpoint.base_dir", "absolute"),
    ("dotdot-base-dir", mutate(_set(["checkpoint", "base_dir"], "/var/../etc")), "checkpoint.base_dir", "'..'"),
    ("signal-kill", mutate(_set(["checkpoint", "signal"], "KILL")), "checkpoint.signal", "can catch"),
    ("signal-sigstop", mutate(_set(["checkpoint", "signal"], "SIGSTOP")), "checkpoint.signal", "can catch"),
    ("warn-seconds-1e20", mutate(_set(["checkpoint", "warn_seconds"], 10**20)), "checkpoint.warn_seconds", "too large"),
    ("warn-seconds-float", mutate(_set(["checkpoint", "warn_seconds"], 1e20)), "checkpoint.warn_seconds", "integer"),
    ("cpus-1e100", mutate(_set(["node_groups", 0, "cpus"], 1e100)), "node_groups[0].cpus", "integer"),
    ("cpus-huge", mutate(_set(["node_groups", 0, "cpus"], 10**30)), "node_groups[0].cpus", "too large"),
    ("non-ascii-host", mutate(_set(["node_groups", 0, "hosts"], "ä-gpu[1-2]")), "node_groups[0].hosts", "ASCII"),
    ("huge-hostlist", mutate(_set(["node_groups", 0, "hosts"], "n[1-100000000]")), "node_groups[0].hosts", "more than"),
    ("version-true", mutate(_set(["version"], True)), "version", "not a supported spec version"),
    # Issue 30: names Slurm reads as keywords (read_config.c compares them case-insensitively).
    (
        "partition-default",
        mutate(_set(["partitions", 0, "name"], "default")),
        "partitions[0].name",
        "PartitionName=DEFAULT",
    ),
    ("node-default", mutate(_set(["node_groups", 1, "hosts"], "default")), "node_groups[1].hosts", "NodeName=DEFAULT"),
    ("node-all", mutate(_set(["node_groups", 1, "hosts"], "All")), "node_groups[1].hosts", "Nodes=ALL"),
    ("project-root", mutate(_set(["projects", 3, "name"], "root")), "projects[3].name", "root account"),
    ("max-batch-requeue-0", mutate(_set(["scheduler", "max_batch_requeue"], 0)), "scheduler.max_batch_requeue", "1"),
    (
        "max-batch-requeue-past-16-bits",
        mutate(_set(["scheduler", "max_batch_requeue"], 70000)),
        "scheduler.max_batch_requeue",
        "65000",
    ),
    (
        "bar-in-description",
        mutate(_set(["tiers", 0, "description"], "gpu | cpu")),
        "tiers[0].description",
        "holds one of",
    ),
    (
        "newline-in-description",
        mutate(_set(["projects", 0, "description"], "a\nb")),
        "projects[0].description",
        "control characters",
    ),
    (
        "console-bad-proxy",
        mutate(_set(["console"], {"trusted_proxies": ["10.0.0.300"]})),
        "console.trusted_proxies[0]",
        "10.0.0.300",
    ),
    (
        "console-bad-header",
        mutate(_set(["console"], {"user_header": "X-User: admin"})),
        "console.user_header",
        "header",
    ),
    ("console-bad-operator", mutate(_set(["console"], {"operators": ["Root;"]})), "console.operators[0]", "Root;"),
    ("console-refresh-zero", mutate(_set(["console"], {"refresh_seconds": 0})), "console.refresh_seconds", "too small"),
    ("console-unknown-key", mutate(_set(["console"], {"jwt": "/x"})), "console.jwt", "unknown key"),
    ("console-relative-key", mutate(_set(["console"], {"jwt_key": "../key"})), "console.jwt_key", "../key"),
    ("duplicate-key", EXAMPLE.read_text().replace("version: 1", "version: 1\nversion: 1", 1), "", "given twice"),
]


@pytest.mark.parametrize("text,path,words", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_spec_exits_2_names_path_writes_nothing(tmp_path, capsys, text, path, words):
    spec = tmp_path / "bad.yaml"
    spec.write_text(text)
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(SystemExit) as exc:
        main(["render", str(spec), "-o", str(out), "--slurm-version", "22.05"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert words in err, err
    if path:
        assert f"error: {path}" in err, err
    assert list(out.iterdir()) == []


def test_validate_exit_code_for_bad_spec(tmp_path):
    spec = tmp_path / "bad.yaml"
    spec.write_text(CASES[0][1])
    with pytest.raises(SystemExit) as exc:
        main(["validate", str(spec)])
    assert exc.value.code == 2


def test_example_is_valid():
    res = CliRunner().invoke(cli, ["validate", str(EXAMPLE)])
    assert res.exit_code == 0, res.output
    assert "valid" in res.output


def test_at_least_fifteen_bad_specs():
    assert len(CASES) >= 15
