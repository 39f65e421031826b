"""Narrow readers: node and job records from ``sinfo``/``squeue`` text with only the fields the pool uses.

``squeue --json`` prints about 7 KB per job, nearly all of which the pool
never reads; these readers ask for the fields of
:class:`~slurm_pool.adapters.records.NodeRecord` and
:class:`~slurm_pool.adapters.records.JobRecord` and give exactly the records
the JSON readers give (``tests/unit/test_narrow_readers.py`` pins that on the
output recorded from the real daemons of both ends).

* Separators: every read draws a fresh random token (:func:`new_token`) that
  ends each field (``SEP``) and each record (``END`` then a newline), through
  ``--Format=Field:0SUFFIX`` (``src/squeue/opts.c`` and ``src/sinfo/opts.c``
  ``_parse_long_token``: width 0 prints the whole value, ``print.c``
  ``_print_str``).  A value -- a job name, comment or reason, which a user
  chooses and which may hold newlines -- cannot hold a token it never saw, so
  it cannot end its field or forge a record; output that does not split into
  whole records is a :class:`~slurm_pool.adapters.records.RecordError` naming
  the record.  A record without a usable job id or count (or a node line without
  a name) is reported and skipped, as from JSON
  (:func:`~slurm_pool.adapters.records.skipped`).
* Times: ``SLURM_TIME_FORMAT=%s`` makes every time Unix seconds
  (``src/common/parse_time.c`` ``_make_time_str_internal``); unset times print
  ``N/A``, ``Unknown`` or ``None``.
* A node line becomes the JSON record's shape and goes through the same
  :func:`~slurm_pool.adapters.records.node_record`; a job line goes straight to
  the record :func:`~slurm_pool.adapters.records.job_record` makes of its JSON
  shape (:class:`TextJobs`, held to ``job_record(job_dict(...))`` by the tests),
  so unset values, GPU counts and states map exactly as they do from JSON.
* What text cannot say, read again with ``squeue --json --jobs=ID,...``
  (:func:`fallback_command`), so the records stay exact:

  - 23.02+ JSON lists a job's state flags beside its base state; text prints
    one word, the flag when one is set (``job_state_string``);
  - text prints a job's ``state_desc`` in place of its reason word;
  - ``tres-alloc`` prints the request only while nothing is allocated
    (``_print_job_tres_alloc``), and the JSON reader reads the request when
    the allocation holds no GPU;
  - a job with no time limit whose end is ahead prints ``NONE``
    (``_print_job_time_end``; a running one's end is its start plus a year,
    ``src/slurmctld/job_mgr.c`` ``job_end_time_reset``; a pending one has none,
    as :func:`~slurm_pool.adapters.records.job_record` says too), and a limit over a
    year prints ``INVALID`` (``_print_secs``).
"""

from __future__ import annotations

import dataclasses
import re
import secrets
from dataclasses import dataclass
from functools import lru_cache
from types import MappingProxyType
from typing import Any, Iterable, Iterator, Mapping, Sequence

from slurm_pool.adapters.records import (
    JOB_BASE_STATES,
    ON_NODE,
    WAITING,
    JobRecord,
    NodeRecord,
    RecordError,
    RecordSkipped,
    convert_record,
    job_state,
    node_record,
    skipped,
    string_tres,
)
from slurm_pool.adapters.slurmjson import INFINITE, UINT32_MAX, Unusable, parse_duration, whole
from slurm_pool.text import shown
from slurm_pool.versions import SlurmVersion

#: The environment every narrow read runs with: times as Unix seconds.
TIME_ENV = "SLURM_TIME_FORMAT=%s"
#: squeue -O fields, in order, of the job read (``ExcNodes`` where the release has it, else a second ``-o %x`` read).
JOB_FIELDS = (
    "JobId",
    "Name",
    "State",
    "Reason",
    "Partition",
    "QOS",
    "Account",
    "UserName",
    "NodeList",
    "ReqNodes",
    "RestartCnt",
    "Comment",
    "Requeue",
    "SubmitTime",
    "StartTime",
    "EndTime",
    "PreemptTime",
    "TimeLimit",
    "tres-alloc",
    "tres-per-node",
    "tres-per-job",
    "tres-per-socket",
    "tres-per-task",
    "NumNodes",
    "Feature",
)
#: sinfo -O fields, in order, of the node read (``Version`` only where the JSON records carry it).
NODE_FIELDS = (
    "NodeList",
    "StateComplete",
    "Reason",
    "Gres",
    "GresUsed",
    "PartitionName",
    "features_act",
    "CPUs",
    "Memory",
    "NodeAddr",
)
#: A reason Slurm names by its enum (``job_state_reason_string``: one word); anything else is a ``state_desc``.
_REASON_WORD = re.compile(r"[A-Za-z0-9_]{1,64}")
_SECONDS = re.compile(r"[0-9]{1,20}")
#: What squeue prints for a text value that is not set (:func:`~slurm_pool.adapters.records.job_record` reads it "").
_UNSET = frozenset({"(null)", "N/A"})
#: What squeue prints for a time that is not set (0, INFINITE, NO_VAL).
_NO_TIME = frozenset({"N/A", "Unknown", "None"})
#: What squeue prints for a time limit that is not a number of minutes.
_NO_LIMIT = frozenset({"UNLIMITED", "NOT_SET", "Partition_Limit"})
#: What slurmctld adds to a job's start for the end of a job with no time limit.
YEAR_SECONDS = 365 * 24 * 60 * 60
#: The ``raw`` of a record read from text: one shared, read-only empty mapping.
_NO_RAW: Mapping[str, Any] = MappingProxyType({})
#: JobRecord's fields in order: :class:`TextJobs` passes them by position (a fifth of its time).
_RECORD_ORDER = (
    "job_id name state reason partition qos account user nodes required_nodes excluded_nodes restart_count comment "
    "requeue submit_time start_time end_time preempt_time time_limit gpus gpu_types shards node_count features raw"
).split()
#: :meth:`TextJobs.shape` of jobs that text cannot say exactly.
_AGAIN: tuple[Any, ...] = ()
#: Characters of output split at once (:func:`split_records`).
SPLIT_BLOCK = 1 << 20
#: At most this many jobs are read again one list at a time; more take one whole ``squeue --json``, streamed
#: (:func:`wanted_records`).
FALLBACK_LIST_MAX = 500


def new_token() -> str:
    """A fresh separator: a non-digit first (``strtol`` reads the width), then 64 random bits."""
    return "~" + secrets.token_hex(8)


@dataclass(frozen=True)
class Tokens:
    """The field and record separators of one read."""

    sep: str
    end: str

    @classmethod
    def fresh(cls) -> "Tokens":
        return cls(new_token(), new_token())


def long_format(fields: Sequence[str], tok: Tokens) -> str:
    """``Field:0SEP,...,Last:0END``: every value whole, each followed by its separator."""
    return ",".join(f"{f}:0{tok.end if i == len(fields) - 1 else tok.sep}" for i, f in enumerate(fields))


def job_fields(version: SlurmVersion) -> tuple[str, ...]:
    return JOB_FIELDS + (("ExcNodes",) if version.has("squeue_format_excnodes") else ())


def node_fields(version: SlurmVersion) -> tuple[str, ...]:
    return NODE_FIELDS + (("Version",) if version.has("json_data_parser") else ())


def job_commands(version: SlurmVersion, tok: Tokens) -> list[list[str]]:
    """The squeue reads of one job listing: the -O read, then (before ``ExcNodes``) ``-o %A SEP %x END``."""
    states = [] if version.has("squeue_json_filters") else ["--states=all"]
    base = ["env", TIME_ENV, "squeue", "--all", *states, "--noheader"]
    argv = [[*base, f"--Format={long_format(job_fields(version), tok)}"]]
    if not version.has("squeue_format_excnodes"):
        argv.append([*base, f"--format=%A{tok.sep}%x{tok.end}"])
    return argv


def node_command(version: SlurmVersion, tok: Tokens) -> list[str]:
    """The sinfo read: one line per node and partition, every partition (hidden ones too).

    ``--sort=#P`` puts the lines in the partitions' order in slurm.conf (``src/sinfo/sort.c``
    ``_sort_by_partition``), the order of a node record's ``partitions``.
    """
    fmt = f"--Format={long_format(node_fields(version), tok)}"
    return ["env", TIME_ENV, "sinfo", "--all", "--Node", "--noheader", "--sort=#P", fmt]


def split_records(text: str, n: int, tok: Tokens, what: str) -> Iterator[list[str]]:
    """``n`` values per record, one record at a time; RecordError naming the first that is not whole.

    Split a block of records at a time (one C call each), so a 200,000-job listing is never held twice.
    """
    end = tok.end + "\n"
    pos, i = 0, 0
    while pos < len(text):
        cut = text.rfind(end, pos, pos + SPLIT_BLOCK)  # the block's last whole record
        if cut < 0:
            cut = text.find(end, pos)  # one record longer than a block
        if cut < 0:
            raise RecordError(f"{what}: output ends inside a record: {shown(text[pos : pos + 200])!r}")
        for record in text[pos:cut].split(end):
            values = record.split(tok.sep)
            i += 1
            if len(values) != n:
                raise RecordError(f"{what}: record {i} ({shown(values[0][:64])!r}) has {len(values)} fields, not {n}")
            yield values
        pos = cut + len(end)


def _int(value: str, field: str, where: str, least: int = 0) -> int:
    """An id or a count (:func:`~slurm_pool.adapters.slurmjson.whole`); RecordSkipped naming the record."""
    try:
        return whole(value, field, least=least)
    except Unusable as exc:
        raise RecordSkipped(f"{where}: {exc}") from None


def _stamp(value: str, field: str) -> int:
    """Unix seconds (0: unset); a time in another form is RecordError (the read's time format did not hold)."""
    if value.isdigit() and value.isascii() and len(value) <= 20:
        return int(value)
    if value in _NO_TIME:
        return 0
    if not _SECONDS.fullmatch(value):
        raise RecordError(f"{field} {shown(value[:64])!r} is not a number")
    return int(value)


def _end(v: dict[str, str]) -> int | None:
    """EndTime; squeue prints ``NONE`` for a job with no time limit whose end is ahead (``_print_job_time_end``).

    A running job's is then its start plus a year, unless a preemption set it
    (``src/slurmctld/job_mgr.c`` ``job_end_time_reset``); a pending one's 0 (none);
    None (read it as JSON) otherwise.
    """
    if v["EndTime"] != "NONE":
        return _stamp(v["EndTime"], "EndTime")
    start = _stamp(v["StartTime"], "StartTime")
    if v["State"] == "RUNNING" and start and v["PreemptTime"] in _NO_TIME:
        return start + YEAR_SECONDS
    if v["State"] == "PENDING":  # not started: no end (job_record drops Slurm's estimate too)
        return 0
    return None


@lru_cache(maxsize=4096)
def _limit(value: str) -> int | None:
    """Minutes (None: no limit; -1: over a year, which text does not say); limits repeat, so cached."""
    if value in _NO_LIMIT:
        return None
    if value == "INVALID":  # over a year: _print_secs prints no number (read as JSON)
        return -1
    secs = parse_duration(value)
    if secs is None:
        raise RecordError(f"TimeLimit {shown(value[:64])!r} is not a time")
    return int(secs) // 60


def _null(value: str) -> str:
    return "" if value == "(null)" else value


def job_dict(values: Sequence[str], fields: Sequence[str], where: str) -> dict[str, Any]:
    """One squeue line as the ``squeue --json`` keys :func:`job_record` reads (what :class:`TextJobs` is held to)."""
    try:
        return _job_dict(dict(zip(fields, values, strict=True)), where)
    except RecordSkipped:
        raise
    except RecordError as exc:
        raise RecordError(f"{where}: {exc}") from None


def _job_dict(v: dict[str, str], where: str) -> dict[str, Any]:
    requeue = v["Requeue"]
    if requeue not in ("0", "1"):
        raise RecordError(f"Requeue {shown(requeue[:64])!r} is not 0 or 1")
    return {
        "job_id": _int(v["JobId"], "JobId", where, least=1),
        "name": v["Name"],
        "job_state": v["State"],
        "state_reason": v["Reason"],
        "partition": v["Partition"],
        "qos": v["QOS"],
        "account": v["Account"],
        "user_name": v["UserName"],
        "nodes": v["NodeList"],
        "required_nodes": v["ReqNodes"],
        "excluded_nodes": v.get("ExcNodes", ""),
        "restart_cnt": _int(v["RestartCnt"], "RestartCnt", where),
        "comment": _null(v["Comment"]),
        "requeue": requeue == "1",
        "submit_time": _stamp(v["SubmitTime"], "SubmitTime"),
        "start_time": _stamp(v["StartTime"], "StartTime"),
        "end_time": _end(v),
        "preempt_time": _stamp(v["PreemptTime"], "PreemptTime"),
        "time_limit": _limit(v["TimeLimit"]),
        "tres_alloc_str": "" if v["tres-alloc"] == "N/A" else v["tres-alloc"],
        "tres_per_node": "" if v["tres-per-node"] == "N/A" else v["tres-per-node"],
        **{
            f"tres_per_{k}": "" if v[f"tres-per-{k}"] == "N/A" else v[f"tres-per-{k}"]
            for k in ("job", "socket", "task")
        },
        "node_count": _int(v["NumNodes"], "NumNodes", where),
        "features": v["Feature"],
    }


def exact(job: dict[str, Any], version: SlurmVersion) -> bool:
    """Whether text said all JSON says of this job (see the module's docstring)."""
    if not _REASON_WORD.fullmatch(job["state_reason"]) or job["end_time"] is None or job["time_limit"] == -1:
        return False
    # squeue prints the request only while nothing is allocated; JSON reads it when the allocation has no GPU.
    asks = " ".join(job[f"tres_per_{k}"] for k in ("node", "job", "socket", "task"))
    alloc = job["tres_alloc_str"]
    gpus, _, shards = string_tres(alloc, None, None)
    if ("gpu" in asks and not gpus) or ("shard" in asks and not shards):
        return False
    return job["job_state"] in JOB_BASE_STATES or not version.has("json_data_parser")


@dataclass
class JobText:
    """A job listing from text: the records text gave exactly, and the ids to read again as JSON."""

    records: list[JobRecord]
    fallback_ids: list[int]


def parse_job_text(texts: Sequence[str], version: SlurmVersion, tok: Tokens, what: str = "squeue --Format") -> JobText:
    """The job records of :func:`job_commands`' outputs (in that order), sorted by job id."""
    fields = job_fields(version)
    rows = split_records(texts[0], len(fields), tok, what)
    excluded: dict[int, str] | None = None
    if not version.has("squeue_format_excnodes"):
        excluded = {}
        for i, (jid, exc) in enumerate(split_records(texts[1], 2, tok, f"{what} (%x)")):
            try:
                excluded[_int(jid, "JobId", f"{what} (%x): record {i + 1}", least=1)] = exc
            except RecordSkipped as problem:
                skipped(problem)
    build = TextJobs(fields, version, excluded)
    records: dict[int, JobRecord] = {}
    again: list[int] = []
    for i, values in enumerate(rows):
        try:
            got = build.record(values)
        except (Unusable, RecordError) as problem:  # named here: the message is built only for a bad record
            where = f"{what}: record {i + 1} (job {shown(values[0][:24])})"
            if isinstance(problem, (Unusable, RecordSkipped)):  # no usable id or count (a GPU count in its TRES)
                skipped(f"{where}: {problem}")
                continue
            raise RecordError(f"{where}: {problem}") from None
        if isinstance(got, int):
            again.append(got)
        else:
            records[got.job_id] = got
    return JobText([records[k] for k in sorted(records)], again)


class TextJobs:
    """One squeue line straight to its :class:`JobRecord`: what :func:`job_record` makes of :func:`job_dict`.

    The per-line work of a 200,000-job read, so it indexes the values and skips the
    JSON-shaped dict between; ``tests/unit/test_narrow_readers.py`` pins it to
    ``job_record(job_dict(...))``.  Errors name the field, not the record (the caller adds that).
    """

    def __init__(self, fields: Sequence[str], version: SlurmVersion, excluded: Mapping[int, str] | None):
        if tuple(fields[: len(JOB_FIELDS)]) != JOB_FIELDS:
            raise ValueError(f"the job fields must start with JOB_FIELDS, not {fields!r}")
        self.excluded = excluded
        self.flags_exact = not version.has("json_data_parser")  # 22.05: JSON prints the one word too
        self.exc_ix = fields.index("ExcNodes") if "ExcNodes" in fields else None
        self.shapes: dict[tuple[Any, ...], tuple[Any, ...]] = {}
        if [f.name for f in dataclasses.fields(JobRecord)] != _RECORD_ORDER:
            raise TypeError("JobRecord's fields moved: TextJobs builds it by position")

    def record(self, values: Sequence[str]) -> JobRecord | int:
        """The record, or its job id when text cannot say it exactly (:func:`exact`: read it as JSON)."""
        (
            jid_text,
            name,
            state_word,
            reason,
            partition,
            qos,
            account,
            user,
            nodes,
            required,
            restart_text,
            comment,
            requeue,
            submit_text,
            start_text,
            end_text,
            preempt_text,
            limit_text,
            alloc,
            per_node,
            per_job,
            per_socket,
            per_task,
            count_text,
            features,
        ) = values[: len(JOB_FIELDS)]
        if requeue not in ("0", "1"):
            raise RecordError(f"Requeue {shown(requeue[:64])!r} is not 0 or 1")
        jid = _whole(jid_text, "JobId", 1)
        restarts = _whole(restart_text, "RestartCnt", 0)
        submit = _stamp(submit_text, "SubmitTime")
        start = _stamp(start_text, "StartTime")
        if end_text != "NONE":
            end: int | None = _stamp(end_text, "EndTime")
        elif state_word == "RUNNING" and start and preempt_text in _NO_TIME:
            end = start + YEAR_SECONDS
        elif state_word == "PENDING":
            end = 0
        else:
            end = None
        preempt = _stamp(preempt_text, "PreemptTime")
        limit = _limit(limit_text)
        count = _whole(count_text, "NumNodes", 0)
        excluded = self.excluded
        if excluded is not None:
            if jid not in excluded:  # ended between the two reads: JSON says what it is now
                return jid
            exc = excluded[jid]
        else:
            exc = "" if self.exc_ix is None else values[self.exc_ix]
        if end is None:
            return jid
        key = (limit, reason, alloc, per_node, per_job, per_socket, per_task, state_word)
        shape = self.shapes.get(key)
        if shape is None:
            shape = self.shapes[key] = self.shape(*key)
        if shape is _AGAIN:
            return jid
        state, gpus, types, shards, seconds, unlimited_waiting = shape
        return JobRecord(
            jid,
            name if name not in _UNSET else "",
            state,
            reason,
            partition if partition not in _UNSET else "",
            qos if qos not in _UNSET else "",
            account if account not in _UNSET else "",
            user if user not in _UNSET else "",
            nodes if nodes not in _UNSET else "",
            required if required not in _UNSET else "",
            exc if exc not in _UNSET else "",
            restarts,
            "" if comment == "(null)" else comment,
            requeue == "1",
            _seconds(submit),
            _seconds(start),
            None if unlimited_waiting else _seconds(end),  # job_record: no end for an unlimited job not started
            _seconds(preempt),
            seconds,
            gpus,
            dict(types),
            shards,
            count,
            features if features not in _UNSET else "",
            _NO_RAW,
        )

    def shape(
        self,
        limit: int | None,
        reason: str,
        alloc: str,
        per_node: str,
        per_job: str,
        per_socket: str,
        per_task: str,
        state_word: str,
    ) -> tuple[Any, ...]:
        """What jobs with these values share: _AGAIN (read them as JSON), or their state, GPUs and limit.

        Many jobs share them, so each read computes them once (:meth:`record`); an Unusable count is raised
        for every job that has it, never kept.
        """
        if limit == -1 or not _REASON_WORD.fullmatch(reason):
            return _AGAIN
        alloc, per_node = _na(alloc), _na(per_node)
        asks = " ".join((per_node, _na(per_job), _na(per_socket), _na(per_task)))
        alloc_gpus, _, alloc_shards = string_tres(alloc, None, None)  # Unusable for a bad count
        if ("gpu" in asks and not alloc_gpus) or ("shard" in asks and not alloc_shards):
            return _AGAIN
        if not (state_word in JOB_BASE_STATES or self.flags_exact):
            return _AGAIN
        state = job_state(state_word)
        gpus, types, shards = string_tres(alloc, None, per_node)
        minutes = None if limit is None or limit >= INFINITE else limit
        unlimited_waiting = minutes is None and state.any(WAITING) and not state.any(ON_NODE)
        return state, gpus, types, shards, None if minutes is None else float(minutes) * 60.0, unlimited_waiting


def _whole(value: str, field: str, least: int) -> int:
    """:func:`~slurm_pool.adapters.slurmjson.whole` of a text value, the common case first."""
    if value.isdigit() and value.isascii() and len(value) <= 10:
        n = int(value)
        if least <= n <= UINT32_MAX:
            return n
    return whole(value, field, least=least)


def _seconds(n: int) -> float | None:
    """A time as :func:`~slurm_pool.adapters.records.job_record` reads it: 0 and Slurm's sentinels are unset."""
    return float(n) if n and n < INFINITE else None


def _na(value: str) -> str:
    return "" if value == "N/A" else value


def merge(text: JobText, json_records: Iterable[JobRecord]) -> list[JobRecord]:
    """Text's records and the JSON records of its fallback ids (ids JSON no longer lists are gone)."""
    wanted = set(text.fallback_ids)
    out = {r.job_id: r for r in text.records}
    for r in json_records:
        if r.job_id in wanted:
            out[r.job_id] = r
    return [out[k] for k in sorted(out)]


def fallback_command(ids: Sequence[int]) -> list[str]:
    """The JSON read of jobs text could not say exactly: by id, or every job when there are many."""
    if len(ids) > FALLBACK_LIST_MAX:
        return ["squeue", "--json"]
    return ["squeue", "--json", f"--jobs={','.join(str(i) for i in ids)}"]


def node_dict(values: Sequence[str], fields: Sequence[str]) -> dict[str, Any]:
    """One sinfo line as the node-record keys :func:`node_record` reads (one partition)."""
    v = dict(zip(fields, values, strict=True))
    return {
        "name": v["NodeList"],
        "state": v["StateComplete"],
        "reason": "" if v["Reason"] == "none" else v["Reason"],
        "gres": v["Gres"],
        "gres_used": v["GresUsed"],
        "partitions": [] if v["PartitionName"] in ("n/a", "(null)") else [v["PartitionName"]],
        "active_features": _null(v["features_act"]),
        "cpus": v["CPUs"],
        "real_memory": v["Memory"],
        "version": v.get("Version"),
        "address": v["NodeAddr"],
    }


def parse_node_text(text: str, version: SlurmVersion, tok: Tokens, what: str = "sinfo --Format") -> list[NodeRecord]:
    """Node records of :func:`node_command`'s output: one per node, its partitions merged in order."""
    fields = node_fields(version)
    at = fields.index("PartitionName")
    first: dict[str, list[str]] = {}  # each node's first line, then the partitions of all its lines
    parts: dict[str, list[str]] = {}
    for i, values in enumerate(split_records(text, len(fields), tok, what)):
        name, part = values[0], values[at]
        if not name:
            skipped(f"{what}: record {i + 1} (node {shown(name[:64])}): no node name")
            continue
        seen = first.get(name)
        if seen is None:
            first[name], parts[name] = values, []
        elif (seen[:at] != values[:at] or seen[at + 1 :] != values[at + 1 :]) and _beyond_partition(
            seen, values, fields
        ):
            raise RecordError(
                f"{what}: record {i + 1} (node {shown(name[:64])}): differs from the node's earlier line beyond "
                "its partition"
            )
        if part not in ("n/a", "(null)") and part not in parts[name]:
            parts[name].append(part)
    out = []
    for name in sorted(first):
        n = node_dict(first[name], fields)
        n["partitions"] = parts[name]
        try:
            out.append(convert_record(node_record, n, f"{what}: node {shown(name)}"))
        except RecordSkipped as problem:
            skipped(problem)
    return out


def _beyond_partition(a: Sequence[str], b: Sequence[str], fields: Sequence[str]) -> bool:
    """Whether two lines of one node say different things beyond the partition (as node records)."""
    x, y = node_dict(a, fields), node_dict(b, fields)
    return {k: v for k, v in x.items() if k != "partitions"} != {k: v for k, v in y.items() if k != "partitions"}
