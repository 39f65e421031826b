"""``slurm-pool status --spec`` with floating guarantees: each project's guarantee, GPUs in use in it,
GPUs borrowed; on the queue recorded from Slurm 22.05 and 26.05 (``squeue-requeued.json``: jobs 1, 3 and 6
run, 2, 4 and 5 wait), its jobs given to the floating projects as each case says."""

from __future__ import annotations

import copy
import io
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from prometheus_client import CollectorRegistry
from rich.console import Console

from slurm_pool.adapters.records import parse_jobs
from slurm_pool.adapters.runner import RecordingRunner
from slurm_pool.adapters.slurm import SlurmClient
from slurm_pool.cli import cli
from slurm_pool.metrics import status as st
from slurm_pool.metrics.collector import PoolCollector
from slurm_pool.spec.load import parse_spec

pytestmark = pytest.mark.usefixtures("narrow_from_json")

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "slurm"
H100 = "nvidia_h100_80gb_hbm3"
A100 = "nvidia_a100-sxm4-80gb"
NODE_COMMAND = {"22.05": ["sinfo", "--json"], "26.05": ["scontrol", "show", "nodes", "--json"]}


def spec_dict() -> dict[str, Any]:
    """``examples/pool-floating.yaml`` with f-gpu[1-2], projd promised 2 GPUs, proje 2 H100s."""
    d = yaml.safe_load((ROOT / "examples" / "pool-floating.yaml").read_text())
    next(g for g in d["node_groups"] if g["name"] == "f")["hosts"] = "f-gpu[1-2]"
    projects = {p["name"]: p for p in d["projects"]}
    projects["projd"]["guarantee"] = {"gres/gpu": 2}
    projects["proje"]["guarantee"] = {f"gres/gpu:{H100}": 2}
    return d


def queue(version: str, jobs: dict[int, tuple[str, str, str, str]]) -> str:
    """The recorded queue, job id -> (account, QOS, partition, GPU type: H100, A100 or "" for none in its TRES)."""
    doc = json.loads((DATA / version / "squeue-requeued.json").read_text())
    out = []
    for job in doc["jobs"]:
        job = copy.deepcopy(job)
        if job["job_id"] in jobs:
            job["account"], job["qos"], job["partition"], gtype = jobs[job["job_id"]]
            tres = re.sub(r",gres/gpu:[^,=]+=[0-9]+", "", job["tres_alloc_str"])
            job["tres_alloc_str"] = tres + (f",gres/gpu:{gtype}=" + str(job_gpus(tres)) if gtype else "")
        out.append(job)
    return json.dumps({**doc, "jobs": out})


def job_gpus(tres: str) -> int:
    m = re.search(r"gres/gpu=([0-9]+)", tres)
    return int(m.group(1)) if m else 0


def row(project: str, guarantee: dict[str, int], in_use: dict[str, int], gpus: int, by_tier: dict[str, int]):
    qos = f"guaranteed-{project}"
    return {
        "project": project,
        "qos": qos,
        "guarantee": guarantee,
        "in_use": in_use,
        "in_use_gpus": gpus,
        "borrowed": sum(by_tier.values()),
        "borrowed_by_tier": by_tier,
    }


D, E = {"gres/gpu": 2}, {f"gres/gpu:{H100}": 2}
CASES = [
    # (name, jobs given to the floating projects, projd's row, proje's row)
    ("none of theirs", {}, row("projd", D, {"gres/gpu": 0}, 0, {}), row("proje", E, {f"gres/gpu:{H100}": 0}, 0, {})),
    (
        "in the guarantee and borrowing",
        {
            1: ("projd", "guaranteed-projd", "floating", A100),
            3: ("projd", "shared", "shared", A100),
            6: ("proje", "guaranteed-proje", "floating", H100),
        },
        row("projd", D, {"gres/gpu": 1}, 1, {"shared": 1}),
        row("proje", E, {f"gres/gpu:{H100}": 2}, 2, {}),
    ),
    (
        "waiting jobs hold nothing",
        {2: ("projd", "guaranteed-projd", "floating", ""), 5: ("proje", "scavenger", "scavenger", "")},
        row("projd", D, {"gres/gpu": 0}, 0, {}),
        row("proje", E, {f"gres/gpu:{H100}": 0}, 0, {}),
    ),
    (
        "the guarantees' own tier (owned servers) is not borrowing",
        {1: ("projd", "guaranteed", "a-owner", A100), 6: ("projd", "scavenger", "scavenger", A100)},
        row("projd", D, {"gres/gpu": 0}, 0, {"scavenger": 2}),
        row("proje", E, {f"gres/gpu:{H100}": 0}, 0, {}),
    ),
    (
        "a TRES without GPU types counts against a guarantee of one type",
        {6: ("proje", "guaranteed-proje", "floating", "")},
        row("projd", D, {"gres/gpu": 0}, 0, {}),
        row("proje", E, {f"gres/gpu:{H100}": 2}, 2, {}),
    ),
    (
        "GPUs of another type are not the typed guarantee's",
        {6: ("proje", "guaranteed-proje", "floating", A100)},
        row("projd", D, {"gres/gpu": 0}, 0, {}),
        row("proje", E, {f"gres/gpu:{H100}": 0}, 2, {}),
    ),
    (
        "another account in the QOS is not the project",
        {1: ("projx", "guaranteed-projd", "floating", A100), 3: ("projx", "shared", "shared", A100)},
        row("projd", D, {"gres/gpu": 0}, 0, {}),
        row("proje", E, {f"gres/gpu:{H100}": 0}, 0, {}),
    ),
]


def runner(version: str, jobs: dict[int, tuple[str, str, str, str]]) -> RecordingRunner:
    """Slurm of ``version`` answering with the recorded nodes and the queue of :func:`queue`."""
    r = RecordingRunner()
    r.on(["sinfo", "--version"], f"slurm {version}.0\n")
    r.on(NODE_COMMAND[version], (DATA / version / "nodes-requeued.json").read_text())
    r.on(["squeue", "--json"], queue(version, jobs))
    return r


def replay(monkeypatch: pytest.MonkeyPatch, version: str, jobs: dict[int, tuple[str, str, str, str]]) -> None:
    r = runner(version, jobs)
    monkeypatch.setattr("slurm_pool.adapters.runner.SubprocessRunner", lambda **kw: r)


@pytest.mark.parametrize("version", ["22.05", "26.05"])
@pytest.mark.parametrize("name, jobs, projd, proje", CASES, ids=[c[0] for c in CASES])
def test_status_json_rows(monkeypatch, tmp_path, version, name, jobs, projd, proje):
    replay(monkeypatch, version, jobs)
    path = tmp_path / "pool.yaml"
    path.write_text(yaml.safe_dump(spec_dict()))
    res = CliRunner().invoke(cli, ["status", "--json", "--spec", str(path), "--state-dir", "", "--usage-hours", "0"])
    assert res.exit_code == 0, res.output
    got = json.loads(res.output)["guarantees"]
    assert got == {"tier": "guaranteed", "partition": "floating", "overflow": "shared", "projects": [projd, proje]}


def test_no_guarantees_section_no_key(monkeypatch):
    replay(monkeypatch, "26.05", {})
    res = CliRunner().invoke(
        cli,
        ["status", "--json", "--spec", str(ROOT / "examples" / "pool.yaml"), "--state-dir", "", "--usage-hours", "0"],
    )
    assert res.exit_code == 0, res.output
    assert "guarantees" not in json.loads(res.output)
    assert st.guarantee_status(parse_spec(yaml.safe_load((ROOT / "examples" / "pool.yaml").read_text())), []) is None


def rendered(status: dict[str, Any]) -> list[str]:
    console = Console(width=200, record=True, color_system=None, file=io.StringIO())
    for part in st.tables(status):
        console.print(part)
    return [ln.rstrip() for ln in console.export_text().splitlines()]


@pytest.mark.parametrize("version", ["22.05", "26.05"])
def test_table_rows(version):
    jobs = parse_jobs(queue(version, dict(CASES[1][1])))
    spec = parse_spec(spec_dict())
    data = st.build([], jobs, guarantees=st.guarantee_status(spec, jobs), now=0)
    lines = rendered(data)
    title = lines.index("Floating guarantees (partition floating, beyond them: shared)")
    cells = [[c.strip() for c in re.split("[│┃]", ln)[1:-1]] for ln in lines[title:] if ln[:1] in "│┃"]
    assert cells[:3] == [
        ["project", "guarantee QOS", "guarantee", "in use", "borrowed", "borrowed by tier"],
        ["projd", "guaranteed-projd", "2", "1", "1", "shared 1"],
        ["proje", "guaranteed-proje", f"{H100}:2", f"{H100}:2", "0", "-"],
    ]


def test_table_shows_slurms_text_literally():
    jobs = parse_jobs(queue("26.05", {3: ("projd", "[bold red]x", "shared", A100)}))
    data = st.build([], jobs, guarantees=st.guarantee_status(parse_spec(spec_dict()), jobs), now=0)
    assert any("[bold red]x 1" in ln for ln in rendered(data))


@pytest.mark.parametrize("version", ["22.05", "26.05"])
@pytest.mark.parametrize("name, jobs, projd, proje", CASES, ids=[c[0] for c in CASES])
def test_exporter_gauges_agree_with_status(version, name, jobs, projd, proje):
    r = runner(version, jobs)
    spec = parse_spec(spec_dict())
    reg = CollectorRegistry()
    reg.register(PoolCollector(SlurmClient(r), guarantees=lambda js: st.guarantee_status(spec, js)))
    got = {(s.name, *sorted(s.labels.values())): s.value for fam in reg.collect() for s in fam.samples}
    for want in (projd, proje):
        project = want["project"]
        for key, n in want["guarantee"].items():
            assert got[("slurm_pool_project_guarantee_gpus", key, project)] == n
            assert got[("slurm_pool_project_guarantee_in_use_gpus", key, project)] == want["in_use"][key]
        assert got[("slurm_pool_project_borrowed_gpus", project)] == want["borrowed"]
    assert got[("slurm_pool_up",)] == 1.0


def test_no_guarantee_gauges_without_guarantees():
    r = runner("26.05", {})
    spec = parse_spec(yaml.safe_load((ROOT / "examples" / "pool.yaml").read_text()))
    reg = CollectorRegistry()
    reg.register(PoolCollector(SlurmClient(r), guarantees=lambda js: st.guarantee_status(spec, js)))
    names = {fam.name for fam in reg.collect()}
    assert "slurm_pool_project_allocated_gpus" in names and not any("guarantee" in n for n in names)
