"""The hook wrappers on a shared cluster: a site job's prolog and epilog never fail, the pool's fail closed.

Each case renders the wrapper from node.conf (as the local cluster and an
admin do), runs it under ``/bin/sh`` with the environment slurmd gives, and
an interpreter that works, is gone (the venv moved away), cannot import the
package, fails to start, or crashes.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from slurm_pool import nodeconf as config
from slurm_pool.nodeconf import wrappers as hookwrap
from slurm_pool.spec import load_spec_text
from tests.unit.test_node_cli import setup_node

ROOT = Path(__file__).resolve().parents[2]
COEXIST = (ROOT / "examples" / "pool-coexist.yaml").read_text()
POOL_PARTS = "a-owner,shared,k8s-lend"
POOL_ACCTS = "proja,k8s-bridge"

#: Fake interpreters: each records that it ran, then ends as named.
FAKE = {
    "exit0": "exit 0",
    "exit1": "exit 1",  # an interpreter that cannot start (no stdlib) exits 1, as the hook's own "failed" does
    "import-error": f"exit {hookwrap.BROKEN}",
    "crash": "kill -SEGV $$",
}


def interpreter(tmp: Path, how: str) -> str:
    """The path the wrapper execs: a real Python, one that is gone, one without the package, or a fake."""
    if how == "real":
        return sys.executable
    if how == "gone":
        return str(tmp / "moved-away" / "bin" / "python")
    if how == "no-package":  # -I -S and no path to slurm_pool: the import fails
        return sys.executable
    p = tmp / f"python-{how}"
    p.write_text(f'#!/bin/sh\necho ran >>"{tmp}/interpreter-ran"\n{FAKE[how]}\n')
    p.chmod(0o755)
    return str(p)


def wrapper(tmp: Path, kind: str, how: str, conf: Path, **values: str) -> Path:
    vals = config.parse(conf.read_text())
    vals.update(coexist="yes", pool_partitions=POOL_PARTS, pool_accounts=POOL_ACCTS, **values)
    conf.write_text("".join(f"{k} = {v}\n" for k, v in vals.items()))
    cfg = config.load(str(conf))
    paths = [str(tmp / "empty")] if how == "no-package" else config.hook_paths()
    script = tmp / f"slurm-pool-{kind}"
    script.write_text(config.render_hook(kind, interpreter(tmp, how), str(conf), paths=paths, cfg=cfg))
    script.chmod(0o755)
    return script


def run(script: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(["/bin/sh", str(script)], env=env, capture_output=True, text=True, timeout=120)


SITE = {"SLURM_JOB_PARTITION": "site-gpu", "SLURM_JOB_ACCOUNT": "physics"}
POOL_BY_PARTITION = {"SLURM_JOB_PARTITION": "a-owner", "SLURM_JOB_ACCOUNT": "physics"}
POOL_BY_ACCOUNT = {"SLURM_JOB_PARTITION": "site-gpu", "SLURM_JOB_ACCOUNT": "proja"}
NO_ACCOUNT = {"SLURM_JOB_PARTITION": "site-gpu"}
NO_PARTITION = {"SLURM_JOB_ACCOUNT": "physics"}
LOOKALIKE = {"SLURM_JOB_PARTITION": "a-owner2", "SLURM_JOB_ACCOUNT": "proj*"}

# case, hook, interpreter, job, GPU snapshot, expected status (None: any non-zero), logged as a site job's failure
JOB_CASES = [
    ("site job, venv gone: prolog", "prolog", "gone", SITE, "h100x8_healthy.json", 0, True),
    ("site job, venv gone: epilog", "epilog", "gone", SITE, "h100x8_healthy.json", 0, True),
    ("site job, import error", "prolog", "no-package", SITE, "h100x8_healthy.json", 0, True),
    ("site job, interpreter fails to start", "epilog", "exit1", SITE, "h100x8_healthy.json", 0, True),
    ("site job, interpreter crashes", "prolog", "crash", SITE, "h100x8_healthy.json", 0, True),
    ("site job, GPU fault found", "prolog", "real", SITE, "ecc_failure.json", 0, True),
    ("site job, healthy", "prolog", "real", SITE, "h100x8_healthy.json", 0, False),
    ("site-looking names are not the pool's", "prolog", "gone", LOOKALIKE, "h100x8_healthy.json", 0, True),
    ("pool partition, venv gone: prolog", "prolog", "gone", POOL_BY_PARTITION, "h100x8_healthy.json", 127, False),
    ("pool partition, venv gone: epilog", "epilog", "gone", POOL_BY_PARTITION, "h100x8_healthy.json", 127, False),
    ("pool account on a site partition", "prolog", "gone", POOL_BY_ACCOUNT, "h100x8_healthy.json", 127, False),
    ("pool job, import error", "prolog", "no-package", POOL_BY_PARTITION, "h100x8_healthy.json", 70, False),
    ("pool job, crash", "epilog", "crash", POOL_BY_ACCOUNT, "h100x8_healthy.json", None, False),
    ("pool job, GPU fault found", "prolog", "real", POOL_BY_PARTITION, "ecc_failure.json", 1, False),
    ("pool job, healthy", "prolog", "real", POOL_BY_PARTITION, "h100x8_healthy.json", 0, False),
    ("no account given: the pool's", "prolog", "gone", NO_ACCOUNT, "h100x8_healthy.json", 127, False),
    ("no partition given: the pool's", "prolog", "gone", NO_PARTITION, "h100x8_healthy.json", 127, False),
]


@pytest.mark.parametrize("name,kind,how,job,snapshot,rc,logged", JOB_CASES, ids=[c[0] for c in JOB_CASES])
def test_job_hooks_fail_only_the_pools_jobs(tmp_path, name, kind, how, job, snapshot, rc, logged):
    conf, env = setup_node(tmp_path, snapshot)
    (tmp_path / "state" / "n1").mkdir(parents=True)
    res = run(wrapper(tmp_path, kind, how, conf), {**env, **job})
    if rc is None:
        assert res.returncode != 0, res.stderr
    else:
        assert res.returncode == rc, res.stderr
    log = tmp_path / "state" / "n1" / hookwrap.LOG_FILE
    if logged:
        line = f"{kind}: the pool's {kind} exited"
        assert line in res.stderr and line in log.read_text()
        assert "under job 42 of the site" in log.read_text()
    else:
        assert not log.exists()
    if how in FAKE:  # the pool's hook was tried, whoever's job it was
        assert (tmp_path / "interpreter-ran").exists()


def test_a_hostile_environment_reaches_no_shell(tmp_path):
    conf, env = setup_node(tmp_path, "h100x8_healthy.json")
    (tmp_path / "state" / "n1").mkdir(parents=True)
    hostile = {
        "SLURM_JOB_PARTITION": f"$(touch {tmp_path}/pwned-p)",
        "SLURM_JOB_ACCOUNT": f"`touch {tmp_path}/pwned-a`",
        "SLURM_JOB_ID": f"1;touch {tmp_path}/pwned-j",
        "SLURMD_NODENAME": "../../n1",
    }
    res = run(wrapper(tmp_path, "prolog", "gone", conf), {**env, **hostile})
    assert res.returncode == 0 and not list(tmp_path.glob("pwned*"))
    assert "under job ? of the site (partition ?, account ?)" in res.stderr
    assert not (tmp_path / "state" / "n1" / hookwrap.LOG_FILE).exists()  # no node name, no log file


def test_a_pool_that_owns_its_cluster_fails_closed_for_every_job(tmp_path):
    conf, env = setup_node(tmp_path, "h100x8_healthy.json")
    cfg = config.load(str(conf))
    assert not cfg.flag("coexist")
    script = tmp_path / "slurm-pool-prolog"
    gone = interpreter(tmp_path, "gone")
    script.write_text(config.render_hook("prolog", gone, str(conf), paths=config.hook_paths(), cfg=cfg))
    assert script.read_text() == config.render_hook("prolog", gone, str(conf), paths=config.hook_paths())
    assert run(script, {**env, **SITE}).returncode == 127


def _site_program(tmp: Path, rc: int, mode: int = 0o755) -> Path:
    d = tmp / "site"
    d.mkdir(mode=0o755)
    p = d / "nhc"
    p.write_text(f'#!/bin/sh\necho ran >>"{tmp}/site-ran"\nexit {rc}\n')
    p.chmod(mode)
    return p


# case, interpreter, GPU snapshot, site program (exit status, mode; None: none), expected status, site ran, logged
HEALTH_CASES = [
    ("healthy: the pool's verdict, site chained", "real", "h100x8_healthy.json", (0, 0o755), 0, True, False),
    ("GPU fault: the pool's verdict stands", "real", "ecc_failure.json", (0, 0o755), 1, True, False),
    ("venv gone: the site's check decides (ok)", "gone", "h100x8_healthy.json", (0, 0o755), 0, True, True),
    ("venv gone: the site's check decides (fails)", "gone", "h100x8_healthy.json", (4, 0o755), 4, True, True),
    ("import error: the site's check decides", "no-package", "h100x8_healthy.json", (0, 0o755), 0, True, True),
    ("interpreter fails to start", "exit1", "h100x8_healthy.json", (5, 0o755), 5, True, True),
    ("interpreter crashes", "crash", "h100x8_healthy.json", (0, 0o755), 0, True, True),
    ("no site check: the node is left alone", "gone", "h100x8_healthy.json", None, 0, False, True),
    ("a site program others may write is refused", "gone", "h100x8_healthy.json", (0, 0o775), 1, False, True),
]


@pytest.mark.parametrize("name,how,snapshot,site,rc,ran,logged", HEALTH_CASES, ids=[c[0] for c in HEALTH_CASES])
def test_health_check_without_the_pools_python(tmp_path, name, how, snapshot, site, rc, ran, logged):
    if os.geteuid() != 0:
        pytest.skip("the site's program must be root's")
    conf, env = setup_node(tmp_path, snapshot, expected_gpus="8")
    (tmp_path / "state" / "n1").mkdir(parents=True)
    extra = {"site_health_check": str(_site_program(tmp_path, *site))} if site else {}
    env = {"SLURMD_NODENAME": "n1", "FAKE_LOG": env["FAKE_LOG"]}  # all slurmd gives a health check
    res = run(wrapper(tmp_path, "healthcheck", how, conf, **extra), env)
    assert res.returncode == rc, res.stderr
    assert (tmp_path / "site-ran").exists() is ran
    log = tmp_path / "state" / "n1" / hookwrap.LOG_FILE
    assert log.exists() is logged
    if logged:
        assert "the pool's health check could not run" in log.read_text()


@pytest.mark.parametrize("coexist", [False, True])
def test_the_pools_own_breakage_is_no_verdict(tmp_path, coexist):
    conf, env = setup_node(tmp_path, "h100x8_healthy.json")
    cfg = config.load(str(conf))
    if coexist:
        cfg.values.update(coexist="yes", pool_partitions=POOL_PARTS, pool_accounts=POOL_ACCTS)
    script = tmp_path / "slurm-pool-healthcheck"
    script.write_text(config.render_hook("healthcheck", sys.executable, str(conf), paths=config.hook_paths(), cfg=cfg))
    conf.chmod(0o666)  # node.conf others may write: the health check refuses it and cannot judge the node
    res = run(script, env)
    # A pool that owns its cluster: non-zero, but not the 1 of "unhealthy"; on a shared one the site's check
    # (none here) decides, and the breakage is logged.
    assert res.returncode == (0 if coexist else hookwrap.BROKEN), res.stderr
    assert ("the pool's health check could not run (exit 70)" in res.stderr) is coexist


@pytest.mark.parametrize(
    "values,error",
    [
        ({"pool_partitions": "a-owner,x;reboot"}, "pool_partitions: 'x;reboot'"),
        ({"pool_accounts": "proj*"}, "pool_accounts: 'proj*'"),
        ({"pool_accounts": "$(id)"}, "pool_accounts"),
        ({"state_dir": "/var/lib/x y"}, "state_dir"),
        ({"log": "journal"}, "log: 'journal'"),
    ],
)
def test_what_could_reach_the_shell_is_refused(tmp_path, values, error):
    conf, _ = setup_node(tmp_path, "h100x8_healthy.json")
    cfg = config.load(str(conf))
    cfg.values.update({"coexist": "yes", "pool_partitions": POOL_PARTS, "pool_accounts": POOL_ACCTS, **values})
    with pytest.raises(config.ConfigError, match=re.escape(error)):
        config.render_hook("prolog", sys.executable, str(conf), cfg=cfg)


@pytest.mark.parametrize(
    "python,error",
    [("/opt/slurm pool/bin/python", "python"), ("python3", "python"), ("/x/python';reboot;'", "python")],
)
def test_interpreter_path_is_checked(tmp_path, python, error):
    conf, _ = setup_node(tmp_path, "h100x8_healthy.json")
    cfg = config.load(str(conf))
    cfg.values.update(coexist="yes", pool_partitions=POOL_PARTS)
    with pytest.raises(config.ConfigError, match=error):
        config.render_hook("epilog", python, str(conf), cfg=cfg)


def test_node_conf_carries_the_pools_names_from_the_spec():
    spec = load_spec_text(COEXIST)
    vals = config.parse(config.render(spec))
    assert vals["coexist"] == "yes"
    assert vals["pool_partitions"].split(",") == [p.name for p in spec.partitions]
    assert vals["pool_accounts"].split(",") == [p.name for p in spec.projects]
    owned = load_spec_text(COEXIST.split("\ncoexist:")[0] + "\n")
    assert "coexist" not in config.parse(config.render(owned))
