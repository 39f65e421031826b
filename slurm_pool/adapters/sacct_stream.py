"""``sacct --json`` read as a stream: one job object at a time, never the whole document.

A site's history can hold millions of jobs (several GB of JSON); :func:`sacct_jobs`
hands each ``jobs`` entry to the caller as it is parsed (``ijson``'s C parser), so
memory is what the caller keeps, not the document.

* The document must be an object whose ``jobs`` is a list (checked before the
  first job); a UTF-8 byte order mark in front is skipped.  Bytes that are not
  UTF-8 are read through the runner's one decoder
  (:class:`~slurm_pool.adapters.runner.EscapedJSON`: a job name holding 0xff
  reads ``\\xff``); ``NaN``/``Infinity``, numbers past 64 bits and a truncated
  document are refused, naming the job record being read.
* A job without a usable id is reported and skipped
  (:func:`~slurm_pool.adapters.records.skipped`), never read as job 0.
* Slurm's ``errors`` list may come before or after ``jobs`` (26.05 prints
  ``jobs``, ``meta``, ``errors``, ``warnings`` in that order:
  ``add_openapi_response_single`` in
  ``src/plugins/data_parser/v0.0.44/parsers.c``).  One before the jobs refuses at once; one after the last job
  refuses at the end of the document, before the iteration ends, so a caller
  that returns only when the stream is exhausted returns nothing.  The values
  after ``jobs`` are read from the last :data:`WINDOW` parse events of the
  document (a second, cheap tokenizing in C), which hold all of what Slurm
  prints there (``meta``, ``errors``, ``warnings``).
* With ``fields`` (the simulator's read), a document printed as Slurm prints it
  is read by :mod:`~slurm_pool.adapters.jobsplit` (runs of jobs decoded by
  ``msgspec``, only those keys kept), this reader taking over where that one
  cannot vouch for the result: the same jobs and the same refusals, faster.
"""

from __future__ import annotations

import collections
import re
from typing import IO, Any, Iterator

import ijson  # type: ignore[import-untyped]

from slurm_pool.adapters import jobsplit
from slurm_pool.adapters.decode import EscapedJSON
from slurm_pool.adapters.records import JobRecord, RecordError, job_record, skipped
from slurm_pool.adapters.slurmjson import Unusable
from slurm_pool.text import shown

#: Bytes read at a time.
CHUNK = 1 << 16
#: How far into the document its ``jobs`` list must start (what comes before it is kept until then).
HEAD_LIMIT = 64 * 1024 * 1024
_BOM = b"\xef\xbb\xbf"
#: The start of a document as Slurm prints it, up to its first job: nothing but an empty ``errors`` or
#: ``warnings`` before ``jobs``; group 1 is what comes before each job (a newline and the indent).
_PRETTY = re.compile(rb'\s*\{\s*(?:"(?:errors|warnings)"\s*:\s*\[\s*\]\s*,\s*)*"jobs"\s*:\s*\[(\n[ ]*)\{')
#: The keys of a job object that :func:`~slurm_pool.adapters.records.job_record` and the simulator read.
JOB_FIELDS = (
    *("account", "comment", "end_time", "excluded_nodes", "features", "job_id", "job_state", "name", "node_count"),
    *("nodes", "partition", "preempt_time", "qos", "requeue", "required_nodes", "restart_cnt", "start_time"),
    *("state", "state_reason", "submit_time", "time", "time_limit", "tres", "tres_alloc_str", "tres_per_node"),
    *("tres_req_str", "user", "user_name"),
)


class _Head:
    """Reads ``stream`` (its BOM skipped) and keeps every byte read, to be read again by :class:`_Feed`."""

    def __init__(self, stream: IO[bytes]):
        self.stream = stream
        self.kept = bytearray()

    def read(self, n: int) -> bytes:
        data = self.stream.read(n)
        if not self.kept and data.startswith(_BOM):
            data = data[len(_BOM) :]
        self.kept += data
        if len(self.kept) > HEAD_LIMIT:
            raise _TooLong
        return data


class _TooLong(Exception):
    pass


class _Feed:
    """The bytes of the document: the kept head, then the rest of ``stream``; each chunk also goes to ``tap``."""

    def __init__(self, head: bytearray, stream: IO[bytes], tap: Any):
        self.head, self.stream, self.tap, self.at = memoryview(head), stream, tap, 0

    def read(self, n: int) -> bytes:
        if self.at < len(self.head):
            data = bytes(self.head[self.at : self.at + n])
            self.at += len(data)
        else:
            data = self.stream.read(n)
        if data:
            self.tap.send(data)
        return data


class _Window(collections.deque[tuple[str, Any]]):
    """The last :data:`WINDOW` parse events of the document (``send`` in C: the tap costs one tokenizing)."""

    send = collections.deque.append


#: Parse events kept from the end of the document: what Slurm prints after ``jobs`` is a few dozen.
WINDOW = 1 << 12


def _tail_values(events: list[tuple[str, Any]]) -> dict[str, list[Any]]:
    """The top-level values at the end of the document whose events are all in ``events``, by key."""
    out: dict[str, list[Any]] = {}
    depth, end = 0, len(events)
    for i in range(len(events) - 1, -1, -1):
        event, value = events[i]
        if event in ("end_map", "end_array"):
            depth += 1
            if depth == 2:
                end = i + 1
        elif event in ("start_map", "start_array"):
            depth -= 1
            if depth == 0:  # the document's start: every value was seen
                break
        elif depth == 1 and event == "map_key":
            builder = ijson.ObjectBuilder()
            for ev, val in events[i + 1 : end]:
                builder.event(ev, val)
            out.setdefault(value, []).append(builder.value)
        elif depth == 1:  # a scalar value
            end = i + 1
    return out


def _problem(exc: Exception) -> str:
    """What is wrong, from the parser's complaint (its first line, safe to show)."""
    text = str(exc).strip().split("\n")[0]
    if "invalid bytes in UTF8" in text:
        return "not UTF-8 text"
    return "not JSON: " + shown(text.removeprefix("b'").removeprefix('b"'))[:200]


def _check_head(head: _Head, what: str, error: type[Exception]) -> list[Any]:
    """Up to the start of ``jobs``: the document is an object and ``jobs`` a list (else ``error``); ``errors`` there."""
    errors: list[Any] = []
    builder: Any = None
    try:
        for k, (prefix, event, value) in enumerate(ijson.parse(head, buf_size=CHUNK, use_float=True)):
            if k == 0 and event != "start_map":
                raise error(f"{what}: not a JSON object")
            if prefix == "errors" and event not in ("start_map", "start_array", "end_map", "end_array"):
                errors.append(value)  # a scalar "errors"
            elif prefix == "errors" and event.startswith("start"):
                builder = ijson.ObjectBuilder()
            if builder is not None:
                builder.event(event, value)
                if prefix == "errors" and event.startswith("end"):
                    errors.append(builder.value)
                    builder = None
            if prefix == "jobs":
                if event != "start_array":
                    raise error(f"{what}: 'jobs' is not a list")
                return errors
    except _TooLong:
        raise error(f"{what}: no 'jobs' list in the first {HEAD_LIMIT // (1024 * 1024)} MiB") from None
    except ijson.JSONError as exc:
        raise error(f"{what}: {_problem(exc)}") from None
    raise error(f"{what}: no 'jobs' list")


def _errors_text(errors: list[Any]) -> str:
    parts = []
    for e in errors:
        for item in e if isinstance(e, list) else [e]:
            text = item.get("description") or item.get("error") or item if isinstance(item, dict) else item
            parts.append(str(text))
    return shown("; ".join(parts[:5]))[:500] + (f" (and {len(parts) - 5} more)" if len(parts) > 5 else "")


def sacct_jobs(
    stream: IO[bytes], what: str, error: type[Exception] = RecordError, fields: tuple[str, ...] | None = None
) -> Iterator[tuple[int, dict[str, Any]]]:
    """Each ``(index, job object)`` of the ``sacct --json`` document in ``stream``; ``error`` for bad input.

    With ``fields``, each job object holds only those of its keys (:data:`JOB_FIELDS`: what
    :func:`~slurm_pool.adapters.records.job_record` reads), and a document printed as Slurm prints it
    is read by :class:`~slurm_pool.adapters.jobsplit.Splitter` (same objects, same refusals, faster).
    """
    stream = EscapedJSON(stream)  # type: ignore[assignment]  # read() is all the readers use
    head = _Head(stream)
    errors = _check_head(head, what, error)

    def refuse() -> None:
        if any(errors):
            raise error(f"{what}: Slurm reported errors: {_errors_text(errors)}")

    refuse()
    pretty = _PRETTY.match(head.kept) if fields is not None else None
    if fields is None or pretty is None:
        yield from _parsed(head.kept, stream, what, error, 0, fields)
        return
    fast = jobsplit.Splitter(pretty.group(1), fields)
    for i, job in fast.jobs(bytearray(head.kept[pretty.end() - 1 :]), stream):
        if job is None:  # from here on the document is read as above (the last job and what follows it, at least)
            yield from _parsed(b'{"jobs":[' + fast.rest, stream, what, error, i, fields)
            return
        yield i, job


def _parsed(
    head: bytes | bytearray,
    stream: IO[bytes],
    what: str,
    error: type[Exception],
    first: int,
    fields: tuple[str, ...] | None,
) -> Iterator[tuple[int, dict[str, Any]]]:
    """The jobs of the document ``head`` then ``stream`` (``ijson``), numbered from ``first``, each with only its
    ``fields`` (None: all); Slurm's errors after them refuse."""
    window = _Window(maxlen=WINDOW)
    tap = ijson.basic_parse_coro(window, use_float=True)
    i = first - 1
    try:
        for i, raw in enumerate(ijson.items(_Feed(bytearray(head), stream, tap), "jobs.item", use_float=True), first):
            if not isinstance(raw, dict):
                raise error(f"{what}: jobs[{i}] is {type(raw).__name__}, not an object")
            yield i, raw if fields is None else {k: raw[k] for k in fields if k in raw}
        tap.close()
    except ijson.JSONError as exc:
        raise error(f"{what}: jobs[{i + 1}] or after: {_problem(exc)}") from None
    errors = _tail_values(list(window)).get("errors", [])
    if any(errors):
        raise error(f"{what}: Slurm reported errors: {_errors_text(errors)}")


def job_records(stream: IO[bytes], what: str) -> Iterator[JobRecord]:
    """The :class:`JobRecord` of each job in ``stream`` (RecordError for bad input, naming the job)."""
    for i, raw in sacct_jobs(stream, what):
        try:
            yield job_record(raw)
        except Unusable as exc:
            skipped(f"{what}: jobs[{i}]: {exc}")
        except (TypeError, ValueError, AttributeError, OverflowError) as exc:
            raise RecordError(f"{what}: jobs[{i}]: unexpected value ({exc})") from None
