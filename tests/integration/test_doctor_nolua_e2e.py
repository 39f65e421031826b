"""``slurm-pool doctor`` on a Slurm 26.05 built without Lua (as SchedMD's RPMs are unless ``--with lua``).

The build is the cached variant ``26.05-nolua`` (``slurmbuild build --variant
nolua``; built here on first use when absent).  No session cluster: one
slurmctld of that build with a minimal slurm.conf in a temporary directory
(``auth/slurm`` with a key file, so no munge; no slurmd, no slurmdbd).

* With ``JobSubmitPlugins=lua`` slurmctld stops at start, as a site would see it;
  doctor then cannot ask Slurm and still names the missing plugin and its fix.
* Without it slurmctld runs; ``scontrol show config``'s PluginDir lacks
  ``job_submit_lua.so`` and doctor says so.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from slurm_pool.adapters.records import parse_config_text
from slurm_pool.adapters.runner import SubprocessRunner
from slurm_pool.doctor.diagnose import list_plugins
from tests.support.patience import patience, wait_for
from tests.support.slurm_cluster import built_slurm

pytestmark = pytest.mark.slurm

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "pool.yaml"  # has a policy: JobSubmitPlugins=lua


@pytest.fixture(scope="module")
def nolua() -> Path:
    """The prefix of Slurm 26.05 built ``--without-lua``, built now if not cached (`make slurm-build` builds it ahead)."""
    return built_slurm("nolua")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(prefix: Path, conf: Path) -> dict[str, str]:
    return {
        **os.environ,
        "SLURM_CONF": str(conf),
        "PATH": f"{prefix}/bin:{prefix}/sbin:{os.environ['PATH']}",
        "PYTHONPATH": str(REPO),
    }


def _config(d: Path, extra: str) -> Path:
    """A one-node slurm.conf for slurmctld alone, with its auth/slurm key beside it."""
    (d / "state").mkdir()
    key = d / "slurm.key"
    key.write_bytes(os.urandom(64))
    key.chmod(0o600)
    conf = d / "slurm.conf"
    conf.write_text(
        f"ClusterName=nolua\nSlurmctldHost={socket.gethostname().split('.')[0]}\nSlurmctldPort={_free_port()}\n"
        f"SlurmUser=root\nAuthType=auth/slurm\nCredType=cred/slurm\nStateSaveLocation={d}/state\n"
        f"SlurmctldPidFile={d}/slurmctld.pid\nSlurmctldLogFile={d}/slurmctld.log\nSlurmctldDebug=info\n"
        f"NodeName=n1 NodeAddr=127.0.0.1 CPUs=1 State=UNKNOWN\nPartitionName=p Nodes=n1 Default=YES\n{extra}"
    )
    return conf


def _doctor(prefix: Path, conf: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "slurm_pool", "doctor", "--spec", str(EXAMPLE)],
        env=_env(prefix, conf),
        capture_output=True,
        text=True,
        timeout=patience(60),
    )


def _names_the_plugin_and_its_fix(res: subprocess.CompletedProcess[str], plugin_dir: str) -> None:
    assert res.returncode == 1, res.stdout + res.stderr
    assert "  FAIL  plugins" in res.stdout
    assert f"PluginDir {plugin_dir} has no job_submit_lua.so" in res.stdout, res.stdout
    assert "rpmbuild -ta slurm-VERSION.tar.bz2 --with lua --with nvml" in res.stdout
    assert "has no gpu_nvml.so" not in res.stdout  # gres.conf asks for no NVML


def test_the_nolua_build_has_no_job_submit_lua(nolua):
    assert (nolua / "lib" / "slurm" / "job_submit_defaults.so").is_file()  # other job_submit plugins are there
    assert not (nolua / "lib" / "slurm" / "job_submit_lua.so").exists()


def test_slurmctld_refuses_jobsubmitplugins_lua_and_doctor_names_the_fix(nolua, tmp_path):
    conf = _config(tmp_path, "JobSubmitPlugins=lua\n")
    (tmp_path / "gres.conf").write_text("AutoDetect=off\n")
    ctld = subprocess.run(
        [str(nolua / "sbin" / "slurmctld"), "-D", "-i", "-f", str(conf)],
        env=_env(nolua, conf),
        capture_output=True,
        text=True,
        timeout=patience(60),
    )
    log = (tmp_path / "slurmctld.log").read_text()
    assert ctld.returncode != 0
    assert "cannot create job_submit context for job_submit/lua" in log, log[-2000:]
    assert "failed to initialize job_submit plugin" in log
    _names_the_plugin_and_its_fix(_doctor(nolua, conf), str(nolua / "lib" / "slurm"))


def test_a_running_slurmctld_reports_a_plugin_dir_without_job_submit_lua(nolua, tmp_path):
    conf = _config(tmp_path, "")
    (tmp_path / "gres.conf").write_text("AutoDetect=off\n")
    env = _env(nolua, conf)
    ctld = subprocess.Popen(
        [str(nolua / "sbin" / "slurmctld"), "-D", "-i", "-f", str(conf)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        runner = SubprocessRunner(env=env)

        def up() -> bool:
            assert ctld.poll() is None, (tmp_path / "slurmctld.log").read_text()[-2000:]
            return runner.run(["scontrol", "ping"], check=False).returncode == 0

        wait_for(up, 20, "slurmctld of the nolua build to answer")
        config = parse_config_text(runner.run(["scontrol", "show", "config"]).stdout)
        assert config["PluginDir"] == str(nolua / "lib" / "slurm")
        plugins = list_plugins(runner, config["PluginDir"])
        assert plugins and "select_cons_tres.so" in plugins and "job_submit_lua.so" not in plugins
        _names_the_plugin_and_its_fix(_doctor(nolua, conf), config["PluginDir"])
    finally:
        ctld.terminate()
        ctld.wait(timeout=patience(30))
