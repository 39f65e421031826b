"""Gang jobs as ``status`` and the exporter show them (issue 31): pending gangs, lent groups, their reclaims.

The pure summary is table-driven over Node views and Gangs; the exporter's
families and the status table are read back; one observation through fakes
(a recorded Slurm, :class:`FakeK8s`) shows that the groups come from the
Nodes' marks alone.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from rich.console import Console

from slurm_pool.adapters.runner import RecordingRunner, Result
from slurm_pool.adapters.slurm import SlurmClient
from slurm_pool.bridge.gangs import GANG_JOB, GANG_LABEL, Gang, PodShape
from slurm_pool.bridge.k8sview import LENT_LABEL, RECLAIM_SINCE, K8sNodeView
from slurm_pool.metrics.cli import gang_observer
from slurm_pool.metrics.collector import PoolCollector
from slurm_pool.metrics.gangs import gang_status, gangs_table
from slurm_pool.metrics.status import build, tables
from slurm_pool.metrics.status_cli import gang_part
from slurm_pool.spec import load_spec
from slurm_pool.spec.bridge import Bridge, GangSettings
from slurm_pool.text import control_chars
from tests.support.k8s_fake import FakeK8s

pytestmark = pytest.mark.usefixtures("narrow_from_json")

GPU = "nvidia.com/gpu"
HOSTILE = "[bold red]x[/]\x1b[2J\n"


def node(name: str, group: str = "", job: str = "", reclaim: bool = False) -> K8sNodeView:
    labels = {LENT_LABEL: "true"} if group else {}
    annotations: dict[str, str] = {}
    if group:
        labels[GANG_LABEL] = group
        annotations[GANG_JOB] = job
    if reclaim:
        annotations[RECLAIM_SINCE] = "2026-01-07T02:00:00Z"
    return K8sNodeView(name=name, gpus=2, labels=labels, annotations=annotations)


def gang(name: str, pods: int = 2, gpus: int = 2, phase: str = "Pending", **kw: Any) -> Gang:
    shapes = tuple(PodShape(resources={GPU: gpus}) for _ in range(pods))
    return Gang(namespace="train", name=name, uid=f"uid-{name}", min_member=pods, pods=shapes, phase=phase, **kw)


G1 = gang("pg-a").group
CASES = [
    # (nodes, gangs, plan) -> (pending [(gang, pods, gpus, lent, why)], groups [(group, nodes, reclaiming, intent)])
    ([], [], [], [], []),
    (
        [node("a-gpu1", G1, "train/job-a"), node("a-gpu2", G1, "train/job-a"), node("b-gpu1")],
        [gang("pg-a", phase="Running", running=2)],
        [],
        [],
        [(G1, ["a-gpu1", "a-gpu2"], [], "")],
    ),
    (  # one node of the group taken back: the group is reclaimed as one, the gauge counts the marked node
        [node("a-gpu1", G1, "train/job-a", reclaim=True), node("a-gpu2", G1, "train/job-a")],
        [gang("pg-a", phase="Running", running=2)],
        [{"kind": "lent", "group": G1, "job": "train/job-a", "nodes": ["a-gpu1", "a-gpu2"], "intent": "reclaim"}],
        [],
        [(G1, ["a-gpu1", "a-gpu2"], ["a-gpu1"], "reclaim")],
    ),
    (  # waiting gangs, each counted with its min_member pods' GPUs; an ended or running one is not
        [node("c-gpu1")],
        [
            gang("pg-b", pods=4, gpus=2),
            gang("pg-c", pods=2, gpus=1, phase="Inqueue"),
            gang("pg-d", job="job-d", job_phase="Completed"),
            gang("pg-e", phase="Running", running=2),
        ],
        [{"kind": "pending", "gang": "train/pg-b", "pods": 4, "gpus": 8, "lent": False, "why": "no 4 nodes fit"}],
        [("train/pg-b", 4, 8, False, "no 4 nodes fit"), ("train/pg-c", 2, 2, False, "")],
        [],
    ),
    (  # running below minMember: still waiting; a group already lent for it is said
        [node("a-gpu1", G1, "train/job-a")],
        [gang("pg-a", pods=2, phase="Running", running=1), gang("pg-x", problem="no vcjob")],
        [],
        [("train/pg-a", 2, 4, True, ""), ("train/pg-x", 2, 4, False, "cannot be read whole: no vcjob")],
        [(G1, ["a-gpu1"], [], "")],
    ),
]


@pytest.mark.parametrize("views, gangs, plan, pending, groups", CASES)
def test_gang_status(views, gangs, plan, pending, groups) -> None:
    got = gang_status({v.name: v for v in views}, gangs, GPU, plan)
    assert [(p["gang"], p["pods"], p["gpus"], p["lent"], p["why"]) for p in got["pending"]] == pending
    assert [(g["group"], g["nodes"], g["reclaiming"], g["intent"]) for g in got["groups"]] == groups
    assert got["pending_gpus"] == sum(p[2] for p in pending)
    assert got["nodes_lent"] == sum(len(g[1]) for g in groups)
    assert got["nodes_reclaiming"] == sum(len(g[2]) for g in groups)


def test_gang_metrics() -> None:
    views, gangs = CASES[2][:2]
    status = gang_status({v.name: v for v in views}, gangs, GPU) | {
        "pending": [{"gang": "a"}, {"gang": "b"}],
        "pending_gpus": 6,
    }
    text = scrape(lambda: status)
    for line in (
        "slurm_pool_bridge_gangs_pending 2.0",
        "slurm_pool_bridge_gang_pending_gpus 6.0",
        "slurm_pool_bridge_gang_groups_lent 1.0",
        "slurm_pool_bridge_gang_nodes_lent 2.0",
        "slurm_pool_bridge_gang_nodes_reclaiming 1.0",
        f'slurm_pool_bridge_gang_group_nodes{{group="{G1}",job="train/job-a"}} 2.0',
    ):
        assert "\n" + line + "\n" in text, line


def scrape(read) -> str:
    """One scrape of a collector whose Slurm answers nothing, with ``read`` as its gang reader."""
    runner = RecordingRunner()
    runner.respond(["sinfo"], lambda a, i: Result(a, 1, "", "down"))
    runner.respond(["squeue"], lambda a, i: Result(a, 1, "", "down"))
    reg = CollectorRegistry()
    reg.register(PoolCollector(SlurmClient(runner), gangs=read))
    return generate_latest(reg).decode()


def test_a_failed_gang_read_leaves_a_gap() -> None:
    def read() -> dict[str, Any]:
        raise RuntimeError("API server down")

    text = scrape(read)
    assert "slurm_pool_bridge_gang" not in text
    assert 'slurm_pool_scrape_errors_total{source="kubernetes"} 1.0' in text


def test_no_gangs_reader_no_gang_families() -> None:
    assert "slurm_pool_bridge_gang" not in scrape(None)


def test_hostile_text_is_shown_never_interpreted() -> None:
    """Names from Kubernetes reach the terminal and the exposition without control characters or markup."""
    status = {
        "pending": [{"gang": HOSTILE, "pods": 2, "gpus": 2, "lent": False, "why": HOSTILE}],
        "pending_gpus": 2,
        "groups": [{"group": HOSTILE, "job": HOSTILE, "nodes": [HOSTILE], "reclaiming": [], "intent": ""}],
        "nodes_lent": 1,
        "nodes_reclaiming": 0,
    }
    text = scrape(lambda: status)
    assert not control_chars(text.replace("\n", ""))
    out = render(gangs_table(status))
    assert "[bold red]x[/]" in out and "\x1b" not in out


def render(part: Any) -> str:
    console = Console(width=200, record=True, color_system=None, force_terminal=False)
    with console.capture() as cap:
        console.print(part)
    return cap.get()


@pytest.mark.parametrize(
    "gangs, shown, absent",
    [
        (None, [], ["Gang jobs"]),
        ({"error": "cannot reach Kubernetes: \x1b[31mno"}, ["Gang jobs: cannot reach Kubernetes: "], ["\x1b"]),
        (
            gang_status({"a-gpu1": node("a-gpu1", G1, "train/job-a", reclaim=True)}, [gang("pg-b", 3, 2)], GPU),
            ["Gang jobs (lent groups: 1, nodes: 1, reclaiming: 1; pending: 1, 6 GPUs)", "train/pg-b", "3 pods",
             "a-gpu1 (reclaiming: a-gpu1)", "train/job-a"],
            [],
        ),
    ],
)  # fmt: skip
def test_status_shows_gangs(gangs, shown: list[str], absent: list[str]) -> None:
    data = build([], [], gangs=gangs, now=0.0)
    assert ("gangs" in data) is (gangs is not None)
    assert json.loads(json.dumps(data)) == data
    out = "".join(render(p) for p in tables(data))
    for s in shown:
        assert s in out, s
    for s in absent:
        assert s not in out, s


def test_the_observer_reads_groups_from_the_nodes() -> None:
    """One observation (Slurm and Kubernetes, no plan): the groups and reclaims are the Nodes' marks."""
    k8s = FakeK8s()
    for name, reclaim in (("a-gpu1", False), ("a-gpu2", True)):
        meta = k8s.nodes[name]["metadata"]
        meta["labels"] |= {LENT_LABEL: "true", GANG_LABEL: G1}
        meta["annotations"][GANG_JOB] = "train/job-a"
        if reclaim:
            meta["annotations"][RECLAIM_SINCE] = "2026-01-07T02:00:00Z"
    config = Bridge(timezone="UTC", gangs=GangSettings())
    got = gang_observer(config, k8s)()
    assert [(g["group"], g["job"], g["nodes"], g["reclaiming"]) for g in got["groups"]] == [
        (G1, "train/job-a", ["a-gpu1", "a-gpu2"], ["a-gpu2"])
    ]
    assert (got["nodes_lent"], got["nodes_reclaiming"], got["pending"]) == (2, 1, [])
    assert not k8s.patches and not k8s.commands  # it only reads


@pytest.mark.parametrize("example, want", [("pool.yaml", None), ("pool-gangs.yaml", "error")])
def test_status_reads_gangs_only_with_gangs(tmp_path, example: str, want: str | None) -> None:
    """``status --spec``: no gangs: no Kubernetes read; gangs and no Kubernetes: the failure is shown, not raised."""
    spec = load_spec(Path(__file__).resolve().parents[2] / "examples" / example)
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\n")
    got = gang_part(spec, str(kubeconfig))
    assert (None if got is None else next(iter(got))) == want
    if got is not None:
        assert got["error"].startswith("cannot reach Kubernetes: ") and not control_chars(got["error"])
