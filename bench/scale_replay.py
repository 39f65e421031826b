"""Issue 32's scale cases for the node engine's replay (``simulate --nodes``), per the bench interface.

Each case is 1,000 seeded synthetic 8-GPU nodes (ten projects own 90 each,
100 are nobody's) and seeded jobs, 70 % owners' and 30 % borrowers', GPU
counts 1-32 as ``bench/sim_speed.py`` draws them (mean 4.6), replayed by
:mod:`slurm_pool.sim.nodes` (best fit, backfill, preemption with 60 s
GraceTime and 60 s restarts) until the last arrival and the owners' jobs are
done.  ``--baseline`` replays the same jobs through the GPU-pool engine
(:mod:`slurm_pool.sim.engine`, GPUs interchangeable; nobody's nodes are one
more project), the baseline of the issue's table.

* ``replay-1000n-10000j``, ``replay-1000n-100000j``: ``sim_speed.py``'s jobs
  (mean 2 h, at most 3 days) arriving at 150 % of the GPUs, the overload under
  which the issue measured 14 s and over 23 min: queues grow all through the
  replay, so backfill looks at full windows of waiting jobs at every event.
* ``replay-1000n-year``: a year of arrivals at 85 % of the GPUs, with jobs of
  12 h on average (exponential, clamped to 1 min .. 7 days): 1,203,767 jobs
  with the default seed, the issue's million-record year of history.

Usage (run from the repository root)::

    python3 bench/scale_replay.py --list
    python3 bench/scale_replay.py --generate DIR [--seed N]
    python3 bench/scale_replay.py --case NAME --inputs DIR [--baseline]
"""

from __future__ import annotations

import argparse
import csv
import json
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from slurm_pool.sim.engine import Job, Policy, simulate  # noqa: E402
from slurm_pool.sim.nodes import Node, NodePolicy, simulate_nodes  # noqa: E402

SIZES = (1, 2, 4, 8, 16, 32)
WEIGHTS = (50, 15, 15, 12, 5, 3)
YEAR = 365 * 86400.0
PATH = "simulate --nodes: node engine replay"


@dataclass(frozen=True)
class Case:
    """A workload: ``jobs`` jobs (None: as many as arrive in ``until`` seconds) at ``load`` of the GPUs."""

    name: str
    jobs: int | None
    load: float
    mean_work: float
    max_work: float
    until: float | None = None


CASES = {
    c.name: c
    for c in (
        Case("replay-1000n-10000j", 10_000, 1.5, 7200.0, 3 * 86400.0),
        Case("replay-1000n-100000j", 100_000, 1.5, 7200.0, 3 * 86400.0),
        Case("replay-1000n-year", None, 0.85, 12 * 3600.0, 7 * 86400.0, until=YEAR),
    )
}


def cluster(n_nodes: int = 1000, projects: int = 10) -> list[Node]:
    """``n_nodes`` 8-GPU nodes; each project owns 9 % of them, the rest are nobody's (as sim_speed.py)."""
    per = n_nodes * 9 // 100
    return [Node(f"n{i:05d}", 8, f"p{i // per}" if i < per * projects else None) for i in range(n_nodes)]


def workload(c: Case, nodes: list[Node], seed: int) -> list[Job]:
    """Seeded jobs (the same draws as sim_speed.py's for its mean and cap)."""
    rng = random.Random(seed)
    owners = sorted({nd.owner for nd in nodes if nd.owner is not None})
    mean_gpus = sum(s * w for s, w in zip(SIZES, WEIGHTS, strict=True)) / sum(WEIGHTS)
    rate = c.load * sum(nd.gpus for nd in nodes) / (mean_gpus * c.mean_work)  # arrivals per second
    out: list[Job] = []
    t = 0.0
    while c.jobs is None or len(out) < c.jobs:
        t += rng.expovariate(rate)
        if c.until is not None and t > c.until:
            break
        project = rng.choice(owners) if rng.random() < 0.7 else None
        work = min(c.max_work, max(60.0, rng.expovariate(1 / c.mean_work)))
        out.append(Job(f"j{len(out)}", project, round(t, 1), round(work, 1), rng.choices(SIZES, WEIGHTS)[0]))
    return out


def generate(root: Path, seed: int) -> None:
    """Per case, ``NAME.nodes.json`` (name, GPUs, owner) and ``NAME.jobs.csv`` (id, project, arrival, work,
    GPUs; read line by line, so a replay's peak memory is not a parsed document's)."""
    root.mkdir(parents=True, exist_ok=True)
    nodes = cluster()
    for c in CASES.values():
        path = root / f"{c.name}.jobs.csv"
        if path.exists():
            continue
        jobs = workload(c, nodes, seed)
        (root / f"{c.name}.nodes.json").write_text(json.dumps([[nd.name, nd.gpus, nd.owner] for nd in nodes]))
        tmp = path.with_suffix(".tmp")
        with tmp.open("w", newline="") as fh:
            w = csv.writer(fh)
            for j in jobs:
                w.writerow([j.id, j.project or "", repr(j.arrival), repr(j.work), j.gpus])
        tmp.replace(path)


def read_jobs(path: Path) -> list[Job]:
    with path.open(newline="") as fh:
        return [Job(i, p or None, float(a), float(w), int(g)) for i, p, a, w, g in csv.reader(fh)]


def run(name: str, inputs: Path, baseline: bool) -> dict[str, object]:
    nodes = [Node(n, g, o) for n, g, o in json.loads((inputs / f"{name}.nodes.json").read_text())]
    jobs = read_jobs(inputs / f"{name}.jobs.csv")
    window = jobs[-1].arrival
    size = f"{len(nodes):,} nodes, {len(jobs):,} jobs ({window / 86400:,.1f} days)"
    out: dict[str, object] = {"case": name, "path": PATH, "size": size, "baseline": baseline}
    if baseline:
        capacity: dict[str, int] = {}
        for nd in nodes:  # the GPU-pool engine has no unowned servers: nobody's nodes are one more project
            capacity[nd.owner or "unowned"] = capacity.get(nd.owner or "unowned", 0) + nd.gpus
        t = time.perf_counter()
        r = simulate(capacity, jobs, Policy("pool", grace=60.0, restart_overhead=60.0), window)
        out["seconds"] = round(time.perf_counter() - t, 3)
        out["note"] = "the GPU-pool engine (slurm_pool.sim.engine) on the same jobs"
    else:
        t = time.perf_counter()
        r = simulate_nodes(nodes, jobs, NodePolicy("pool-nodes", grace=60.0, restart_overhead=60.0), window)
        out["seconds"] = round(time.perf_counter() - t, 3)
        out["runs"] = len(r.schedule)
        out["backfilled"] = r.backfilled
    out["preemptions"] = r.preemptions
    out["utilization"] = round(r.utilization, 4)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--list", action="store_true", help="print the case names")
    ap.add_argument("--generate", type=Path, metavar="DIR", help="write every case's inputs under DIR")
    ap.add_argument("--seed", type=int, default=12)
    ap.add_argument("--case", choices=sorted(CASES))
    ap.add_argument("--inputs", type=Path, metavar="DIR")
    ap.add_argument("--baseline", action="store_true", help="time the GPU-pool engine on the same jobs")
    args = ap.parse_args()
    if args.list:
        print("\n".join(CASES))
    elif args.generate is not None:
        generate(args.generate, args.seed)
    elif args.case is not None and args.inputs is not None:
        print(json.dumps(run(args.case, args.inputs, args.baseline)))
    else:
        ap.error("give --list, --generate DIR, or --case NAME --inputs DIR")
    return 0


if __name__ == "__main__":
    sys.exit(main())
