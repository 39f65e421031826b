"""How many GPUs does the pool need?  `slurm-pool simulate --nodes --size --compare` on five Philly mixes.

Each mix names the virtual clusters that own servers (8-GPU servers, sized
so that the owner's own jobs keep them at a target utilisation, as
``bench/pool_sim.py`` does) and those that only borrow.  For each mix,
``slurm_pool.sim.sizing_compare`` replays 30 days on the node engine (best
fit, whole nodes, backfill, preempt/qos with GraceTime, checkpoint-on-preempt)
in three designs: dedicated servers (the baseline), owned nodes (servers taken
away down to each owner's floor) and floating guarantees (nobody owns a node,
each owner is guaranteed its dedicated GPUs anywhere; servers taken away down
to the biggest job).  Each replay runs over several runtime draws (Philly
runtimes redrawn per seed; seed 0 is pool_sim's draw), and the off-peak
lending of ``examples/pool.yaml``'s bridge is on in every replay (``--no-lend``).
A size's borrowers may fall short of the full pool's jobs done inside the
window by ``--borrower-tolerance`` (1 %): one job ending a second late does
not decide a size.  Each answer shows its offered load (the jobs' GPU time in
the window over the size's), which bounds Slurm's busy from above.

Writes bench/results/pool_size.md and bench/results/pool_size/sizing.png.

Run from the repository root:  python3 bench/pool_size.py [--draws 3] [--borrower-tolerance 0.01]
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import pool_sim  # noqa: E402  (its workload: the same traces, servers and runtime draws)

from slurm_pool.bridge.windows import off_peak  # noqa: E402
from slurm_pool.sim import workload as wl  # noqa: E402
from slurm_pool.sim.engine import GUARANTEED, standard_policies  # noqa: E402
from slurm_pool.sim.nodelend import OVERFLOW, LendRule  # noqa: E402
from slurm_pool.sim.nodes import Node  # noqa: E402
from slurm_pool.sim.report import design_curves  # noqa: E402
from slurm_pool.sim.sizing import BORROWER_TOLERANCE, borrowers_done_in_window, check_tolerance  # noqa: E402
from slurm_pool.sim.sizing_compare import Comparison, Design, compare  # noqa: E402
from slurm_pool.spec import load_spec  # noqa: E402

OUT = ROOT / "bench" / "results" / "pool_size.md"
PLOT = ROOT / "bench" / "results" / "pool_size" / "sizing.png"
SERVER_GPUS = 8
PROMISE_RATIO, PROMISE_BUSY = 0.5, 0.70

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


def lend_rule() -> LendRule:
    """pool_sim's node lending: the example's off-peak window, owners take lent nodes back, borrowers wait."""
    bridge = load_spec(pool_sim.SPEC).bridge
    assert bridge is not None

    def allowed(t: float) -> bool:
        return off_peak(bridge, pool_sim.MONDAY + timedelta(seconds=t))

    return LendRule(
        period=pool_sim.CRON_SECONDS,
        window=allowed,
        grace=pool_sim.CRON_GRACE,
        preemptors=frozenset({GUARANTEED, OVERFLOW}),
    )


def stops(d: Design, f: dict) -> str:
    """Why a design's answer misses the promise (<= PROMISE_RATIO of the GPUs or >= PROMISE_BUSY busy), or
    'reaches it'; a busy short of the promise is set against the offered load at that size."""
    small = f["gpus"] <= PROMISE_RATIO * d.dedicated_gpus
    if f["busy_with_lent"] >= PROMISE_BUSY:
        return "reaches it" + ("" if small else f" ({PROMISE_BUSY:.0%} busy)")
    load = f["offered_load"]
    short = f"busy {f['busy_with_lent']:.0%} < {PROMISE_BUSY:.0%}"
    if load is None:
        why = short
    elif load < PROMISE_BUSY:
        why = f"{short}: offered load only {load:.0%}, the most Slurm's jobs can fill (lending adds off-peak only)"
    else:
        why = f"{short} at an offered load of {load:.0%}: placement and queueing hold it down, not the load"
    if small:
        return f"reaches it on GPUs (<= {PROMISE_RATIO:.1f}); {why}"
    return f"{d.limit}; {why}"


def short_of(label: str, c: Comparison) -> str:
    """How far the floating design's full pool falls short of the borrowers' bar, on the first draw it fails."""
    d = c.design("floating")
    for k, draw in enumerate(d.trials):
        need, done = c.needs[k], borrowers_done_in_window(draw[0].result)
        if draw[0].failures and need and done < need:
            return f"'{label}', draw {k}: {need - done} of {need}, {(need - done) / need:.2%}"
    return f"'{label}': {d.limit}"


def stopped_by(rows: list[tuple[str, int, int, Comparison]]) -> str:
    """What stops a smaller size, counted over the pooled designs' answers."""
    kinds = {"owners' p95": 0, "borrower jobs done": 0, "the floor": 0, "an unfinished owner job": 0}
    for *_, c in rows:
        for d in c.designs[1:]:
            lim = d.limit
            key = (
                "the floor"
                if lim == d.floor
                else "owners' p95"
                if "owner wait p95" in lim
                else "borrower jobs done"
                if "fewer borrower jobs" in lim
                else "an unfinished owner job"
            )
            kinds[key] += 1
    said = ", ".join(f"{k} {n}" for k, n in kinds.items() if n)
    return f"What stops a smaller size, over the {2 * len(rows)} pooled answers: {said}."


def loads(rows: list[tuple[str, int, int, Comparison]]) -> str:
    """How many pooled answers could not reach the busy promise on Slurm's jobs alone."""
    got = [
        (f["offered_load"], f["busy_with_lent"])
        for *_, c in rows
        for d in c.designs[1:]
        if d.chosen is not None and (f := d.figures(d.chosen))["offered_load"] is not None
    ]
    if not got:
        return ""
    low = sum(load < PROMISE_BUSY for load, _ in got)
    return (
        f"  The offered load at the answers is {min(x for x, _ in got):.0%}-{max(x for x, _ in got):.0%}: on "
        f"{low} of {len(got)} it is below {PROMISE_BUSY:.0%}, so no schedule of these jobs keeps Slurm "
        f"{PROMISE_BUSY:.0%} busy there and only lending could make up the rest."
    )


def design_row(label: str, c: Comparison, d: Design) -> str:
    i = d.chosen
    base95 = max(b.wait_quantile(0.95) for b in c.baselines)
    if i is None:
        return f"| {label} | - | **none passes** | - | - | - | - | - | - | - | {d.limit} |"
    f = d.figures(i)
    rr = d.ratio_range
    span = "-" if rr is None else f"{rr[0]:.2f}" if rr[0] == rr[1] else f"{rr[0]:.2f}-{rr[1]:.2f}"
    oc = f"{f['overcommit']:.2f}" if f["overcommit"] is not None else "-"
    load = "-" if f["offered_load"] is None else f"{f['offered_load']:.1%}"
    return (
        f"| {label} | {f['gpus']} | **{f['gpus'] / d.dedicated_gpus:.2f}** | {span} | {oc} | "
        f"{base95:,.0f} -> {f['owner_wait_p95_seconds']:,.0f} | {f['utilization']:.1%} / {f['busy_with_lent']:.1%} | "
        f"{load} | {f['preemptions']:,.0f} | {f['lost_gpu_hours']:,.0f} / {f['grace_and_restart_gpu_hours']:,.0f} | "
        f"{stops(d, f)} |"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--days", type=float, default=30.0)
    ap.add_argument("--grace", type=float, default=120.0, help="GraceTime, seconds")
    ap.add_argument("--draws", type=int, default=3, help="runtime draws per size (seed 0 is pool_sim's)")
    ap.add_argument("--no-lend", action="store_true", help="no off-peak lending to the inference tier")
    ap.add_argument(
        "--borrower-tolerance",
        type=float,
        default=BORROWER_TOLERANCE,
        help="share (0 to 0.2) by which a size's borrower jobs done may fall short of the full pool's",
    )
    args = ap.parse_args()
    try:
        tol = check_tolerance(args.borrower_tolerance)
    except ValueError as exc:
        ap.error(f"--borrower-tolerance: {exc}")
    window = args.days * wl.DAY
    policy = next(p for _, p in standard_policies(args.grace, 1800.0, 120.0) if p.name == "pool-checkpoint-on-preempt")
    rule = None if args.no_lend else lend_rule()
    rows: list[tuple[str, int, int, Comparison]] = []
    t0 = time.monotonic()
    for label, owners, borrowers in MIXES:
        capacity, owner_jobs, borrower_jobs, _, _, sampler = pool_sim.workload(window, owners, borrowers)
        jobs = owner_jobs + borrower_jobs
        runtimes = [min(sampler.hi, max(sampler.lo, v)) for v in sampler.values]  # as the sampler clamps them
        c = compare(servers(capacity), jobs, policy, window, draws=args.draws, runtimes=runtimes, lend=rule, tol=tol)
        rows.append((label, len(owner_jobs), len(borrower_jobs), c))
    elapsed = time.monotonic() - t0
    replays = sum(c.draws * (1 + sum(len(d.gpus) for d in c.designs[1:])) for *_, c in rows)
    flags = f" --days {args.days:g}" if args.days != 30 else ""
    flags += f" --draws {args.draws}" if args.draws != 3 else ""
    flags += " --no-lend" if args.no_lend else ""
    flags += f" --borrower-tolerance {tol:g}" if tol != BORROWER_TOLERANCE else ""
    pct = f"{tol * 100:g} %"
    lines = [
        "## Pool sizing: dedicated servers, owned nodes and floating guarantees (issues 12, 28)",
        "",
        f"Command: `python3 bench/pool_size.py{flags}` ({args.days:g} days, GraceTime {args.grace:.0f} s, checkpoint-on-preempt, "
        f"8-GPU servers, node engine, {args.draws} runtime draw{'s' if args.draws > 1 else ''}"
        + ("" if args.no_lend else ", off-peak lending of whole idle nodes as `examples/pool.yaml`'s bridge")
        + ").  Traces as in the pool simulator above (arrivals and GPU counts of six Philly virtual clusters, via "
        "Gavel, Jeon et al. ATC 2019; runtimes drawn from 83,154 Philly runtimes, Weng et al. NSDI 2022; "
        "`bench/traces/SOURCES.md`).  `slurm_pool.sim.sizing_compare` (what `slurm-pool simulate --nodes --size "
        "--compare` runs) replays three designs of the same servers: **dedicated** servers (the baseline, measured "
        "in the same run), **owned** nodes (servers taken away from the owner that keeps the largest share, down to "
        "one server per owner or as many as its biggest job needs) and **floating** guarantees (nobody owns a node; "
        "each owner is guaranteed its dedicated GPUs, capped at the pool's, on any node; servers taken away down to "
        "the biggest job; overcommit = guarantees / pool GPUs).  A size passes a draw when the owners' p95 wait is "
        "no worse than on dedicated servers, no owner job is unfinished, and the borrowers get at least "
        f"(1 - {tol:g}) of the jobs done inside the window that they get on all servers with owned nodes (a "
        f"{pct} tolerance, `--borrower-tolerance`: one borrower job ending a second after the window is chance, "
        "not capacity).  The answer passes on every draw and so does every "
        "larger size ('range' is each draw's own smallest passing size).  Ratios are GPUs over dedicated GPUs; busy "
        "is Slurm's useful GPU time / plus GPU time lent to inference, over the size's GPUs; the offered load at "
        "this size is the GPU time its jobs ask inside the window (GPUs x runtime from arrival, cut at the window's "
        "end; owners' and borrowers' jobs, the owners' alone on dedicated servers) over the size's GPU time, which "
        "Slurm's busy cannot pass; owners' p95 is the "
        "worst draw, the rest are means over draws.  'What stops it' says why a design misses the promise "
        f"(<= {PROMISE_RATIO:.1f} of dedicated GPUs or >= {PROMISE_BUSY:.0%} busy): what stops a smaller size, and "
        "what holds busy down.",
        "",
        "| mix | owner / borrower jobs | dedicated GPUs |",
        "|---|---:|---:|",
    ]
    lines += [f"| {label} | {no:,} / {nb:,} | {c.designs[0].dedicated_gpus} |" for label, no, nb, c in rows]
    for name, title in (
        ("dedicated", "Dedicated servers (the baseline)"),
        ("owned", "Owned nodes"),
        ("floating", "Floating guarantees"),
    ):
        lines += [
            "",
            f"### {title}",
            "",
            "| mix | GPUs | **ratio** | range over draws | overcommit | owners' p95 dedicated -> this (s) | "
            "busy: Slurm / + lent | offered load at this size | preemptions | lost / grace+restart GPU-h | "
            "what stops it |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
        ]
        lines += [design_row(label, c, c.design(name)) for label, _, _, c in rows]

    def span(name: str) -> str:
        got = [d.gpus[d.chosen] / d.dedicated_gpus for d in (c.design(name) for *_, c in rows) if d.chosen is not None]
        return f"{min(got):.2f}-{max(got):.2f}" if got else "none"

    def answer(name: str, c: Comparison) -> float:
        d = c.design(name)
        return d.gpus[d.chosen] / d.dedicated_gpus if d.chosen is not None else float("inf")

    def promise(name: str) -> str:
        met = [
            label
            for label, _, _, c in rows
            if (i := c.design(name).chosen) is not None
            and (
                c.design(name).gpus[i] <= PROMISE_RATIO * c.design(name).dedicated_gpus
                or c.design(name).figures(i)["busy_with_lent"] >= PROMISE_BUSY
            )
        ]
        return "; ".join(f"'{m}'" for m in met) or "none"

    found = [d.overcommit(d.chosen) or 0.0 for d in (c.design("floating") for *_, c in rows) if d.chosen is not None]
    ocs = f"{min(found):.2f}-{max(found):.2f}x" if found else "-"
    none = [short_of(label, c) for label, _, _, c in rows if c.design("floating").chosen is None]
    fewer = sum(answer("floating", c) < answer("owned", c) for *_, c in rows)
    more = sum(answer("floating", c) > answer("owned", c) for *_, c in rows)
    lines += [
        "",
        f"Across the mixes owned nodes need **{span('owned')}** of the dedicated GPUs and floating guarantees "
        f"**{span('floating')}**; floating needs fewer GPUs than owned nodes on {fewer} of {len(rows)} mixes"
        + (f" and more on {more}" if more else "")
        + f".  Mixes that reach the promise: {promise('owned')} with owned nodes, {promise('floating')} with "
        "floating guarantees.  Owned nodes stop at each owner's floor (an owner's job runs guaranteed only on its "
        "own servers, so its biggest job keeps them) or when an owner's p95 passes its dedicated one; floating "
        f"guarantees have no per-owner floor and go further on owners alone (overcommitted {ocs} at the answers), "
        "until the owners' p95 passes the dedicated one.  "
        + stopped_by(rows)
        + loads(rows)
        + (
            f"  On {len(none)} mix{'es' if len(none) > 1 else ''} floating guarantees pass at no size: even on all "
            f"the servers they finish more than {pct} fewer borrower jobs than owned nodes ({'; '.join(none)}; a "
            "guaranteed job preempts borrowers on any node, not only on its owner's)."
            if none
            else ""
        ),
        "",
        f"[GPUs needed vs owners' p95, every size tried, three designs per mix]({PLOT.relative_to(ROOT).as_posix()}) "
        f"(solid: owned, dashed: floating, square: dedicated; the dots are the answers).  All {replays} replays "
        f"({len(rows)} mixes x {args.draws} draw{'s' if args.draws > 1 else ''}) took {elapsed:.0f} s on the 2-core machine.",
        "",
    ]
    PLOT.parent.mkdir(parents=True, exist_ok=True)
    design_curves([(label, c) for label, _, _, c in rows], PLOT)
    text = "\n".join(lines)
    print(text)
    OUT.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
