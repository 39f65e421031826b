#!/usr/bin/env python3
"""The table of CI runs in BENCHMARKS.md: each run's phases, against the serial layout's (issue 50).

``bash .ci/run`` leaves ``build/test-logs/ci.json`` (deps, lint, test and total seconds) and
``make test`` leaves ``build/test-logs/phases.json`` (each build's and stream's start and end,
and each stream's counts).  ``--record`` adds one run from those files to
``bench/results/ci_phases.json``; without it the table is only written again from what is kept.

    python3 bench/ci_phases.py --record build/test-logs --label "warm caches, fresh clone"
    python3 bench/ci_phases.py
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent
RESULTS = BENCH / "results"
RUNS = RESULTS / "ci_phases.json"
OUT = RESULTS / "ci_phases.md"

#: The serial layout before issue 50 (one pytest after another: every test on 22.05, then the daemon tests on
#: 26.05), as measured and reported in issue 50 on a fresh Debian 12 machine with 2 cores: the baseline.
BASELINE = {
    "label": "serial layout, cold (issue 50's measurement)",
    "total": 85 * 60 + 46,
    "builds": 26 * 60,
    "streams": {"every test on 22.05 (serially)": 33 * 60 + 19, "daemon tests on 26.05 (serially)": 28 * 60 + 5},
    "counts": {"22.05": 7209, "26.05": 136},
}


def clock(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = int(round(seconds))
    return f"{s // 60}:{s % 60:02d}"


def record(logs: Path, label: str) -> dict:
    """One run from ``logs`` (ci.json and phases.json)."""
    ci = json.loads((logs / "ci.json").read_text())
    phases = json.loads((logs / "phases.json").read_text())
    took = {p["name"]: (p["end"] - p["start"]) if p["end"] is not None else None for p in phases["phases"]}
    ends = {p["name"]: p["end"] for p in phases["phases"]}
    streams = [n for n in phases["counts"]]
    return {
        "label": label,
        "total": ci["total"],
        "deps": ci["deps"],
        "lint": ci["lint"],
        "test": ci["test"],
        "status": ci["status"],
        "builds": {n: took[n] for n in took if n not in streams},
        "streams": {n: {"took": took[n], "end": ends[n], "counts": phases["counts"][n]} for n in streams},
    }


def table(runs: list[dict]) -> str:
    base = BASELINE["total"]
    passes = sum(BASELINE["streams"].values())
    lines = [
        "## CI phases: `bash .ci/run` on 2 cores, per run (issue 50)",
        "",
        "Each run is `CI=true bash .ci/run` in a fresh clone with `../shared` beside it; its figures come from "
        "the run's own `build/test-logs/ci.json` and `phases.json`, recorded with "
        "`python3 bench/ci_phases.py --record build/test-logs --label LABEL`. Minutes:seconds. The baseline is "
        "the serial layout as issue 50 measured it on a fresh machine: the builds, then every test on 22.05, then "
        f"the daemon tests on 26.05 ({clock(passes)} of test passes, {clock(base)} in all, cold). The first ratio "
        "is the run's test phase against those passes (what a warm run compares with: its builds are no-ops), "
        'the second its total against the cold total. "Warm" means the cached builds (Slurm 26.05 twice, '
        "Kubernetes, KServe, Volcano, JupyterHub, torch) were already in the cache.",
        "",
        "| run | deps | lint | test (builds and streams side by side) | unit | daemons 22.05 | daemons 26.05 | "
        "total | test / serial passes | total / serial cold | tests passed (unit + 22.05 + 26.05) | result |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    b = BASELINE["streams"]
    lines.append(
        f"| {BASELINE['label']} | - | - | builds {clock(BASELINE['builds'])}, then the two passes | - | "
        f"{clock(list(b.values())[0])} (with the unit tests) | {clock(list(b.values())[1])} | {clock(base)} | 1.00 | 1.00 | "
        f"{BASELINE['counts']['22.05']} + {BASELINE['counts']['26.05']} | passed |"
    )
    for r in runs:
        s = r["streams"]

        def took(prefix: str, streams: dict = s) -> str:
            name = next((n for n in streams if n.startswith(prefix)), None)
            return clock(streams[name]["took"]) if name else "-"

        passed = " + ".join(str(v["counts"].get("passed", 0)) for v in s.values())
        failed = sum(v["counts"].get("failed", 0) + v["counts"].get("errors", 0) for v in s.values())
        result = "passed" if r["status"] == 0 else f"failed ({failed} failed)"
        lines.append(
            f"| {r['label']} | {clock(r['deps'])} | {clock(r['lint'])} | {clock(r['test'])} | {took('unit')} | "
            f"{took('daemons-22')} | {took('daemons-26')} | {clock(r['total'])} | {r['test'] / passes:.2f} | "
            f"{r['total'] / base:.2f} | "
            f"{passed} | {result} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--record", type=Path, help="a run's build/test-logs folder to add")
    ap.add_argument("--label", default="", help="what the run was (cold or warm caches, the machine's load)")
    args = ap.parse_args(argv)
    runs = json.loads(RUNS.read_text()) if RUNS.exists() else []
    if args.record:
        if not args.label:
            print("error: --label: say what the run was (cold or warm caches)", file=sys.stderr)
            return 2
        try:
            runs.append(record(args.record, args.label))
        except (OSError, ValueError, KeyError) as exc:
            print(f"error: {args.record}: not a finished CI run's logs ({exc})", file=sys.stderr)
            return 2
        RESULTS.mkdir(exist_ok=True)
        RUNS.write_text(json.dumps(runs, indent=2) + "\n")
    OUT.write_text(table(runs))
    print(OUT.read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
