"""What ``diff`` and ``doctor`` see on a live site, every command of docs/adoption.md, and what the pool's
global settings change for the site's own jobs (docs/adoption.md's table), on real Slurm.

Runs on the shared brownfield site (``brownfield_site``, tests/support/brownfield.py), 22.05 by default
and 26.05 with SLURM_POOL_TEST_SLURM=26.05; every file, QOS or job a test changes is put back.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Callable

import pytest
import yaml

from slurm_pool.adapters.records import parse_config_text
from slurm_pool.render.required import config_values
from tests.support.brownfield import SITE_GPU_PARTITION, SiteCluster
from tests.support.doccommands import COVERED, cli_shim, doc_commands, shell_env, substitute
from tests.support.patience import wait_for

pytestmark = pytest.mark.slurm

SCRIPT = "#!/bin/sh\ntrue\n"


@pytest.fixture
def site(brownfield_site) -> SiteCluster:
    return brownfield_site


@pytest.fixture
def handle(site):
    site.handle.cancel_all()
    yield site.handle
    site.handle.cancel_all()


def _spec_with(site: SiteCluster, tmp_path: Path, change: Callable[[dict], None] = lambda d: None) -> Path:
    """The site's spec as installed, changed by ``change``: the local cluster keeps checkpoints in its state
    directory (LocalCluster sets ``checkpoint.base_dir``), so the spec that renders its files names that."""
    data = yaml.safe_load(site.spec_path.read_text())
    data.setdefault("checkpoint", {})["base_dir"] = str(site.pool.spec.checkpoint.base_dir)
    change(data)
    path = tmp_path / "pool.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _tier(data: dict, name: str) -> dict:
    return next(t for t in data["tiers"] if t["name"] == name)


def _config(handle) -> dict[str, str]:
    return parse_config_text(handle.run(["scontrol", "show", "config"], check=True).stdout)


# -- diff ---------------------------------------------------------------------------------------------


def test_diff_of_the_installed_spec_shows_nothing(site, tmp_path):
    res = site.handle.cli("diff", "--spec", str(_spec_with(site, tmp_path)))
    assert (res.returncode, res.stdout) == (0, ""), res.stdout + res.stderr


def test_diff_names_a_changed_tier_rule_of_job_submit(site, tmp_path):
    before = _tier(yaml.safe_load(site.spec_path.read_text()), "shared").get("policy", {}).get("checkpoint", "none")
    spec = _spec_with(site, tmp_path, lambda d: _tier(d, "shared").setdefault("policy", {}).update(checkpoint="reject"))
    res = site.handle.cli("diff", "--spec", str(spec))
    assert res.returncode == 1, res.stdout + res.stderr
    assert res.stdout.splitlines() == [f"tier shared: policy.checkpoint {before} -> reject"]


def test_diff_names_a_changed_prolog_setting(site, tmp_path):
    spec = _spec_with(site, tmp_path, lambda d: d.setdefault("health", {}).update(prolog=False))
    res = site.handle.cli("diff", "--spec", str(spec))
    assert res.returncode == 1, res.stdout + res.stderr
    prolog = yaml.safe_load(site.spec_path.read_text())["coexist"]["prolog_dir"]
    assert "file site-settings.conf: PrologFlags Alloc -> -" in res.stdout.splitlines()
    assert f"file site-settings.conf: Prolog {prolog}/* -> -" in res.stdout.splitlines()


def test_diff_names_a_changed_hook_setting_of_node_conf(site, tmp_path):
    spec = _spec_with(site, tmp_path, lambda d: d.setdefault("checkpoint", {}).update(warn_seconds=91))
    res = site.handle.cli("diff", "--spec", str(spec), "--json")
    assert res.returncode == 1, res.stdout + res.stderr
    assert {"kind": "node.conf", "name": "", "field": "warn_seconds", "cluster": "60", "rendered": "91"} in (
        yaml.safe_load(res.stdout)
    )


# -- doctor follows Include -----------------------------------------------------------------------------


def _doctor(site) -> tuple[int, list[str]]:
    res = site.handle.cli("doctor", "--spec", str(site.spec_path))
    return res.returncode, res.stdout.splitlines()


def _check_line(lines: list[str], check: str) -> str:
    return next(line.split()[0] for line in lines if line.split()[1:2] == [check])


@pytest.mark.parametrize(
    "extra, says",
    [
        ("", None),
        # Relative: from slurm.conf's directory, as Slurm takes it.
        ("Include gres-a.conf\n", None),
        ("Include gres-missing.conf\n", "gres-missing.conf is missing"),
        ("Include {etc}/gres.conf\n", "a cycle"),
    ],
)
def test_doctor_follows_gres_conf_includes(site, extra, says):
    gres = site.pool.layout.etc / "gres.conf"
    saved = gres.read_text()
    try:
        gres.write_text(saved + extra.format(etc=site.pool.layout.etc))
        code, lines = _doctor(site)
        assert _check_line(lines, "includes") == ("ok" if says is None else "FAIL"), "\n".join(lines)
        if says is not None:
            assert code == 1
            assert any(says in line for line in lines), "\n".join(lines)
    finally:
        gres.write_text(saved)


# -- every command of docs/adoption.md that needs the daemons ----------------------------------------------


#: doctor's findings on this site that are the site's own doing: it keeps its HealthCheckProgram unset
#: (tests/support/brownfield.py installs no health check), which doctor rightly reports.
KNOWN_DOCTOR_PROBLEMS = ("problem: HealthCheckProgram is not set",)


def test_the_documented_commands_run_on_the_site(site, tmp_path):
    bindir = tmp_path / "bin"
    cli_shim(bindir)
    spec = _spec_with(site, tmp_path)
    paths = {"/etc/slurm": str(site.pool.layout.etc), "pool.yaml": str(spec)}
    env = shell_env(bindir, site.pool.layout.env())
    for command in (c for c in doc_commands() if COVERED[c] == "site"):
        line = substitute(command, paths)
        res = subprocess.run(
            ["/bin/sh", "-c", line], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
        )
        said = f"{command!r} ({line}) exited {res.returncode}:\n{res.stdout}{res.stderr}"
        if command.startswith("slurm-pool doctor") and res.returncode == 1:
            problems = [x.strip() for x in res.stdout.splitlines() if x.strip().startswith("problem:")]
            assert problems and all(p.startswith(KNOWN_DOCTOR_PROBLEMS) for p in problems), said
            continue
        assert res.returncode == 0, said


# -- what the pool's global settings change for a site job (docs/adoption.md's table) -----------------------


def _site_job(handle, *args: str, script: str = SCRIPT) -> int:
    return handle.sbatch("-p", "batch", "-o", "/dev/null", *args, user="dave", script=script)


def _show_job(handle, job: int) -> str:
    return handle.run(["scontrol", "show", "job", str(job)], check=True).stdout


def _priority_type(site, handle):
    # The site ran multifactor before; the pool needs the same: sprio answers for waiting site jobs.
    assert _config(handle)["PriorityType"] == "priority/multifactor"
    assert len(site.pending_priorities()) == len(site.sprio_before)


def _priority_weight_qos(site, handle):
    assert _config(handle)["PriorityWeightQOS"] == "10000"  # the site's own value, kept
    # The tiers' priorities fitted at or below the site's highest QOS Priority (normal's 10): the factors of
    # the site's QOS, each divided by the highest of all, stay as they were.
    rows = handle.run(["sacctmgr", "-n", "-P", "show", "qos", "format=Name,Priority"], check=True).stdout.splitlines()
    tiers = {t.name for t in site.pool.spec.tiers}
    assert max(int(p) for n, p in (r.split("|", 1) for r in rows) if n in tiers) <= 10


def _partition_name(site, handle):
    line = handle.run(["scontrol", "show", "partition", "-o", SITE_GPU_PARTITION], check=True).stdout
    deny = next(w for w in line.split() if w.startswith("DenyQos="))
    assert {t.name for t in site.pool.spec.tiers} <= set(deny.split("=", 1)[1].split(","))
    res = handle.run(["sbatch", "--uid=dave", "-p", SITE_GPU_PARTITION, "--qos=spot", "-o", "/dev/null", "--wrap=true"])
    assert res.returncode != 0, res.stdout
    job = handle.sbatch("-p", SITE_GPU_PARTITION, "-o", "/dev/null", user="dave", script="#!/bin/sh\ntrue\n")
    handle.wait_state(job, ["COMPLETED"], timeout=60)


def _accounting_storage_enforce(site, handle):
    assert {"associations", "limits", "qos"} <= set(_config(handle)["AccountingStorageEnforce"].split(","))
    qos = "seen-not-dave"
    handle.run(["sacctmgr", "-i", "add", "qos", qos], check=True)
    try:
        res = handle.run(["sbatch", "--uid=dave", "-p", "batch", f"--qos={qos}", "-o", "/dev/null", "--wrap=true"])
        assert res.returncode != 0 and "qos" in res.stderr.lower(), res.stdout + res.stderr
    finally:
        handle.run(["sacctmgr", "-i", "delete", "qos", qos], check=True)


def _accounting_storage_tres(site, handle):
    job = _site_job(handle)
    handle.wait_state(job, ["COMPLETED"], timeout=60)
    # 22.05 prints TRES=, 26.05 AllocTRES= (and ReqTRES=).
    tres = next(w for w in _show_job(handle, job).split() if w.split("=", 1)[0] in ("TRES", "AllocTRES"))
    assert "gres/" not in tres and "cpu=" in tres


def _preempt_type(site, handle):
    assert _config(handle)["PreemptType"] == "preempt/qos"
    site_qos = {"normal", "site-normal", "scavenger"}
    rows = handle.run(["sacctmgr", "-n", "-P", "show", "qos", "format=Name,Preempt"], check=True).stdout.splitlines()
    tiers = {t.name for t in site.pool.spec.tiers}
    for name, preempt in (r.split("|", 1) for r in rows):
        if name in tiers:
            assert not set(preempt.split(",")) & site_qos, f"pool tier {name} preempts a site QOS: {preempt}"


def _preempt_mode(site, handle):
    assert "REQUEUE" in _config(handle)["PreemptMode"].upper()
    out = handle.run(["sacctmgr", "-n", "-P", "show", "qos", "scavenger", "format=PreemptMode"], check=True).stdout
    assert out.strip() == "cancel"


def _job_requeue(site, handle):
    job = _site_job(handle, "--begin=now+3600")
    assert "Requeue=1" in _show_job(handle, job).split()


def _requeue_exit(site, handle):
    job = _site_job(handle, script="#!/bin/sh\nexit 85\n")
    restarts = wait_for(
        lambda: next(
            (w for w in _show_job(handle, job).split() if w.startswith("Restarts=") and w != "Restarts=0"), None
        ),
        60,
        "a site job that exits 85 to be requeued",
    )
    assert restarts.startswith("Restarts=")


def _job_submit_plugins(site, handle):
    job = _site_job(handle)
    handle.wait_state(job, ["COMPLETED"], timeout=60)
    assert handle.run(["squeue", "-h", "-t", "all", "-j", str(job), "-o", "%k"], check=True).stdout.strip() == (
        "site-policy"
    )


def _prolog(site, handle):
    job = _site_job(handle)
    handle.wait_state(job, ["COMPLETED"], timeout=60)
    assert (site.marks / str(job)).exists()
    assert [v.strip() for v in config_values(_config(handle), "Prolog")] == [f"{site.pool.layout.etc}/prolog.d/*"]


#: docs/adoption.md's rows marked e2e, each with its check (tests/unit/test_adoption_doc.py keeps them in step).
SITE_JOB_EFFECTS: dict[str, Callable[..., None]] = {
    "PriorityType": _priority_type,
    "PriorityWeightQOS": _priority_weight_qos,
    "AccountingStorageEnforce": _accounting_storage_enforce,
    "AccountingStorageTRES": _accounting_storage_tres,
    "PreemptType": _preempt_type,
    "PreemptMode": _preempt_mode,
    "JobRequeue": _job_requeue,
    "RequeueExit": _requeue_exit,
    "JobSubmitPlugins": _job_submit_plugins,
    "Prolog": _prolog,
    "PartitionName": _partition_name,
}


@pytest.mark.parametrize("setting", sorted(SITE_JOB_EFFECTS))
def test_what_the_setting_changes_for_a_site_job(site, handle, setting):
    SITE_JOB_EFFECTS[setting](site, handle)
