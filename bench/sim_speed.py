"""How fast the node engine replays a large synthetic workload, against the old engine.

100,000 seeded synthetic jobs on 1,000 8-GPU nodes: ten projects own 90
nodes each, 100 nodes belong to nobody.  70 % of the jobs are owners' (split
evenly across the projects), 30 % borrowers'.  GPU counts 1, 2, 4, 8, 16, 32
with weights 50, 15, 15, 12, 5, 3 %; durations exponential (mean 2 h,
clamped to 1 min .. 3 days); Poisson arrivals sized for ``--load`` of the
GPUs.  The same jobs run through :mod:`slurm_pool.sim.nodes` (best fit,
backfill, preemption with 60 s GraceTime) and, as the baseline in the same
run, :mod:`slurm_pool.sim.engine` (GPUs interchangeable per project); the
ratio node/old is what to compare across machines.

Prints a markdown section and writes it to bench/results/sim_speed.md.

Run from the repository root:  python3 bench/sim_speed.py
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from slurm_pool.sim.engine import Job, Policy, simulate  # noqa: E402
from slurm_pool.sim.nodes import Node, NodePolicy, simulate_nodes  # noqa: E402

OUT = ROOT / "bench" / "results" / "sim_speed.md"
SIZES = (1, 2, 4, 8, 16, 32)
WEIGHTS = (50, 15, 15, 12, 5, 3)
MEAN_WORK = 7200.0


def cluster(n_nodes: int, projects: int) -> list[Node]:
    """``n_nodes`` 8-GPU nodes; each project owns 9 % of them, the rest are nobody's."""
    per = n_nodes * 9 // 100
    return [Node(f"n{i:05d}", 8, f"p{i // per}" if i < per * projects else None) for i in range(n_nodes)]


def jobs(n: int, nodes: list[Node], load: float, seed: int) -> list[Job]:
    """Seeded synthetic jobs offering ``load`` of the nodes' GPUs."""
    rng = random.Random(seed)
    owners = sorted({nd.owner for nd in nodes if nd.owner is not None})
    mean_gpus = sum(s * w for s, w in zip(SIZES, WEIGHTS, strict=True)) / sum(WEIGHTS)
    gpus = sum(nd.gpus for nd in nodes)
    rate = load * gpus / (mean_gpus * MEAN_WORK)  # arrivals per second
    out, t = [], 0.0
    for i in range(n):
        t += rng.expovariate(rate)
        project = rng.choice(owners) if rng.random() < 0.7 else None
        work = min(3 * 86400.0, max(60.0, rng.expovariate(1 / MEAN_WORK)))
        out.append(Job(f"j{i}", project, round(t, 1), round(work, 1), rng.choices(SIZES, WEIGHTS)[0]))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--jobs", type=int, default=100_000)
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--load", type=float, default=0.85, help="offered load, a share of the GPUs")
    ap.add_argument("--seed", type=int, default=12)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    if args.nodes < 12:
        ap.error(f"--nodes {args.nodes}: at least 12 (ten projects own 9 % each)")
    nodes = cluster(args.nodes, 10)
    work = jobs(args.jobs, nodes, args.load, args.seed)
    window = work[-1].arrival
    capacity: dict[str, int] = {}
    for nd in nodes:
        if nd.owner is not None:
            capacity[nd.owner] = capacity.get(nd.owner, 0) + nd.gpus
    old_jobs = work
    if any(nd.owner is None for nd in nodes):  # the old engine has no unowned servers: give them to a project
        capacity["unowned"] = sum(nd.gpus for nd in nodes if nd.owner is None)
    pol = Policy("pool", grace=60.0, restart_overhead=60.0)

    t = time.perf_counter()
    old = simulate(capacity, old_jobs, pol, window)
    t_old = time.perf_counter() - t
    t = time.perf_counter()
    new = simulate_nodes(nodes, work, NodePolicy("pool-nodes", grace=60.0, restart_overhead=60.0), window)
    t_new = time.perf_counter() - t

    cmd = "python3 bench/sim_speed.py" + "".join(
        f" --{k} {v}"
        for k, v, d in (("jobs", args.jobs, 100_000), ("nodes", args.nodes, 1000), ("load", args.load, 0.85))
        if v != d
    )
    cmd += f" --seed {args.seed}" if args.seed != 12 else ""
    lines = [
        "## Simulator speed: node engine vs the GPU-pool engine",
        "",
        f"{args.jobs:,} seeded synthetic jobs (seed {args.seed}, offered load {args.load:.0%}) on "
        f"{args.nodes:,} 8-GPU nodes (ten projects own 9 % each, the rest nobody), "
        f"{window / 86400:.1f} days of arrivals; both engines replay the same jobs with 60 s GraceTime.",
        "",
        "| Engine | Seconds | Ratio to baseline | Utilisation | Owner wait p95 | Preemptions | Backfilled |",
        "|---|---:|---:|---:|---:|---:|---:|",
        f"| GPU pool, GPUs interchangeable (baseline) | {t_old:.1f} | 1.00 | {old.utilization:.1%} | "
        f"{old.wait_quantile(0.95):,.0f} s | {old.preemptions:,} | - |",
        f"| nodes: best fit, backfill, preemption | {t_new:.1f} | **{t_new / t_old:.2f}** | "
        f"{new.utilization:.1%} | {new.wait_quantile(0.95):,.0f} s | {new.preemptions:,} | {new.backfilled:,} |",
        "",
        f"The node engine replays {args.jobs / t_new:,.0f} jobs per second here "
        f"({len(new.schedule):,} runs in its schedule). The old engine has no unowned servers, so it "
        "counts the nobody's nodes as one more project with no jobs.",
        "",
        f"Command: `{cmd}`",
        "",
    ]
    text = "\n".join(lines)
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)


if __name__ == "__main__":
    main()
