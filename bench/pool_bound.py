"""The pool's answer beside a lower bound: `simulate --compare`'s owners' bar on bench/pool_size.py's mixes.

For each of ``bench/pool_size.py``'s five Philly mixes (the same servers, jobs,
runtime draws and off-peak lending), ``slurm_pool.sim.sizing_compare`` sizes
the three designs twice in one run: under the bar before issue 48 (the
dedicated p95 exactly, on every draw: ``slack=0, confidence=1``, the baseline)
and under the site's bar (dedicated p95 plus one GraceTime, ``--slack``, on
``--confidence`` of the draws).  Beside each answer: the lower bound of
``slurm_pool.sim.bound`` (the fewest GPUs on which any schedule, knowing every
runtime, keeps the same bar on the same owner jobs), the answer's ratio to it,
the share of draws passing, owners' p95 per project and busy with and without
lending.

Writes bench/results/bound.md.  Run from the repository root:
python3 bench/pool_bound.py [--draws 3] [--confidence 0.9]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import pool_sim  # noqa: E402
import pool_size  # noqa: E402  (its mixes, servers and lending)

from slurm_pool.sim import workload as wl  # noqa: E402
from slurm_pool.sim.engine import standard_policies  # noqa: E402
from slurm_pool.sim.sizing_compare import Comparison, compare, draws_needed  # noqa: E402

OUT = ROOT / "bench" / "results" / "bound.md"


def cells(c: Comparison, name: str) -> str:
    d = c.design(name)
    bound = c.bound
    if d.chosen is None:
        return f"none passes | {bound} | - | - | - | - | - |"
    f = d.figures(d.chosen)
    per = ", ".join(f"{p} {v:,.0f}" for p, v in f["owner_wait_p95_seconds_per_project"].items())
    ratio = f"{f['gpus'] / bound:.2f}" if bound else "-"
    return (
        f"{f['gpus']} ({f['gpus'] / d.dedicated_gpus:.2f}) | {bound} | **{ratio}** | {f['draws_passing_share']:.0%} | "
        f"{f['utilization']:.1%} / {f['busy_with_lent']:.1%} | {f['owner_jobs_preempted']:g} | {per} |"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--days", type=float, default=30.0)
    ap.add_argument("--grace", type=float, default=120.0, help="GraceTime, seconds")
    ap.add_argument("--draws", type=int, default=3)
    ap.add_argument("--confidence", type=float, default=0.9)
    ap.add_argument("--slack", type=float, default=None, help="seconds over the dedicated p95 [default: --grace]")
    ap.add_argument("--only", type=int, default=None, help="only the n-th mix (0-based), for a quick run")
    ap.add_argument("--out", type=Path, default=OUT, help="the Markdown file written")
    args = ap.parse_args()
    slack = args.grace if args.slack is None else args.slack
    window = args.days * wl.DAY
    policy = next(p for _, p in standard_policies(args.grace, 1800.0, 120.0) if p.name == "pool-checkpoint-on-preempt")
    rule = pool_size.lend_rule()
    mixes = pool_size.MIXES if args.only is None else [pool_size.MIXES[args.only]]
    rows = []
    t0 = time.monotonic()
    for label, owners, borrowers in mixes:
        capacity, owner_jobs, borrower_jobs, _, _, sampler = pool_sim.workload(window, owners, borrowers)
        jobs = owner_jobs + borrower_jobs
        runtimes = [min(sampler.hi, max(sampler.lo, v)) for v in sampler.values]
        nodes = pool_size.servers(capacity)
        common = dict(draws=args.draws, runtimes=runtimes, lend=rule)
        old = compare(nodes, jobs, policy, window, slack=0.0, confidence=1.0, **common)  # type: ignore[arg-type]
        new = compare(nodes, jobs, policy, window, slack=slack, confidence=args.confidence, **common)  # type: ignore[arg-type]
        rows.append((label, old, new))
        print(f"{label}: done at {time.monotonic() - t0:.0f} s", file=sys.stderr, flush=True)
    elapsed = time.monotonic() - t0
    load = os.getloadavg()
    flags = (
        "".join(
            f" --{k} {v:g}"
            for k, v, default in (
                ("days", args.days, 30),
                ("draws", args.draws, 3),
                ("confidence", args.confidence, 0.9),
            )
            if v != default
        )
        + (f" --slack {slack:g}" if args.slack is not None else "")
        + (f" --only {args.only}" if args.only is not None else "")
        + (f" --out {args.out}" if args.out.resolve() != OUT else "")
    )
    need = draws_needed(args.draws, args.confidence)
    lines = [
        "## The pool's answer beside a lower bound (issue 48)",
        "",
        f"Command: `python3 bench/pool_bound.py{flags}` ({args.days:g} days, GraceTime {args.grace:.0f} s, "
        f"{args.draws} runtime draws, the mixes, servers and off-peak lending of `bench/pool_size.py`).  Each mix "
        "is sized twice in the same run: **before** (the baseline: owners' p95 no worse than the dedicated "
        f"servers' on the same draw, on every draw) and **site bar** (dedicated p95 + {slack:g} s, one GraceTime, "
        f"on at least {need} of {args.draws} draws, confidence {args.confidence:g}).  GPUs: the answer (ratio to "
        "dedicated); bound: the fewest GPUs on which any schedule, knowing every runtime, keeps the same bar on "
        "the same owner jobs (`slurm_pool/sim/bound.py`; per draw, then the "
        f"{need}-th smallest; docs/guarantees.md); **answer / bound**; the share of draws passing at the answer; "
        "busy: Slurm's jobs / + lent to inference; owner jobs preempted at the answer (mean over draws: the "
        "bound covers schedules that never preempt a started owner job); owners' p95 per project at the answer "
        "(s, worst draw).",
        "",
        "| mix | bar | design | GPUs (ratio) | bound | **answer / bound** | draws passing | busy: Slurm / + lent "
        "| owner jobs preempted | owners' p95 per project (s) |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for label, old, new in rows:
        for bar, c in (("before", old), ("site bar", new)):
            for name in ("owned", "floating"):
                lines.append(f"| {label} | {bar} | {name} | {cells(c, name)}")
    lines += ["", "Bounds per draw (GPUs) and dedicated GPUs:", ""]
    for label, old, new in rows:
        lines.append(
            f"- {label}: {old.designs[0].dedicated_gpus} dedicated; bound before {list(old.bounds)}, "
            f"site bar {list(new.bounds)}; bar before {[round(t) for t in old.targets]} s, "
            f"site bar {[round(t) for t in new.targets]} s"
        )
    for bar, k in (("before", 1), ("site bar", 2)):
        said = []
        for name in ("owned", "floating"):
            got = [
                c.design(name).gpus[c.design(name).chosen] / c.bound
                for c in (row[k] for row in rows)
                if c.design(name).chosen is not None and c.bound
            ]
            said.append(f"{name} {min(got):.2f}-{max(got):.2f}" if got else f"{name} -")
        lines.append(f"- answer / bound, {bar}: " + ", ".join(said))
    lines += [
        "",
        "The p95 bar says nothing of the 5 % of owner jobs that wait longest, and every owner job only has to "
        "end at some time: a schedule may leave the heaviest of them for later, so the bound is what the bar "
        "allows, which can be far below what a design that also serves those jobs needs.",
    ]
    lines += [
        "",
        f"All {len(rows)} mixes x 2 bars took {elapsed:.0f} s (load average {load[0]:.1f} / {load[1]:.1f} / "
        f"{load[2]:.1f}, a shared 2-core machine).",
    ]
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
