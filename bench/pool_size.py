"""How many GPUs does the pool need?  `slurm-pool simulate --size` on five mixes of Philly virtual clusters.

Each mix names the virtual clusters that own servers (8-GPU servers, sized
so that the owner's own jobs keep them at a target utilisation, as
``bench/pool_sim.py`` does) and those that only borrow.  For each mix,
``slurm_pool.sim.sizing`` replays 30 days on the node engine (best fit, whole
nodes, backfill, preempt/qos with GraceTime): first dedicated servers (the
baseline), then the pool with checkpoint-on-preempt on every nested size from
all servers down to each owner's floor.  The answer is the smallest size whose
owners' p95 wait is no worse than on dedicated servers and whose borrowers get
as many jobs done inside the window as on all servers.  The GPU engine
(GPUs interchangeable) gives a second answer in the same run, for comparison.

Writes bench/results/pool_size.md and bench/results/pool_size/sizing.png.

Run from the repository root:  python3 bench/pool_size.py
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import pool_sim  # noqa: E402  (its workload: the same traces, servers and runtime draws)

from slurm_pool.sim import workload as wl  # noqa: E402
from slurm_pool.sim.engine import standard_policies  # noqa: E402
from slurm_pool.sim.nodes import Node  # noqa: E402
from slurm_pool.sim.report import sizing_curves  # noqa: E402
from slurm_pool.sim.sizing import Sizing, gpu_replay, node_replay, size_pool  # noqa: E402

OUT = ROOT / "bench" / "results" / "pool_size.md"
PLOT = ROOT / "bench" / "results" / "pool_size" / "sizing.png"
SERVER_GPUS = 8

# (label, owners: project -> (virtual cluster, own utilisation), borrower virtual clusters)
MIXES: list[tuple[str, dict[str, tuple[str, float]], tuple[str, ...]]] = [
    ("3 owners (20/35/50 %), no borrowers", pool_sim.OWNERS, ()),
    ("6 owners at 30 %, no borrowers", {vc: (vc, 0.30) for vc in (*(v for v, _ in pool_sim.OWNERS.values()), *pool_sim.BORROWERS)}, ()),
    ("4 owners at 30 %, 2 borrowers", {vc: (vc, 0.30) for vc in ("0e4a51", "103959", "b436b2", "6c71a0")}, ("ed69ec", "2869ce")),
    ("3 owners (20/35/50 %), 2 small borrowers", pool_sim.OWNERS, ("ed69ec", "2869ce")),
    ("3 owners (20/35/50 %), 3 borrowers (pool_sim's mix)", pool_sim.OWNERS, pool_sim.BORROWERS),
]  # fmt: skip


def servers(capacity: dict[str, int]) -> list[Node]:
    return [Node(f"{p}-{i}", SERVER_GPUS, p) for p, gpus in capacity.items() for i in range(gpus // SERVER_GPUS)]


def cell_ratio(sz: Sizing) -> str:
    return f"{sz.ratio:.2f}" if sz.ratio is not None else "none passes"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--days", type=float, default=30.0)
    ap.add_argument("--grace", type=float, default=120.0, help="GraceTime, seconds")
    args = ap.parse_args()
    window = args.days * wl.DAY
    policy = next(p for _, p in standard_policies(args.grace, 1800.0, 120.0) if p.name == "pool-checkpoint-on-preempt")
    rows, curves = [], []
    t0 = time.monotonic()
    for label, owners, borrowers in MIXES:
        capacity, owner_jobs, borrower_jobs, _, _, _ = pool_sim.workload(window, owners, borrowers)
        jobs = owner_jobs + borrower_jobs
        nodes = servers(capacity)
        on_nodes = size_pool(nodes, jobs, policy, window, node_replay(jobs, window))
        on_gpus = size_pool(nodes, jobs, policy, window, gpu_replay(jobs, window))
        rows.append((label, len(owner_jobs), len(borrower_jobs), on_nodes, on_gpus))
        curves.append((label, on_nodes))
    elapsed = time.monotonic() - t0
    ratios = [sz.ratio for _, _, _, sz, _ in rows if sz.ratio is not None]
    busy = [sz.best.result.utilization for _, _, _, sz, _ in rows if sz.best is not None]
    lines = [
        "## Pool sizing: how many GPUs the pool needs (issue 12)",
        "",
        f"Command: `python3 bench/pool_size.py` (30 days, GraceTime {args.grace:.0f} s, checkpoint-on-preempt, "
        "8-GPU servers).  Traces as in the pool simulator above.  `slurm_pool.sim.sizing` (what "
        "`slurm-pool simulate --size` runs) takes servers away one at a time, from the owner that keeps the "
        "largest share of its own, down to one server per owner (or as many as its biggest job needs).  A size "
        "passes when the owners' p95 wait is no worse than on their dedicated servers and the borrowers get as "
        "many jobs done inside the window as on all servers.  Ratios are GPUs needed over dedicated GPUs, "
        "from the same run.",
        "",
        "| mix | owner / borrower jobs | dedicated GPUs | busy on dedicated | GPUs needed (nodes) | **ratio** | "
        "busy at that size | owners' p95 dedicated -> pool (s) | preemptions | lost + grace GPU-h | "
        "ratio, GPUs interchangeable | what stops a smaller pool (nodes) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for label, n_owner, n_borrower, sz, flat in rows:
        best = sz.best
        if best is None:
            at = "- | **none passes** | - | - | - | -"
        else:
            r = best.result
            at = (
                f"{best.gpus} | **{sz.ratio:.2f}** | {r.utilization:.1%} | "
                f"{sz.target_p95:,.0f} -> {r.wait_quantile(0.95):,.0f} | {r.preemptions:,} | "
                f"{(r.lost_gpu_seconds + r.grace_gpu_seconds + r.restart_gpu_seconds) / 3600:,.0f}"
            )
        lines.append(
            f"| {label} | {n_owner:,} / {n_borrower:,} | {sz.dedicated_gpus} | {sz.baseline.utilization:.1%} | "
            f"{at} | {cell_ratio(flat)} | {sz.limit} |"
        )
    span = f"{min(ratios):.2f}-{max(ratios):.2f}" if ratios else "none"
    lines += [
        "",
        f"Across the mixes the pool needs **{span}** of the dedicated GPUs and runs "
        f"{min(busy):.0%}-{max(busy):.0%} busy at that size."
        if busy
        else "No mix has a passing size.",
        "",
        "Against the pool's promise (half the GPUs, 70-80 % busy): with owners alone the pool saves GPUs, but "
        "fewer than half of them, and the owners' p95 rises past their dedicated one (or an owner reaches its floor) "
        "while the pool is still well under 70 % busy.  An owner's floor is set by its biggest job, because the "
        "simulator runs an owner's job only if it fits the owner's own servers.  Borrowers add work the dedicated "
        "servers never did; keeping all of that work done leaves little or nothing to take away.  The "
        "interchangeable-GPU engine is the optimistic bound: node packing costs the difference.",
        "",
        f"[GPUs needed vs owners' p95, every size tried]({PLOT.relative_to(ROOT).as_posix()}) (the dots are the "
        f"answers).  All {2 * len(rows)} sizings took {elapsed:.1f} s.",
        "",
    ]
    PLOT.parent.mkdir(parents=True, exist_ok=True)
    sizing_curves(curves, PLOT)
    text = "\n".join(lines)
    print(text)
    OUT.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
