#!/usr/bin/env python3
"""Start-time predictions against the real scheduler: ours and ``squeue --start`` (issue 29, check 1).

A compressed Philly slice (``bench/sim_validate.py``'s) is replayed as real
jobs on the example pool's whole-GPU nodes with three kinds of work:

* owners: VC 0e4a51 is alice (proja) in ``a-owner``, VC 103959 bob (projb) in
  ``b-owner``, both with QOS guaranteed;
* borrowers: VC 6c71a0 is carol (projc) in ``shared`` (preemptible, at most 4
  GPUs per user);
* spot: VC b436b2 is carol in ``scavenger`` (preempted by both tiers above).

Borrowers and spot jobs stay off c-gpu1 (the MIG node), are requeued when
preempted and ignore SIGTERM (they hold their GPUs through the GraceTime).
Real users over-ask: each job's ``-t`` is its duration times a seeded factor
in [1.5, 5], rounded up to whole minutes.

Every ``--every`` seconds during the replay one snapshot is taken with
:func:`slurm_pool.predict.live.forecast`: for every pending job our predicted
start (and range) and Slurm's own estimate from the same ``squeue`` read.
Afterwards each (snapshot, pending job) pair is compared with the start of
the job's next run in ``sacct`` (the first run that began at or after the
snapshot: a requeued job has several).  Per estimator: the share of pairs it
gave an estimate for, and the median and p90 absolute error, over its own
pairs and over the pairs where both gave one.  Needs a running local cluster
(``bench/run_all.py`` starts one per Slurm release); ``--from`` re-computes
the table from a saved run without Slurm.

    python3 bench/start_prediction.py [--every 10] [--span 420] [--from FILE]
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from sim_validate import Spec, replay, slice_jobs, slice_options  # noqa: E402
from timing import emit, sh  # noqa: E402

from slurm_pool.adapters.runner import SubprocessRunner  # noqa: E402
from slurm_pool.adapters.slurm import SlurmClient  # noqa: E402
from slurm_pool.sim.engine import quantile  # noqa: E402

# VC -> (project, user, partition, QOS, kind); project None: not an owner
ROLES = {
    "0e4a51": ("proja", "alice", "a-owner", "guaranteed", "owner"),
    "103959": ("projb", "bob", "b-owner", "guaranteed", "owner"),
    "6c71a0": (None, "carol", "shared", "shared", "borrower"),
    "b436b2": (None, "carol", "scavenger", "scavenger", "spot"),
}
BORROW_ACCOUNT = "projc"
KINDS = ("owner", "borrower", "spot")
#: The estimators compared: ours, Slurm's (``squeue --start``) and the trivial "starts now" (the snapshot's time).
ESTIMATORS = ("ours", "slurm", "starts_now")
SPEC = REPO / "examples" / "pool.yaml"
#: sacct keeps whole seconds, and a forecast's ``now`` is read after its squeue: a run that began this much
#: before a snapshot is still its "next".
START_TOLERANCE = 2.0


def role(key: str) -> tuple[str | None, str, str, str, str]:
    return next(r for vc, r in ROLES.items() if key.startswith(vc + "-"))


def limit_minutes(spec: Spec, seed: int) -> int:
    """The over-asked time limit: duration x a seeded factor in [1.5, 5], rounded up to whole minutes."""
    factor = random.Random(f"{seed}:{spec.key}").uniform(1.5, 5.0)
    return max(1, math.ceil(spec.seconds * factor / 60))


def submitter(seed: int) -> Callable[[Spec], int]:
    def submit(spec: Spec) -> int:
        project, user, partition, qos, kind = role(spec.key)
        argv = [
            "sbatch",
            "--parsable",
            f"--uid={user}",
            "-p",
            partition,
            f"--qos={qos}",
            "-A",
            project or BORROW_ACCOUNT,
        ]
        argv += [f"--gres=gpu:{spec.gpus}", "-t", str(limit_minutes(spec, seed)), "-o", "/dev/null", "-D", "/tmp"]
        argv += ["-J", spec.key]
        if kind != "owner":  # preemptible: requeue, and hold the GPUs through the whole GraceTime
            argv += ["--requeue", "--signal=B:USR1@30", "--exclude=c-gpu1"]
            script = f"#!/bin/bash\ntrap '' TERM USR1\nsleep {spec.seconds}\n"
        else:
            script = f"#!/bin/bash\nsleep {spec.seconds}\n"
        return int(sh(*argv, input=script).split(";")[0])

    return submit


# -- the predictor (the real one, or a stand-in for developing this script) --------------------


@dataclass
class _Guess:
    start: float | None
    low: float | None
    high: float | None


@dataclass
class _Forecast:
    now: float
    predictions: dict[int, _Guess] = field(default_factory=dict)
    slurm_start: dict[int, float | None] = field(default_factory=dict)


def fake_forecast(slurm: SlurmClient, spec: Any) -> _Forecast:
    """A stand-in: Slurm's estimate, or now plus the job's time limit where it gives none."""
    fc = _Forecast(time.time())
    for j in slurm.jobs():
        if j.state.any({"PENDING"}):
            est = j.start_time if j.start_time else None
            fc.slurm_start[j.job_id] = est
            start = est if est is not None else fc.now + (j.time_limit or 60)
            fc.predictions[j.job_id] = _Guess(start, start - 10, start + 10)
    return fc


def predictor(name: str) -> Callable[[SlurmClient, Any], Any]:
    if name == "fake":
        return fake_forecast
    from slurm_pool.predict.live import forecast

    return forecast


def _num(x: Any) -> float | None:
    return None if x is None else round(float(x), 3)


class Sampler(threading.Thread):
    """One forecast every ``every`` seconds until stopped: per snapshot, each pending job's estimates."""

    def __init__(self, every: float, forecast: Callable[[SlurmClient, Any], Any]):
        super().__init__(daemon=True)
        from slurm_pool.spec import load_spec

        self.every, self.forecast, self.spec = every, forecast, load_spec(SPEC)
        self.slurm = SlurmClient(SubprocessRunner(default_timeout=60))
        self.samples: list[dict[str, Any]] = []
        self.errors: list[str] = []
        self.done = threading.Event()

    def run(self) -> None:
        tick = time.monotonic()
        while not self.done.is_set():
            t = time.monotonic()
            try:
                fc = self.forecast(self.slurm, self.spec)
                took = time.monotonic() - t
                ids = sorted(set(fc.predictions) | set(fc.slurm_start))
                rows = []
                for i in ids:
                    p = fc.predictions.get(i)
                    rows.append([i, *(_num(getattr(p, a, None)) for a in ("start", "low", "high"))])
                    est, job = getattr(p, "runtime", None), getattr(fc, "jobs", {}).get(i)
                    rows[-1] += [_num(fc.slurm_start.get(i)), getattr(est, "basis", ""), getattr(p, "note", "")]
                    rows[-1].append(getattr(job, "reason", ""))  # Slurm's pending reason
                self.samples.append({"now": round(fc.now, 3), "seconds": round(took, 4), "pending": rows})
            except Exception as e:  # noqa: BLE001 - a failed snapshot is a finding, not the end of the run
                self.errors.append(f"{time.time():.0f}: {type(e).__name__}: {e}"[:500])
            while tick <= time.monotonic():
                tick += self.every
            self.done.wait(tick - time.monotonic())


def next_starts(ids: dict[int, Spec]) -> dict[int, list[float]]:
    """Each job's run starts (epoch s, sorted), from ``sacct --duplicates``: a requeued job has several."""
    slurm = SlurmClient(SubprocessRunner(default_timeout=60))
    recs = slurm.accounting_jobs("--allusers", "--duplicates", "--allocations", "-j", ",".join(map(str, ids)))
    runs: dict[int, list[float]] = {}
    for r in recs:
        if r.start_time:
            runs.setdefault(r.job_id, []).append(float(r.start_time))
    return {j: sorted(s) for j, s in runs.items()}


# -- the comparison ------------------------------------------------------------------------


def pairs(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Every (snapshot, pending job of the replay) pair with its real next start (None: it never started)."""
    jobs, runs = doc["jobs"], {int(k): v for k, v in doc["runs"].items()}
    out = []
    for s in doc["samples"]:
        now = s["now"]
        for jid, start, low, high, slurm_est, *why in s["pending"]:
            if str(jid) not in jobs:
                continue  # not one of the replay's jobs
            real = next((x for x in runs.get(jid, []) if x >= now - START_TOLERANCE), None)
            kind = role(jobs[str(jid)]["key"])[4]
            out.append({"now": now, "job": jid, "kind": kind, "real": real, "ours": start, "low": low,
                        "high": high, "slurm": slurm_est, "starts_now": now, "why": why})  # fmt: skip
    return out


def stats(errs: list[float]) -> tuple[int, float | None, float | None]:
    """Count, median and p90 (nearest rank; None for none)."""
    return len(errs), (quantile(errs, 0.5) if errs else None), (quantile(errs, 0.9) if errs else None)


def sec(x: float | None, sign: bool = False) -> str:
    return "-" if x is None else f"{x:+.0f}" if sign else f"{x:.0f}"


def summary(ps: list[dict[str, Any]]) -> dict[str, Any]:
    """Coverage, median and p90 absolute error (s) per estimator, alone and where both gave one."""
    known = [p for p in ps if p["real"] is not None]
    out: dict[str, Any] = {"pairs": len(ps), "never_started": len(ps) - len(known)}
    for est in ESTIMATORS:
        mine = [p for p in known if p[est] is not None]
        n, med, p90 = stats([abs(p[est] - p["real"]) for p in mine])
        out[est] = {
            "coverage": n / len(known) if known else 0.0,
            "median": med,
            "p90": p90,
            "bias": statistics.median([p[est] - p["real"] for p in mine]) if mine else None,
        }
    both = [p for p in known if p["ours"] is not None and p["slurm"] is not None]
    out["both"] = {"pairs": len(both)}
    for est in ESTIMATORS:
        _, med, p90 = stats([abs(p[est] - p["real"]) for p in both])
        out["both"][est] = {"median": med, "p90": p90}
    ranged = [p for p in known if p["low"] is not None and p["high"] is not None]
    out["in_range"] = sum(p["low"] - START_TOLERANCE <= p["real"] <= p["high"] + START_TOLERANCE for p in ranged) / (
        len(ranged) or 1
    )
    out["by_basis"] = {}  # what moves the error: what our runtimes rested on (the pair's own job)
    for basis in sorted({str(p["why"][0]) if p["why"] else "-" for p in known}):
        sub = [p for p in known if (str(p["why"][0]) if p["why"] else "-") == basis]
        row_b: dict[str, Any] = {"pairs": len(sub)}
        for est in ESTIMATORS:
            _, med, _ = stats([abs(p[est] - p["real"]) for p in sub if p[est] is not None])
            row_b[est] = med
        out["by_basis"][basis] = row_b
    out["by_kind"] = {}
    for kind in KINDS:
        sub = [p for p in known if p["kind"] == kind]
        row: dict[str, Any] = {"pairs": len(sub)}
        for est in ESTIMATORS:
            mine = [p for p in sub if p[est] is not None]
            n, med, _ = stats([abs(p[est] - p["real"]) for p in mine])
            row[est] = {"coverage": n / len(sub) if sub else 0.0, "median": med}
        out["by_kind"][kind] = row
    return out


def findings(ps: list[dict[str, Any]], jobs: dict[str, Any], worst: int = 8) -> dict[str, Any]:
    """What to look at: why ours gave none, what its runtimes rested on, and its largest errors."""
    known = [p for p in ps if p["real"] is not None]
    none = Counter(" / ".join(str(w) for w in p["why"] if w) or "-" for p in known if p["ours"] is None)
    slurm_none = Counter(str(p["why"][2]) if len(p["why"]) > 2 else "-" for p in known if p["slurm"] is None)
    basis = Counter(str(p["why"][0]) if p["why"] else "-" for p in known)
    big = sorted((p for p in known if p["ours"] is not None), key=lambda p: -abs(p["ours"] - p["real"]))[:worst]
    return {
        "no_estimate": dict(none.most_common(10)),
        "runtime_basis": dict(basis.most_common()),
        "slurm_none_by_reason": dict(slurm_none.most_common(10)),
        "largest_errors": [
            {**p, "key": jobs[str(p["job"])]["key"], "ours_minus_real": round(p["ours"] - p["real"], 1),
             "slurm_minus_real": None if p["slurm"] is None else round(p["slurm"] - p["real"], 1)}
            for p in big
        ],
    }  # fmt: skip


def table(doc: dict[str, Any], s: dict[str, Any], cmd: str, kept: str, from_run: bool) -> list[str]:
    version, secs = doc["slurm"], [x["seconds"] for x in doc["samples"]]
    o, m, b = s["ours"], s["slurm"], s["both"]
    kinds = {k: sum(role(j["key"])[4] == k for j in doc["jobs"].values()) for k in KINDS}
    goal_err = b["pairs"] > 0 and b["ours"]["median"] <= b["slurm"]["median"] / 2
    pct = "{:.0%}".format
    failed = f"; {len(doc['errors'])} calls failed" if doc["errors"] else ""
    took = f"{statistics.median(secs):.2f} s (median; max {max(secs):.2f} s)" if secs else "-"

    def row(name: str, e: dict[str, Any], both: dict[str, Any]) -> str:
        cells = [pct(e["coverage"]), sec(e["median"]), sec(e["p90"]), sec(e["bias"], True)]
        return f"| {name} | {' | '.join(cells)} | {sec(both['median'])} | {sec(both['p90'])} |"

    lines = [
        f"## Start-time predictions against Slurm {version}: ours and `squeue --start` (issue 29)",
        "",
        f"Command: `{cmd}` (local cluster on Slurm {version}; the run is kept in `{kept}`, and with `--from {kept}` "
        f"the same command makes this table again without Slurm{', as it did here' if from_run else ''}).  "
        f"{len(doc['jobs'])} jobs ({kinds['owner']} of owners A and B in their owner partitions, "
        f"{kinds['borrower']} borrowers in `shared`, {kinds['spot']} spot jobs in `scavenger`) from a compressed "
        "Philly slice as `bench/sim_validate.py` replays it, each with a time limit of its duration times a seeded "
        f"factor in [1.5, 5], rounded up to whole minutes.  The replay took {doc['wall_seconds']:.0f} s; "
        f"{len(doc['samples'])} snapshots, one every {doc['every']:g} s, gave {s['pairs']} (snapshot, pending job) "
        f"pairs ({s['never_started']} of them for a job that never started again, left out).  Each estimate is "
        "compared with the start of the job's next run in `sacct` (the first that began at or after the snapshot).  "
        f"One `forecast` call took {took}{failed}.",
        "",
        "| estimator | pending jobs with an estimate | median abs. error, s | p90 abs. error, s "
        "| median signed error, s | median abs. error where both estimate, s | p90 where both estimate, s |",
        "|---|---:|---:|---:|---:|---:|---:|",
        row("this project's prediction", o, b["ours"]),
        row("Slurm (`squeue --start`)", m, b["slurm"]),
        row('"starts now" (the snapshot\'s time)', s["starts_now"], b["starts_now"]),
        "",
        f"Pairs where both estimate: {b['pairs']}.  The real start fell within our stated range in "
        f"{pct(s['in_range'])} of the pairs.  Goal (median error at most half of Slurm's where both estimate, and "
        f"an estimate for every pending job): {'met' if goal_err and o['coverage'] == 1 else 'not met'}.",
        "",
        "| kind of job | pairs | ours: with an estimate | ours: median abs. error, s | Slurm: with an estimate "
        '| Slurm: median abs. error, s | "starts now": median abs. error, s |',
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for kind, r in s["by_kind"].items():
        lines.append(
            f"| {kind} | {r['pairs']} | {pct(r['ours']['coverage'])} | {sec(r['ours']['median'])} "
            f"| {pct(r['slurm']['coverage'])} | {sec(r['slurm']['median'])} | {sec(r['starts_now']['median'])} |"
        )
    lines += [
        "",
        "What the pending job's own runtime estimate rested on, and the median absolute error (s) of each "
        "estimator there:",
        "",
        '| runtime basis | pairs | ours | Slurm | "starts now" |',
        "|---|---:|---:|---:|---:|",
    ]
    for basis, r in s.get("by_basis", {}).items():
        lines.append(f"| {basis} | {r['pairs']} | {sec(r['ours'])} | {sec(r['slurm'])} | {sec(r['starts_now'])} |")
    lines.append("")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    slice_options(ap)
    ap.add_argument("--seed", type=int, default=1, help="seed of the time limits' over-ask factors")
    ap.add_argument("--every", type=float, default=10.0, help="seconds between snapshots")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds to wait for the queue to drain")
    ap.add_argument("--predictor", choices=("live", "fake"), default="live", help="fake: a stand-in, for testing")
    ap.add_argument("--from", dest="run", type=Path, help="a saved run (…json): no Slurm needed")
    ap.add_argument("--out", help="result section (default: bench/results/start_prediction-<slurm>.md; the run beside)")
    args = ap.parse_args()
    cmd = (
        f"python3 bench/start_prediction.py --start-hour {args.start_hour:g} --hours {args.hours:g} "
        f"--span {args.span:g} --load {args.load:g} --min {args.lo} --max {args.hi} --seed {args.seed} "
        f"--every {args.every:g}" + (" --predictor fake" if args.predictor == "fake" else "")
    )
    if args.run is not None:
        doc = json.loads(args.run.read_text())
        stem = args.run.with_suffix("")
    else:
        specs = slice_jobs(args.start_hour, args.hours, args.span, args.load, args.lo, args.hi, ROLES)
        version = sh("sinfo", "--version").split()[-1]
        sampler = Sampler(args.every, predictor(args.predictor))
        t = time.monotonic()
        sampler.start()
        try:
            ids = replay(specs, args.timeout, submitter(args.seed))
        finally:
            sampler.done.set()
            sampler.join()
        wall = time.monotonic() - t
        doc = {
            "slurm": version,
            "command": cmd,
            "every": args.every,
            "wall_seconds": round(wall, 1),
            "jobs": {
                str(j): {
                    "key": s.key,
                    "gpus": s.gpus,
                    "seconds": s.seconds,
                    "limit_minutes": limit_minutes(s, args.seed),
                }
                for j, s in ids.items()
            },
            "runs": {str(j): v for j, v in next_starts(ids).items()},
            "errors": sampler.errors,
            "samples": sampler.samples,
        }
        stem = REPO / "bench" / "results" / f"start_prediction-{'.'.join(version.split('.')[:2])}"
        stem = Path(args.out).with_suffix("") if args.out else stem
    ps = pairs(doc)
    s = summary(ps)
    found = findings(ps, doc["jobs"])
    if args.run is None:
        doc["summary"], doc["findings"] = s, found
        Path(f"{stem}.json").write_text(json.dumps(doc, indent=None, separators=(",", ":")) + "\n")
    kept = Path(f"{stem}.json").resolve()
    kept_name = kept.relative_to(REPO).as_posix() if kept.is_relative_to(REPO) else kept.name
    emit(table(doc, s, doc.get("command", cmd), kept_name, args.run is not None), Path(args.out or f"{stem}.md"))
    for e in doc["errors"][:5]:
        print("forecast failed:", e, file=sys.stderr)
    print(json.dumps(found, indent=1), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
