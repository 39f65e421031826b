#!/usr/bin/env python3
"""The node engine against the real scheduler: one time-compressed Philly slice on the local cluster (issue 12).

A slice of three Philly virtual clusters (``bench/traces/``) is compressed in
time and replayed as real jobs on the example pool's whole-GPU nodes:

* VC 0e4a51 is project A (owner of a-gpu[1-2], 4 GPUs), submitted as alice to
  ``a-owner`` with QOS guaranteed;
* VC 103959 is project B (owner of b-gpu1, 2 GPUs), bob to ``b-owner``;
* VC 6c71a0 borrows: carol's jobs in ``scavenger`` (preemptible, GraceTime
  20 s), kept off c-gpu1 (the MIG node).

Arrivals are the trace's, compressed so they fit ``--span`` seconds; each
job's duration is its deterministic Philly runtime draw, scaled so the
offered load is ``--load`` of the 6 GPUs and clamped to [``--min``,
``--max``] seconds; GPU counts are capped at 2 (one node).  Jobs sleep;
borrowers ignore SIGTERM (and USR1), so a preempted one holds its GPUs for
the whole GraceTime and loses its work, as the model's victim with no
checkpoint does.  Every job asks for ``-t 5`` minutes.

The simulator (:mod:`slurm_pool.sim.nodes`) then replays the same jobs, at the
submit times ``sacct`` recorded and for as long as each one's finishing run took
(the sleep and Slurm's launch and teardown), on the same three nodes: best fit, backfill
on 300 s limits, preempt/qos with the spec's GraceTime, no checkpoints,
owners only on their own nodes (their partitions), and Slurm's requeue hold
(a requeued job starts again no sooner than 121 s later: job_mgr.c,
``_requeue_delay``, the 120 s credential lifetime + 1).  The table compares
per-tier GPU utilisation over the arrival window, owners' waits and
preemptions.  Needs a running local cluster (``bench/run_all.py`` starts
one per Slurm release).

    python3 bench/sim_validate.py [--start-hour 612] [--hours 36] [--span 420]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from timing import emit, sh  # noqa: E402

from slurm_pool.adapters.runner import SubprocessRunner  # noqa: E402
from slurm_pool.adapters.slurm import SlurmClient  # noqa: E402
from slurm_pool.sim import workload as wl  # noqa: E402
from slurm_pool.sim.engine import BORROWED, GUARANTEED, Job, quantile  # noqa: E402
from slurm_pool.sim.nodes import Node, NodePolicy, simulate_nodes  # noqa: E402

TRACES = REPO / "bench" / "traces"
ARRIVALS = TRACES / "philly_vc_arrivals_30d.csv"
RUNTIMES = TRACES / "alibaba_v2020_philly_runtime.csv"
# VC -> (project, user, partition, QOS); project None: a borrower
ROLES = {
    "0e4a51": ("proja", "alice", "a-owner", "guaranteed"),
    "103959": ("projb", "bob", "b-owner", "guaranteed"),
    "6c71a0": (None, "carol", "scavenger", "scavenger"),
}
BORROW_ACCOUNT = "projc"
NODES = [Node("a-gpu1", 2, "proja"), Node("a-gpu2", 2, "proja"), Node("b-gpu1", 2, "projb")]
GPUS = sum(n.gpus for n in NODES)
GRACE = 20.0  # the scavenger tier's grace_time in examples/pool.yaml
REQUEUE_HOLD = 121.0
LIMIT_MINUTES = 5
BF_INTERVAL = 5.0  # scheduler.bf_interval in examples/pool.yaml


@dataclass(frozen=True)
class Spec:
    """One job of the slice: what to submit and what the simulator gets."""

    key: str
    project: str | None
    offset: float  # seconds after the slice's first job
    seconds: int
    gpus: int


def slice_jobs(
    start_h: float, hours: float, span: float, load: float, lo: int, hi: int, roles: dict | None = None
) -> list[Spec]:
    """The slice's jobs, per VC of ``roles`` (default :data:`ROLES`): VC -> (project or None, ...)."""
    arrivals = wl.parse_arrivals_csv(ARRIVALS.read_text(), ARRIVALS.name)
    sampler = wl.RuntimeSampler(wl.parse_runtimes(RUNTIMES.read_text(), RUNTIMES.name))
    start, length = start_h * 3600, hours * 3600
    raw = []
    for vc, (project, *_) in (roles or ROLES).items():
        for i, a in enumerate(arrivals[vc]):
            if start <= a.time < start + length:
                raw.append((f"{vc}-{i}", project, (a.time - start) * span / length, sampler.draw(f"{vc}:{i}"), a.gpus))
    if not raw:
        raise SystemExit(f"no jobs in hours {start_h}..{start_h + hours} of {ARRIVALS.name}")

    def seconds(d: float, scale: float) -> int:
        return int(min(hi, max(lo, round(d / scale))))

    def offered(scale: float) -> float:
        return sum(seconds(d, scale) * min(g, 2) for *_, d, g in raw) / (GPUS * span)

    low, high = 1e-3, 1e9  # duration divisor: bisect (in log) for the offered load
    for _ in range(100):
        mid = (low * high) ** 0.5
        low, high = (mid, high) if offered(mid) > load else (low, mid)
    first = min(t for _, _, t, _, _ in raw)
    return sorted(
        (Spec(k, p, t - first, seconds(d, high), min(g, 2)) for k, p, t, d, g in raw), key=lambda s: (s.offset, s.key)
    )


def submit(spec: Spec) -> int:
    project, user, partition, qos = next(r for vc, r in ROLES.items() if spec.key.startswith(vc + "-"))
    account = project or BORROW_ACCOUNT
    argv = ["sbatch", "--parsable", f"--uid={user}", "-p", partition, f"--qos={qos}", "-A", account]
    argv += [f"--gres=gpu:{spec.gpus}", "-t", str(LIMIT_MINUTES), "-o", "/dev/null", "-D", "/tmp", "-J", spec.key]
    if project is None:  # preemptible: requeue, and hold the GPUs through the whole GraceTime
        argv += ["--requeue", "--signal=B:USR1@30", "--exclude=c-gpu1"]
        script = f"#!/bin/bash\ntrap '' TERM USR1\nsleep {spec.seconds}\n"
    else:
        script = f"#!/bin/bash\nsleep {spec.seconds}\n"
    return int(sh(*argv, input=script).split(";")[0])


def replay(specs: list[Spec], timeout: float, submit_one: Callable[[Spec], int] = submit) -> dict[int, Spec]:
    """Submit each job at its offset (with ``submit_one``); wait until none is left in the queue."""
    ids: dict[int, Spec] = {}
    t0 = time.monotonic()
    for s in specs:
        delay = t0 + s.offset - time.monotonic()
        if delay > 0:
            time.sleep(delay)  # the replay's clock: when the trace says the job arrives
        ids[submit_one(s)] = s
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = subprocess.run(
            ["squeue", "-h", "-o", "%i", "-j", ",".join(map(str, ids))], capture_output=True, text=True
        )
        if out.returncode == 0 and not out.stdout.strip():
            return ids
        time.sleep(2)
    raise SystemExit(f"jobs still queued after {timeout:.0f} s")


@dataclass
class Measured:
    """What one side did: GPU-seconds per tier in the arrival window, waits, preemptions."""

    busy: dict[str, float]
    owner_waits: list[float]
    borrower_waits: list[float]
    preemptions: int
    makespan: float


def release_gaps(by: dict[int, list], t0: float) -> list[float]:
    """Seconds from the last end on a node to the start of a job that was waiting for it.

    Only first runs of jobs that queued (submitted before that end), and gaps up to 30 s (a
    longer one waited for something else, like a requeue hold).  sacct keeps whole seconds.
    """
    ends: dict[str, list[float]] = {}
    for rs in by.values():
        for r in rs:
            ends.setdefault(r.nodes, []).append(r.end_time - t0)
    gaps = []
    for rs in by.values():
        first = min(rs, key=lambda r: r.start_time)
        s, submit = first.start_time - t0, min(r.submit_time for r in rs) - t0
        before = [e for e in ends.get(first.nodes, []) if submit <= e <= s]
        if before and s - max(before) <= 30:
            gaps.append(s - max(before))
    return gaps


def measured_slurm(
    ids: dict[int, Spec], span: float, tier_of: Callable[[Any], str] | None = None
) -> tuple[Measured, list[Job], list[float], dict[str, list], dict[str, list[str]]]:
    """What Slurm did: busy GPU time per tier, waits, preemptions; also the jobs for the simulator, the gaps
    from a job's end to the next start on its node, each job's runs (start, end, nodes, QOS) and the
    (partition, QOS) its finishing run had.  ``tier_of``: a run's tier from its sacct record (default: the
    job's role, owners guaranteed)."""
    slurm = SlurmClient(SubprocessRunner(default_timeout=60))
    recs = slurm.accounting_jobs("--allusers", "--duplicates", "--allocations", "-j", ",".join(map(str, ids)))
    by: dict[int, list] = {}
    for r in recs:
        by.setdefault(r.job_id, []).append(r)
    if set(by) != set(ids):
        raise SystemExit(f"sacct is missing jobs: {sorted(set(ids) - set(by))[:10]}")
    t0 = min(min(r.submit_time for r in rs) for rs in by.values())
    busy = {GUARANTEED: 0.0, BORROWED: 0.0}
    owner_waits: list[float] = []
    borrower_waits: list[float] = []
    jobs: list[Job] = []
    preemptions, end = 0, 0.0
    runs: dict[str, list] = {}
    routes: dict[str, list[str]] = {}
    for jid, rs in by.items():
        spec = ids[jid]
        submit_t = min(r.submit_time for r in rs) - t0
        first = min(r.start_time for r in rs) - t0
        (owner_waits if spec.project else borrower_waits).append(first - submit_t)
        last = max(rs, key=lambda r: r.start_time)  # the run that finished the job
        jobs.append(Job(spec.key, spec.project, submit_t, ran_for(last.start_time, last.end_time, spec), spec.gpus))
        # runs that ended in a requeue: records so marked, extra records, or Slurm's restart count
        marked = sum(r.state.any({"PREEMPTED", "REQUEUED"}) for r in rs)
        preemptions += max(marked, len(rs) - 1, max(r.restart_count for r in rs))
        for r in rs:
            s, e = r.start_time - t0, r.end_time - t0
            end = max(end, e)
            tier = tier_of(r) if tier_of else (GUARANTEED if spec.project else BORROWED)
            busy[tier] += max(0.0, min(e, span) - max(s, 0.0)) * spec.gpus
        runs[spec.key] = sorted([r.start_time - t0, r.end_time - t0, r.nodes, r.qos] for r in rs)
        routes[spec.key] = [last.partition, last.qos]
    return Measured(busy, owner_waits, borrower_waits, preemptions, end), jobs, release_gaps(by, t0), runs, routes


def ran_for(start: float, end: float, spec: Spec | None = None) -> float:
    """A job's work as sacct measured its finishing run (as ``slurm-pool simulate`` takes it): the sleep
    plus Slurm's launch and teardown, a second or so that adds up along a queue of 5 s jobs."""
    return float(end - start) if end > start else float(spec.seconds if spec else 1)


def measured_sim(jobs: list[Job], span: float, release: float = 0.0, bf_interval: float = 0.0) -> Measured:
    """The node engine on the same jobs; ``release``: seconds a finished job's GPUs stay taken;
    ``bf_interval``: seconds between backfill passes (0: at every event)."""
    policy = NodePolicy(
        "pool", grace=GRACE, checkpoint_on_signal=False, checkpoint_interval=0, restart_overhead=0,
        requeue_delay=REQUEUE_HOLD, time_limit=LIMIT_MINUTES * 60, owners_borrow=False, release_delay=release,
        bf_interval=bf_interval,
    )  # fmt: skip
    r = simulate_nodes(NODES, jobs, policy, window=10 * span)  # a long window: everything finishes
    busy = {GUARANTEED: 0.0, BORROWED: 0.0}
    for p in r.schedule:
        gpus = sum(g for _, g in p.nodes)
        busy[p.tier] += max(0.0, min(p.end, span) - max(p.start, 0.0)) * gpus
    end = max(p.end for p in r.schedule)
    return Measured(busy, r.owner_waits, r.borrower_waits, r.preemptions, end)


def diff(sim: float, real: float) -> str:
    return f"{(sim - real) / real:+.0%}" if real else ("0" if sim == real else "-")


def jittered(jobs: list[Job], seed: int) -> list[Job]:
    """The jobs with submit times somewhere in the whole second sacct recorded (seed 0: as recorded)."""
    if seed == 0:
        return jobs
    rng = random.Random(seed)
    return [replace(j, arrival=j.arrival + rng.random()) for j in jobs]


def rows_of(m: Measured, window: float) -> list[float]:
    return [
        m.busy[GUARANTEED] / window,
        m.busy[BORROWED] / window,
        sum(m.busy.values()) / window,
        quantile(m.owner_waits, 0.5),
        quantile(m.owner_waits, 0.95),
        quantile(m.borrower_waits, 0.95),
        float(m.preemptions),
        m.makespan,
    ]


NAMES = [
    ("GPU utilisation in the arrival window, owners (guaranteed)", "{:.1%}"),
    ("GPU utilisation in the arrival window, borrowers (scavenger)", "{:.1%}"),
    ("GPU utilisation in the arrival window, all", "{:.1%}"),
    ("owners' wait p50, s", "{:.0f}"),
    ("owners' wait p95, s", "{:.0f}"),
    ("borrowers' wait p95, s", "{:.0f}"),
    ("preemptions", "{:.0f}"),
    ("last job ends, s after the first submit", "{:.0f}"),
]


def save_run(
    path: Path, version: str, wall: float, real: Measured, jobs: list[Job], gaps: list[float], runs: dict[str, list]
) -> None:
    """What the real run gave, so that the simulator's side can be made again without Slurm (``--from``)."""
    doc = {
        "slurm": version,
        "wall_seconds": round(wall, 1),
        "release_gaps": gaps,
        "jobs": [[j.id, j.project, j.arrival, j.work, j.gpus] for j in jobs],
        "measured": asdict(real),
        "runs": runs,
    }
    path.write_text(json.dumps(doc, indent=1) + "\n")


def load_run(path: Path) -> tuple[str, float, Measured, list[Job], list[float]]:
    doc = json.loads(path.read_text())
    runs = doc.get("runs", {})
    jobs = [
        Job(k, p, float(a), ran_for(*max(runs[k])[:2]) if k in runs else float(w), int(g))
        for k, p, a, w, g in doc["jobs"]
    ]
    return doc["slurm"], doc["wall_seconds"], Measured(**doc["measured"]), jobs, doc["release_gaps"]


def slice_options(ap: argparse.ArgumentParser) -> None:
    """The options that choose and compress the slice (this bench's and start_prediction's)."""
    ap.add_argument("--start-hour", type=float, default=612.0, help="where the slice starts in the 30-day trace")
    ap.add_argument("--hours", type=float, default=36.0, help="trace hours in the slice")
    ap.add_argument("--span", type=float, default=420.0, help="seconds the slice's arrivals are compressed into")
    ap.add_argument("--load", type=float, default=0.7, help="offered load the durations are scaled to")
    ap.add_argument("--min", dest="lo", type=int, default=5, help="shortest job, seconds")
    ap.add_argument("--max", dest="hi", type=int, default=90, help="longest job, seconds")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    slice_options(ap)
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds to wait for the queue to drain")
    ap.add_argument("--replays", type=int, default=31, help="simulator replays, submit times jittered in their second")
    ap.add_argument("--from", dest="run", type=Path, help="a saved real run (…run.json): no Slurm needed")
    ap.add_argument("--out", help="result section (default: bench/results/sim_validate-<slurm>.md)")
    args = ap.parse_args()
    specs = slice_jobs(args.start_hour, args.hours, args.span, args.load, args.lo, args.hi)
    if args.run is not None:
        version, wall, real, jobs, gaps = load_run(args.run)
    else:
        version = sh("sinfo", "--version").split()[-1]
        t = time.monotonic()
        ids = replay(specs, args.timeout)
        wall = time.monotonic() - t
        real, jobs, gaps, runs, _routes = measured_slurm(ids, args.span)
    stem = REPO / "bench" / "results" / f"sim_validate-{'.'.join(version.split('.')[:2])}"
    out = Path(args.out or f"{stem}.md")
    if args.run is None:
        save_run(Path(f"{stem}.run.json"), version, wall, real, jobs, gaps, runs)
    release = sum(gaps) / len(gaps) if gaps else 0.0
    window = GPUS * args.span
    kept = Path(f"{stem}.run.json").relative_to(REPO).as_posix()
    variants = []
    for rel, bf in ((0.0, 0.0), (release, 0.0), (release, BF_INTERVAL)):
        runs = [rows_of(measured_sim(jittered(jobs, k), args.span, rel, bf), window) for k in range(args.replays)]
        variants.append([sorted(r[m] for r in runs) for m in range(len(NAMES))])
    measured = rows_of(real, window)
    owners = sum(s.project is not None for s in specs)
    lines = [
        f"## The simulator against Slurm {version}: a compressed Philly slice (issue 12)",
        "",
        f"Command: `python3 bench/sim_validate.py --start-hour {args.start_hour:g} --hours {args.hours:g} "
        f"--span {args.span:g} --load {args.load:g}` (local cluster on Slurm {version}; the run is kept in "
        f"`{kept}`, and with `--from {kept}` the same command makes the simulator's side again without Slurm"
        f"{', as it did for this table' if args.run else ''}).  "
        f"{len(specs)} jobs ({owners} of owners A and B, {len(specs) - owners} of a borrower) from hours "
        f"{args.start_hour:g}-{args.start_hour + args.hours:g} of `bench/traces/philly_vc_arrivals_30d.csv`, "
        f"arrivals compressed into {args.span:g} s, durations {args.lo}-{args.hi} s for an offered load of "
        f"{args.load:.0%} on a-gpu[1-2] and b-gpu1 (6 GPUs).  The replay took {wall:.0f} s.",
        "",
        "The simulator (`slurm_pool.sim.nodes`) replays the same jobs at the submit times sacct recorded, each "
        "running as long as its finishing run did in Slurm (the sleep plus Slurm's launch and teardown, as "
        "`slurm-pool simulate` reads a history).  sacct "
        f"keeps whole seconds, so it replays them {args.replays} times, each job's submit time moved by a seeded "
        "draw within its second (the first replay as recorded), and the table gives the median and, in brackets, "
        "the range: how much the model's own schedule moves with a fraction of a second.  Three variants: GPUs free "
        "the moment a job ends; with `NodePolicy.release_delay`, the mean gap this run measured from a job's end to "
        f"the start of a job waiting for its node, {release:.2f} s over {len(gaps)} such starts (Slurm's epilog, "
        "COMPLETING and the next scheduling pass); and with `NodePolicy.bf_interval` as well, backfill starting "
        f"jobs only at its passes every {BF_INTERVAL:g} s (the spec's `scheduler.bf_interval`) while a queue's "
        "head starts at once.  Differences are (simulator median - Slurm) / Slurm.",
        "",
        "| measure | Slurm | simulator, GPUs free at once | difference | simulator, release delay | difference | "
        f"simulator, release delay and backfill every {BF_INTERVAL:g} s | difference |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for k, (name, fmt) in enumerate(NAMES):
        r = measured[k]
        cells = []
        for v in variants:
            xs = v[k]
            mid = statistics.median(xs)
            cells.append(f"{fmt.format(mid)} ({fmt.format(xs[0])}-{fmt.format(xs[-1])}) | {diff(mid, r)}")
        lines.append(f"| {name} | {fmt.format(r)} | {' | '.join(cells)} |")
    lines.append("")
    emit(lines, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
