"""Decoders for ``sacct --json`` compared on one document (``bench/scale_history.py --decoders``).

Each row reads every job of the document once and prints its wall and CPU
time, as a ratio to ``json.loads`` of the whole document (the baseline; left
out where it would not fit in memory, then to the reference reader):

* ``json.loads``: the whole document at once (memory: all of it, parsed).
* ``ijson items``: ``jobs.item`` with ijson's C backend, each job built whole.
* the reference reader: :func:`~slurm_pool.adapters.sacct_stream.sacct_jobs`
  without ``fields`` (ijson, and a second tokenizing for what follows ``jobs``).
* ``orjson`` / ``msgspec`` per job: each job's text (cut by its indent) decoded whole.
* ``msgspec`` Struct: the fast reader (``sacct_jobs`` with ``JOB_FIELDS``: jobs
  cut apart by their indent and decoded alone, only the keys the records read).
* ``read_sacct`` with the reference reader and with the fast one: the
  simulator's whole read (records, checks, the replay's jobs).

    python3 bench/scale_history.py --decoders --case history-100000 --inputs DIR
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import ijson  # type: ignore[import-untyped]
import msgspec

from slurm_pool.adapters.sacct_stream import JOB_FIELDS, sacct_jobs
from slurm_pool.sim import history

#: Between two jobs, as Slurm prints them.
CUT = b"\n  },\n  {"


def job_texts(path: Path) -> Iterator[bytes]:
    """Each job's text (all but the last cut by :data:`CUT`; the last up to the end of ``jobs``)."""
    with path.open("rb") as fh:
        head = fh.read(1 << 16)
        buf = bytearray(head[head.index(b"[", head.index(b'"jobs"')) + 1 :].lstrip())
        while True:
            data = fh.read(1 << 20)
            parts = bytes(buf + data).split(CUT)
            for n, part in enumerate(parts[:-1]):
                yield (b"{" if n or not part.startswith(b"{") else b"") + part + b"\n  }"
            buf = bytearray(b"{" + parts[-1]) if len(parts) > 1 else bytearray(parts[-1])
            if not data:
                yield bytes(buf[: buf.rindex(b"\n  }") + 4])
                return


def _reference(path: Path, capacity: dict[str, int]) -> history.History:
    with path.open("rb") as fh:
        return history.jobs_from_records(sacct_jobs(fh, str(path), history.HistoryError), capacity, str(path))


def candidates(path: Path, capacity: dict[str, int], whole: bool) -> list[tuple[str, Callable[[], Any]]]:
    """(name, what it runs) of each decoder."""
    rows: list[tuple[str, Callable[[], Any]]] = []
    if whole:
        rows.append(("json.loads, whole document", lambda: len(json.loads(path.read_bytes())["jobs"])))
    rows.append(("ijson items (C backend), each job whole", lambda: _count(ijson.items(path.open("rb"), "jobs.item"))))
    rows.append(("reference reader (ijson + tail tap)", lambda: _count(sacct_jobs(path.open("rb"), "x"))))
    try:
        import orjson  # not a dependency: compared where installed

        rows.append(("orjson per job, whole", lambda: _count(orjson.loads(t) for t in job_texts(path))))
    except ImportError:
        pass
    rows.append(("msgspec per job, whole", lambda: _count(msgspec.json.decode(t) for t in job_texts(path))))
    rows.append(("msgspec Struct per job, JOB_FIELDS (fast reader)", lambda: _count(_fast(path))))
    rows.append(("read_sacct, reference reader", lambda: len(_reference(path, capacity).jobs)))
    rows.append(("read_sacct, fast reader", lambda: len(history.read_sacct(str(path), capacity).jobs)))
    return rows


def _fast(path: Path) -> Iterator[Any]:
    with path.open("rb") as fh:
        yield from sacct_jobs(fh, str(path), history.HistoryError, JOB_FIELDS)


def _count(items: Any) -> int:
    return sum(1 for _ in items)


def compare(path: Path, capacity: dict[str, int], whole: bool) -> str:
    """The markdown table of :func:`candidates` on ``path``."""
    results = []
    for name, fn in candidates(path, capacity, whole):
        wall, cpu = time.perf_counter(), time.process_time()
        n = fn()
        results.append((name, n, time.perf_counter() - wall, time.process_time() - cpu))
        print(f"  {name}: {results[-1][2]:.1f} s", flush=True)
    base = results[0]
    lines = [
        f"Decoders on {path.name} ({path.stat().st_size / 1e9:.2f} GB), ratios to {base[0]}:",
        "",
        "| decoder | jobs | wall | CPU | CPU ratio |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, n, w, c in results:
        lines.append(f"| {name} | {n:,} | {w:.1f} s | {c:.1f} s | {c / base[3]:.2f}x |")
    if not whole:
        lines += ["", "(json.loads left out: the parsed document would not fit in this machine's memory)"]
    return "\n".join(lines)


if __name__ == "__main__":
    import sys

    print(compare(Path(sys.argv[1]), {"proja": 16, "projb": 16}, whole=True))
