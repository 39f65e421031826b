"""The node hooks as slurmd runs them: real processes, node.conf checks,
hostile job strings, and the hooks' import graph."""

from __future__ import annotations

import json
import os
import pwd
import shlex
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from slurm_pool import nodeconf as config

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "nvml"

FAKE_SCONTROL = textwrap.dedent("""\
    import json, os, sys
    args = sys.argv[1:]
    with open(os.environ.get("FAKE_LOG", "/dev/null"), "a") as fh:
        fh.write(json.dumps(args) + "\\n")
    here = os.path.dirname(os.path.abspath(__file__))
    if args[:3] == ["--json", "show", "node"]:
        print(open(os.path.join(here, "node.json")).read())
    elif args[:3] == ["--json", "show", "job"]:
        print(open(os.path.join(here, "job.json")).read())
    elif args[:1] != ["update"]:
        sys.exit(1)
""")


def setup_node(tmp: Path, snapshot: str, **values: str) -> tuple[Path, dict[str, str]]:
    bindir = tmp / "bin"
    bindir.mkdir()
    fake = bindir / "scontrol"
    fake.write_text(f"#!{sys.executable}\n" + FAKE_SCONTROL)
    fake.chmod(0o755)
    (bindir / "node.json").write_text(
        json.dumps({"nodes": [{"name": "n1", "state": "idle", "state_flags": [], "reason": "", "gres": "gpu:a100:2"}]})
    )
    (bindir / "job.json").write_text(
        json.dumps(
            {
                "jobs": [
                    {
                        "job_id": 42,
                        "job_state": "COMPLETING",
                        "comment": f"$(touch {tmp}/pwned-comment)",
                        "restart_cnt": 0,
                        "start_time": 1,
                        "end_time": 2,
                        "preempt_time": 0,
                        "time_limit": 60,
                    }
                ]
            }
        )
    )
    snap = tmp / "snap.json"
    shutil.copyfile(DATA / snapshot, snap)
    snap.chmod(0o644)
    conf = tmp / "node.conf"
    vals = {
        "state_dir": str(tmp / "state"),
        "checkpoint_base_dir": str(tmp / "ckpt"),
        "gpus": f"replay:{snap}",
        "scontrol": str(fake),
        "log": "stderr",
        **values,
    }
    conf.write_text("".join(f"{k} = {v}\n" for k, v in vals.items()))
    conf.chmod(0o644)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "SLURMD_NODENAME": "n1",
        "SLURM_JOB_ID": "42",
        # a user of this machine, as slurmd gives it: the prolog checks the name is that uid's
        "SLURM_JOB_USER": pwd.getpwuid(os.geteuid()).pw_name,
        "SLURM_JOB_UID": str(os.geteuid()),
        "SLURM_JOB_GID": str(os.getegid()),
        "SLURM_JOB_GPUS": "0",
        "FAKE_LOG": str(tmp / "scontrol.log"),
    }
    return conf, env


#: ``python -I -m slurm_pool.node`` of this checkout: ``-I`` leaves the working directory off sys.path, so a plain
#: ``-m`` would run whichever slurm_pool is installed, not the code under test.
NODE_MAIN = [
    "-I",
    "-c",
    f"import runpy, sys; sys.path.insert(0, {str(ROOT)!r}); runpy.run_module('slurm_pool.node', run_name='__main__')",
]


def hook(name: str, conf: Path, env: dict[str, str], *extra: str, click: bool = False) -> subprocess.CompletedProcess:
    mod = ["-m", "slurm_pool", name] if click else [*NODE_MAIN, name]
    return subprocess.run(
        [sys.executable, *mod, "--config", str(conf), *extra], env=env, capture_output=True, text=True, timeout=120
    )


def scontrol_calls(tmp: Path) -> list[list[str]]:
    log = tmp / "scontrol.log"
    return [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []


HOSTILE = [
    "$(touch {t}/pwned-a)",
    "; touch {t}/pwned-b",
    "`touch {t}/pwned-c`",
    "x' || touch {t}/pwned-d '",
    "; rm -rf ~",
]


@pytest.mark.parametrize(
    "field",
    ["SLURM_JOB_NAME", "SLURM_JOB_COMMENT", "SLURM_JOB_WORK_DIR", "SPANK_SLURM_POOL_CHECKPOINT_DIR", "SLURM_JOB_USER"],
)
def test_hostile_job_strings_do_nothing(tmp_path, field):
    conf, env = setup_node(tmp_path, "ecc_failure.json")
    for value in HOSTILE:
        env[field] = value.format(t=tmp_path)
        assert hook("prolog", conf, env).returncode == 1  # the GPU check still fails the job
        assert hook("epilog", conf, env).returncode == 0
    assert not list(tmp_path.glob("pwned*"))
    calls = scontrol_calls(tmp_path)
    assert calls and all(isinstance(c, list) and all(isinstance(a, str) for a in c) for c in calls)
    for c in calls:
        assert c[:3] in (
            ["--json", "show", "node"],
            ["--json", "show", "job"],
            ["update", "NodeName=n1", "State=DRAIN"],
        )
        if c[0] == "update":
            assert c[3].startswith("Reason=slurm-pool: ecc: GPU 1") and len(c) == 4


def test_prolog_via_the_click_cli(tmp_path):
    conf, env = setup_node(tmp_path, "ecc_failure.json")
    res = hook("prolog", conf, env, click=True)
    assert res.returncode == 1, res.stderr
    assert ["update", "NodeName=n1", "State=DRAIN"] == scontrol_calls(tmp_path)[-1][:3]
    (tmp_path / "b").mkdir()
    conf2, env2 = setup_node(tmp_path / "b", "a100_mig.json")
    assert hook("healthcheck", conf2, env2, click=True).returncode == 1  # GRES says 2, MIG gives 5 units


def test_healthcheck_ack_flag(tmp_path):
    conf, env = setup_node(tmp_path, "xid_critical.json", expected_gpus="8")
    assert hook("healthcheck", conf, env).returncode == 1
    shutil.copyfile(DATA / "h100x8_healthy.json", tmp_path / "snap.json")
    assert hook("healthcheck", conf, env).returncode == 1
    assert hook("healthcheck", conf, env, "--ack-xids").returncode == 0


@pytest.mark.parametrize(
    "damage,hook_name,rc",
    [
        (lambda p: p.chmod(0o666), "prolog", 0),
        (lambda p: p.chmod(0o666), "healthcheck", 70),  # no verdict on the node (hookwrap.BROKEN)
        (lambda p: os.chown(p, 65534, 65534), "prolog", 0),
        (lambda p: p.write_text("gpus = replay:/x\nbogus_key = 1\n"), "healthcheck", 70),
    ],
)
def test_unsafe_or_broken_node_conf(tmp_path, damage, hook_name, rc):
    if os.geteuid() != 0 and "chown" in repr(damage.__code__.co_names):
        pytest.skip("needs root")
    conf, env = setup_node(tmp_path, "ecc_failure.json")
    damage(conf)
    res = hook(hook_name, conf, env)
    assert res.returncode == rc
    assert "slurm-pool" in res.stderr
    assert not any(c[0] == "update" for c in scontrol_calls(tmp_path))  # an unsafe config drains nothing


def test_node_conf_parsing(tmp_path):
    p = tmp_path / "node.conf"
    p.write_text("# comment\n\nwarn_seconds = 60\ngpus = replay:/snaps/{node}.json\nextra_ignore_xids = 79, 94\n")
    p.chmod(0o644)
    cfg = config.load(str(p))
    assert cfg.integer("warn_seconds") == 60 and cfg.gpu_source("n7") == ("replay", "/snaps/n7.json")
    assert cfg.ignored_xids() == {13, 31, 43, 45, 68, 109, 79, 94} and cfg.expected_gpus() is None
    link = tmp_path / "link.conf"
    link.symlink_to(p)
    with pytest.raises(config.ConfigError):
        config.load(str(link))
    with pytest.raises(config.ConfigError, match="no such file"):
        config.load(str(tmp_path / "absent.conf"))
    for bad in ("warn_seconds\n", "colour = blue\n"):
        p.write_text(bad)
        with pytest.raises(config.ConfigError):
            config.load(str(p))
    p.write_text("gpus = maybe\n")
    with pytest.raises(config.ConfigError):
        config.load(str(p)).gpu_source("n1")


def test_render_node_conf_from_the_example_spec(tmp_path):
    from slurm_pool.spec.load import load_spec

    spec = load_spec(ROOT / "examples" / "pool.yaml")
    text = config.render(spec, state_dir="/var/lib/slurm-pool/state", gpus="nvml")
    vals = config.parse(text)
    assert vals["checkpoint_signal"] == "USR1" and vals["warn_seconds"] == "60"
    assert vals["checkpoint_base_dir"] == spec.checkpoint.base_dir
    hook_text = config.render_hook("prolog", "/usr/bin/python3", "/etc/slurm-pool/node.conf")
    assert hook_text == (
        "#!/bin/sh\nexec /usr/bin/python3 -I -m slurm_pool.node prolog --config /etc/slurm-pool/node.conf\n"
    )
    with pytest.raises(ValueError):
        config.render_hook("taskprolog", "/usr/bin/python3")


@pytest.mark.parametrize("snapshot,rc", [("h100x8_healthy.json", 0), ("ecc_failure.json", 1)])
def test_rendered_hook_scripts_run(tmp_path, snapshot, rc):
    conf, env = setup_node(tmp_path, snapshot)
    for kind, want in (("prolog", rc), ("epilog", 0)):
        script = tmp_path / f"slurm-pool-{kind}"
        script.write_text(config.render_hook(kind, sys.executable, str(conf), paths=config.hook_paths()))
        script.chmod(0o755)
        res = subprocess.run([str(script)], env=env, capture_output=True, text=True, timeout=120)
        assert res.returncode == want, res.stderr
    assert (tmp_path / "state" / "n1" / "outcomes.jsonl").exists()


HEAVY = (
    "pydantic",
    "jinja2",
    "click",
    "yaml",
    "scipy",
    "prometheus_client",
    "ClusterShell",
    "pynvml",
    "slurm_pool.spec",
    "slurm_pool.cli",
    "slurm_pool.render",
    "rich",
)


@pytest.mark.parametrize("name", ["prolog", "epilog"])
def test_hook_import_graph_is_small(tmp_path, name):
    conf, env = setup_node(tmp_path, "h100x8_healthy.json")
    env["SLURM_JOB_GPUS"] = "0"
    res = subprocess.run(
        [sys.executable, "-X", "importtime", *NODE_MAIN, name, "--config", str(conf)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    mods = {line.split("|")[-1].strip() for line in res.stderr.splitlines() if line.startswith("import time:")}
    ours = {m for m in mods if m.startswith("slurm_pool")}
    assert "slurm_pool.node.hooks" in ours
    bad = sorted(m for m in mods for h in HEAVY if m == h or m.startswith(h + "."))
    assert bad == [], f"the {name} imports {bad}"
    if name == "prolog":  # a healthy prolog never needs the Runner (and its dataclasses/inspect)
        assert "slurm_pool.adapters.runner" not in mods and "inspect" not in mods


#: What the rendered hooks must not import, beside :data:`HEAVY`: standard modules their path once loaded for
#: nothing (logging to report a skipped record, pathlib to open a file, tempfile to stream a command), and for the
#: prolog of a healthy node, everything a Slurm query needs.
NOT_ON_THE_HOOK_PATH = {
    "prolog": (
        "logging",
        "pathlib",
        "tempfile",
        "subprocess",
        "dataclasses",
        "slurm_pool.adapters.gres",
        "slurm_pool.adapters.records",
        "slurm_pool.adapters.slurm",
    ),
    "epilog": ("logging", "pathlib", "tempfile", "slurm_pool.adapters.slurm"),
}


@pytest.mark.parametrize("name", sorted(NOT_ON_THE_HOOK_PATH))
def test_the_rendered_hook_imports_only_what_its_path_needs(tmp_path, name):
    # The very command line render_hook writes (python3 -I -S and its sys.path), with -X importtime added.
    conf, env = setup_node(tmp_path, "h100x8_healthy.json")
    script = config.render_hook(name, sys.executable, str(conf), paths=config.hook_paths())
    argv = shlex.split(script.splitlines()[-1])
    assert argv[:4] == ["exec", sys.executable, "-I", "-S"]
    res = subprocess.run([argv[1], "-X", "importtime", *argv[2:]], env=env, capture_output=True, text=True, timeout=120)
    said = [line for line in res.stderr.splitlines() if not line.startswith("import time:")]
    assert res.returncode == 0 and said == [], res.stderr  # log = stderr: the hook's whole path ran, and quietly
    mods = {line.split("|")[-1].strip() for line in res.stderr.splitlines() if line.startswith("import time:")}
    assert "slurm_pool.node.hooks" in mods
    bad = sorted(m for m in mods for h in (*HEAVY, *NOT_ON_THE_HOOK_PATH[name]) if m == h or m.startswith(h + "."))
    assert bad == [], f"the {name} imports {bad}"
    if name == "epilog":  # it asked Slurm about the job and recorded the answer
        assert ["--json", "show", "job", "42"] in scontrol_calls(tmp_path)
        rec = json.loads((tmp_path / "state" / "n1" / "outcomes.jsonl").read_text())
        assert rec["job_id"] == "42" and "slurm" in rec["sources"]


@pytest.mark.parametrize(
    "argv,want",
    [
        (["prolog"], ("prolog", None, None, False)),
        (["healthcheck", "--config", "/x", "--node=n2", "--ack-xids"], ("healthcheck", "/x", "n2", True)),
        (["epilog", "--ack-xids"], None),
        (["reboot"], None),
        (["prolog", "--config"], None),
        ([], None),
    ],
)
def test_fast_entry_point_arguments(argv, want):
    from slurm_pool.node.__main__ import parse

    if want is None:
        with pytest.raises(ValueError):
            parse(argv)
    else:
        hook, opts = parse(argv)
        assert (hook, opts["config"], opts["node"], opts["ack_xids"]) == want
