"""Issue 44, check 4, on real Slurm: the pool's Python environment moved away fails no site job.

The pool's prolog and epilog on the site (``prolog.d/50-slurm-pool`` and
``epilog.d/50-slurm-pool``) are rendered here from the site's node.conf on an
interpreter of their own (a venv under the site's state directory, as an admin
installs ``/opt/slurm-pool``), which is then moved away, as a half-done upgrade
leaves it.  A site job on a pool node (``site-gpu`` overlaps ``a-gpu2``) still
runs to COMPLETED and the node stays up; a pool job fails closed as before
(slurmd drains the node and requeues the job, which never runs).  The site's
own health check decides when the pool's cannot run.  Everything is put back
in a ``finally``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest

from slurm_pool import nodeconf
from slurm_pool.nodeconf import wrappers as hookwrap
from tests.support.patience import wait_for

pytestmark = pytest.mark.slurm

REPO = Path(__file__).resolve().parents[2]
SITE_NODE, POOL_NODE = "a-gpu2", "a-gpu1"
DONE = ["COMPLETED", "FAILED", "NODE_FAIL", "CANCELLED", "BOOT_FAIL", "OUT_OF_MEMORY"]


def _node(handle, node: str) -> tuple[str, str]:
    """(state, reason) as sinfo shows them (a node in several partitions is listed once per partition)."""
    out = handle.run(["sinfo", "-h", "-N", "-n", node, "-o", "%T|%E"], check=True).stdout.strip().splitlines()
    state, _, reason = out[0].partition("|")
    return state, reason


def _settled(handle, node: str) -> tuple[str, str] | None:
    """The node's state once no job is on it or finishing there (None until then)."""
    state, reason = _node(handle, node)
    return None if state.rstrip("*~#") in ("allocated", "mixed", "completing") else (state, reason)


@contextmanager
def pools_python_moved_away(site) -> Iterator[Path]:
    """The pool's hooks on a venv of their own, which is moved away; yields the pool's own log directory."""
    L = site.pool.layout
    conf = L.etc / nodeconf.BESIDE_SLURM_CONF
    venv, moved = site.state / "pool-venv", site.state / "pool-venv.moved"
    hooks = {kind: L.etc / f"{kind}.d" / "50-slurm-pool" for kind in ("prolog", "epilog")}
    saved = {kind: path.read_bytes() for kind, path in hooks.items()}
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    cfg = nodeconf.load(str(conf))
    assert cfg.flag("coexist"), "the site's node.conf does not say the cluster is shared"
    logdir = Path(cfg.get("state_dir"))
    try:
        for kind, path in hooks.items():
            text = nodeconf.render_hook(kind, str(venv / "bin" / "python"), str(conf), [str(REPO)], cfg=cfg)
            tmp = path.with_name(".50-slurm-pool.tmp")
            tmp.write_text(text)
            tmp.chmod(0o755)
            os.replace(tmp, path)
        os.rename(venv, moved)
        for node in (SITE_NODE, POOL_NODE):
            (logdir / node).mkdir(mode=0o755, parents=True, exist_ok=True)
        yield logdir
    finally:
        for kind, path in hooks.items():
            path.write_bytes(saved[kind])
        shutil.rmtree(moved if moved.exists() else venv, ignore_errors=True)


def test_site_job_on_a_pool_node_runs_without_the_pools_python(brownfield_site):
    site, handle = brownfield_site, brownfield_site.handle
    handle.cancel_all()
    try:
        with pools_python_moved_away(site) as logdir:
            job = handle.sbatch(
                "-p", "site-gpu", "-w", SITE_NODE, "-o", "/dev/null", user="dave", script="#!/bin/sh\ntrue\n"
            )
            assert handle.wait_state(job, DONE, timeout=90) == "COMPLETED", handle.seen(job)
            state, reason = wait_for(lambda: _settled(handle, SITE_NODE), 60, f"{SITE_NODE} to settle")
            assert state.rstrip("*~#") == "idle", (state, reason)  # not drained, not down
            assert (site.marks / str(job)).exists()  # the site's own prolog ran
            log = (logdir / SITE_NODE / hookwrap.LOG_FILE).read_text()
            for kind in ("prolog", "epilog"):
                assert f"{kind}: the pool's {kind} exited 127 under job {job} of the site" in log, log
    finally:
        handle.cancel_all()


def test_pool_job_fails_closed_without_the_pools_python(brownfield_site):
    site, handle = brownfield_site, brownfield_site.handle
    handle.cancel_all()
    ran = Path("/tmp") / f"sp-hooks-ran-{os.getpid()}"
    ran.unlink(missing_ok=True)
    job = None
    try:
        with pools_python_moved_away(site):
            job = handle.sbatch(
                "-p",
                "a-owner",
                "-w",
                POOL_NODE,
                "--gres=gpu:1",
                "-o",
                "/dev/null",
                user="alice",
                script=f"#!/bin/sh\ntouch {ran}\n",
            )
            # As on a cluster the pool owns: slurmd drains the node for the failed prolog, and the job is
            # requeued (nohold_on_prolog_fail) and never runs.
            state, reason = wait_for(
                lambda: s if "drain" in (s := _node(handle, POOL_NODE))[0] else None, 90, f"{POOL_NODE} drained"
            )
            assert "prolog" in reason.lower(), (state, reason)
            assert handle.wait_state(job, ["PENDING", "REQUEUED"], timeout=60) in ("PENDING", "REQUEUED")
            assert not ran.exists()
            handle.run(["scancel", str(job)], check=True)
            handle.wait_state(job, ["CANCELLED"], timeout=60)
    finally:
        if job is not None:
            handle.run(["scancel", str(job)])
        handle.run(["scontrol", "update", f"NodeName={POOL_NODE}", "State=RESUME"])
        wait_for(
            lambda: _node(handle, POOL_NODE)[0].rstrip("*~#") == "idle", 90, f"{POOL_NODE} idle again after resume"
        )
        ran.unlink(missing_ok=True)
    assert not ran.exists()


def test_site_health_check_decides_without_the_pools_python(brownfield_site):
    """What slurmd's HealthCheckProgram runs (its interval is minutes), with the environment slurmd gives it."""
    site, handle = brownfield_site, brownfield_site.handle
    conf = site.pool.layout.etc / nodeconf.BESIDE_SLURM_CONF
    cfg = nodeconf.load(str(conf))
    work = Path("/var/tmp") / f"sp-site-nhc-{os.getpid()}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(mode=0o755)
    try:
        nhc = work / "nhc"
        nhc.write_text(f'#!/bin/sh\necho "$SLURMD_NODENAME" >{work}/ran\nexit 3\n')
        nhc.chmod(0o755)
        cfg.values["site_health_check"] = str(nhc)
        script = work / "slurm-pool-healthcheck"
        script.write_text(
            nodeconf.render_hook("healthcheck", str(work / "moved-away" / "python"), str(conf), [str(REPO)], cfg=cfg)
        )
        script.chmod(0o755)
        res = subprocess.run([str(script)], env={"SLURMD_NODENAME": SITE_NODE}, capture_output=True, timeout=60)
        assert res.returncode == 3, res.stderr  # the site's verdict, not the pool's breakage
        assert (work / "ran").read_text().strip() == SITE_NODE
        assert b"the pool's health check could not run (exit 127)" in res.stderr
        state, reason = wait_for(lambda: _settled(handle, SITE_NODE), 60, f"{SITE_NODE} to settle")
        assert state.rstrip("*~#") == "idle", (state, reason)  # not drained
    finally:
        shutil.rmtree(work, ignore_errors=True)
