"""Jobs for the simulator from public traces (pure: callers pass file text).

* Philly virtual-cluster traces, as Gavel ships them (tab-separated, no
  header; column 6 is the arrival time in seconds, column 7 the GPU count).
  One virtual cluster stands for one project.
* Philly job runtimes (one ``runtime`` column, seconds).  Gavel's own step
  counts are not real durations, so each job's duration is a draw from the
  real runtime distribution, keyed by a hash of the job's name: the same
  trace always gives the same jobs.

Every number is read with :func:`slurm_pool.text.strict_float` /
:func:`~slurm_pool.text.strict_int` (no NaN, infinities, ``1_0`` or non-ASCII
digits): a row that is not a plain number is refused with its ``file:line``,
never dropped, so a replay is always of the whole trace.  A UTF-8 byte order
mark before the header (spreadsheet exports) is ignored, as ``utf-8-sig``
would.
"""

from __future__ import annotations

import csv
import hashlib
import io
import itertools
import math
from dataclasses import dataclass
from typing import Iterator, Sequence

from slurm_pool.errors import InputError
from slurm_pool.sim.engine import Job
from slurm_pool.text import strict_float, strict_int

DAY = 86400.0


class TraceError(InputError):
    """A trace line that cannot be read; the message names the line."""


@dataclass(frozen=True)
class Arrival:
    """One job of a virtual-cluster trace: when it came and how many GPUs it asked for."""

    time: float
    gpus: int


def _arrival(time: object, gpus: object, where: str) -> Arrival:
    """One validated arrival; ``where`` (``file:line``) names the row in errors."""
    try:
        a = Arrival(strict_float(time, "arrival"), strict_int(gpus, "gpus"))
    except ValueError:
        raise TraceError(f"{where}: arrival {time!r} / gpus {gpus!r} are not numbers") from None
    if a.time < 0 or a.gpus < 1:
        raise TraceError(f"{where}: arrival {a.time} must be >= 0 and gpus {a.gpus} >= 1")
    return a


def parse_vc_trace(text: str, name: str = "trace") -> list[Arrival]:
    """Rows of a Gavel/Philly virtual-cluster trace, in file order."""
    out = []
    for n, line in enumerate(_text(text).splitlines(), 1):
        if not line.strip():
            continue
        cols = line.split("\t")
        if len(cols) < 7:
            raise TraceError(f"{name}:{n}: expected 7 tab-separated columns, got {len(cols)}")
        out.append(_arrival(cols[5], cols[6], f"{name}:{n}"))
    return out


def _text(text: str) -> str:
    """The file's text without a leading UTF-8 byte order mark (as ``utf-8-sig`` decodes it)."""
    return text.removeprefix("\ufeff")


ARRIVAL_COLUMNS = ("vc", "arrival_seconds", "num_gpus")


def arrivals_csv(rows: dict[str, Sequence[Arrival]]) -> str:
    """A compact CSV (``vc,arrival_seconds,num_gpus``) of several virtual clusters' arrivals."""
    out = [",".join(ARRIVAL_COLUMNS)]
    for vc, arrivals in rows.items():
        out.extend(f"{vc},{a.time:.3f},{a.gpus}" for a in arrivals)
    return "\n".join(out) + "\n"


def parse_arrivals_csv(text: str, name: str = "arrivals") -> dict[str, list[Arrival]]:
    """Read :func:`arrivals_csv` output back: arrivals per virtual cluster, in file order."""
    reader = csv.DictReader(io.StringIO(_text(text)))
    if tuple(reader.fieldnames or ()) != ARRIVAL_COLUMNS:
        raise TraceError(f"{name}: columns {reader.fieldnames} are not {list(ARRIVAL_COLUMNS)}")
    rows: dict[str, list[Arrival]] = {}
    for n, row in enumerate(reader, 2):
        rows.setdefault(row["vc"], []).append(_arrival(row["arrival_seconds"], row["num_gpus"], f"{name}:{n}"))
    return rows


def parse_runtimes(text: str, name: str = "runtimes") -> list[float]:
    """The ``runtime`` column (seconds), sorted."""
    reader = csv.DictReader(io.StringIO(_text(text)))
    if reader.fieldnames is None or "runtime" not in reader.fieldnames:
        raise TraceError(f"{name}: no 'runtime' column (columns: {reader.fieldnames})")
    values = []
    for n, row in enumerate(reader, 2):
        try:
            value = strict_float(row["runtime"], "runtime")
        except ValueError:
            raise TraceError(f"{name}:{n}: runtime {row['runtime']!r} is not a number") from None
        if value < 0:
            raise TraceError(f"{name}:{n}: runtime {value:g} is negative")
        values.append(value)
    if not values:
        raise TraceError(f"{name}: no runtimes")
    return sorted(values)


class RuntimeSampler:
    """Deterministic draws from an empirical runtime distribution, clamped to ``[lo, hi]``."""

    def __init__(self, runtimes: Sequence[float], lo: float = 60.0, hi: float = 7 * DAY):
        if not runtimes:
            raise ValueError("runtimes: empty")
        if not 0 < lo <= hi:
            raise ValueError(f"runtime clamp [{lo}, {hi}] is not a positive range")
        self.values = sorted(runtimes)
        self.lo, self.hi = lo, hi

    def draw(self, key: str) -> float:
        """The runtime for ``key``: its hash picks a quantile of the distribution."""
        u = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") / 2.0**64
        v = self.values[min(len(self.values) - 1, int(u * len(self.values)))]
        return min(self.hi, max(self.lo, v))


def trace_jobs(
    name: str,
    project: str | None,
    arrivals: Sequence[Arrival],
    sampler: RuntimeSampler,
    window: float,
    max_gpus: int | None = None,
) -> list[Job]:
    """Jobs named ``name-N`` that arrive inside ``[0, window)``, GPU counts capped at ``max_gpus``.

    ``project=None`` makes them borrowers: users with no servers of their own.
    """
    jobs = []
    for i, a in enumerate(arrivals):
        if a.time >= window:
            continue
        g = min(a.gpus, max_gpus) if max_gpus else a.gpus
        jobs.append(Job(f"{name}-{i}", project, a.time, sampler.draw(f"{name}:{i}"), g))
    return jobs


def gpu_seconds(jobs: Sequence[Job]) -> float:
    """Total GPU-seconds of work."""
    return sum(j.work * j.gpus for j in jobs)


def size_servers(jobs: Sequence[Job], window: float, utilization: float, server_gpus: int = 8) -> int:
    """GPUs (whole servers) at which ``jobs`` would keep the servers ``utilization`` busy on average.

    Never fewer servers than the largest job needs.
    """
    if not 0 < utilization <= 1:
        raise ValueError(f"utilization: {utilization} is not in (0, 1]")
    need = gpu_seconds(jobs) / (window * utilization)
    biggest = max((j.gpus for j in jobs), default=1)
    servers = max(math.ceil(need / server_gpus), math.ceil(biggest / server_gpus), 1)
    return servers * server_gpus


def borrower_backlog(
    pattern: Sequence[Arrival], sampler: RuntimeSampler, max_gpus: int, prefix: str = "b"
) -> Iterator[Job]:
    """An endless queue of borrower jobs: GPU counts cycle through ``pattern``
    (real jobs of projects without servers), runtimes from ``sampler``."""
    if not pattern:
        raise ValueError("borrower pattern: empty")
    for i, a in enumerate(itertools.cycle(pattern)):
        yield Job(f"{prefix}{i}", None, 0.0, sampler.draw(f"{prefix}:{i}"), min(a.gpus, max_gpus))
