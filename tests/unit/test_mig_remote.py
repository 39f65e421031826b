"""The ssh path of ``mig apply``: config edits, the remote NodeControl, ClusterShell, the emulated nvidia-smi."""

from __future__ import annotations

import stat
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from slurm_pool.adapters.clush import NodeRunner
from slurm_pool.adapters.records import NodeRecord, State
from slurm_pool.adapters.runner import RecordingRunner
from slurm_pool.adapters.slurmcalls import SlurmCalls
from slurm_pool.localcluster.nvsmi import EmulatedNode, run
from slurm_pool.mig.apply import ApplyError, parse_lci, parse_lgi
from slurm_pool.mig.confedit import ConfEditError, node_gres, replace_node_gres_conf, set_node_gres
from slurm_pool.mig.emit import cap_minor
from slurm_pool.mig.placement import Layout
from slurm_pool.mig.remote import RemoteNodeControl, RemoteSettings
from slurm_pool.versions import SlurmVersion

SLURM_CONF = """\
# site slurm.conf
NodeName=DEFAULT CPUs=4
NodeName=a-gpu[1-3] CPUs=4 Gres=gpu:a100:2 Features=x State=UNKNOWN
nodename=c-gpu1 NodeAddr=10.0.0.9 Port=6818 Gres=gpu:old:1 Features=projc
PartitionName=p Nodes=a-gpu[1-3],c-gpu1
"""


@pytest.mark.parametrize(
    ("node", "gres", "want"),
    [
        ("c-gpu1", "gpu:new:2", "NodeName=c-gpu1 NodeAddr=10.0.0.9 Port=6818 Gres=gpu:new:2 Features=projc"),
        ("c-gpu1", "", "NodeName=c-gpu1 NodeAddr=10.0.0.9 Port=6818 Features=projc"),
        ("a-gpu2", "gpu:x:7", "NodeName=a-gpu2 CPUs=4 Gres=gpu:x:7 Features=x State=UNKNOWN"),
    ],
)
def test_set_node_gres_changes_one_node(node: str, gres: str, want: str) -> None:
    out = set_node_gres(SLURM_CONF, node, gres)
    assert want in out.splitlines()
    assert node_gres(out, node) == gres
    others = {n: node_gres(SLURM_CONF, n) for n in ("a-gpu1", "a-gpu3", "c-gpu1") if n != node}
    assert {n: node_gres(out, n) for n in others} == others
    assert "PartitionName=p Nodes=a-gpu[1-3],c-gpu1" in out and out.startswith("# site slurm.conf\n")


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("NodeName=b1 CPUs=1\n", "no NodeName line for c-gpu1"),
        ("NodeName=c-gpu[1-2] Port=6818-6819\n", "per-node values"),
        ("NodeName=c-gpu[1-2] NodeAddr=10.0.0.[1-2]\n", "per-node values"),
        ("NodeName=c-gpu1 CPUs=1\nNodeName=c-gpu1 CPUs=2\n", "second NodeName line"),
        ("NodeName=c-gpu[1-\n", "not a valid hostlist"),
    ],
)
def test_set_node_gres_refuses_what_it_cannot_edit_safely(text: str, match: str) -> None:
    with pytest.raises(ConfEditError, match=match):
        set_node_gres(text, "c-gpu1", "gpu:x:1")


def test_replace_node_gres_conf_keeps_everything_else() -> None:
    text = "AutoDetect=off\nNodeName=a-gpu[1-2] Name=gpu File=/dev/nvidia[0-1]\nNodeName=c-gpu1 Name=gpu File=/x\n"
    out = replace_node_gres_conf(text, "a-gpu1", ["NodeName=a-gpu1 AutoDetect=nvml"])
    assert out.splitlines() == [
        "AutoDetect=off",
        "NodeName=a-gpu2 Name=gpu File=/dev/nvidia[0-1]",
        "NodeName=a-gpu1 AutoDetect=nvml",
        "NodeName=c-gpu1 Name=gpu File=/x",
    ]
    assert replace_node_gres_conf("AutoDetect=off\n", "n9", ["NodeName=n9 Name=gpu File=/y"]).splitlines()[-1] == (
        "NodeName=n9 Name=gpu File=/y"
    )


# ------------------------------------------------------------ remote control


def FakeNode(name: str, state: State, gres: str, reason: str = "") -> NodeRecord:  # noqa: N802
    return NodeRecord(name, state, reason=reason, gres=gres)


@dataclass
class FakeSlurm(SlurmCalls):
    """The SlurmClient calls the remote control makes: node reads and drains faked, registration follows
    ``script``; the rest (reconfigure, the jobs on a node) are the adapter's own, through ``runner``."""

    runner: RecordingRunner
    script: list[NodeRecord] = field(default_factory=list)
    drains: list[tuple[str, str]] = field(default_factory=list)

    def node(self, name: str) -> NodeRecord:
        return self.script.pop(0) if len(self.script) > 1 else self.script[0]

    def drain(self, node: str, reason: str) -> None:
        self.drains.append((node, reason))


def _state(text: str) -> State:
    return State.parse(text)


def _control(version: str, script: list[NodeRecord], **settings: object):
    local = RecordingRunner()
    remote: dict[str, RecordingRunner] = {}

    def on_node(node: str) -> RecordingRunner:
        return remote.setdefault(node, RecordingRunner())

    slurm = FakeSlurm(local, script)
    ctl = RemoteNodeControl(
        slurm,  # type: ignore[arg-type]
        on_node,
        SlurmVersion.parse(version),
        RemoteSettings(register_timeout=1, **settings),  # type: ignore[arg-type]
        poll=0.01,
    )
    return ctl, slurm, local, on_node


def test_write_gres_edits_the_node_and_the_controller_files() -> None:
    ctl, _, local, on_node = _control("26.05", [], controller="ctl1", slurm_confs=("/etc/slurm/slurm.conf",))
    on_node("c-gpu1").on(["cat", "--", "/etc/slurm/gres.conf"], "AutoDetect=off\nNodeName=c-gpu1 Name=gpu File=/x\n")
    on_node("ctl1").on(["cat", "--", "/etc/slurm/slurm.conf"], SLURM_CONF)
    ctl.write_gres("c-gpu1", ["NodeName=c-gpu1 Name=gpu Type=t File=/dev/nvidia0"], "gpu:t:1")
    node_write = on_node("c-gpu1").calls[-1]
    assert node_write[:2] == ("sh", "-c") and node_write[-1] == "/etc/slurm/gres.conf"
    assert on_node("c-gpu1").inputs[-1] == "AutoDetect=off\nNodeName=c-gpu1 Name=gpu Type=t File=/dev/nvidia0\n"
    assert node_gres(on_node("ctl1").inputs[-1] or "", "c-gpu1") == "gpu:t:1"
    assert local.calls == []  # the controller is another host: nothing is written here


def test_a_bad_slurm_conf_writes_nothing_there() -> None:
    ctl, _, local, on_node = _control("26.05", [])
    on_node("c-gpu1").on(["cat"], "")
    local.on(["cat"], "NodeName=b1 CPUs=1\n")
    with pytest.raises(ConfEditError):
        ctl.write_gres("c-gpu1", [], "gpu:t:1")
    assert not [c for c in local.calls if c[0] == "sh"]


@pytest.mark.parametrize(
    ("version", "settings", "local_cmds", "node_cmds"),
    [
        ("26.05", {}, [("scontrol", "reconfigure")], []),
        ("23.11", {}, [("scontrol", "reconfigure")], []),
        ("22.05", {}, [("systemctl", "restart", "slurmctld")], [("systemctl", "restart", "slurmd")]),
        ("26.05", {"reconfigure": False, "restart_slurmctld": ""}, [], [("systemctl", "restart", "slurmd")]),
        ("22.05", {"reconfigure": True}, [("scontrol", "reconfigure")], []),
        (
            "22.05",
            {"restart_slurmd": "/opt/restart {node}"},
            [("systemctl", "restart", "slurmctld")],
            [("/opt/restart", "c-gpu1")],
        ),
    ],
)
def test_restart_follows_the_release(version: str, settings: dict, local_cmds: list, node_cmds: list) -> None:
    up = FakeNode("c-gpu1", _state("DRAIN+IDLE"), "gpu:t:1(S:0)", "slurm-pool: mig reconfigure")
    ctl, _, local, on_node = _control(version, [up], **settings)
    ctl._wanted["c-gpu1"] = "gpu:t:1"
    ctl.restart_slurmd("c-gpu1")
    assert local.calls == local_cmds
    assert on_node("c-gpu1").calls == node_cmds


def test_restart_waits_for_the_new_gres_and_keeps_the_drain() -> None:
    script = [
        FakeNode("c-gpu1", _state("DRAIN+IDLE"), "gpu:old:1", "admin: fan"),  # before
        FakeNode("c-gpu1", _state("DOWN+NOT_RESPONDING"), "gpu:old:1"),
        FakeNode("c-gpu1", _state("IDLE"), "gpu:old:1"),
        FakeNode("c-gpu1", _state("IDLE"), "gpu:t:7"),  # registered, but the drain was lost
        FakeNode("c-gpu1", _state("DRAIN+IDLE"), "gpu:t:7(S:0)", "admin: fan"),
    ]
    ctl, slurm, _, _ = _control("26.05", script)
    ctl._wanted["c-gpu1"] = "gpu:t:7"
    ctl.restart_slurmd("c-gpu1")
    assert slurm.drains == [("c-gpu1", "admin: fan")]


def test_restart_fails_when_the_gres_never_registers() -> None:
    ctl, _, _, _ = _control("26.05", [FakeNode("c-gpu1", _state("DRAIN+IDLE"), "gpu:old:1", "x")])
    ctl._wanted["c-gpu1"] = "gpu:t:7"
    with pytest.raises(ApplyError, match=r"did not register Gres=gpu:t:7 .*Gres=gpu:old:1"):
        ctl.restart_slurmd("c-gpu1")


# ------------------------------------------------------------ ClusterShell


def test_node_runner_passes_input_status_and_stderr() -> None:
    r = NodeRunner("n1", worker="exec")  # ClusterShell's local worker: the same code path as ssh
    res = r.run(["sh", "-c", "cat; echo oops >&2; exit 3"], input="a\nb\n", check=False)
    assert (res.returncode, res.stdout, res.stderr) == (3, "a\nb\n", "oops")
    assert r.run(["printf", "%s", "x y"]).stdout == "x y\n"


def test_node_runner_times_out() -> None:
    res = NodeRunner("n1", worker="exec").run(["sleep", "30"], check=False, timeout=0.5)
    assert res.returncode == 124 and "timed out" in res.stderr


# ------------------------------------------------------- emulated nvidia-smi


@dataclass
class DictBackend:
    gpus: dict[int, Layout | None]

    def model(self, node: str) -> str:
        return "A100-40GB"

    def layouts(self, node: str) -> dict[int, Layout | None]:
        return dict(self.gpus)

    def apply(self, node: str, gpu: int, layout: Layout | None) -> None:
        self.gpus[gpu] = layout


def test_emulated_nvidia_smi_speaks_the_commands_apply_sends(tmp_path: Path) -> None:
    node = EmulatedNode(DictBackend({0: ("3g.20gb", "4g.20gb"), 1: None}), "c-gpu1", tmp_path)  # type: ignore[arg-type]
    assert run(node, ["--query-gpu=index,mig.mode.current", "--format=csv,noheader"]) == (
        0,
        "0, Enabled\n1, Disabled\n",
    )
    assert run(node, ["-i", "1", "-mig", "1"])[0] == 0
    assert run(node, ["mig", "-i", "1", "-dci"])[0] == 6  # nothing to destroy: non-zero, as the driver does
    assert run(node, ["mig", "-i", "1", "-cgi", "3g.20gb:4,1g.5gb:0", "-C"])[0] == 0
    rc, text = run(node, ["mig", "-lgi"])
    assert rc == 0
    assert sorted((g, p) for g, p, _, _ in parse_lgi(text)) == [
        (0, "3g.20gb"),
        (0, "4g.20gb"),
        (1, "1g.5gb"),
        (1, "3g.20gb"),
    ]
    assert len(parse_lci(run(node, ["mig", "-lci"])[1])) == 4
    cap = tmp_path / "nvidia-caps" / f"nvidia-cap{cap_minor(1, 1, 0)}"
    assert stat.S_ISCHR(cap.stat().st_mode) and (tmp_path / "nvidia1").exists()
    (tmp_path / "fail-cgi").write_text("1")
    assert run(node, ["mig", "-i", "0", "-dgi"])[0] == 0
    rc, text = run(node, ["mig", "-i", "0", "-cgi", "7g.40gb:0", "-C"])
    assert rc == 2 and "Insufficient Resources" in text and node.layouts()[0] == ()
    assert run(node, ["mig", "-i", "0", "-cgi", "7g.40gb:0", "-C"])[0] == 0
    assert run(node, ["mig", "-i", "0", "-cgi", "1g.5gb:0", "-C"])[0] == 2  # no room left
    assert run(node, ["-i", "0", "-mig", "0"])[0] == 6  # in use
    assert run(node, ["--help"])[0] == 2
