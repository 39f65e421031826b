#!/usr/bin/env python3
"""Site-scale cases of the start-time forecast: ``why`` for one job and the exporter's predicted waits.

A case module of :mod:`bench.site_scale` (see its docstring for the interface).
The inputs are :mod:`bench.slurm_docs`'s scaled-up copies of what the 26.05
daemons printed (``squeue --json`` and ``sinfo --json`` records, a spec with an
owner partition per node group, then ``shared``, ``scavenger`` and ``k8s-lend``),
at 1,000 nodes with about 10,000 pending jobs, and a ``sacct --json`` document
of two weeks of finished runs made from ``tests/data/slurm/26.05/sacct.json``'s
record (each user's runs, with seeded lengths).

* ``why-…``: what ``slurm-pool why JOB`` does: read Slurm (the queue, the nodes,
  the history), predict every pending job's start, explain one borrower's
  wait with its alternatives;
* ``exporter-…``: one forecast of the exporter's predicted waits
  (:class:`slurm_pool.metrics.predicted.PredictionReader` over
  :func:`slurm_pool.predict.live.forecast`) and its metric families.

The baseline of each case is ``json.loads`` of the same three documents.  The
forecast reads the spec through :func:`slurm_pool.spec.load_spec` before the
clock starts (the exporter and ``why`` load it once, as here).

    python3 bench/scale_forecast.py --list [--quick]
    python3 bench/scale_forecast.py --generate DIR [--seed N] [--quick]
    python3 bench/scale_forecast.py --case NAME --inputs DIR [--baseline] [--profile FILE]
    python3 bench/scale_forecast.py --report [--size NODES,JOBS] [--runs N] [--before-commit REV] [--out FILE]

``--report`` runs every case in fresh children against ``json.loads`` and the code at ``REV`` and writes
bench/results/predict_speed.md.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import random
import re
import sys
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
#: ``--tree DIR``: the slurm_pool package of another checkout (the code before), ahead of this one's.
TREE = next((sys.argv[i + 1] for i, a in enumerate(sys.argv[:-1]) if a == "--tree"), None)
if TREE:
    sys.path.insert(0, TREE)

from bench.scale_slurm import DocRunner, answers_path, load_answers, narrow_stamp  # noqa: E402
from bench.slurm_docs import FIXTURES, PARTITIONS, generate, size_name  # noqa: E402

#: (nodes, jobs in the queue) of the full and the quick datasets: about 10,000 (500) of the jobs are pending.
FULL = (1_000, 17_000)
QUICK = (100, 1_700)
#: Projects of the spec (as many users, two each): fewer than site_scale's 300, as 1,000 nodes have fewer.
PROJECTS = 120
#: Finished runs in the history document, over :data:`DAYS` days.
RUNS_PER_USER, DAYS = 12, 14
NOW = 1796234706.0
#: The exporter's forecasts run without the late run (``--late-range``: with it, as before).
LATE_RANGE = False


#: ``--size NODES,JOBS``: another size than FULL (the quick one is QUICK).
SIZE: tuple[int, int] | None = None


def size(quick: bool) -> tuple[int, int]:
    return QUICK if quick else SIZE or FULL


def cases(quick: bool) -> list[str]:
    n, j = size(quick)
    return [f"{k}-{size_name(n, j)}" for k in ("why", "exporter")]


def parse_case(name: str) -> tuple[str, int, int]:
    m = re.fullmatch(r"(why|exporter)-([0-9]+)n-([0-9]+)j", name)
    if m is None:
        raise SystemExit(f"--case {name!r}: not a case of this module (see --list)")
    return m.group(1), int(m.group(2)), int(m.group(3))


def history_path(where: Path, nodes: int) -> Path:
    return where / f"sacct-{size_name(nodes)}-forecast.json"


def write_history(path: Path, nodes: int, seed: int) -> None:
    """Two weeks of finished runs of every user of the spec, from the recorded ``sacct --json`` record."""
    if path.exists():
        return
    doc = json.loads((FIXTURES / "sacct.json").read_text())
    template = doc["jobs"][0]
    rng = random.Random(seed)
    groups = PARTITIONS - 3
    out = []
    job_id = 10_000_000
    for p in range(PROJECTS - 1):
        for who in "ab":
            for _ in range(RUNS_PER_USER):
                rec = copy.deepcopy(template)
                gpus = rng.choice((1, 1, 2, 4, 8))
                own = p < groups and rng.random() < 0.5
                seconds = int(rng.lognormvariate(7.5, 1.3)) + 60
                end = int(NOW) - rng.randrange(DAYS * 86400)
                rec.update(job_id=job_id, user=f"u{p:03d}{who}", account=f"p{p:03d}")
                rec["partition"] = f"g{p:02d}-owner" if own else rng.choice(("shared", "scavenger"))
                rec["state"] = {"current": ["COMPLETED"], "reason": "None"}
                rec["time"].update(start=end - seconds, end=end, elapsed=seconds, submission=end - seconds - 60)
                for kind in ("allocated", "requested"):
                    for t in rec["tres"][kind]:
                        if t["type"] == "gres":
                            t["count"] = gpus
                out.append(rec)
                job_id += 1
    doc["jobs"] = out
    path.write_text(json.dumps(doc, indent=1))


def make_inputs(where: Path, nodes: int, jobs: int, seed: int) -> None:
    """The documents, then the narrow reads' answers (recorded from one forecast, so a measured run does
    not parse the JSON to answer ``sinfo --Format``)."""
    where.mkdir(parents=True, exist_ok=True)
    generate(where, nodes, jobs, seed, PROJECTS, PARTITIONS)
    write_history(history_path(where, nodes), nodes, seed)
    name = f"forecast-{size_name(nodes, jobs)}"
    if load_answers(where, name):
        return
    from slurm_pool.adapters.slurm import SlurmClient
    from slurm_pool.predict.live import forecast
    from slurm_pool.spec import load_spec

    paths = files(where, nodes, jobs)
    runner = HistoryRunner(*paths[:3])
    runner.record = True
    forecast(SlurmClient(runner), load_spec(paths[3]), now=NOW)
    answers_path(where, name).write_text(json.dumps({"stamp": narrow_stamp(), "answers": runner.recorded}))


def files(where: Path, nodes: int, jobs: int) -> tuple[Path, Path, Path, Path]:
    return (
        where / f"nodes-{size_name(nodes)}.json",
        where / f"squeue-{size_name(nodes, jobs)}.json",
        history_path(where, nodes),
        where / f"spec-{size_name(nodes)}.yaml",
    )


class HistoryRunner(DocRunner):
    """:class:`DocRunner` that answers ``sacct --json`` with the history document."""

    def __init__(self, nodes: Path, jobs: Path, history: Path, answers: list[tuple[list[str], str]] | None = None):
        super().__init__(nodes, jobs, answers)
        self.history = history

    def answer(self, argv: list[str]) -> str | None:
        if argv[0] == "sacct" and "--json" in argv:
            return self.history.read_text()
        return super().answer(argv)


def path_why(runner: DocRunner, spec: Any) -> Callable[[], dict[str, Any]]:
    """``slurm-pool why JOB``: a forecast read from Slurm, then one pending borrower's explanation."""
    from slurm_pool.adapters.slurm import SlurmClient
    from slurm_pool.predict.explain import explain
    from slurm_pool.predict.live import forecast

    def why() -> dict[str, Any]:
        fc = forecast(SlurmClient(runner), spec, now=NOW)
        job = next(j for j in sorted(fc.predictions) if fc.jobs[j].partition == "shared" and fc.jobs[j].gpus == 8)
        ex = explain(fc, job)
        got = sum(p.start is not None for p in fc.predictions.values())
        return {"pending": len(fc.predictions), "predicted": got, "alternatives": len(ex.alternatives)}

    return why


def path_exporter(runner: DocRunner, spec: Any) -> Callable[[], dict[str, Any]]:
    """The exporter's predicted waits: one forecast through its reader, then the metric families."""
    from slurm_pool.adapters.slurm import SlurmClient
    from slurm_pool.metrics.predicted import PredictionReader, prediction_metrics
    from slurm_pool.predict.live import forecast
    from slurm_pool.predict.pool import PoolModel

    pool = PoolModel.from_spec(spec)  # the exporter builds it once

    def waits() -> dict[str, Any]:
        slurm = SlurmClient(runner)
        kw = {} if LATE_RANGE else {"late_range": False}  # the code before it had no such choice
        reader = PredictionReader(lambda: forecast(slurm, spec, now=NOW, pool=pool, **kw))
        got = reader()
        families = prediction_metrics(got)
        return {
            "pending": sum(len(w) + m for w, m in got.values()),
            "predicted": sum(len(w) for w, _ in got.values()),
            "families": len(families),
        }

    return waits


PATHS = {"why": ("`why` for one job (forecast + explanation)", path_why),
         "exporter": ("exporter's predicted waits (one forecast)", path_exporter)}  # fmt: skip


def _cpu() -> float:
    """CPU seconds of this process and its waited-for children (a forked late run's too)."""
    import resource

    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def run_case(name: str, where: Path, baseline: bool, profile: Path | None = None) -> dict[str, Any]:
    kind, nodes, jobs = parse_case(name)
    paths = files(where, nodes, jobs)
    for p in paths:
        if not p.exists():
            raise SystemExit(f"{p}: not generated (run --generate first)")
    label, fn = PATHS[kind]
    out: dict[str, Any] = {"path": label, "size": f"{nodes:,} nodes, {jobs:,} jobs", "baseline": baseline}
    if baseline:
        texts = [p.read_text() for p in paths[:3]]
        cpu = _cpu()
        start = time.perf_counter()
        for t in texts:
            json.loads(t)
        out["seconds"] = time.perf_counter() - start
        out["cpu_seconds"] = _cpu() - cpu
        return out
    from slurm_pool.spec import load_spec

    spec = load_spec(paths[3])
    work = fn(HistoryRunner(*paths[:3], load_answers(where, f"forecast-{size_name(nodes, jobs)}")), spec)
    if profile is not None:
        import cProfile

        prof = cProfile.Profile()
        start = time.perf_counter()
        extra = prof.runcall(work)
        out["seconds"] = time.perf_counter() - start
        prof.dump_stats(str(profile))
    else:
        cpu = _cpu()
        start = time.perf_counter()
        extra = work()
        out["seconds"] = time.perf_counter() - start
        out["cpu_seconds"] = _cpu() - cpu
    out.update(extra)
    return out


def report(where: Path, quick: bool, runs: int, before: str | None, seed: int, out: Path) -> list[str]:
    """Every case ``runs`` times, interleaved: ``json.loads`` of its documents, the code at ``before`` (a
    commit, checked out beside) and this code, each in a fresh child; a markdown section written to ``out``."""
    import statistics
    import subprocess
    import tempfile

    sys.path.insert(0, str(ROOT / "bench"))
    from site_scale import run_child
    from timing import emit

    n, j = size(quick)
    make_inputs(where, n, j, seed)
    me = [sys.executable, str(Path(__file__).resolve())]
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "before"
        if before:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), before], check=True,
                           capture_output=True)  # fmt: skip
        try:
            got: dict[tuple[str, str], list[dict[str, Any]]] = {}
            for _ in range(runs):
                for case in cases(quick):
                    kinds = [("json.loads", ["--baseline"])]
                    kinds += [("before", ["--before", "--tree", str(tree)])] if before else []
                    kinds += [("now", [])]
                    for label, extra in kinds:
                        rc, text, err, peak, _ = run_child([*me, "--case", case, "--inputs", str(where), *extra], 1800)
                        if rc:
                            raise SystemExit(f"{case} ({label}) exited {rc}: {err.strip()[-500:]}")
                        rec = json.loads(text.strip().splitlines()[-1])
                        rec["peak_mib"] = peak / 1024
                        got.setdefault((case, label), []).append(rec)
        finally:
            if before:
                subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], check=False)
    load = os.getloadavg()
    sized = f" --size {n},{j}" if SIZE and not quick else ""
    cmd = f"python3 bench/scale_forecast.py --report{' --quick' if quick else sized} --runs {runs}" + (
        f" --before-commit {before}" if before else ""
    )
    lines = [
        "## Forecasts at site scale: `why` and the exporter's predicted waits (issue 47)",
        "",
        f"Command: `{cmd}` (load average after the run {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} on "
        f"{os.cpu_count()} CPUs).  {n:,} 8-GPU nodes and {j:,} jobs scaled up from the recorded 26.05 documents "
        "(`bench/slurm_docs.py`), plus a `sacct --json` of two weeks of finished runs; each case in a fresh "
        f"child, {runs} runs interleaved, medians (peak memory: the largest).  *before*: the same calls on the "
        "code at the commit named (the exporter's forecast with its late run, `why`'s late run after the "
        "expected one); *json.loads*: parsing the same three documents.  CPU is the process's and its "
        "children's user + system time (less noisy than wall time on a loaded machine).",
        "",
        "| path | pending | code | wall s | CPU s | peak MiB | wall / json.loads | wall / before |",
        "|---|---:|---|---:|---:|---:|---:|---:|",
    ]
    for case in cases(quick):
        base = statistics.median(r["seconds"] for r in got[(case, "json.loads")])
        prior = got.get((case, "before"))
        bw = statistics.median(r["seconds"] for r in prior) if prior else None
        for label in ("json.loads", "before", "now"):
            recs = got.get((case, label))
            if not recs:
                continue
            wall = statistics.median(r["seconds"] for r in recs)
            cpu = statistics.median(r.get("cpu_seconds", 0.0) for r in recs)
            peak = max(r["peak_mib"] for r in recs)
            pend = recs[0].get("pending", "")
            ratio = f"{wall / bw:.2f}" if bw and label != "json.loads" else "-"
            lines.append(f"| {recs[0]['path']} | {pend} | {label} | {wall:.2f} | {cpu:.2f} | {peak:.0f} "
                         f"| {wall / base:.2f} | {ratio} |")  # fmt: skip
    lines.append("")
    emit(lines, out)
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    what = ap.add_mutually_exclusive_group(required=True)
    what.add_argument("--list", action="store_true", help="print the case names")
    what.add_argument("--generate", type=Path, metavar="DIR", help="write every case's inputs under DIR")
    what.add_argument("--case", metavar="NAME", help="run one case; prints one JSON line")
    what.add_argument("--report", action="store_true", help="run every case, write a markdown section (--out)")
    ap.add_argument("--runs", type=int, default=3, help="runs of each case (--report)")
    ap.add_argument("--before-commit", help="also run the code at this commit (--report)")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "predict_speed.md")
    ap.add_argument("--tree", help="import slurm_pool from this checkout (--case)")
    ap.add_argument("--inputs", type=Path, help="where --generate wrote the inputs (with --case)")
    ap.add_argument("--baseline", action="store_true", help="time the baseline instead")
    ap.add_argument("--profile", type=Path, help="write a cProfile of the measured call here")
    ap.add_argument("--late-range", action="store_true", help="the exporter's forecast with the late run (as before)")
    ap.add_argument("--seed", type=int, default=32)
    ap.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    ap.add_argument("--size", help="NODES,JOBS instead of the full size (--report, --generate, --list)")
    args = ap.parse_args(argv)
    global SIZE
    if args.size:
        if not re.fullmatch(r"[1-9][0-9]{0,5},[1-9][0-9]{0,6}", args.size):
            ap.error(f"--size {args.size!r}: not NODES,JOBS")
        SIZE = (int(args.size.split(",")[0]), int(args.size.split(",")[1]))
    if args.list:
        print("\n".join(cases(args.quick)))
        return 0
    if args.report:
        where = args.inputs or ROOT / "bench" / "results" / "scale-inputs" / "forecast"
        report(where, args.quick, args.runs, args.before_commit, args.seed, args.out)
        return 0
    if args.generate:
        n, j = size(args.quick)
        make_inputs(args.generate, n, j, args.seed)
        return 0
    if args.inputs is None:
        ap.error("--case needs --inputs DIR")
    global LATE_RANGE
    LATE_RANGE = args.late_range
    print(json.dumps({"case": args.case, **run_case(args.case, args.inputs, args.baseline, args.profile)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
