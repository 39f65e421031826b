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
* Each line becomes the JSON record's shape and goes through the same
  :func:`~slurm_pool.adapters.records.job_record` /
  :func:`~slurm_pool.adapters.records.node_record`, so unset values, GPU
  counts and states map exactly as they do from JSON.
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

import re
import secrets
from dataclasses import dataclass
from typing import IO, Any, Iterable, Iterator, Mapping, Sequence

from slurm_pool.adapters.records import (
    JOB_BASE_STATES,
    JobRecord,
    NodeRecord,
    RecordError,
    RecordSkipped,
    convert_record,
    job_record,
    node_record,
    skipped,
    string_tres,
)
from slurm_pool.adapters.slurmjson import Unusable, parse_duration, whole
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
#: What squeue prints for a time that is not set (0, INFINITE, NO_VAL).
_NO_TIME = frozenset({"N/A", "Unknown", "None"})
#: What squeue prints for a time limit that is not a number of minutes.
_NO_LIMIT = frozenset({"UNLIMITED", "NOT_SET", "Partition_Limit"})
#: What slurmctld adds to a job's start for the end of a job with no time limit.
YEAR_SECONDS = 365 * 24 * 60 * 60
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
    """``n`` values per record, one record at a time; RecordError naming the first that is not whole."""
    end = tok.end + "\n"
    pos, i = 0, 0
    while pos < len(text):
        stop = text.find(end, pos)
        if stop < 0:
            raise RecordError(f"{what}: output ends inside a record: {shown(text[pos : pos + 200])!r}")
        values = text[pos:stop].split(tok.sep)
        i += 1
        if len(values) != n:
            raise RecordError(f"{what}: record {i} ({shown(values[0][:64])!r}) has {len(values)} fields, not {n}")
        yield values
        pos = stop + len(end)


def _int(value: str, field: str, where: str, least: int = 0) -> int:
    """An id or a count (:func:`~slurm_pool.adapters.slurmjson.whole`); RecordSkipped naming the record."""
    try:
        return whole(value, field, least=least)
    except Unusable as exc:
        raise RecordSkipped(f"{where}: {exc}") from None


def _stamp(value: str, field: str, where: str) -> int:
    """Unix seconds (0: unset); a time in another form is RecordError (the read's time format did not hold)."""
    if value in _NO_TIME:
        return 0
    if not _SECONDS.fullmatch(value):
        raise RecordError(f"{where}: {field} {shown(value[:64])!r} is not a number")
    return int(value)


def _end(v: dict[str, str], where: str) -> int | None:
    """EndTime; squeue prints ``NONE`` for a job with no time limit whose end is ahead (``_print_job_time_end``).

    A running job's is then its start plus a year, unless a preemption set it
    (``src/slurmctld/job_mgr.c`` ``job_end_time_reset``); a pending one's 0 (none);
    None (read it as JSON) otherwise.
    """
    if v["EndTime"] != "NONE":
        return _stamp(v["EndTime"], "EndTime", where)
    start = _stamp(v["StartTime"], "StartTime", where)
    if v["State"] == "RUNNING" and start and v["PreemptTime"] in _NO_TIME:
        return start + YEAR_SECONDS
    if v["State"] == "PENDING":  # not started: no end (job_record drops Slurm's estimate too)
        return 0
    return None


def _limit(value: str, where: str) -> int | None:
    if value in _NO_LIMIT:
        return None
    if value == "INVALID":  # over a year: _print_secs prints no number (read as JSON)
        return -1
    secs = parse_duration(value)
    if secs is None:
        raise RecordError(f"{where}: TimeLimit {shown(value[:64])!r} is not a time")
    return int(secs) // 60


def _null(value: str) -> str:
    return "" if value == "(null)" else value


def job_dict(values: Sequence[str], fields: Sequence[str], where: str) -> dict[str, Any]:
    """One squeue line as the ``squeue --json`` keys :func:`job_record` reads."""
    v = dict(zip(fields, values, strict=True))
    requeue = v["Requeue"]
    if requeue not in ("0", "1"):
        raise RecordError(f"{where}: Requeue {shown(requeue[:64])!r} is not 0 or 1")
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
        "submit_time": _stamp(v["SubmitTime"], "SubmitTime", where),
        "start_time": _stamp(v["StartTime"], "StartTime", where),
        "end_time": _end(v, where),
        "preempt_time": _stamp(v["PreemptTime"], "PreemptTime", where),
        "time_limit": _limit(v["TimeLimit"], where),
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
    records: dict[int, JobRecord] = {}
    again: list[int] = []
    for i, values in enumerate(rows):
        where = f"{what}: record {i + 1} (job {shown(values[0][:24])})"
        try:
            job = job_dict(values, fields, where)
            jid = job["job_id"]
            if excluded is not None:
                if jid not in excluded:  # ended between the two reads: JSON says what it is now
                    again.append(jid)
                    continue
                job["excluded_nodes"] = excluded[jid]
            if not exact(job, version):
                again.append(jid)
                continue
            records[jid] = convert_record(_text_job, job, where)
        except Unusable as problem:  # a GPU count in its TRES (exact reads them)
            skipped(f"{where}: {problem}")
        except RecordSkipped as problem:
            skipped(problem)
    return JobText([records[k] for k in sorted(records)], again)


def _text_job(job: Mapping[str, Any]) -> JobRecord:
    return job_record(job, keep_raw=False)  # 200,000 dicts of text values are not worth keeping


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
    nodes: dict[str, dict[str, Any]] = {}
    for i, values in enumerate(split_records(text, len(fields), tok, what)):
        where = f"{what}: record {i + 1} (node {shown(values[0][:64])})"
        n = node_dict(values, fields)
        if not n["name"]:
            skipped(f"{where}: no node name")
            continue
        seen = nodes.get(n["name"])
        if seen is None:
            nodes[n["name"]] = n
            continue
        parts = seen["partitions"]
        if {k: x for k, x in seen.items() if k != "partitions"} != {k: x for k, x in n.items() if k != "partitions"}:
            raise RecordError(f"{where}: differs from the node's earlier line beyond its partition")
        parts.extend(p for p in n["partitions"] if p not in parts)
    out = []
    for name in sorted(nodes):
        try:
            out.append(convert_record(node_record, nodes[name], f"{what}: node {shown(name)}"))
        except RecordSkipped as problem:
            skipped(problem)
    return out


# -- the whole fallback read, streamed -----------------------------------------------------


def wanted_records(stream: IO[bytes], ids: Iterable[int], what: str) -> Iterator[JobRecord]:
    """The records of jobs ``ids`` in a whole ``squeue --json`` document read from ``stream``, one job at a time.

    Only those jobs are converted, and none keeps its JSON (``raw``), so a queue of
    200,000 jobs never stands in memory as a document (``sacct_stream``'s reader).
    """
    from slurm_pool.adapters.sacct_stream import sacct_jobs  # not at import: the node hooks never stream

    wanted = set(ids)
    for i, raw in sacct_jobs(stream, what):
        if raw.get("job_id") not in wanted:
            continue
        try:
            yield convert_record(_text_job, raw, f"{what}: jobs[{i}]")
        except RecordSkipped as problem:
            skipped(problem)
