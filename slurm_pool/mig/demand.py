"""Demand sources for the planner: job needs files and ``sacct --json`` history.

Pure parsing: nothing here runs Slurm; ``sacct --json`` output is read from a
file.  GRES Types in accounting (``gres/gpu:a100-sxm4-40gb_1g.5gb``,
``gpu:nvidia_a100_3g.39gb``) are mapped back to profiles by their trailing
``<slices>g.<GB>gb`` part, accepting either the profile-name GB or the GiB
figure Slurm's autodetection uses.
"""

from __future__ import annotations

import csv
import io
import re
from collections import Counter, defaultdict
from typing import Any, Iterable

from slurm_pool.adapters.records import job_records, parse_jobs
from slurm_pool.errors import InputError
from slurm_pool.mig.catalogue import GPU_MODELS, mig_gres_types
from slurm_pool.mig.planner import MAX_DEMAND, PlanError, demand_from_needs
from slurm_pool.mig.profiles import geometry
from slurm_pool.text import strict_float, strict_int
from slurm_pool.textio import parse_json

#: The tail of a MIG GRES Type; searched for, and it must end the string.
_TAIL_RE = re.compile(r"([0-9]+)g\.([0-9]+)gb(\+me)?\Z")
#: The largest GPU memory (GB) a needs row may ask for; far above any GPU's.
MAX_NEED_GB = 100_000


def is_mig_type(gres_type: str) -> bool:
    """True when a GRES Type names a MIG instance (it ends in ``<slices>g.<GB>gb``), of any model."""
    return _TAIL_RE.search(gres_type.lower()) is not None


def profile_for_gres_type(model: str, gres_type: str) -> str | None:
    """The plain profile behind a GRES Type, or None when it is not a MIG type of ``model``."""
    geo = geometry(model)
    t = gres_type.lower().removeprefix("gpu:")
    plain = [p for p in geo.profiles.values() if not p.media_ext]
    for p in plain:
        if t in mig_gres_types(model, p.name) or t == p.name:
            return p.name
    m = _TAIL_RE.search(t)
    if not m:
        return None
    slices, gb = int(m.group(1)), int(m.group(2))
    gib = GPU_MODELS[model].mig_gib
    cands = [p for p in plain if p.compute == slices and gb in (p.memory_gb, gib.get(p.name))]
    return cands[0].name if len(cands) == 1 else None


def parse_needs(text: str) -> list[tuple[float, float, int]]:
    """Rows of (GPU memory GB, compute fraction, count) from CSV or JSON.

    CSV needs a header with ``gpu_mem_gb`` (or ``memory_gb``) and optionally
    ``compute`` (fraction of a GPU, 0..1) and ``count``; JSON is a list of
    objects with the same keys (or an object whose ``needs`` is that list).
    Every number must be finite and plain: PlanError names the row and field.
    """
    text = text.strip()
    rows: Any
    if text.startswith("[") or text.startswith("{"):
        try:
            data = parse_json(text, "needs")
        except InputError as exc:
            raise PlanError(str(exc)) from None
        rows = data.get("needs") if isinstance(data, dict) else data
        if not isinstance(rows, list):
            raise PlanError("needs: expected a JSON list of objects, or an object with a 'needs' list")
    else:
        reader = csv.DictReader(io.StringIO(text))
        rows = list(reader)
        header = reader.fieldnames or []
        if text and not {"gpu_mem_gb", "memory_gb"} & set(header):
            raise PlanError(f"needs: the CSV header {','.join(header)!r} has no gpu_mem_gb column")
    return [_need_row(i, r) for i, r in enumerate(rows, 1)]


def _need_row(n: int, row: object) -> tuple[float, float, int]:
    """One needs row as (memory GB, compute fraction, count)."""
    where = f"needs row {n}"
    if not isinstance(row, dict):
        raise PlanError(f"{where}: {row!r} is not an object")
    key = "gpu_mem_gb" if "gpu_mem_gb" in row else "memory_gb"
    if row.get(key) in (None, ""):
        raise PlanError(f"{where}: missing gpu_mem_gb")

    def number(field: str, read: Any, default: float, lo: float, hi: float) -> Any:
        value = row.get(field)
        if value is None or value == "":
            return default
        try:
            out = read(value, f"{where}: {field}")
        except ValueError as exc:
            raise PlanError(str(exc)) from None
        if not lo <= out <= hi:
            raise PlanError(f"{where}: {field}: {value!r} is not between {lo:g} and {hi:g}")
        return out

    return (
        number(key, strict_float, 0.0, 0.0, MAX_NEED_GB),
        number("compute", strict_float, 0.0, 0.0, 1.0),
        number("count", strict_int, 1, 0, MAX_DEMAND),
    )


def demand_from_needs_text(model: str, text: str) -> tuple[dict[str, int], int]:
    """Demand from a needs file; also how many jobs fit no profile."""
    return demand_from_needs(model, parse_needs(text))


def demand_from_sacct(model: str, text: str) -> tuple[dict[str, int], dict[str, int]]:
    """MIG demand from ``sacct --json`` output, and the GRES Types that are not MIG.

    With start and end times on every job the demand is the peak number of
    instances of each profile in use at once; otherwise the total requested.
    """
    try:
        if text.lstrip().startswith("{"):  # sacct's own answer: its 'errors' are refused too
            records = parse_jobs(text, "sacct JSON")
        else:
            jobs = parse_json(text, "sacct JSON")
            if not isinstance(jobs, list):
                raise PlanError("sacct JSON: no 'jobs' list")
            records = job_records(jobs, "sacct JSON")
    except InputError as exc:
        raise PlanError(str(exc)) from None
    events: dict[str, list[tuple[float, int]]] = defaultdict(list)
    totals: Counter[str] = Counter()
    other: Counter[str] = Counter()
    timed = True
    for job in records:
        start, end = job.start_time, job.end_time
        for gtype, n in job.gpu_types.items():
            prof = profile_for_gres_type(model, gtype)
            if prof is None:
                other[gtype] += n
                continue
            totals[prof] += n
            if start is None or end is None or end < start:
                timed = False
            else:
                events[prof] += [(start, n), (end, -n)]
    if not timed:
        return dict(totals), dict(other)
    peak: dict[str, int] = {}
    for prof, evs in events.items():
        level = best = 0
        for _, delta in sorted(evs, key=lambda e: (e[0], e[1])):  # ends before starts at ties
            level += delta
            best = max(best, level)
        peak[prof] = best
    return peak, dict(other)


def merge(demands: Iterable[dict[str, int]]) -> dict[str, int]:
    out: Counter[str] = Counter()
    for d in demands:
        out.update(d)
    return dict(out)
