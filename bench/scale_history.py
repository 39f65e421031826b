"""Scale case: ``simulate`` reading a site's ``sacct --json`` history (issue 32's bench interface).

Cases ``history-100000`` and ``history-1000000``: one ``sacct --json``
document of that many job records, made by repeating the records recorded
from the real daemons (``tests/data/slurm/26.05/sacct.json`` and
``22.05/sacct-history.json``, in turn) with new job ids and seeded
submission, start and end times, printed as Slurm prints it (one-space
indent).  A case times reading the document into what the replay needs
(:func:`slurm_pool.sim.history.read_sacct`, the ``simulate`` reader);
``--quick`` has one small case, ``history-10000``.
``--baseline`` times ``json.loads`` of the same document instead, and is
skipped (with a note) where the parsed document would not fit in this
machine's memory.  ``--before`` times the reader before streaming
(``json.loads`` of the whole document, then the per-job conversion);
``--reference`` the streaming reader without its fast path (ijson only).
``--decoders`` prints the decoders compared on the case's document
(``bench/sacct_decoders.py``: json.loads, ijson, orjson and msgspec), each
reading every job, and the reader with each.

    python3 bench/scale_history.py --list [--quick]
    python3 bench/scale_history.py --generate DIR [--seed N] [--quick]
    python3 bench/scale_history.py --case NAME --inputs DIR [--baseline | --before | --reference | --decoders]
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SIZES = {"history-100000": 100_000, "history-1000000": 1_000_000}
QUICK = {"history-10000": 10_000}
FIXTURES = ("tests/data/slurm/26.05/sacct.json", "tests/data/slurm/22.05/sacct-history.json")
#: Accounts with servers in the replay (the recorded jobs run as proja, projb and projc: projc borrows).
CAPACITY = {"proja": 16, "projb": 16}
#: What json.loads holds per byte of sacct --json, about (for skipping a baseline that cannot fit).
PARSED_PER_BYTE = 5

_SENTINELS = {"job_id": 987654321001, "submission": 987654321002, "eligible": 987654321003}
_SENTINELS |= {"start": 987654321004, "end": 987654321005, "elapsed": 987654321006}
_SLOT = re.compile(r"98765432100([1-6])")


def _template(job: dict[str, Any]) -> str:
    """The record as Slurm prints it inside ``jobs``, with ``{id}``-style slots for what changes."""
    job = json.loads(json.dumps(job))
    job["job_id"] = _SENTINELS["job_id"]
    times = job.setdefault("time", {})
    for key in ("submission", "eligible", "start", "end", "elapsed"):
        times[key] = _SENTINELS[key]
    text = json.dumps(job, indent=1, sort_keys=True)
    text = "\n".join("  " + line for line in text.split("\n"))
    names = {str(v)[-1]: k for k, v in _SENTINELS.items()}
    text = text.replace("{", "{{").replace("}", "}}")
    return _SLOT.sub(lambda m: "{" + names[m.group(1)] + "}", text)


def generate(path: Path, count: int, seed: int) -> None:
    """Write a ``sacct --json`` document of ``count`` records to ``path`` (seeded, deterministic)."""
    templates = [_template(j) for f in FIXTURES for j in json.loads((ROOT / f).read_text())["jobs"]]
    rng = random.Random(seed)
    t = 1_790_000_000
    tmp = path.with_suffix(".part")
    with tmp.open("w", encoding="utf-8") as out:
        out.write('{\n "errors": [],\n "jobs": [\n')
        for k in range(count):
            t += rng.randint(0, 60)
            wait = rng.randint(0, 3600)
            run = rng.randint(1, 86400)
            out.write(",\n" if k else "")
            out.write(
                templates[k % len(templates)].format(
                    job_id=k + 1, submission=t, eligible=t, start=t + wait, end=t + wait + run, elapsed=run
                )
            )
        out.write('\n ],\n "meta": {},\n "warnings": []\n}\n')
    tmp.rename(path)


def _mem_available() -> int:
    """Bytes of memory this machine can still give (``MemAvailable``), 0 when unknown."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def run_case(name: str, inputs: Path, mode: str) -> dict[str, Any]:
    """Time one case; ``mode`` is "stream" (the reader), "baseline" (json.loads), "before" (json.loads, then
    the records) or "reference" (the stream read by ijson alone)."""
    path = inputs / f"{name}.json"
    size = f"{(SIZES | QUICK)[name]:,} records ({path.stat().st_size / 1e9:.1f} GB)"
    out: dict[str, Any] = {
        "case": name,
        "path": "simulate: reading sacct",
        "size": size,
        "baseline": mode == "baseline",
    }
    if mode != "stream" and path.stat().st_size * PARSED_PER_BYTE > _mem_available():
        out |= {"seconds": None, "note": "skipped: the whole parsed document would not fit in memory"}
        return out
    from slurm_pool.sim import history

    t0, cpu = time.perf_counter(), time.process_time()
    if mode == "baseline":
        json.loads(path.read_bytes())
    elif mode == "before":
        hist = history.jobs_from_sacct(json.loads(path.read_bytes()), dict(CAPACITY), name=str(path))
        out["jobs"] = len(hist.jobs)
    elif mode == "reference":
        from slurm_pool.adapters.sacct_stream import sacct_jobs

        with path.open("rb") as fh:
            hist = history.jobs_from_records(sacct_jobs(fh, str(path), history.HistoryError), dict(CAPACITY))
        out["jobs"] = len(hist.jobs)
    else:
        hist = history.read_sacct(str(path), dict(CAPACITY))
        out["jobs"] = len(hist.jobs)
    out["seconds"] = round(time.perf_counter() - t0, 2)
    out["cpu_seconds"] = round(time.process_time() - cpu, 2)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--generate", type=Path, metavar="DIR")
    ap.add_argument("--seed", type=int, default=32)
    ap.add_argument("--quick", action="store_true", help="the small case only")
    ap.add_argument("--case", choices=sorted(SIZES | QUICK))
    ap.add_argument("--inputs", type=Path)
    ap.add_argument("--baseline", action="store_true")
    ap.add_argument("--before", action="store_true", help="time the reader before streaming (json.loads first)")
    ap.add_argument("--reference", action="store_true", help="time the streaming reader with ijson alone")
    ap.add_argument("--decoders", action="store_true", help="compare the decoders on the case's document")
    args = ap.parse_args(argv)
    sizes = QUICK if args.quick else SIZES
    if args.list:
        print("\n".join(sizes))
    elif args.generate:
        args.generate.mkdir(parents=True, exist_ok=True)
        for name, count in sizes.items():
            if not (args.generate / f"{name}.json").exists():
                generate(args.generate / f"{name}.json", count, args.seed)
    elif args.case and args.inputs and args.decoders:
        import sacct_decoders

        path = args.inputs / f"{args.case}.json"
        fits = path.stat().st_size * PARSED_PER_BYTE <= _mem_available()
        print(sacct_decoders.compare(path, dict(CAPACITY), whole=fits))
    elif args.case and args.inputs:
        mode = "baseline" if args.baseline else "before" if args.before else "stream"
        mode = "reference" if args.reference else mode
        print(json.dumps(run_case(args.case, args.inputs, mode)))
    else:
        ap.error("one of --list, --generate DIR, or --case NAME --inputs DIR")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
