"""``doctor``'s ``plugins`` check: a Slurm built without job_submit/lua or gpu/nvml."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_pool.adapters.runner import CommandError, RecordingRunner
from slurm_pool.doctor import diagnose as doctor
from slurm_pool.doctor.diagnose import asks_nvml, list_plugins, offline_plugin_dir, plugin_findings
from slurm_pool.spec import load_spec

ROOT = Path(__file__).resolve().parents[2]
SPEC = load_spec(ROOT / "examples" / "pool.yaml")  # a policy, and group c with MIG layouts
NO_POLICY = SPEC.model_copy(update={"policy": SPEC.policy.model_copy(update={"job_submit": False})})
NO_MIG = SPEC.model_copy(
    update={
        "node_groups": [
            g.model_copy(update={"gpus": g.gpus.model_copy(update={"mig": None})}) if g.gpus else g
            for g in SPEC.node_groups
        ]
    }
)
FULL = frozenset({"job_submit_lua.so", "gpu_nvml.so", "select_cons_tres.so"})
NOLUA = FULL - {"job_submit_lua.so"}
NONVML = FULL - {"gpu_nvml.so"}


@pytest.mark.parametrize(
    "spec, plugins, nvml, missing",
    [
        (SPEC, FULL, True, []),
        (SPEC, NOLUA, False, ["job_submit_lua.so"]),
        (NO_POLICY, NOLUA, False, []),
        (SPEC, NONVML, True, ["gpu_nvml.so"]),
        (SPEC, NONVML, False, []),
        (SPEC, NONVML, None, ["gpu_nvml.so"]),  # gres.conf unread: the spec's MIG groups need NVML
        (NO_MIG, NONVML, None, []),
        (SPEC, frozenset(), True, ["job_submit_lua.so", "gpu_nvml.so"]),
        (SPEC, None, True, []),  # PluginDir not listed: nothing to say
    ],
)
def test_plugin_findings(spec, plugins, nvml, missing):
    found = plugin_findings(spec, "/usr/lib64/slurm", plugins, nvml)
    assert [f.problem.split(" has no ")[1].split(":")[0] for f in found] == missing
    for f in found:
        assert f.check == "plugins" and f.problem.startswith("PluginDir /usr/lib64/slurm has no ")
        assert "rpmbuild -ta slurm-VERSION.tar.bz2 --with lua --with nvml" in f.fix and "slurm-devel" in f.fix


def test_the_lua_finding_names_the_plugin_slurmctld_refuses():
    (f,) = plugin_findings(SPEC, "/p", NOLUA, False)
    assert "job_submit/lua" in f.problem and "failed to initialize job_submit plugin" in f.problem
    assert "apt install slurm-wlm-basic-plugins" in f.fix


@pytest.mark.parametrize(
    "text, want",
    [
        ("AutoDetect=nvml\n", True),
        ("NodeName=c-gpu1 AutoDetect=nvml\n", True),
        ("autodetect=NVML\n", True),
        ("# AutoDetect=nvml\nAutoDetect=off\n", False),
        ("NodeName=a AutoDetect=off Name=gpu File=/dev/nvidia0 # not AutoDetect=nvml\n", False),
        ("AutoDetect=nvmlx\n", False),
        ("", False),
    ],
)
def test_asks_nvml(text, want):
    assert asks_nvml(text) is want


def test_list_plugins_reads_every_plugin_dir_and_drops_odd_names():
    r = RecordingRunner()
    r.fail(["ls", "-1", "--", "/gone"], returncode=2)
    r.on(["ls", "-1", "--", "/lib/slurm"], "job_submit_lua.so\nodd name.so\n\x1b[31m.so\ngpu_nvml.so\n")
    assert list_plugins(r, "/gone:/lib/slurm") == {"job_submit_lua.so", "gpu_nvml.so"}
    assert r.commands("ls") == [("ls", "-1", "--", "/gone"), ("ls", "-1", "--", "/lib/slurm")]
    assert list_plugins(r, "/gone") is None
    assert list_plugins(r, "") is None


def test_offline_plugin_dir(tmp_path):
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=x\n  plugindir = /opt/slurm/lib/slurm  # site's\n")
    assert offline_plugin_dir(str(conf), None) == "/opt/slurm/lib/slurm"
    prefix = tmp_path / "usr"
    (prefix / "bin").mkdir(parents=True)
    (prefix / "lib" / "x86_64-linux-gnu" / "slurm-wlm").mkdir(parents=True)
    assert offline_plugin_dir(str(tmp_path / "none.conf"), str(prefix)) == str(
        prefix / "lib" / "x86_64-linux-gnu" / "slurm-wlm"
    )
    (prefix / "lib64" / "slurm").mkdir(parents=True)
    assert offline_plugin_dir(None, str(prefix)) == str(prefix / "lib64" / "slurm")
    assert offline_plugin_dir(None, None) == ""


def _down(tmp_path, monkeypatch, listing: str) -> RecordingRunner:
    """slurmctld does not answer; slurm.conf names a PluginDir holding ``listing``."""
    conf = tmp_path / "slurm.conf"
    conf.write_text(f"PluginDir={tmp_path}/plugins\n")
    (tmp_path / "gres.conf").write_text("AutoDetect=off\n")
    monkeypatch.setenv("SLURM_CONF", str(conf))
    r = RecordingRunner()
    r.fail(["scontrol"], stderr="Unable to contact slurm controller")
    r.fail(["sinfo"], stderr="Unable to contact slurm controller")
    r.on(["ls", "-1", "--", f"{tmp_path}/plugins"], listing)
    return r


def test_slurmctld_down_on_a_slurm_without_lua_still_names_the_plugin(tmp_path, monkeypatch):
    findings, lines = doctor.run(SPEC, _down(tmp_path, monkeypatch, "select_cons_tres.so\n"))
    assert [f.check for f in findings] == ["plugins"]
    assert "Slurm cannot be asked" in lines[0] and "  FAIL  plugins" in lines
    assert any("has no job_submit_lua.so" in line for line in lines) and lines[-1] == "1 problem(s)"


def test_slurmctld_down_with_every_plugin_is_still_an_error(tmp_path, monkeypatch):
    with pytest.raises(CommandError):
        doctor.run(SPEC, _down(tmp_path, monkeypatch, "job_submit_lua.so\n"))
