"""Forecast-driven lending against a fixed off-peak window, on real traces.

Slurm's side is the pool simulator's 30-day Philly replay (`bench/pool_sim.py`'s
pool with checkpoint-on-preempt: 72 GPUs, nine 8-GPU nodes): its idle GPUs
over time and its owners' jobs.  The inference side is the Alibaba GenAI
serving trace, requests per hour over 23 days, scaled so that its peak hour
needs ``--peak-gpus`` GPUs; ``--base-gpus`` of them are Kubernetes' own, and
only demand beyond those can be served on lent nodes.  The trace keeps its
own hour of the week (it starts on a Friday at 16:00), on the pool's clock
whose day 0 is a Monday.

The policies, replayed every 5 minutes by ``slurm_pool.sim.lending``, with the
bridge's own hour-of-week forecast (``slurm_pool.bridge.forecast``, learnt
online from the history before each moment, so its first days are poor):

* fixed window (the baseline): lend what current demand needs while the
  spec's off-peak window (19:00-07:00) is open, return everything when it
  closes;
* demand only: the same, at any hour;
* forecast: lend ahead of the forecast inference demand by the model's
  warm-up, keep new lends clear of the forecast Slurm load, return nodes one
  per run ahead of a forecast Slurm rise, and hold each for a minimum lease.

A reclaim delays the owner job that causes it by ``--reclaim-seconds`` (the
k8s-lend GraceTime bounds it; bench/reclaim_latency.py measured p95 under 4 s).

Run from the repository root:  python3 bench/forecast_replay.py
"""

from __future__ import annotations

import argparse
import csv
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from pool_sim import MONDAY, SPEC, workload  # noqa: E402
from timing import emit  # noqa: E402

from slurm_pool.bridge.windows import off_peak  # noqa: E402
from slurm_pool.sim import workload as wl  # noqa: E402
from slurm_pool.sim.engine import quantile, simulate, standard_policies  # noqa: E402
from slurm_pool.sim.lending import LendPolicy, replay_inference_lending  # noqa: E402
from slurm_pool.spec import load_spec  # noqa: E402
from slurm_pool.spec.bridge import ForecastSettings  # noqa: E402

TRACE = ROOT / "bench" / "traces" / "alibaba_genai2026_requests_per_hour.csv"
OUT = ROOT / "bench" / "results" / "forecast_replay.md"
NODE_GPUS = 8
CRON_SECONDS = 300.0


def inference_need(peak_gpus: float, base_gpus: float) -> tuple[list[tuple[float, float]], float]:
    """Hourly inference demand beyond the base capacity on the pool's clock, and where the trace starts."""
    with TRACE.open() as f:
        rows = [(datetime.fromisoformat(r["hour_start"]), int(r["requests"])) for r in csv.DictReader(f)]
    first = rows[0][0]
    shift = (first.weekday() * 24 + first.hour) * 3600.0  # keep the trace's hour of the week
    peak = max(n for _, n in rows)
    need = []
    for when, n in rows:
        t = shift + (when - first).total_seconds()
        need.append((t, max(0.0, n / peak * peak_gpus - base_gpus)))
    return need, shift


def owner_p95(waits: list[float], starts: list[float], reclaims: list[float], delay: float) -> float:
    """Owners' p95 wait when each job that started at a reclaim waited ``delay`` s longer."""
    hit = set(reclaims)
    return quantile([w + (delay if s in hit else 0.0) for w, s in zip(waits, starts, strict=True)], 0.95)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--peak-gpus", type=float, default=32.0)
    ap.add_argument("--base-gpus", type=float, default=8.0)
    ap.add_argument("--warmup", type=float, default=600.0, help="a model's cold start, seconds")
    ap.add_argument("--reclaim-seconds", type=float, default=10.0)
    args = ap.parse_args()
    window = 30 * wl.DAY
    capacity, owners, borrowers, _setup, _pattern, _sampler = workload(window)
    total = sum(capacity.values())
    _name, policy = standard_policies(120.0, 1800.0, 120.0)[2]  # checkpoint-on-preempt, as pool_sim
    sides = [
        ("owners and borrowers", simulate(capacity, owners + borrowers, policy, window)),
        ("owners only", simulate(capacity, owners, policy, window)),
    ]
    need, start = inference_need(args.peak_gpus, args.base_gpus)
    end = min(window, need[-1][0] + 3600.0)
    bridge = load_spec(SPEC).bridge
    assert bridge is not None

    def night(t: float) -> bool:
        return off_peak(bridge, MONDAY + timedelta(seconds=t))

    d = ForecastSettings()  # the spec's defaults
    forecast = {
        "forecast": True,
        "warmup": args.warmup,
        "min_lease": 1800.0,
        "slurm_quantile": d.slurm_quantile,
        "inference_quantile": d.inference_quantile,
        "inference_daily": d.inference_cycle == "day",
    }
    policies = [
        LendPolicy("fixed window 19:00-07:00 (baseline)", window=night),
        LendPolicy("demand only, any hour"),
        LendPolicy(f"**forecast** (Slurm p{d.slurm_quantile * 100:.0f})", **forecast),
        LendPolicy("forecast, no Slurm forecast (p0)", **{**forecast, "slurm_quantile": 0.0}),
        LendPolicy("forecast inside the window", window=night, **forecast),
    ]
    t0 = time.monotonic()
    lines = [
        "## Forecast-driven lending vs a fixed off-peak window (issue 10)",
        "",
        f"Command: `python3 bench/forecast_replay.py` (peak {args.peak_gpus:g} GPUs of inference, "
        f"{args.base_gpus:g} of them Kubernetes' own, model warm-up {args.warmup:.0f} s, a reclaim delays its "
        f"owner job {args.reclaim_seconds:g} s, decisions every {CRON_SECONDS:.0f} s).",
        "Traces: `bench/traces/alibaba_genai2026_requests_per_hour.csv` (Alibaba GenAI serving requests per hour, "
        "23 days) on the pool simulator's Philly replay (`bench/pool_sim.py`'s pool with checkpoint-on-preempt, "
        f"{total} GPUs in 8-GPU nodes, with and without its borrowers), over the {(end - start) / 3600:.0f} "
        "hours the inference trace covers.  A cold start is an hour whose rise in demand found too few warm lent "
        "GPUs; ratios are to the fixed window on the same Slurm side.",
        "",
        "| Slurm side (its GPU use) | policy | served on lent nodes, GPU-h | share of demand beyond base | ratio "
        "| lends | cold starts | reclaims | of busy inference nodes | owners' p95 wait s | change |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    summary = []
    for side, pool in sides:
        reports = [
            replay_inference_lending(pool.idle_timeline, need, start, end, total, NODE_GPUS, CRON_SECONDS, p)
            for p in policies
        ]
        base95 = owner_p95(pool.owner_waits, pool.owner_starts, [], 0.0)
        base = reports[0]
        for rep in reports:
            p95 = owner_p95(pool.owner_waits, pool.owner_starts, rep.reclaim_times, args.reclaim_seconds)
            ratio = f"{rep.served_gpu_seconds / base.served_gpu_seconds:.2f}" if base.served_gpu_seconds else "-"
            lines.append(
                f"| {side} ({pool.utilization:.0%}) | {rep.policy} | {rep.served_gpu_seconds / 3600:,.0f} | "
                f"{rep.served_share:.0%} | {ratio} | {rep.lends:,} | {rep.cold_starts:,} | {rep.reclaims:,} | "
                f"{rep.busy_reclaims:,} | {p95:,.0f} | {p95 - base95:+,.0f} |"
            )
        summary.append((side, base, reports[2], reports[3]))
    elapsed = time.monotonic() - t0
    lines += ["", f"Inference demand beyond the base: {summary[0][1].demand_gpu_seconds / 3600:,.0f} GPU-h."]
    for side, fixed, fc, fc0 in summary:
        lines.append(
            f"With {side}, the forecast serves {fc.served_share:.0%} of it on lent nodes ({fc0.served_share:.0%} "
            f"without the Slurm forecast; the fixed window {fixed.served_share:.0%}), with {fc.cold_starts} cold "
            f"starts against {fixed.cold_starts} and {fc.busy_reclaims} reclaims of busy inference nodes against "
            f"{fixed.busy_reclaims}."
        )
    lines += [
        "",
        "Model limits: Slurm's GPUs are interchangeable (a lent node is any 8 idle GPUs), the replay decides in "
        "whole nodes as the planner does but is a model of it, not the planner itself, and the forecast "
        "learns online, so its first week is poor.  "
        f"The replays took {elapsed:.1f} s.",
        "",
    ]
    emit(lines, OUT)
    return 0


if __name__ == "__main__":
    sys.exit(main())
