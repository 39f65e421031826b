"""A cluster's own history as simulator input (pure: callers pass parsed data).

``slurm-pool simulate --spec SPEC --sacct FILE`` replays the GPU jobs of a
``sacct --json`` export on the servers each project owns in the spec: what
dedicated servers gave, and what the pool would give, on the same jobs.

* A project's servers: the GPUs of the node groups it ``owns`` (physical
  GPUs).
* With ``mig`` (:func:`mig_nodes`, for the node engine), a job that held
  MIG instances (a GRES Type such as ``nvidia_a100_3g.20gb``, read as a
  profile of the spec's MIG-partitioned GPU models) asks that many
  instances of its profile; a whole-GPU job is checked against the whole
  GPUs alone.  Jobs holding more than one profile, instances and whole GPUs
  together, a MIG Type no model with layouts knows, a profile no node has or
  more instances than one node has are left out, and counted.  Without it
  (the GPU-pool engine, which cannot model MIG) instances count as GPUs.
* A job belongs to the project whose name is its account; accounts without
  servers (or unknown to the spec) are borrowers.
* Its work is its elapsed run time, its arrival its submission time, its
  size the ``gres/gpu`` it was allocated.  Jobs that never ran, ran for 0 s,
  or held no GPU are left out, and counted.
* Those times and GPU counts must be what Slurm writes: whole numbers, or
  unset (``null``, ``{"set": false}``).  A job with anything else there
  (``"nan"``, ``1e400``, ``true``, ``"1_0"``, ``"١٢"``, a negative count) is
  refused with its index and field (:class:`HistoryError`, exit 2), never
  dropped or counted as "never ran": a replay that quietly lost jobs would
  size the pool on less work than was done.
* :func:`read_sacct` reads the export as a stream (:mod:`slurm_pool.adapters.sacct_stream`):
  no size cap, one job object at a time (only the keys the records read:
  ``JOB_FIELDS``), memory bounded by the jobs kept.  A
  Slurm ``errors`` list anywhere in the document refuses it (one after the
  last job, at the end, before anything is returned).
"""

from __future__ import annotations

import functools
import os
from collections import Counter
from dataclasses import dataclass, field
from typing import IO, Any, Callable, Iterable, Mapping

from slurm_pool.adapters.records import job_record
from slurm_pool.adapters.sacct_stream import JOB_FIELDS, sacct_jobs
from slurm_pool.adapters.slurmjson import Unusable
from slurm_pool.errors import InputError
from slurm_pool.mig.demand import is_mig_type, profile_for_gres_type
from slurm_pool.sim.engine import Job
from slurm_pool.sim.nodes import nodes_from_spec
from slurm_pool.sim.units import mig_counts
from slurm_pool.spec.hosts import expand
from slurm_pool.text import strict_int
from slurm_pool.textio import open_binary


class HistoryError(InputError):
    """The export is not ``sacct --json`` output."""


@dataclass
class History:
    """Jobs ready for :func:`slurm_pool.sim.engine.simulate`, and what was left out."""

    capacity: dict[str, int]
    jobs: list[Job]
    start: float
    end: float
    skipped: Counter[str] = field(default_factory=Counter)

    @property
    def window(self) -> float:
        """From the first submission to the last end, seconds."""
        return max(self.end - self.start, 1.0)


def owned_gpus(spec: Any) -> dict[str, int]:
    """GPUs of the node groups each project owns (projects owning nothing are left out)."""
    groups = {g.name: g for g in spec.node_groups}
    out = {}
    for p in spec.projects:
        n = sum(
            len(expand(groups[g].hosts)) * groups[g].gpus.count for g in p.owns if groups[g].gpus is not None
        )  # owns is checked on load
        if n:
            out[p.name] = n
    return out


@dataclass(frozen=True)
class MigNodes:
    """What the spec's nodes offer when MIG is modelled (the node engine)."""

    models: tuple[str, ...]  # GPU models with MIG layouts: a MIG GRES Type is read as a profile of one
    most: dict[str, int]  # profile -> the most instances of it on one node
    whole: dict[str, int]  # project -> whole (unpartitioned) GPUs of the nodes it owns
    whole_total: int

    def profile(self, gres_type: str) -> str | None:
        """The profile behind a MIG GRES Type (one that some node has, when models differ); None: unknown."""
        found = {p for m in self.models if (p := _profile_for(m, gres_type)) is not None}
        pick = (found & self.most.keys()) or found
        return min(pick) if pick else None


@functools.lru_cache(maxsize=1024)
def _profile_for(model: str, gres_type: str) -> str | None:
    return profile_for_gres_type(model, gres_type)


def mig_nodes(spec: Any) -> MigNodes:
    """The MIG instances and whole GPUs of the spec's nodes (:func:`.nodes.nodes_from_spec`)."""
    nodes = nodes_from_spec(spec)
    models = {g.gpus.model for g in spec.node_groups if g.gpus is not None and any(g.gpus.mig or [])}
    most: dict[str, int] = {}
    whole: Counter[str] = Counter()
    for nd in nodes:
        for p, c in mig_counts(nd).items():
            most[p] = max(most.get(p, 0), c)
        if nd.owner is not None:
            whole[nd.owner] += nd.gpus - len(nd.mig)
    return MigNodes(tuple(sorted(models)), most, dict(whole), sum(nd.gpus - len(nd.mig) for nd in nodes))


def _mig_profile(types: Mapping[str, int], gpus: int, mig: MigNodes) -> tuple[str | None, str]:
    """The profile of the MIG instances a job held (None: whole GPUs), or why it is left out."""
    held = {t: n for t, n in types.items() if n > 0 and is_mig_type(t)}
    if not held:
        return None, ""
    profiles = {mig.profile(t) for t in held}
    if None in profiles:
        return None, "MIG type no spec model knows"
    if len(profiles) > 1:
        return None, "more than one MIG profile"
    if sum(held.values()) < gpus:
        return None, "MIG instances and whole GPUs"
    (p,) = profiles
    if p not in mig.most:
        return None, "MIG profile no node has"
    if gpus > mig.most[p]:
        return None, "more MIG instances than a node has"
    return p, ""


#: The times a replay reads: the top-level key (squeue, older sacct) and the one nested in ``time``.
_TIMES = (("submit_time", "submission"), ("start_time", "start"), ("end_time", "end"))


_INT64_MAX = 2**63 - 1


def check_numbers(raw: Mapping[str, Any], where: str) -> None:
    """Refuse a job whose times or GPU counts are not whole numbers (or unset); see the module's notes."""
    times = raw.get("time")
    times = times if isinstance(times, dict) else {}
    for top, nested in _TIMES:
        if top in raw:
            _whole(raw[top], f"{where}.{top}")
        elif nested in times:
            _whole(times[nested], f"{where}.time.{nested}")
    tres = raw.get("tres")
    tres = tres if isinstance(tres, dict) else {}
    for kind in ("allocated", "requested"):
        items = tres.get(kind)
        for k, item in enumerate(items if isinstance(items, list) else []):
            if isinstance(item, dict) and item.get("type") == "gres":
                _whole(item.get("count"), f"{where}.tres.{kind}[{k}].count")
    for key in ("tres_alloc_str", "tres_req_str"):
        text = raw.get(key)
        for part in text.split(",") if isinstance(text, str) else []:
            tres_name, sep, value = part.strip().partition("=")
            if sep and tres_name.startswith("gres/gpu"):
                _whole(value, f"{where}.{key} {tres_name}")


def _whole(value: Any, what: str) -> None:
    """``value`` is unset, or a whole number >= 0 (:func:`~slurm_pool.text.strict_int`); else HistoryError."""
    if isinstance(value, dict):  # 23.02+: {"set": ..., "infinite": ..., "number": ...}
        if value.get("set") is False or value.get("infinite") is True:
            return
        value = value.get("number")
    if value is None:
        return
    try:
        n = strict_int(value, what)
    except ValueError as exc:
        raise HistoryError(str(exc)) from None
    if n < 0:
        raise HistoryError(f"{what}: {value!r} is negative")
    if n > _INT64_MAX:  # Slurm keeps times and counts in 64 bits: a bigger number is no record of it
        raise HistoryError(f"{what}: {value!r} is too large")


class _Counted:
    """A binary stream whose ``read`` reports how many bytes it has given so far."""

    def __init__(self, raw: IO[bytes], report: Callable[[int], None]):
        self.raw, self.report, self.done = raw, report, 0

    def read(self, n: int = -1) -> bytes:
        data = self.raw.read(n)
        self.done += len(data)
        self.report(self.done)
        return data


def read_sacct(
    path: str,
    capacity: dict[str, int],
    mig: MigNodes | None = None,
    progress: Callable[[int, int | None], None] | None = None,
) -> History:
    """:func:`jobs_from_sacct` of the ``sacct --json`` file ``path`` (``-``: standard input), streamed;
    ``progress(bytes read, the file's size or None)`` as it reads."""
    with open_binary(path) as fh:
        stream: IO[bytes] = fh
        if progress is not None:
            size = os.fstat(fh.fileno()).st_size if path != "-" else None
            report = progress
            stream = _Counted(fh, lambda done: report(done, size or None))  # type: ignore[assignment]
        return jobs_from_records(sacct_jobs(stream, path, HistoryError, JOB_FIELDS), capacity, path, mig)


def jobs_from_sacct(data: Any, capacity: dict[str, int], name: str = "sacct", mig: MigNodes | None = None) -> History:
    """The GPU jobs of a ``sacct --json`` document, times shifted to start at 0.

    With ``mig``, jobs on MIG instances ask for instances of their profile (see the module's notes).
    """
    if not isinstance(data, dict) or not isinstance(data.get("jobs"), list):
        raise HistoryError(f"{name}: not sacct --json output (no 'jobs' list)")
    return jobs_from_records(enumerate(data["jobs"]), capacity, name, mig)


def jobs_from_records(
    records: Iterable[tuple[int, Any]], capacity: dict[str, int], name: str = "sacct", mig: MigNodes | None = None
) -> History:
    """:func:`jobs_from_sacct` of ``(index, job object)`` pairs, read once: only the replay's jobs are kept."""
    rows: list[Any] = []
    last_end = 0.0
    skipped: Counter[str] = Counter()
    for i, raw in records:
        if not isinstance(raw, dict):
            raise HistoryError(f"{name}: jobs[{i}] is not an object")
        check_numbers(raw, f"{name}: jobs[{i}]")
        try:
            job = job_record(raw)
        except Unusable:  # no usable job id or GPU count: left out, and counted as such
            skipped["no usable job id or count"] += 1
            continue
        submit, start, end, gpus = job.submit_time, job.start_time, job.end_time, job.gpus
        if not submit or not start or not end:  # unset (Slurm's 0)
            skipped["never ran or still running"] += 1
            continue
        if end <= start:
            skipped["ran 0 s"] += 1
            continue
        if gpus <= 0:
            skipped["no GPU"] += 1
            continue
        project = job.account if job.account in capacity else None
        profile, why = _mig_profile(job.gpu_types, gpus, mig) if mig is not None else (None, "")
        owned, pool = (capacity, sum(capacity.values())) if mig is None else (mig.whole, mig.whole_total)
        if not why and profile is None and project is not None and gpus > owned.get(project, 0):
            why = "more GPUs than the project owns"
        if not why and profile is None and project is None and gpus > pool:
            why = "more GPUs than the pool has"
        if why:
            skipped[why] += 1
            continue
        rows.append((submit, f"{job.job_id}", project, end - start, gpus, profile))
        last_end = max(last_end, float(end))
    if not rows:
        raise HistoryError(f"{name}: no GPU job that ran ({dict(skipped) or 'no jobs'})")
    t0 = min(r[0] for r in rows)
    for k, (submit, job_id, project, work, gpus, profile) in enumerate(rows):  # in place: one row at a time
        rows[k] = Job(f"{job_id}#{k}", project, submit - t0, work, gpus, profile)
    return History(dict(capacity), rows, t0, last_end, skipped)
