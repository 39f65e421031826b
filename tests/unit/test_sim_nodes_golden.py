"""The node engine's schedules, pinned: seeded workloads replay to the recorded runs exactly.

Each case is a seeded synthetic pool (owners, nobody's nodes, borrowers, MIG
instances, lending) and policy; its golden file under
``tests/golden/sim-nodes-scale/`` holds every run of the schedule (job, tier,
placed, start, end, nodes, outcome, signal, profile) and the replay's counts,
as the engine gave them before its backfill was indexed.  A speed-up of the
engine must change none of them.

Regenerate (only when a schedule is meant to change):
``python -m tests.unit.test_sim_nodes_golden --write``
"""

from __future__ import annotations

import json
import math
import random
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from slurm_pool.sim import backfill as backfill_mod
from slurm_pool.sim.engine import Job
from slurm_pool.sim.freeindex import TimeIndex
from slurm_pool.sim.nodelend import CLASSES, OVERFLOW, LendRule
from slurm_pool.sim.nodes import Node, NodePolicy, NodeResult, simulate_nodes

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "sim-nodes-scale"
LAYOUTS = [("3g.20gb", "3g.20gb"), ("2g.10gb", "2g.10gb", "2g.10gb", "1g.5gb"), ("1g.5gb",) * 7]


@dataclass(frozen=True)
class Case:
    """A seeded pool and workload: ``nodes`` nodes, ``jobs`` jobs offering ``load`` of the GPUs."""

    name: str
    seed: int
    nodes: int
    jobs: int
    load: float
    policy: NodePolicy
    projects: int = 3
    mig: bool = False
    big: bool = True  # jobs larger than one node


def _day(t: float) -> bool:
    return (t // 3600) % 24 < 12


def _demand(t: float) -> float:
    return 16.0 + 8 * ((t // 1800) % 3)


P = NodePolicy
CASES = [
    Case("pool-small", 1, 4, 50, 0.9, P("pool", grace=60, restart_overhead=60)),
    Case("pool-mid", 2, 16, 400, 0.9, P("pool", grace=60, restart_overhead=60)),
    Case("pool-overload", 3, 24, 600, 1.4, P("pool", grace=60, restart_overhead=60)),
    Case("pool-large", 4, 60, 1000, 1.1, P("pool", grace=120, restart_overhead=120)),
    Case(
        "periodic-ckpt", 5, 12, 300, 1.2, P("periodic", grace=30, checkpoint_on_signal=False, checkpoint_interval=900)
    ),
    Case("no-preempt", 6, 20, 500, 1.2, P("no-preempt", preempt=False)),
    Case("dedicated", 7, 20, 400, 0.8, P("dedicated", pooled=False)),
    Case("time-limit", 8, 16, 500, 1.2, P("limit", time_limit=4 * 3600.0)),
    Case("time-limit-tight", 9, 10, 300, 1.3, P("limit", time_limit=2 * 3600.0, grace=30)),
    Case("bf-depth-3", 10, 16, 500, 1.3, P("depth", bf_depth=3)),
    Case("no-backfill", 11, 16, 400, 1.2, P("fifo", backfill=False)),
    Case("bf-interval", 12, 24, 600, 1.2, P("interval", bf_interval=30.0)),
    Case("requeue-delay", 13, 12, 400, 1.3, P("requeue", requeue_delay=121.0, grace=60)),
    Case("release-delay", 14, 16, 400, 1.1, P("release", release_delay=5.0, grace=30)),
    Case("owners-stay", 15, 16, 400, 1.1, P("stay", owners_borrow=False)),
    Case("mig", 16, 12, 500, 1.1, P("mig", grace=60), mig=True),
    Case("mig-limit", 17, 20, 600, 1.2, P("mig-limit", time_limit=3 * 3600.0, release_delay=3.0), mig=True),
    Case("lend", 18, 16, 400, 0.7, P("lend", lend=LendRule(period=300.0))),
    Case(
        "lend-demand",
        19,
        24,
        600,
        0.9,
        P("lend-d", lend=LendRule(period=600.0, window=_day, demand=_demand, max_nodes=6, preemptors=CLASSES)),
    ),
    Case(
        "lend-owners-only",
        20,
        20,
        500,
        1.0,
        P("lend-o", lend=LendRule(period=300.0, preemptors=frozenset({"guaranteed", OVERFLOW}))),
        mig=True,
    ),
    Case("one-project", 21, 8, 300, 1.3, P("one", grace=60), projects=1, big=False),
]


def workload(c: Case) -> tuple[list[Node], list[Job], float]:
    """The case's nodes and jobs, and the replay's window (the last arrival)."""
    rng = random.Random(c.seed)
    owners = [f"p{i}" for i in range(c.projects)]
    nodes = []
    for i in range(c.nodes):
        gpus = rng.choice([4, 8, 8])
        owner = rng.choice([*owners, *owners, None])
        mig = (rng.choice(LAYOUTS),) if c.mig and rng.random() < 0.4 else ()
        nodes.append(Node(f"n{i:03d}", gpus, owner, mig))
    whole = {o: sum(nd.gpus - len(nd.mig) for nd in nodes if nd.owner == o) for o in owners}
    owners = [o for o in owners if whole[o]]
    most: dict[str, int] = {}
    for nd in nodes:
        for lay in nd.mig:
            for p in set(lay):
                most[p] = max(most.get(p, 0), lay.count(p))
    sizes = [1, 1, 1, 2, 2, 4, 8] + ([16, 24] if c.big else [])
    mean_work = 5400.0
    gpus_total = sum(nd.gpus for nd in nodes)
    rate = c.load * gpus_total / (2.5 * mean_work)
    jobs, t = [], 0.0
    for i in range(c.jobs):
        t += rng.expovariate(rate)
        work = round(min(2 * 86400.0, max(60.0, rng.expovariate(1 / mean_work))), 1)
        project = rng.choice(owners) if owners and rng.random() < 0.65 else None
        if most and rng.random() < 0.25:
            profile = rng.choice(sorted(most))
            jobs.append(Job(f"j{i}", project, round(t, 1), work, rng.randint(1, most[profile]), profile))
            continue
        top = (
            whole[project]
            if project is not None
            else sum(whole.values()) + sum(nd.gpus - len(nd.mig) for nd in nodes if nd.owner is None)
        )
        jobs.append(Job(f"j{i}", project, round(t, 1), work, min(rng.choice(sizes), top)))
    return nodes, jobs, jobs[-1].arrival


def record(r: NodeResult) -> dict[str, Any]:
    """Everything a schedule change would show: the runs and the replay's counts."""
    out: dict[str, Any] = {
        "schedule": [
            [p.job, p.tier, p.placed, p.start, p.end, [list(x) for x in p.nodes], p.outcome, p.signalled, p.profile]
            for p in r.schedule
        ],
        "backfilled": r.backfilled,
        "preemptions": r.preemptions,
        "owner_jobs_preempted": r.owner_jobs_preempted,
        "borrower_jobs_done": r.borrower_jobs_done,
        "unfinished_owner_jobs": r.unfinished_owner_jobs,
        "useful_gpu_seconds": r.useful_gpu_seconds,
        "lost_gpu_seconds": r.lost_gpu_seconds,
    }
    if r.lending is not None:
        out["leases"] = [list(x) for x in r.lending.leases]
        out["reclaims"] = r.lending.reclaims
    return out


def replay(c: Case) -> dict[str, Any]:
    nodes, jobs, window = workload(c)
    return json.loads(json.dumps(record(simulate_nodes(nodes, jobs, c.policy, window))))


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_schedules_equal_the_recorded_ones(case):
    expected = json.loads((GOLDEN / f"{case.name}.json").read_text())
    got = replay(case)
    assert got["schedule"] == expected["schedule"]
    assert got == expected


SCANNED = ["pool-overload", "time-limit", "mig", "lend-demand", "bf-interval"]


@pytest.mark.parametrize("case", [c for c in CASES if c.name in SCANNED], ids=SCANNED)
@pytest.mark.parametrize("plain", ["scan every node", "redo every pass", "both"])
def test_the_shortcuts_give_the_plain_schedule(case, plain, monkeypatch):
    """Backfill's time index and its memory of empty passes give what the full scans give."""
    if plain != "redo every pass":
        monkeypatch.setattr(backfill_mod, "_indexed", lambda *a: None)
    if plain != "scan every node":
        monkeypatch.setattr(backfill_mod, "same_idle_pass", lambda *a: False)
    assert replay(case) == json.loads((GOLDEN / f"{case.name}.json").read_text())


def test_the_time_index_orders_as_backfill_picks():
    idx = TimeIndex([0, 1, 2, 3], whole=True, sizes=[4, 8, 8, 4])
    times = {0: 5.0, 1: 5.0, 2: 1.0, 3: -math.inf}
    ver = [0, 0, 0, 0]
    idx.refresh(times.__getitem__, ver)
    assert idx.earliest(ver, 12, 0.0) == ([(-math.inf, 3), (1.0, 2)], False)
    times[2], ver[2] = 9.0, 1  # node 2 changed: only it is recomputed
    idx.dirty.add(2)
    idx.refresh(times.__getitem__, ver)
    assert idx.earliest(ver, 12, 0.0) == ([(-math.inf, 3), (5.0, 1)], False)  # largest first on a tie
    assert idx.earliest(ver, None, 0.0) == ([(-math.inf, 3)], False)
    assert idx.earliest(ver, 100, 0.0) == ([(-math.inf, 3), (5.0, 1), (5.0, 0), (9.0, 2)], False)
    # the clock reached 5: nodes 0 and 1 tie with node 3 (free now), largest first, then by index
    assert idx.earliest(ver, 100, 6.0) == ([(-math.inf, 1), (-math.inf, 0), (-math.inf, 3), (9.0, 2)], True)


def test_the_cases_exercise_the_engine():
    """The recorded replays cover backfill, preemption, MIG and lending (else the pin proves little)."""
    docs = {c.name: json.loads((GOLDEN / f"{c.name}.json").read_text()) for c in CASES}
    assert sum(d["backfilled"] for d in docs.values()) > 500
    assert sum(d["preemptions"] for d in docs.values()) > 200
    assert any(row[8] is not None for d in docs.values() for row in d["schedule"])
    assert sum(d.get("reclaims", 0) for d in docs.values()) > 0
    assert sum(len(d.get("leases", [])) for d in docs.values()) > 20


def main() -> None:
    if sys.argv[1:] != ["--write"]:
        raise SystemExit("usage: python -m tests.unit.test_sim_nodes_golden --write")
    GOLDEN.mkdir(parents=True, exist_ok=True)
    for c in CASES:
        doc = replay(c)
        (GOLDEN / f"{c.name}.json").write_text(json.dumps(doc, separators=(",", ":")) + "\n")
        print(c.name, len(doc["schedule"]), doc["backfilled"], doc["preemptions"], doc.get("reclaims"))


if __name__ == "__main__":
    main()
