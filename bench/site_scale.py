#!/usr/bin/env python3
"""Site scale (issue 32): every path at 10,000 nodes and 200,000 jobs, against parsing the same JSON.

Each area has a case module, ``bench/scale_<area>.py`` (see AREAS), that
lists its cases, generates their seeded inputs and runs one case per call::

    python3 bench/scale_<area>.py --list [--quick]
    python3 bench/scale_<area>.py --generate DIR [--seed N] [--quick]
    python3 bench/scale_<area>.py --case NAME --inputs DIR [--baseline]

``--case`` prints one JSON line: ``{"case", "path", "size", "seconds", "baseline"}``
and maybe ``"note"``.  This driver generates every area's inputs, then runs
each case ``--runs`` times as itself and as its baseline, each run in a fresh
child process run alone, and reads the child's peak memory from ``wait4``'s
resource usage.  Times are medians, peak memory the largest of the runs.  An
area whose module is missing or fails is skipped, and the section says so.

Prints a markdown section and writes it to bench/results/site_scale.md
(``--quick``: small sizes, one run each; it, ``--only`` and ``--case`` write
beside the inputs instead, unless ``--out`` says where).

    python3 bench/site_scale.py [--quick] [--only AREA ...] [--case NAME ...] [--inputs DIR] [--runs N]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
OUT = BENCH / "results" / "site_scale.md"
DEFAULT_INPUTS = BENCH / "results" / "scale-inputs"
#: Area modules in the order of the issue's table.
AREAS = ("bridge", "slurm", "history", "replay")


@dataclass
class Run:
    """One child run of one case."""

    seconds: float | None
    peak_kib: int
    record: dict[str, Any] = field(default_factory=dict)
    error: str = ""


@dataclass
class Row:
    """A case's runs, as itself and as its baseline."""

    area: str
    case: str
    runs: list[Run] = field(default_factory=list)
    base: list[Run] = field(default_factory=list)


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def run_child(argv: list[str], timeout: float) -> tuple[int, str, str, int, bool]:
    """Run ``argv`` alone: (exit status, stdout, stderr, peak RSS in KiB of it and its children, timed out)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(argv, stdout=out, stderr=err, cwd=ROOT, env=child_env())
        expired = threading.Event()

        def kill() -> None:
            expired.set()
            proc.kill()

        timer = threading.Timer(timeout, kill)
        timer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            timer.cancel()
        proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here: keep Popen from waiting again
        out.seek(0)
        err.seek(0)
        return (
            proc.returncode,
            out.read().decode(errors="replace"),
            err.read().decode(errors="replace"),
            int(usage.ru_maxrss),
            expired.is_set(),
        )


def module(area: str) -> Path:
    return BENCH / f"scale_{area}.py"


def last_json(text: str) -> dict[str, Any] | None:
    """The last line of ``text`` that is a JSON object."""
    for line in reversed(text.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                value = json.loads(line)
            except ValueError:
                continue
            if isinstance(value, dict):
                return value
    return None


def tail(text: str, lines: int = 3) -> str:
    return " / ".join(x.strip() for x in text.strip().splitlines()[-lines:])


def list_cases(area: str, quick: bool, timeout: float) -> tuple[list[str], bool, str]:
    """(case names, whether the module took ``--quick``, error)."""
    script = [sys.executable, str(module(area)), "--list"]
    if quick:
        rc, out, err, _, _ = run_child([*script, "--quick"], timeout)
        if rc == 0:
            return [x.strip() for x in out.splitlines() if x.strip()], True, ""
    rc, out, err, _, _ = run_child(script, timeout)
    if rc:
        return [], False, f"--list exited {rc}: {tail(err)}"
    names = [x.strip() for x in out.splitlines() if x.strip()]
    return (names[:1] if quick else names), False, ""


def measure(area: str, case: str, inputs: Path, baseline: bool, timeout: float, seed: int | None = None) -> Run:
    argv = [sys.executable, str(module(area)), "--case", case, "--inputs", str(inputs)]
    argv += [] if seed is None else ["--seed", str(seed)]
    if baseline:
        argv.append("--baseline")
    rc, out, err, peak, expired = run_child(argv, timeout)
    if expired:
        return Run(None, peak, error=f"stopped after {timeout:.0f} s")
    record = last_json(out)
    if (
        not rc
        and record is not None
        and record.get("seconds") is None
        and str(record.get("note", "")).startswith("skipped")
    ):
        return Run(None, peak, record)  # the module says why it did not run (e.g. would not fit in memory)
    if rc or record is None or not isinstance(record.get("seconds"), (int, float)):
        return Run(None, peak, error=f"exited {rc}: {tail(err or out)}")
    return Run(float(record["seconds"]), peak, record)


def fmt_time(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.1f} us"
    if seconds < 1:
        return f"{seconds * 1e3:.0f} ms"
    return f"{seconds:.1f} s"


def fmt_mem(kib: int | None) -> str:
    if not kib:
        return "-"
    mb = kib * 1024 / 1e6
    return f"{mb / 1000:.1f} GB" if mb >= 1000 else f"{mb:.0f} MB"


def fmt_ratio(a: float | None, b: float | None) -> str:
    if a is None or not b:
        return "-"
    r = a / b
    return f"{r:.2f}x" if r < 10 else f"{r:.0f}x"


def median(runs: list[Run]) -> float | None:
    xs = [r.seconds for r in runs if r.seconds is not None]
    return statistics.median(xs) if xs and len(xs) == len(runs) else None


def table(rows: list[Row]) -> tuple[list[str], list[str]]:
    """The issue's table, and the notes it needs."""
    lines = [
        "| path | size | time | ratio to the baseline | peak memory | baseline time | baseline peak memory |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    notes: list[str] = []
    last_path = None
    for row in rows:
        rec = next((r.record for r in row.runs + row.base if r.record), {})
        path = str(rec.get("path", row.case))
        t, b = median(row.runs), median(row.base)
        peak = max((r.peak_kib for r in row.runs), default=0)
        bpeak = max((r.peak_kib for r in row.base), default=0)
        errors = sorted({r.error for r in row.runs + row.base if r.error})
        shown_time = fmt_time(t) if t is not None else ("; ".join(sorted({e.split(":")[0] for e in errors})) or "-")
        lines.append(
            f"|{' ' if path == last_path else f' {path} '}| {rec.get('size', row.case)} | {shown_time} | "
            f"{fmt_ratio(t, b)} | {fmt_mem(peak) if t is not None else '-'} | {fmt_time(b)} | "
            f"{fmt_mem(bpeak) if b is not None else '-'} |"
        )
        last_path = path
        for r in row.runs + row.base:
            note = r.record.get("note")
            if note and f"{row.case}: {note}" not in notes:
                notes.append(f"{row.case}: {note}")
        notes += [f"{row.case}: {e}" for e in errors]
    return lines, notes


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small sizes, one run each (a smoke run)")
    ap.add_argument("--only", nargs="+", choices=AREAS, metavar="AREA", help=f"areas to run, of {', '.join(AREAS)}")
    ap.add_argument("--case", nargs="+", dest="cases", metavar="NAME", help="only these cases (of the areas run)")
    ap.add_argument("--inputs", type=Path, default=DEFAULT_INPUTS, help="where the generated inputs go (kept)")
    ap.add_argument("--runs", type=int, default=None, help="runs of each case and of its baseline [3; --quick 1]")
    ap.add_argument("--seed", type=int, default=None, help="passed to --generate and --case [each module's own]")
    ap.add_argument("--timeout", type=float, default=None, help="seconds one child may run [1800; --quick 300]")
    ap.add_argument("--out", type=Path, default=None, help="result section [bench/results/site_scale.md]")
    args = ap.parse_args(argv)
    runs = args.runs or (1 if args.quick else 3)
    if runs < 1:
        ap.error(f"--runs {runs}: at least 1")
    timeout = args.timeout or (300.0 if args.quick else 1800.0)
    partial = args.quick or args.only or args.cases  # never overwrites the full section unless --out says so
    out = args.out or (args.inputs / f"site_scale-{'quick' if args.quick else 'partial'}.md" if partial else OUT)
    rows: list[Row] = []
    skipped: list[str] = []
    started = time.monotonic()
    for area in args.only or AREAS:
        if not module(area).exists():
            skipped.append(f"{area}: bench/{module(area).name} does not exist yet")
            print(f"== {area}: skipped, no {module(area).name}", flush=True)
            continue
        cases, took_quick, error = list_cases(area, args.quick, timeout)
        if args.cases and not error:
            cases = [c for c in cases if c in args.cases]
            if not cases:
                continue
        if error or not cases:
            skipped.append(f"{area}: {error or 'no cases listed'}")
            print(f"== {area}: skipped, {error or 'no cases'}", flush=True)
            continue
        where = args.inputs / area
        where.mkdir(parents=True, exist_ok=True)
        gen = [sys.executable, str(module(area)), "--generate", str(where)]
        gen += [] if args.seed is None else ["--seed", str(args.seed)]
        t = time.monotonic()
        rc, _, err, _, expired = run_child([*gen, "--quick"] if took_quick else gen, timeout * 4)
        print(f"== {area}: generated in {time.monotonic() - t:.0f} s (exit {rc})", flush=True)
        if rc or expired:
            skipped.append(f"{area}: --generate {'timed out' if expired else f'exited {rc}'}: {tail(err)}")
            continue
        for case in cases:
            row = Row(area, case)
            for _ in range(runs):  # interleaved, so that drift on a shared machine hits both alike
                row.runs.append(measure(area, case, where, False, timeout, args.seed))
                row.base.append(measure(area, case, where, True, timeout, args.seed))
            rows.append(row)
            print(
                f"   {case}: {fmt_time(median(row.runs))} vs {fmt_time(median(row.base))}, "
                f"peak {fmt_mem(max(r.peak_kib for r in row.runs))}",
                flush=True,
            )
    lines_table, notes = table(rows)
    cmd = "python3 bench/site_scale.py" + (" --quick" if args.quick else "")
    cmd += f" --only {' '.join(args.only)}" if args.only else ""
    cmd += f" --case {' '.join(args.cases)}" if args.cases else ""
    cmd += f" --runs {args.runs}" if args.runs else ""
    cmd += f" --seed {args.seed}" if args.seed is not None else ""
    seeded = "each module's own seed" if args.seed is None else f"seed {args.seed}"
    lines = [
        "## Site scale: 10,000 nodes, 200,000 jobs (issue 32)" + (" [quick smoke run]" if args.quick else ""),
        "",
        "Each area's module (`bench/scale_<area>.py`) makes its inputs by scaling up what the real 26.05 daemons "
        f"printed (same shapes, more records; {seeded}). Each case ran {runs} time(s) as itself and {runs} time(s) as its "
        "baseline (`json.loads` of the same JSON documents, unless the note says otherwise), interleaved, "
        "each in a fresh child process run alone; time is the median, peak memory the child's largest "
        f"resident set (`wait4`). {os.cpu_count()} CPUs, Python {platform.python_version()}.",
        "",
        *lines_table,
        "",
    ]
    if notes or skipped:
        lines += [f"- {n}" for n in notes] + [f"- skipped {s}" for s in skipped] + [""]
    lines += [f"Command: `{cmd}` ({time.monotonic() - started:.0f} s in all)", ""]
    text = "\n".join(lines)
    print(text)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    failed = any(r.error for row in rows for r in row.runs + row.base)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
