"""``mig apply --config-managed``: the site's files are read, never written; the change is printed until they carry it.

The node control is the real :class:`RemoteNodeControl` over recording runners
(every command recorded; a write would be an ``sh -c`` call); Slurm is a small
stateful fake whose ``scontrol reconfigure`` reads the ``Gres=`` slurm.conf holds.
"""

from __future__ import annotations

import json
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurm_pool.adapters.records import NodeRecord, State
from slurm_pool.adapters.runner import RecordingRunner, Result
from slurm_pool.adapters.slurmcalls import SlurmCalls
from slurm_pool.cli import cli
from slurm_pool.mig.confedit import node_gres, replace_node_gres_conf, set_node_gres
from slurm_pool.mig.emit import MigDevice
from slurm_pool.mig.managed import WAITING, Wanted, wanted
from slurm_pool.mig.placement import Layout, find_placement
from slurm_pool.mig.planner import Gpu, plan
from slurm_pool.mig.remote import RemoteNodeControl, RemoteSettings
from slurm_pool.versions import SlurmVersion

MODEL = "A100-40GB"
NODE = "c-gpu1"
VERSION = SlurmVersion.parse("26.05")
GRES_CONF, SLURM_CONF = "/etc/slurm/gres.conf", "/etc/slurm/slurm.conf"
BEFORE: dict[int, Layout | None] = {0: ("7g.40gb",), 1: ("7g.40gb",)}
REASON = "slurm-pool: mig reconfigure"


@dataclass
class FakeGpus:
    """A node's GPUs; the driver numbers the instances it creates from ``first_gi`` (1: as predicted)."""

    gpus: dict[int, Layout | None]
    first_gi: int = 1
    applied: list[tuple[int, Layout | None]] = field(default_factory=list)

    def layouts(self, node: str) -> dict[int, Layout | None]:
        return dict(self.gpus)

    def apply(self, node: str, gpu: int, layout: Layout | None) -> None:
        self.gpus[gpu] = layout
        self.applied.append((gpu, layout))

    def devices(self, node: str) -> list[MigDevice]:
        out = []
        for idx, lay in sorted(self.gpus.items()):
            for gi, (prof, start) in enumerate(find_placement(MODEL, list(lay)) or () if lay else ()):
                first = self.first_gi if idx in {g for g, _ in self.applied} else 1
                out.append(MigDevice(idx, gi + first, 0, prof, start=start))
        return out

    def mig_minors(self, node: str) -> dict[str, int] | None:
        return None


@dataclass
class FakeSlurm(SlurmCalls):
    """slurmctld's view of the node: its drain and the Gres it runs with (the other calls: the adapter's own,
    through ``runner``)."""

    runner: RecordingRunner
    gres: str
    drained: bool = False
    reason: str = ""
    drains: list[str] = field(default_factory=list)
    resumes: list[str] = field(default_factory=list)

    def node(self, name: str) -> NodeRecord:
        state = State.parse("DRAIN+IDLE" if self.drained else "IDLE")
        return NodeRecord(name, state, reason=self.reason, gres=self.gres)

    def drain(self, node: str, reason: str) -> None:
        self.drained, self.reason = True, reason
        self.drains.append(reason)

    def resume(self, node: str) -> None:
        self.drained, self.reason = False, ""
        self.resumes.append(node)


READS = ("cat", "squeue")  # what the control runs that only reads


@dataclass
class Site:
    files: dict[str, str]
    slurm: FakeSlurm
    gpus: FakeGpus
    runners: list[RecordingRunner]

    def writes(self) -> list[tuple[str, ...]]:
        return [c for r in self.runners for c in r.calls if c[0] not in READS and c[:2] != ("scontrol", "reconfigure")]


def _the_plan():  # noqa: ANN202
    return plan(MODEL, [Gpu(NODE, i, lay) for i, lay in BEFORE.items()], {"1g.5gb": 7})


def _wanted(gpus: FakeGpus, targets: dict[int, Layout | None]) -> Wanted:
    return wanted(MODEL, NODE, targets, gpus, "explicit", VERSION, "/dev")


def _planned() -> dict[int, Layout | None]:
    p = _the_plan()
    return {p.gpus[i].index: p.layouts[i] for i in p.changed()}


def _files(state: str) -> dict[str, str]:
    """The site's files: ``before`` the change, ``after`` it, or carrying something else."""
    old = _wanted(FakeGpus(dict(BEFORE)), {})
    new = _wanted(FakeGpus(dict(BEFORE)), _planned())
    gres_conf = (
        "# site gres.conf\nAutoDetect=off\n" + "\n".join(old.lines) + "\nNodeName=c-gpu2 Name=gpu File=/dev/nvidia0\n"
    )
    slurm_conf = f"# site\nNodeName={NODE} CPUs=8 Gres={old.gres}\nNodeName=c-gpu2 CPUs=8 Gres=gpu:a100:1\n"
    if state in ("after", "done", "gres-only", "other-gi"):
        gres_conf = replace_node_gres_conf(gres_conf, NODE, new.lines)
    if state in ("after", "done", "slurm-only", "other-gi"):
        slurm_conf = set_node_gres(slurm_conf, NODE, new.gres)
    if state == "different":
        slurm_conf = set_node_gres(slurm_conf, NODE, "gpu:a100_1g.5gb:3")
    return {GRES_CONF: gres_conf, SLURM_CONF: slurm_conf}


def _site(state: str) -> Site:
    files = _files(state)
    local, remote = RecordingRunner(), RecordingRunner()
    slurm = FakeSlurm(local, node_gres(_files("before")[SLURM_CONF], NODE) or "")
    for runner in (local, remote):
        runner.respond(["cat", "--"], lambda argv, _in: Result(argv, 0, files[argv[2]], ""))

    def reconfigure(argv: tuple[str, ...], _in: str | None) -> Result:
        slurm.gres = node_gres(files[SLURM_CONF], NODE) or ""
        return Result(argv, 0, "", "")

    local.respond(["scontrol", "reconfigure"], reconfigure)
    layouts = dict(BEFORE) if state != "done" else {**BEFORE, **_planned()}
    gpus = FakeGpus(layouts, first_gi=3 if state == "other-gi" else 1)
    if state == "done":
        slurm.gres = node_gres(files[SLURM_CONF], NODE) or ""
    return Site(files, slurm, gpus, [local, remote])


@pytest.fixture
def site(monkeypatch: pytest.MonkeyPatch):  # noqa: ANN201
    holder: dict[str, Site] = {}

    def make_controls(_plan: object) -> tuple[RemoteNodeControl, FakeGpus]:
        s = holder["site"]
        ctl = RemoteNodeControl(
            s.slurm,  # type: ignore[arg-type]
            lambda node: s.runners[1],
            VERSION,
            RemoteSettings(register_timeout=1),
            poll=0.01,
        )
        return ctl, s.gpus

    factory = types.ModuleType("mig_managed_controls")
    factory.make_controls = make_controls  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "mig_managed_controls", factory)

    def boot(state: str) -> Site:
        holder["site"] = _site(state)
        return holder["site"]

    return boot


def _apply(tmp_path: Path, *extra: str) -> tuple[int, str]:
    f = tmp_path / "plan.json"
    f.write_text(json.dumps(_the_plan().to_dict()))
    argv = ["mig", "apply", "--plan", str(f), "--controls", "mig_managed_controls:make_controls", "--config-managed"]
    res = CliRunner().invoke(cli, [*argv, "--slurm-version", str(VERSION), *extra])
    # --json: the document alone (a non-zero exit adds its one-line reason on stderr)
    return res.exit_code, res.stdout if "--json" in extra else res.output


# state, exit status, what the output says, whether the node was changed (drained, repartitioned, resumed)
CASES = [
    ("before", WAITING, ["waiting for config management", f"+NodeName={NODE} CPUs=8 Gres=gpu:", "-NodeName="], False),
    ("after", 0, [f"{NODE}: applied", "check gres.conf and slurm.conf carry the node's lines"], True),
    ("done", 0, [f"{NODE}: nothing to do"], False),
    ("different", 2, [f"{SLURM_CONF} on this host line 2", "nor Slurm's running Gres=", "nothing was done"], False),
    ("slurm-only", 2, ["partly applied", f"{SLURM_CONF} on this host carries", f"{GRES_CONF} on {NODE} line"], False),
    ("gres-only", 2, ["partly applied", f"{GRES_CONF} on {NODE} carries", "does not give Gres="], False),
]


@pytest.mark.parametrize(("state", "code", "says", "changed"), CASES, ids=[c[0] for c in CASES])
def test_config_managed_apply_writes_nothing(site, tmp_path, state: str, code: int, says: list[str], changed: bool):
    s = site(state)
    files = dict(s.files)
    got, out = _apply(tmp_path)
    assert got == code, out
    for text in says:
        assert text in out, out
    assert s.writes() == [] and s.files == files  # no file written, on the node or here
    assert (s.slurm.drains, s.slurm.resumes) == (([REASON], [NODE]) if changed else ([], []))
    assert (s.gpus.gpus == {**BEFORE, **_planned()}) == (changed or state == "done")
    assert not s.slurm.drained
    if changed:  # Slurm read the files the site wrote, and runs the node with the planned GRES
        assert s.slurm.gres == node_gres(files[SLURM_CONF], NODE)


def test_the_printed_diff_is_the_change_that_lets_the_second_run_drive_it(site, tmp_path) -> None:
    s = site("before")
    code, out = _apply(tmp_path, "--json")
    assert code == WAITING, out
    doc = json.loads(out)
    assert doc["waiting"][NODE]["gres"] == node_gres(_files("after")[SLURM_CONF], NODE)
    assert sorted(c["file"] for c in doc["changes"]) == [f"{GRES_CONF} on {NODE}", f"{SLURM_CONF} on this host"]
    for change in doc["changes"]:  # every added line is one the planned files hold, every removed one is gone
        path = change["file"].split(" on ")[0]
        added = [ln[1:] for ln in change["diff"].splitlines() if ln.startswith("+") and not ln.startswith("+++")]
        removed = [ln[1:] for ln in change["diff"].splitlines() if ln.startswith("-") and not ln.startswith("---")]
        assert added and set(added) <= set(_files("after")[path].splitlines())
        assert removed and not set(removed) & set(_files("after")[path].splitlines())
    assert s.writes() == [] and s.slurm.drains == []
    again, out2 = _apply(tmp_path, "--json")
    assert (again, out2) == (code, out)  # idempotent: the same change, still nothing done


def test_a_driver_that_numbers_instances_otherwise_leaves_the_node_drained(site, tmp_path) -> None:
    s = site("other-gi")
    code, out = _apply(tmp_path)
    assert code == 1, out
    assert "is not one of c-gpu1's planned lines" in out and "the GPUs as they are now need" in out, out
    assert s.writes() == [] and s.slurm.resumes == []
    assert s.slurm.drained and s.slurm.reason.startswith(f"{REASON} failed: check gres.conf"), s.slurm.reason


def test_config_managed_needs_controls_that_read_files(tmp_path) -> None:
    f = tmp_path / "plan.json"
    f.write_text(json.dumps(_the_plan().to_dict()))
    res = CliRunner().invoke(cli, ["mig", "apply", "--plan", str(f), "--config-managed"])
    assert res.exit_code == 2 and "--config-managed needs --controls" in res.output, res.output


def test_autodetect_changes_only_slurm_conf(site, tmp_path) -> None:
    s = site("before")
    s.files[GRES_CONF] = f"NodeName={NODE} AutoDetect=nvml\n"
    code, out = _apply(tmp_path, "--gres-mode", "autodetect", "--json")
    assert code == WAITING, out
    assert [c["file"] for c in json.loads(out)["changes"]] == [f"{SLURM_CONF} on this host"]
    assert s.writes() == [] and s.slurm.drains == []
    s.files[SLURM_CONF] = _files("after")[SLURM_CONF]  # config management rolls out the new Gres=
    code, out = _apply(tmp_path, "--gres-mode", "autodetect")
    assert code == 0 and f"{NODE}: applied" in out, out
    assert s.writes() == [] and s.slurm.resumes == [NODE] and s.gpus.gpus == {**BEFORE, **_planned()}
