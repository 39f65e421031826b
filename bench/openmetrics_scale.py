#!/usr/bin/env python3
"""The exporter's job and node counts at site scale: slurmctld's OpenMetrics answers parsed vs the command reads.

At 10,000 nodes and 200,000 jobs (``--quick``: bench.slurm_docs' small sizes), in fresh child processes:

* ``commands``: the exporter's command path, ``SlurmClient.nodes()`` and ``.jobs()`` (the narrow reads,
  answered from the recorded answers of bench/scale_slurm.py's generated documents) and
  :func:`slurm_pool.metrics.openmetrics_source.counts_from_records`;
* ``openmetrics``: :func:`slurm_pool.adapters.openmetrics.parse` of a ``/metrics/partitions`` and a
  ``/metrics/nodes`` answer scaled from the ones recorded on 26.05.3 (tests/data/slurm/26.05/openmetrics/):
  every partition of the generated spec, every node of the generated documents;
* ``json.loads`` of the same node and job documents: the baseline of bench/site_scale.py.

Neither path's time in Slurm is in the figures (squeue/sinfo printing, slurmctld serialising its counts).
Prints a markdown section and writes it to ``--out``::

    python3 bench/openmetrics_scale.py [--quick] [--inputs DIR] [--runs N] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(ROOT))

from bench.scale_slurm import DocRunner, files, load_answers, record_answers  # noqa: E402
from bench.slurm_docs import FULL, PARTITIONS, PROJECTS, QUICK, generate, size_name  # noqa: E402

RECORDED = ROOT / "tests" / "data" / "slurm" / "26.05" / "openmetrics"
PATHS = ("commands", "openmetrics", "json.loads")
_PART_LINE = re.compile(r'(slurm_partition_[a-z_]+)\{partition="[^"]*"\} (.*)')
_NODE_LINE = re.compile(r'(slurm_node_[a-z_]+)\{node="[^"]*"\} (.*)')


def scaled(text: str, line_re: re.Pattern[str], label: str, names: list[str]) -> str:
    """The recorded answer with its per-partition (per-node) samples repeated for every one of ``names``."""
    out, per = [], {}
    for line in text.splitlines():
        m = line_re.fullmatch(line)
        if m:
            per.setdefault(m.group(1), m.group(2))
        elif line != "# EOF":
            out.append(line)
    for name in names:
        out.extend(f'{metric}{{{label}="{name}"}} {value}' for metric, value in per.items())
    return "\n".join(out) + "\n# EOF\n"


def prepare(where: Path, quick: bool) -> dict[str, int]:
    n, j = QUICK if quick else FULL
    sizes = {"nodes": n, "jobs": j}
    nodes, jobs, _ = files(where, sizes)
    if not nodes.exists() or jobs is None or not jobs.exists():
        where.mkdir(parents=True, exist_ok=True)
        generate(where, n, j, 32, PROJECTS, PARTITIONS)
    record_answers("exporter", sizes, where)
    listed = json.loads(nodes.read_text())["nodes"]
    node_names = [x["name"] for x in listed]
    parts = sorted({p for x in listed for p in x.get("partitions") or []})
    rec = {name: (RECORDED / f"{name}.txt").read_text() for name in ("partitions", "nodes")}
    (where / "om-partitions.txt").write_text(scaled(rec["partitions"], _PART_LINE, "partition", parts))
    (where / "om-nodes.txt").write_text(scaled(rec["nodes"], _NODE_LINE, "node", node_names))
    return sizes


def child(path: str, where: Path, sizes: dict[str, int]) -> dict[str, object]:
    nodes, jobs, _ = files(where, sizes)
    assert jobs is not None
    if path == "json.loads":
        texts = [nodes.read_text(), jobs.read_text()]
        start = time.perf_counter()
        for t in texts:
            json.loads(t)
        return {"seconds": time.perf_counter() - start, "bytes": sum(len(t) for t in texts)}
    if path == "openmetrics":
        from slurm_pool.adapters import openmetrics

        parts, per_node = (where / "om-partitions.txt").read_text(), (where / "om-nodes.txt").read_text()
        start = time.perf_counter()
        counts = openmetrics.parse(parts, per_node)
        took = time.perf_counter() - start
        return {"seconds": took, "bytes": len(parts) + len(per_node), "samples": len(counts.jobs) + len(counts.nodes)}
    from slurm_pool.adapters.slurm import SlurmClient
    from slurm_pool.metrics.openmetrics_source import counts_from_records

    runner = DocRunner(nodes, jobs, load_answers(where, f"exporter-{size_name(sizes['nodes'], sizes['jobs'])}"))
    start = time.perf_counter()
    client = SlurmClient(runner)
    counts = counts_from_records(client.nodes(), client.jobs())
    took = time.perf_counter() - start
    return {"seconds": took, "samples": len(counts.jobs) + len(counts.nodes), "parsed_late": runner.parsed_late}


def run(path: str, where: Path, quick: bool) -> tuple[float, int]:
    """One child run: its seconds and its peak RSS (KiB, its own ``getrusage``)."""
    argv = [sys.executable, __file__, "--child", path, "--inputs", str(where)] + (["--quick"] if quick else [])
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    if proc.returncode:
        raise SystemExit(f"{path}: child failed ({proc.returncode}): {proc.stderr[-2000:]}")
    record = json.loads(proc.stdout.strip().splitlines()[-1])
    return float(record["seconds"]), int(record["peak_kib"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small sizes")
    ap.add_argument("--inputs", type=Path, default=BENCH / "results" / "scale-inputs" / "slurm")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--child", choices=PATHS, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    n, j = QUICK if args.quick else FULL
    sizes = {"nodes": n, "jobs": j}
    if args.child:
        import resource

        record = child(args.child, args.inputs, sizes)
        record["peak_kib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        print(json.dumps(record))
        return 0
    prepare(args.inputs, args.quick)
    rows = {}
    for path in PATHS:
        runs = [run(path, args.inputs, args.quick) for _ in range(args.runs)]
        rows[path] = (statistics.median(r[0] for r in runs), max(r[1] for r in runs))
        print(f"{path}: {rows[path][0]:.3f} s, {rows[path][1] / 1024:.0f} MiB", file=sys.stderr, flush=True)
    base = rows["json.loads"][0]
    cmd = "python3 bench/openmetrics_scale.py" + (" --quick" if args.quick else "") + f" --runs {args.runs}"
    lines = [
        f"### Job and node counts at {n:,} nodes / {j:,} jobs",
        "",
        f"`{cmd}` ({platform.node() and 'load average ' + ' '.join(f'{x:.2f}' for x in os.getloadavg())}, "
        f"Python {platform.python_version()}, median of {args.runs} runs each, peak RSS the largest)",
        "",
        "| path | seconds | x json.loads | peak RSS |",
        "|---|---|---|---|",
    ]
    for path, (secs, peak) in rows.items():
        lines.append(f"| {path} | {secs:.3f} | {secs / base:.3f} | {peak / 1024:.0f} MiB |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
