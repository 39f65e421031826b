"""Node and job records of every supported Slurm, from its commands' output.  Stdlib only.

One vocabulary for what Slurm says, whichever release said it:

* node records: ``sinfo --json`` on 22.05 (``{"nodes": [...]}``); from 23.02
  ``sinfo --json`` groups nodes by partition and state (``{"sinfo": [...]}``)
  and the records come from ``scontrol show nodes --json``
  (:func:`node_command`); plain ``scontrol show node`` text as a fallback;
* job records: ``squeue --json`` (every release), ``scontrol show job
  --json`` (23.02+) or plain text, and ``sacct --json`` for finished jobs;
* states as a base plus flags: 22.05 prints ``"idle"`` with ``state_flags``
  for nodes and one word for jobs (a flag such as ``COMPLETING`` when one is
  set); 23.02+ prints lists, base first (``["PENDING", "REQUEUED"]``);
* numbers, plain or ``{set, infinite, number}`` (23.02+), through
  :func:`~slurm_pool.adapters.slurmjson.number`;
* one rule for ids and counts: a record whose job id, restart count or GRES/TRES
  count is not a whole number Slurm's field holds
  (:func:`~slurm_pool.adapters.slurmjson.whole`: missing, negative, fractional,
  boolean, past 32/64 bits) is reported (:func:`skipped`) and left out of the
  read, never read as 0; a node without a name likewise.

Recorded output of both ends is in ``tests/data/slurm/<version>/``.  The same
records also come from narrow ``sinfo``/``squeue --Format`` text
(:mod:`slurm_pool.adapters.narrow`), through :func:`node_record` and :func:`job_record`.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from dataclasses import dataclass, field
from functools import lru_cache
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Mapping, TypeVar

from slurm_pool.adapters.decode import json_text, key_values
from slurm_pool.adapters.gres import check_gres, tres_gpu_types, tres_gpus, tres_list_gpus, tres_shards
from slurm_pool.adapters.slurmjson import INFINITE, REASON_PREFIX, Unusable, number, parse_duration, states, whole
from slurm_pool.errors import InputError
from slurm_pool.text import shown
from slurm_pool.textio import parse_json

if TYPE_CHECKING:
    from slurm_pool.versions import SlurmVersion

#: Job states a job ends up in or passes through (JOB_STATE_BASE in slurm.h).
JOB_BASE_STATES = frozenset(
    {
        "PENDING",
        "RUNNING",
        "SUSPENDED",
        "COMPLETE",
        "COMPLETED",
        "CANCELLED",
        "FAILED",
        "TIMEOUT",
        "NODE_FAIL",
        "PREEMPTED",
        "BOOT_FAIL",
        "DEADLINE",
        "OUT_OF_MEMORY",
    }
)
#: Node base states (NODE_STATE_BASE in slurm.h).
NODE_BASE_STATES = frozenset({"UNKNOWN", "DOWN", "IDLE", "ALLOCATED", "ERROR", "MIXED", "FUTURE"})
#: Job state words while a job has (or is about to have, or still has) processes on its nodes.
ON_NODE = frozenset({"RUNNING", "SUSPENDED", "CONFIGURING", "COMPLETING", "SIGNALING", "STAGE_OUT", "RESIZING"})
#: Job state words of a job waiting to (re)start.
WAITING = frozenset({"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED"})
#: Node state words of a node drained on purpose.
DRAINED = frozenset({"DRAIN", "DRAINED", "DRAINING"})
#: Node state words (base states and flags) under which Slurm gives the node's GPUs to no new job:
#: down, drained or draining, failed or failing, not responding, not there yet, or refused at registration.
OUT_OF_SERVICE = DRAINED | frozenset(
    {"DOWN", "UNKNOWN", "FUTURE", "ERROR", "FAIL", "FAILING", "NOT_RESPONDING", "NO_RESPOND", "INVALID", "INVALID_REG"}
)
#: Lines of ``scontrol show job`` whose value a user chooses.
_USER_TEXT_KEYS = frozenset(
    {
        "Comment",
        "Command",
        "WorkDir",
        "StdErr",
        "StdIn",
        "StdOut",
        "AdminComment",
        "SystemComment",
        "Features",
        "Reservation",
        "MailUser",
        "Licenses",
    }
)
_REASON_SUFFIX = re.compile(r"\s*\[[^\]@]*@[^\]]*\]\s*\Z")


@dataclass(frozen=True, slots=True)
class State:
    """A Slurm state: its base word and its flags, all upper case.

    ``"DRAIN" in state`` looks at base and flags alike; iterating gives the base
    first, then the flags in order.
    """

    base: str
    flags: frozenset[str] = frozenset()

    @classmethod
    def parse(cls, value: Any, flags: Any = None, *, bases: frozenset[str] = frozenset()) -> "State":
        """From a list or a ``+``-joined string, and 22.05's separate ``state_flags``.

        The base is the first word that is one of ``bases`` (else the first word).
        """
        words = list(dict.fromkeys(states(value) + states(flags)))
        if not words:
            return cls("")
        base = next((w for w in words if w in bases), words[0])
        return cls(base, frozenset(w for w in words if w != base))

    def __contains__(self, word: object) -> bool:
        return word == self.base or word in self.flags

    def __iter__(self) -> Iterator[str]:
        if self.base:
            yield self.base
        yield from sorted(self.flags)

    def __str__(self) -> str:
        return "+".join(self)

    def any(self, words: Iterable[str]) -> bool:
        if isinstance(words, (set, frozenset)):  # the hot case (ON_NODE, WAITING, ...): no Python loop
            return self.base in words or not self.flags.isdisjoint(words)
        return any(w in self for w in words)


def node_state(value: Any, flags: Any = None) -> State:
    return State.parse(value, flags, bases=NODE_BASE_STATES)


def job_state(value: Any) -> State:
    if isinstance(value, str):
        return _job_state_word(value)
    return State.parse(value, bases=JOB_BASE_STATES)


@lru_cache(maxsize=256)
def _job_state_word(value: str) -> State:
    return State.parse(value, bases=JOB_BASE_STATES)


@dataclass(frozen=True, slots=True)
class NodeRecord:
    """A node as ``scontrol show node`` (or 22.05's ``sinfo --json``) describes it."""

    name: str
    state: State
    reason: str = ""
    gres: str = ""
    gres_used: str = ""
    partitions: tuple[str, ...] = ()
    features: tuple[str, ...] = ()
    cpus: int | None = None
    memory_mb: int | None = None
    version: str = ""
    #: Where the node is reached (slurm.conf NodeAddr; its name when unset).
    address: str = ""

    @property
    def drained(self) -> bool:
        """Drained or draining (DRAIN, DRAINED, DRAINING)."""
        return self.state.any(DRAINED)

    @property
    def ours(self) -> bool:
        """Its reason is slurm-pool's (prefix ``slurm-pool:``), not a person's."""
        return self.reason.startswith(REASON_PREFIX)


def _words(value: Any) -> tuple[str, ...]:
    """A list of names, or a comma-separated string of them (22.05 features)."""
    if isinstance(value, list):
        return tuple(str(v) for v in value if str(v))
    if isinstance(value, str):
        return tuple(v for v in value.split(",") if v)
    return ()


def _text(value: Any) -> str:
    return "" if value is None or value in ("(null)", "N/A") else str(value)


def node_record(n: Mapping[str, Any]) -> NodeRecord:
    """One node of ``sinfo --json`` (22.05) or ``scontrol show nodes --json`` (23.02+).

    :class:`~slurm_pool.adapters.slurmjson.Unusable` for a node without a name or with a GRES count
    past what Slurm holds.
    """
    name = n.get("name") or n.get("hostname")
    if not isinstance(name, str) or not name:
        raise Unusable(f"node name {shown(repr(name))[:64]} is not a name")
    return NodeRecord(
        name=name,
        state=node_state(n.get("state"), n.get("state_flags")),
        reason=_text(n.get("reason")),
        gres=check_gres(_text(n.get("gres")), "gres"),
        gres_used=check_gres(_text(n.get("gres_used")), "gres_used"),
        partitions=_words(n.get("partitions")),
        features=_words(n.get("active_features") if n.get("active_features") is not None else n.get("features")),
        cpus=number(n.get("cpus")),
        memory_mb=number(n.get("real_memory")),
        version=_text(n.get("version")),
        address=_text(n.get("address")),
    )


class RecordError(InputError):
    """Output that is not what the command prints."""


class RecordSkipped(RecordError):
    """One record without a usable id or count: the reads report it (:func:`skipped`) and go on without it."""


#: The logger skipped records are reported to (a warning each: stderr for the command line, the log for a service).
LOGGER = "slurm_pool.records"


def skipped(why: object) -> None:
    """Report a record left out of a read (:class:`RecordSkipped`): ``why`` names it and its value."""
    import logging  # only here: the epilog reads a job record and must not pay for logging at start-up

    logging.getLogger(LOGGER).warning("%s", shown(f"skipped a record: {why}"))


def each_record(fn: Callable[[Mapping[str, Any]], T], items: Iterable[Mapping[str, Any]], where: str) -> Iterator[T]:
    """``fn`` of each item (:func:`convert_record`); a record without a usable id or count is reported and skipped."""
    for i, item in enumerate(items):
        try:
            yield convert_record(fn, item, f"{where}[{i}]")
        except RecordSkipped as exc:
            skipped(exc)


T = TypeVar("T")


def _document(text: str, what: str) -> dict[str, Any]:
    try:
        data = parse_json(json_text(text or "{}"), what)  # no NaN or Infinity: Slurm never prints them
    except InputError as exc:
        raise RecordError(str(exc)) from None
    if not isinstance(data, dict):
        raise RecordError(f"{what}: not a JSON object")
    errors = data.get("errors")
    if errors:  # Slurm's own complaint: the records beside it are not the whole answer
        raise RecordError(f"{what}: Slurm reported errors: {_error_text(errors)}")
    return data


def _error_text(errors: Any) -> str:
    """Slurm's ``errors`` list as one line (``error``/``description`` of each; anything else as JSON)."""
    if not isinstance(errors, list):
        return f"'errors' is not a list ({type(errors).__name__})"
    parts = []
    for e in errors[:5]:
        if isinstance(e, dict):
            text = e.get("description") or e.get("error") or e.get("error_number") or e.get("errno") or e
        else:
            text = e
        parts.append(str(text))
    more = f" (and {len(errors) - 5} more)" if len(errors) > 5 else ""
    return shown("; ".join(parts))[:500] + more


def _records(items: list[Any], what: str, key: str) -> list[Mapping[str, Any]]:
    """The entries of a records list, each an object; RecordError naming the first that is not."""
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise RecordError(f"{what}: {key}[{i}] is {type(item).__name__}, not an object")
    return items


def node_command(version: SlurmVersion) -> list[str]:
    """The command that prints node records on ``version``."""
    return ["scontrol", "show", "nodes", "--json"] if version.has("json_data_parser") else ["sinfo", "--json"]


def parse_nodes(text: str, what: str = "node records") -> list[NodeRecord]:
    """Node records from :func:`node_command`'s output, one per node.

    Refuses 23.02+'s ``sinfo --json`` (grouped, no records) instead of finding no node.
    """
    data = _document(text, what)
    if "nodes" not in data:
        if "sinfo" in data:
            raise RecordError(
                f"{what}: this is sinfo --json of Slurm 23.02 or later, which groups nodes; "
                "node records come from scontrol show nodes --json"
            )
        raise RecordError(f"{what}: no 'nodes' list")
    nodes = data.get("nodes") or []
    if not isinstance(nodes, list):
        raise RecordError(f"{what}: 'nodes' is not a list")
    out: dict[str, NodeRecord] = {}
    for rec in each_record(node_record, _records(nodes, what, "nodes"), f"{what}: nodes"):
        out.setdefault(rec.name, rec)
    return list(out.values())


def convert_record(fn: Callable[[Mapping[str, Any]], T], raw: Mapping[str, Any], where: str) -> T:
    """One record, or RecordError naming it: well-formed JSON can still hold a value of the wrong type.

    :class:`RecordSkipped` when it has no usable id or count (for the caller to report and skip).
    """
    try:
        return fn(raw)
    except Unusable as exc:
        raise RecordSkipped(f"{where}: {exc}") from None
    except (TypeError, ValueError, AttributeError, OverflowError) as exc:
        raise RecordError(f"{where}: unexpected value ({exc})") from None


def parse_node_text(text: str, name: str) -> NodeRecord | None:
    """``scontrol show node NAME`` in plain text (every release; no JSON in 22.05's scontrol)."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("Reason="):  # the rest of the line, spaces included
            fields["Reason"] = _REASON_SUFFIX.sub("", line[len("Reason=") :])
            continue
        for k, v in key_values(line.split()).items():
            fields.setdefault(k, v)
    if fields.get("NodeName") != name:
        return None
    return NodeRecord(
        name=name,
        state=node_state(fields.get("State", "")),
        reason=_text(fields.get("Reason")),
        gres=_text(fields.get("Gres")),
        partitions=_words(fields.get("Partitions")),
        features=_words(_text(fields.get("ActiveFeatures"))),
    )


# -- jobs ----------------------------------------------------------------------------


#: The ``raw`` of a record read without its JSON (narrow reads): one shared, read-only empty mapping.
_NO_RAW: Mapping[str, Any] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class JobRecord:
    """A job as ``squeue --json`` / ``scontrol show job`` / ``sacct --json`` describe it.

    Times are Unix seconds (None: unset); ``time_limit`` is in seconds.  ``gpus``
    and ``gpu_types`` are the GPU units it holds (its allocation), or asks for
    while it holds none (its request).
    """

    job_id: int
    name: str = ""
    state: State = State("")
    reason: str = ""
    partition: str = ""
    qos: str = ""
    account: str = ""
    user: str = ""
    nodes: str = ""
    required_nodes: str = ""
    excluded_nodes: str = ""
    restart_count: int = 0
    comment: str | None = ""
    requeue: bool | None = None
    submit_time: float | None = None
    start_time: float | None = None
    end_time: float | None = None
    preempt_time: float | None = None
    time_limit: float | None = None
    gpus: int = 0
    gpu_types: Mapping[str, int] = field(default_factory=dict)
    #: GPU shards (``gres/shard``) it holds, or asks for while it holds none.
    shards: int = 0
    #: Nodes it asks for (None: not said) and its ``--constraint`` expression.
    node_count: int | None = None
    features: str = ""
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def on_node(self) -> bool:
        """Its processes are (or are about to be, or still are) on its nodes."""
        return self.state.any(ON_NODE)

    @property
    def waiting(self) -> bool:
        """Pending, or requeued and not yet started again."""
        return self.state.any(WAITING) and not self.on_node

    @property
    def running(self) -> bool:
        return "RUNNING" in self.state or "CONFIGURING" in self.state

    @property
    def requeued(self) -> bool:
        """Back in the queue after a run (preempted, or requeued by anyone)."""
        return self.waiting and (self.restart_count > 0 or "REQUEUED" in self.state)

    @property
    def natural_end(self) -> float | None:
        if self.start_time is None or self.time_limit is None:
            return None
        return self.start_time + self.time_limit


def _count(v: Any, what: str) -> int | None:
    """A count (None: absent, unset or one of Slurm's sentinels); Unusable when it is no count."""
    if v is None or (isinstance(v, dict) and (v.get("set") is False or v.get("infinite") is True)):
        return None
    if type(v) is int and INFINITE <= v <= 0xFFFFFFFF:  # NO_VAL, INFINITE
        return None
    return whole(v, what)


def _time(v: Any) -> float | None:
    n = number(v)
    return float(n) if n else None  # 0 is Slurm's "unset"


def _nodes(v: Any) -> str:
    if isinstance(v, dict):  # 23.02+ sacct/scontrol sometimes nest {"list": ...}
        v = _obj(v).get("list") or ""
    if isinstance(v, list):
        return ",".join(str(x) for x in v)
    return _text(v)


def _comment(v: Any) -> str:
    if isinstance(v, dict):  # sacct: {"job": ..., "administrator": ..., "system": ...}
        v = v.get("job")
    return "" if v is None else str(v)


def _obj(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}


def _gpus_in(value: Any) -> tuple[int, Counter[str]]:
    """GPU units (and per type) of a TRES list (sacct) or TRES string (squeue, older sacct)."""
    if isinstance(value, list):
        return tres_list_gpus(value)
    if isinstance(value, str):
        return tres_gpus(value), tres_gpu_types(value)
    return 0, Counter()


def _tres_counts(tres: Mapping[str, Any], j: Mapping[str, Any]) -> tuple[int, Counter[str], int]:
    """GPU units, per type, and shards: of the allocation, else of the request (then per node, for shards)."""
    gpus: int = 0
    typed: Counter[str] = Counter()
    for value in (tres.get("allocated"), j.get("tres_alloc_str"), tres.get("requested"), j.get("tres_req_str")):
        gpus, typed = _gpus_in(value)
        if gpus:
            break
    shards = 0
    for value in (
        tres.get("allocated"),
        j.get("tres_alloc_str"),
        tres.get("requested"),
        j.get("tres_req_str"),
        j.get("tres_per_node"),
    ):
        shards = tres_shards(value)
        if shards:
            break
    return gpus, typed, shards


@lru_cache(maxsize=4096)
def string_tres(
    alloc: str | None, req: str | None, per_node: str | None
) -> tuple[int, tuple[tuple[str, int], ...], int]:
    """:func:`_tres_counts` of squeue's TRES strings, hashable so that it is cached."""
    gpus, typed, shards = _tres_counts({}, {"tres_alloc_str": alloc, "tres_req_str": req, "tres_per_node": per_node})
    return gpus, tuple(typed.items()), shards


def job_record(j: Mapping[str, Any], keep_raw: bool = True) -> JobRecord:
    """One job of ``squeue --json``, ``scontrol show job --json`` or ``sacct --json`` (``raw``: ``j``, or empty)."""
    st = j.get("job_state")
    sacct_state = _obj(j.get("state"))  # sacct: {current, reason}
    if st is None:
        st = sacct_state.get("current") if sacct_state else j.get("state")
    times = _obj(j.get("time"))  # sacct nests them
    limit = number(j.get("time_limit")) if "time_limit" in j else number(times.get("limit"))
    tres = _obj(j.get("tres"))  # sacct nests TRES
    strings = (j.get("tres_alloc_str"), j.get("tres_req_str"), j.get("tres_per_node"))
    if not tres and all(v is None or isinstance(v, str) for v in strings):
        gpus, types, shards = string_tres(*strings)  # squeue's strings repeat: computed once each
        typed: Mapping[str, int] = dict(types)
    else:
        gpus, typed, shards = _tres_counts(tres, j)
    req = j.get("requeue")
    reason = j.get("state_reason")
    if reason is None:
        reason = sacct_state.get("reason")
    state = job_state(st)
    end = _time(j.get("end_time") if "end_time" in j else times.get("end"))
    if limit is None and state.any(WAITING) and not state.any(ON_NODE):
        # Slurm's end for an unlimited job that has not started is an artefact of its
        # estimate (start plus a year, or plus INFINITE*60 wrapped to 32 bits: backfill.c), not a time.
        end = None
    return JobRecord(
        job_id=whole(j.get("job_id"), "job_id", least=1),
        name=_text(j.get("name")),
        state=state,
        reason=_text(reason),
        partition=_text(j.get("partition")),
        qos=_text(j.get("qos")),
        account=_text(j.get("account")),
        user=_text(j.get("user_name") if j.get("user_name") is not None else j.get("user")),
        nodes=_nodes(j.get("nodes")),
        required_nodes=_nodes(j.get("required_nodes")),
        excluded_nodes=_nodes(j.get("excluded_nodes")),
        restart_count=_count(j.get("restart_cnt"), "restart_cnt") or 0,
        comment=_comment(j.get("comment")),
        requeue=None if req is None else bool(req),
        submit_time=_time(j.get("submit_time") if "submit_time" in j else times.get("submission")),
        start_time=_time(j.get("start_time") if "start_time" in j else times.get("start")),
        end_time=end,
        preempt_time=_time(j.get("preempt_time")),
        time_limit=None if limit is None else float(limit) * 60.0,
        gpus=gpus,
        gpu_types=dict(typed),
        shards=shards,
        node_count=_count(j.get("node_count"), "node_count"),
        features=_text(j.get("features")),
        raw=j if keep_raw else _NO_RAW,
    )


def parse_jobs(text: str, what: str = "job records") -> list[JobRecord]:
    """Every job of ``squeue --json``, ``scontrol show job --json`` or ``sacct --json`` output.

    A job without a usable id or count is reported and skipped (:func:`job_records`); a reader that
    must see every job (one that removes what the queue does not hold) reads :func:`job_objects`.
    """
    return job_records(job_objects(text, what), what)


def job_objects(text: str, what: str = "job records") -> list[Mapping[str, Any]]:
    """The job objects of a ``--json`` output as Slurm printed them, none left out (RecordError: not such output)."""
    data = _document(text, what)
    jobs = data.get("jobs")
    if not isinstance(jobs, list):
        raise RecordError(f"{what}: no 'jobs' list")
    return _records(jobs, what, "jobs")


def job_records(jobs: Iterable[Any], what: str = "job records") -> list[JobRecord]:
    """Job records from a parsed ``jobs`` list; RecordError naming a job with a value of the wrong type.

    A job without a usable id or count is reported and skipped (:func:`each_record`).
    """
    return list(each_record(job_record, _records(list(jobs), what, "jobs"), f"{what}: jobs"))


def _parse_stamp(v: str) -> float | None:
    try:
        return time.mktime(time.strptime(v, "%Y-%m-%dT%H:%M:%S"))
    except (ValueError, OverflowError):
        return None


def parse_job_text(text: str, job_id: int | str) -> JobRecord | None:
    """One job from plain ``scontrol show job`` output (no comment: it may hold spaces).

    Values a user chooses (job name, comment, command, paths) can hold ``KEY=value``
    text: the first line gives only ``JobId``, and lines of those keys are skipped, so
    a job named ``x JobState=PREEMPTED Restarts=7`` cannot forge its record.
    """
    fields: dict[str, str] = {}
    for i, line in enumerate(text.splitlines()):
        tokens = line.split()
        if not tokens or tokens[0].partition("=")[0] in _USER_TEXT_KEYS:
            continue
        for k, v in key_values(tokens[:1] if i == 0 else tokens).items():
            fields.setdefault(k, v)
    if fields.get("JobId") != str(job_id):
        return None
    restarts = fields.get("Restarts", "")
    requeue = fields.get("Requeue")
    return JobRecord(
        job_id=int(job_id),
        state=job_state(fields.get("JobState", "")),
        reason=fields.get("Reason", ""),
        partition=fields.get("Partition", ""),
        start_time=_parse_stamp(fields.get("StartTime", "")),
        end_time=_parse_stamp(fields.get("EndTime", "")),
        preempt_time=_parse_stamp(fields.get("PreemptTime", "")),
        time_limit=parse_duration(fields.get("TimeLimit", "")),
        restart_count=int(restarts) if restarts.isascii() and restarts.isdigit() else 0,
        comment=None,
        requeue=None if requeue is None else requeue == "1",
    )


def gpu_type_totals(jobs: Iterable[JobRecord]) -> Counter[str]:
    """GPU units per GRES type over ``jobs``."""
    out: Counter[str] = Counter()
    for j in jobs:
        out.update(j.gpu_types)
    return out


# -- configuration -------------------------------------------------------------------

_CONFIG_LINE = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(?:\[[0-9]+\])?\s*=\s?(.*)")


def parse_config_text(text: str) -> dict[str, str]:
    """``scontrol show config`` as ``{key: value}``.

    22.05 prints ``Prolog = PATH``; 26.05 numbers list-valued keys (``Prolog[0] = PATH``):
    the values of a numbered key are joined by commas.
    """
    out: dict[str, str] = {}
    for line in text.splitlines():
        m = _CONFIG_LINE.fullmatch(line.strip())
        if not m:
            continue
        key, value = m.group(1), m.group(2).strip()
        if value in ("(null)", "N/A"):
            value = ""
        out[key] = f"{out[key]},{value}" if out.get(key) and value else (value or out.get(key, ""))
    return out
