#!/usr/bin/env python3
"""Run every benchmark and write BENCHMARKS.md from their result sections.

Benchmarks that need Slurm share one local cluster per Slurm release started
here (the example pool on free loopback ports), exactly as the tests do: the
Slurm on PATH (Debian's 22.05), then each ``--slurm`` build (default 26.05,
from ``make slurm-build``); a benchmark named in ``SPECS`` gets a cluster of
its own spec.  Their sections are written per release.

    python3 bench/run_all.py [--only NAME ...] [--skip-cluster] [--slurm 26.05 ...]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
RESULTS = BENCH / "results"

# name -> (script args, needs the cluster)
BENCHES: dict[str, tuple[list[str], bool]] = {
    "render_scale": (["render_scale.py"], False),
    "mig_pack": (["mig_pack.py"], False),
    "mig_replay": (["mig_replay.py"], False),
    "pool_sim": (["pool_sim.py"], False),
    "pool_size": (["pool_size.py"], False),
    "sim_speed": (["sim_speed.py"], False),
    "forecast_replay": (["forecast_replay.py"], False),
    "prolog_latency": (["prolog_latency.py"], False),
    "site_scale": (["site_scale.py"], False),
    "predict_speed": (["predict_speed.py"], False),
    "submit_overhead": (["submit_overhead.py", "--spec", "examples/pool.yaml"], True),
    "preempt_resume": (["preempt_resume.py"], True),
    "reclaim_latency": (["reclaim_latency.py"], True),
    "sim_validate": (["sim_validate.py"], True),
    "sim_validate_floating": (["sim_validate_floating.py"], True),
    "start_prediction": (["start_prediction.py"], True),
    "elastic": (["elastic.py"], True),
    "api_load": (["api_load.py"], True),
    # only writes its table again from the CI runs it keeps (a run is added with --record; see the script)
    "ci_phases": (["ci_phases.py"], False),
}

# cluster benchmarks on another spec than examples/pool.yaml (a cluster of it per release)
SPECS = {"sim_validate_floating": "examples/pool-floating.yaml"}
# result sections of a benchmark, when not "<name>*.md"
RESULT_GLOBS = {"sim_validate": "sim_validate-[0-9]*.md", "sim_validate_floating": "sim_validate-floating-*.md"}

HEADER = """# Benchmarks

Every figure below was made by the command shown with it, on the project's
2-core test machine, and is given as a ratio against a baseline measured in
the same run (the machines are shared and noisy: compare ratios, not seconds).
Regenerate all of it with `python3 bench/run_all.py` (or `make bench`).
Trace data: see `bench/traces/SOURCES.md` for sources and licences.
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", default=None)
    ap.add_argument("--skip-cluster", action="store_true", help="Skip benchmarks that need Slurm.")
    ap.add_argument(
        "--slurm",
        nargs="*",
        default=["26.05"],
        help="Slurm builds to run the cluster benchmarks on as well (after the one on PATH)",
    )
    args = ap.parse_args()
    names = args.only or list(BENCHES)
    base_env = dict(os.environ)
    base_env["PYTHONPATH"] = str(REPO) + os.pathsep + base_env.get("PYTHONPATH", "")
    failed = []

    def run(name: str, env: dict[str, str]) -> None:
        script, _ = BENCHES[name]
        t = time.monotonic()
        print(f"== {name}", flush=True)
        res = subprocess.run([sys.executable, str(BENCH / script[0]), *script[1:]], env=env, cwd=REPO)
        print(f"== {name}: exit {res.returncode} in {time.monotonic() - t:.0f}s", flush=True)
        if res.returncode:
            failed.append(name)

    for name in names:
        if not BENCHES[name][1]:
            run(name, base_env)
    cluster_benches = [n for n in names if BENCHES[n][1] and not args.skip_cluster]
    if cluster_benches:
        sys.path.insert(0, str(REPO))
        from tests.support.slurm_cluster import start_session_cluster, stop_session_cluster

        specs = sorted({SPECS.get(n, "examples/pool.yaml") for n in cluster_benches})
        for slurm in [None, *args.slurm]:
            for spec in specs:
                handle, state = start_session_cluster(REPO / spec, slurm=slurm)
                try:
                    env = {**base_env, **handle.env, "SLURM_POOL_STATE_DIR": str(handle.cluster.layout.root)}
                    for name in cluster_benches:
                        if SPECS.get(name, "examples/pool.yaml") == spec:
                            run(name, env)
                finally:
                    stop_session_cluster(handle, state)
    parts = [HEADER]
    for name in BENCHES:
        for f in sorted(RESULTS.glob(RESULT_GLOBS.get(name, f"{name}*.md"))):
            parts.append(f.read_text().strip() + "\n")
    (REPO / "BENCHMARKS.md").write_text("\n".join(parts))
    print("wrote BENCHMARKS.md" + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
