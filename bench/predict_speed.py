"""How fast start times are predicted for a large live queue, against a plain replay of the same queue.

A seeded synthetic pool of 1,000 8-GPU nodes (ten projects own 90 nodes
each, 100 are nobody's), about 90 % of its GPUs held by running jobs (owners'
on their nodes, borrowers' anywhere), and 10,000 pending jobs (40 % owners',
60 % borrowers'; 1-32 GPUs), 200 users each with two runs of history.

* **predict all**: :func:`slurm_pool.predict.forward.predict`, a start for
  every pending job (the expected run and the late run for the range);
* **why, one job**: :func:`slurm_pool.predict.explain.explain` for one pending
  borrower on that cached forecast, with its alternatives (one forward run each);
* **baseline**: :func:`slurm_pool.sim.nodes.simulate_nodes` replaying the same
  jobs as arrivals at time 0 (running ones first), in the same process.

Goals (issue 29): predict all under 5 s, one job's why under 1 s.
Prints a markdown section and writes it to bench/results/predict_speed.md.

Run from the repository root:  python3 bench/predict_speed.py [--nodes 1000 --pending 10000]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from timing import emit  # noqa: E402

from slurm_pool.predict.explain import explain  # noqa: E402
from slurm_pool.predict.forward import LiveJob, predict  # noqa: E402
from slurm_pool.predict.pool import PoolModel, Queue  # noqa: E402
from slurm_pool.predict.runtimes import Finished, Runtimes  # noqa: E402
from slurm_pool.sim.engine import BORROWED, GUARANTEED, Job  # noqa: E402
from slurm_pool.sim.history import MigNodes  # noqa: E402
from slurm_pool.sim.nodes import Node, NodePolicy, simulate_nodes  # noqa: E402

OUT = ROOT / "bench" / "results" / "predict_speed.md"
SIZES = (1, 2, 4, 8, 16, 32)
WEIGHTS = (50, 15, 15, 12, 5, 3)
NOW = 1_800_000_000.0


def pool_of(n_nodes: int, projects: int = 10) -> PoolModel:
    per = n_nodes * 9 // 100
    nodes = tuple(Node(f"n{i:05d}", 8, f"p{i // per}" if i < per * projects else None) for i in range(n_nodes))
    queues = {
        f"p{k}-owner": Queue(f"p{k}-owner", "guaranteed", GUARANTEED, f"p{k}", 100, None, None, 0.0, False)
        for k in range(projects)
    }
    queues["shared"] = Queue("shared", "shared", BORROWED, None, 50, 2 * 86400.0, None, 60.0, True)
    return PoolModel(
        nodes=nodes,
        queues=queues,
        preempts={"guaranteed": frozenset({"shared"}), "shared": frozenset()},
        project_tiers={f"p{k}": ("guaranteed", "shared") for k in range(projects)},
        allowed={name: frozenset({q.owner}) if q.owner else None for name, q in queues.items()},
        lend_partition=None,
        lend_preemptors=frozenset(),
        bf_interval=30.0,
        mig=MigNodes((), {}, {}, 0),
    )


def live_state(pool: PoolModel, pending: int, seed: int) -> tuple[list[LiveJob], Runtimes]:
    rng = random.Random(seed)
    users = [(f"u{i:03d}", f"p{i % 10}") for i in range(200)]
    jobs: list[LiveJob] = []
    jid = 1
    for nd in pool.nodes:  # fill each node to about 90 %
        free = 8
        while free > 1 or (free == 1 and rng.random() < 0.8):
            g = min(free, rng.choice((1, 1, 2, 4, 8)))
            user, project = rng.choice(users)
            owner = nd.owner is not None and nd.owner == project or (nd.owner is not None and rng.random() < 0.6)
            project = nd.owner if owner and nd.owner else project
            part = f"{project}-owner" if owner else "shared"
            limit = rng.choice((3600.0, 4 * 3600.0, 86400.0))
            jobs.append(LiveJob(jid, user, project, part, "running", g, nodes=((nd.name, g),), priority=100,
                                submit=NOW - 7200, start=NOW - rng.uniform(0, 3600), limit=limit))  # fmt: skip
            jid += 1
            free -= g
    for _ in range(pending):
        user, project = rng.choice(users)
        g = rng.choices(SIZES, WEIGHTS)[0]
        owner = rng.random() < 0.4
        g = min(g, 8) if owner else g
        part = f"{project}-owner" if owner else "shared"
        jobs.append(LiveJob(jid, user, project, part, "pending", g, priority=rng.randrange(1000, 20000),
                            submit=NOW - rng.uniform(0, 86400), limit=rng.choice((3600.0, 4 * 3600.0, 86400.0)),
                            reason="Priority"))  # fmt: skip
        jid += 1
    hist = [
        Finished(u, part, g, NOW - 10_000 + k, rng.expovariate(1 / 3600))
        for k, (u, p) in enumerate(users)
        for part in (f"{p}-owner", "shared")
        for g in SIZES
        for _ in range(2)
    ]
    return jobs, Runtimes(hist)


def baseline(pool: PoolModel, jobs: list[LiveJob]) -> float:
    """A plain replay of the same queue to its end: every job arrives at 0, running ones first, each for its limit."""
    eng = []
    for j in sorted(jobs, key=lambda j: (j.state != "running", -j.priority)):
        q = pool.queues[j.partition]
        project = q.owner if q.engine_tier == GUARANTEED else None
        eng.append(Job(str(j.job_id), project, 0.0, j.limit or 3600.0, j.gpus))
    policy = NodePolicy("plain", grace=pool.grace, owners_borrow=False, bf_interval=pool.bf_interval)
    t = time.perf_counter()
    simulate_nodes(pool.nodes, eng, policy, 30 * 86400.0)
    return time.perf_counter() - t


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--pending", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    pool = pool_of(args.nodes)
    jobs, runtimes = live_state(pool, args.pending, args.seed)
    running = sum(j.state == "running" for j in jobs)
    base, full, one = [], [], []
    for _ in range(args.repeat):
        base.append(baseline(pool, jobs))
        t = time.perf_counter()
        fc = predict(pool, jobs, runtimes, NOW)
        full.append(time.perf_counter() - t)
        target = next(j for j in jobs if j.state == "pending" and j.partition == "shared" and j.gpus == 8)
        t = time.perf_counter()
        ex = explain(fc, target.job_id)
        one.append(time.perf_counter() - t)
    got = sum(p.start is not None for p in fc.predictions.values())
    b = statistics.median(base)
    rows = [("plain replay of the same queue (baseline)", base), ("predict every pending job", full),
            ("why for one job, with alternatives", one)]  # fmt: skip
    cmd = f"python3 bench/predict_speed.py --nodes {args.nodes} --pending {args.pending} --repeat {args.repeat}"
    lines = [
        "## Start-time prediction speed (issue 29)",
        "",
        f"Command: `{cmd}`.  {args.nodes} 8-GPU nodes, {running} running jobs, {args.pending} pending jobs; "
        f"{got} of them got a predicted start; the `why` tried {len(ex.alternatives)} alternatives.  Goals: every "
        "pending job under 5 s, one job's why under 1 s.",
        "",
        "| what | median s | min s | ratio to baseline |",
        "|---|---|---|---|",
    ]
    for label, xs in rows:
        lines.append(f"| {label} | {statistics.median(xs):.2f} | {min(xs):.2f} | {statistics.median(xs) / b:.2f} |")
    emit(lines, OUT)
    return 0


if __name__ == "__main__":
    sys.exit(main())
