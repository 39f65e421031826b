"""``slurm-pool uninstall`` on the brownfield site: the site as it was, the pool gone; then the pool back.

Runs on the shared brownfield site (``brownfield_site``, tests/support/brownfield.py), which recorded
every QOS, account, association and user (``sacctmgr -P show``, all its default fields) and every file of
the site's configuration directory before the pool was installed.  The test refuses while a pool job
waits, uninstalls with ``--dry-run`` (nothing changes), uninstalls, compares, runs again (nothing to do),
then puts the pool back as it was installed (its files byte for byte, ``apply accounting --prune``, a
restart of slurmctld) so that the pool works as installed for whatever runs next.  What cannot be put back
is the usage slurmctld kept for the associations deleted (a site user's fairshare factor moves), so this
module runs after the other ``test_brownfield*`` modules (``LAST_MODULES`` in tests/support/collect.py).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.support.brownfield import SiteCluster
from tests.support.doccommands import COVERED, cli_shim, doc_commands, shell_env, substitute

pytestmark = pytest.mark.slurm

SLEEP = "#!/bin/sh\nsleep 3600\n"


#: docs/adoption.md's commands, "Removing the pool": the dry run, then the run.
DRY_RUN, RUN = (c for c in doc_commands() if COVERED[c] == "uninstall")


def _uninstall(site: SiteCluster, tmp: Path, command: str) -> subprocess.CompletedProcess:
    """One of the documented commands, as the docs give it, on the site; cron entries and units are looked
    for in empty directories of the test's, never in this machine's /etc."""
    bindir = tmp / "bin"
    if not (bindir / "slurm-pool").exists():
        cli_shim(bindir)
    for d in ("cron.d", "units"):
        (tmp / d).mkdir(exist_ok=True)
    line = substitute(command, {"/etc/slurm": str(site.pool.layout.etc), "pool.yaml": str(site.spec_path)})
    line += f" --cron-dir {tmp / 'cron.d'} --unit-dir {tmp / 'units'}"
    env = shell_env(bindir, site.pool.layout.env())
    return subprocess.run(["/bin/sh", "-c", line], cwd=tmp, env=env, capture_output=True, text=True, timeout=300)


def _restore(site: SiteCluster, installed: dict[Path, tuple[bytes, int]]) -> None:
    """The pool as it was installed: its files byte for byte, its accounting, slurmctld reading both."""
    for path, (data, mode) in installed.items():
        if not path.exists() or path.read_bytes() != data:
            path.write_bytes(data)
            path.chmod(mode)
    site.apply_accounting()
    assert site.apply_accounting().strip().endswith("accounting: no changes")
    # partitions resolve AllowQos/DenyQos to the QOS's ids when slurmctld reads slurm.conf: the QOS are new
    site.pool.restart_controller()


def test_uninstall_leaves_the_site_as_before_the_pool(brownfield_site: SiteCluster, tmp_path: Path) -> None:
    site, h = brownfield_site, brownfield_site.handle
    etc = site.pool.layout.etc
    site.cancel_all()
    installed = site.files()
    installed_accounting = site.accounting()
    assert installed_accounting != site.accounting_before, "the pool is installed"
    try:
        # 1. Refused, naming the job, while a pool job waits or runs; nothing changes.
        job = h.sbatch("-p", "a-owner", "--gres=gpu:1", "-o", "/dev/null", user="alice", script=SLEEP)
        res = _uninstall(site, tmp_path, RUN)
        assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
        assert f"error: job {job} (" in res.stderr, res.stderr
        assert (site.files(), site.accounting()) == (installed, installed_accounting)
        site.cancel_all()

        # 2. --dry-run prints every step and changes nothing.
        res = _uninstall(site, tmp_path, DRY_RUN)
        assert res.returncode == 0, res.stdout + res.stderr
        assert f"would remove 'Include {etc}/slurm-pool.conf'" in res.stdout
        assert "would remove qos shared" in res.stdout and "would remove account proja" in res.stdout
        assert (site.files(), site.accounting()) == (installed, installed_accounting)

        # 3. The uninstall.
        res = _uninstall(site, tmp_path, RUN)
        assert res.returncode == 0, res.stdout + res.stderr
        printed = res.stdout
        # Every object the site had, byte for byte as sacctmgr -P printed it before the pool; nothing else.
        assert site.accounting() == site.accounting_before, printed
        assert site.snapshot() == site.before
        before, now = site.files_before, site.files()
        for name in ("gres.conf", "plugstack.conf", "job_submit.lua"):
            assert now[etc / name] == before[etc / name], name  # job_submit.lua: the site's, back in place
        assert now[etc / "prolog.d" / "10-site"] == before[etc / "site-prolog.sh"]
        # slurm.conf: exactly the documented Include line gone; the settings merged at installation are the
        # site's to take out (uninstall says so, it cannot tell them from the site's own)
        include = f"Include {etc}/slurm-pool.conf\n".encode()
        assert installed[etc / "slurm.conf"][0].count(include) == 1
        conf, mode = installed[etc / "slurm.conf"]
        assert now[etc / "slurm.conf"] == (conf.replace(include, b""), mode)
        assert f"left: {etc}/slurm.conf: the settings you merged from site-settings.conf" in printed
        # the pool's files are gone, and nothing else is
        gone = {p for p in installed if p not in now}
        manifest = json.loads(installed[etc / "manifest.json"][0])
        rendered = {etc / n for n in [*manifest["files"], "manifest.json"]}
        hooks = {etc / f"{k}.d" / "50-slurm-pool" for k in ("prolog", "epilog")}
        assert gone == (rendered | hooks | {etc / "site_job_submit.lua"}) - {etc / "job_submit.lua"}
        assert {p: v for p, v in now.items() if p not in installed} == {}
        changed = {p for p in now if now[p] != installed[p]}
        assert changed == {etc / "slurm.conf", etc / "gres.conf", etc / "plugstack.conf", etc / "job_submit.lua"}
        for line in (f"removed {etc}/manifest.json", "removed user bob", "removed user alice from account proja"):
            assert line in printed

        # 4. A second run has nothing to do.
        res = _uninstall(site, tmp_path, RUN)
        assert res.returncode == 0 and res.stdout.splitlines()[-1] == "uninstall: nothing to do", res.stdout
        assert (site.files(), site.accounting()) == (now, site.accounting_before)
    finally:
        site.cancel_all()
        _restore(site, installed)
    # 5. The pool is back as it was installed.
    assert site.files() == installed
    assert site.accounting() == installed_accounting
    job = h.sbatch("-p", "a-owner", "--gres=gpu:1", "-o", "/dev/null", user="alice", script="#!/bin/sh\ntrue\n")
    assert h.wait_state(job, ["COMPLETED"], timeout=90) == "COMPLETED"
    assert os.path.exists(etc / "manifest.json")
