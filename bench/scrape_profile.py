#!/usr/bin/env python3
"""Where the exporter's scrape and ``status --json`` spend their time at site scale (issue 47).

Runs one case of :mod:`bench.scale_slurm` (``exporter-*`` or ``status-*``) on inputs
``scale_slurm.py --generate`` wrote, and prints its wall and CPU seconds and peak RSS;
``--profile N`` adds cProfile's top N functions by own time.  The exporter's Slurm read
runs in the collector's reader thread, which cProfile does not follow: its profile is of
the same steps called in turn (node and job reads, then the metric families).

The recorded narrow answers are used whatever source stamp they carry: their text is
what Slurm prints for the read's argv, which the readers' code does not change (run
``--generate`` again when the argv does).  Run it alone: CPU seconds are the figure to
compare on a loaded machine, against the same command on the earlier commit.

    python3 bench/scrape_profile.py --inputs DIR --case exporter-10000n-200000j [--profile 25]
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import resource
import sys
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import scale_slurm  # noqa: E402


def steps(runner: scale_slurm.DocRunner) -> Callable[[], Any]:
    """The exporter's scrape as plain calls in this thread (for the profile)."""
    from slurm_pool.adapters.slurm import SlurmClient
    from slurm_pool.metrics import collector

    def scrape() -> None:
        slurm = SlurmClient(runner)
        nodes, jobs = slurm.nodes(), slurm.jobs()
        collector.node_metrics(nodes)
        collector.job_metrics(jobs)
        collector.pool_metrics(nodes, jobs, collector.DEFAULT_LEND_PARTITION)

    return scrape


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--inputs", type=Path, required=True, help="where scale_slurm.py --generate wrote the inputs")
    ap.add_argument("--case", required=True, help="exporter-<N>n-<J>j or status-<N>n-<J>j")
    ap.add_argument("--profile", type=int, default=0, metavar="N", help="print cProfile's top N functions")
    args = ap.parse_args(argv)
    kind, sizes = scale_slurm.parse_case(args.case)
    if kind not in ("exporter", "status"):
        ap.error("--case: an exporter-* or status-* case")
    nodes, jobs, spec = scale_slurm.files(args.inputs, sizes)
    recorded = scale_slurm.answers_path(args.inputs, args.case)
    if not recorded.exists():
        ap.error(f"{recorded}: not recorded (run scale_slurm.py --generate)")
    answers = [(a, t) for a, t in json.loads(recorded.read_text())["answers"]]
    runner = scale_slurm.DocRunner(nodes, jobs, answers)
    work = scale_slurm.PATHS[kind][1](runner, spec)
    if args.profile and kind == "exporter":
        work = steps(runner)
    prof = cProfile.Profile() if args.profile else None
    wall, cpu = time.perf_counter(), time.process_time()
    if prof:
        prof.enable()
    work()
    if prof:
        prof.disable()
    out = {
        "case": args.case,
        "wall_s": round(time.perf_counter() - wall, 2),
        "cpu_s": round(time.process_time() - cpu, 2),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024,
        "json_reads": runner.json_reads,
        "parsed_late": runner.parsed_late,
    }
    print(json.dumps(out))
    if prof:
        pstats.Stats(prof).sort_stats("tottime").print_stats(args.profile)
    return 0


if __name__ == "__main__":
    sys.exit(main())
