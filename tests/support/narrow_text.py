"""What Slurm's narrow reads print, made from the ``--json`` documents of the same Slurm.

:func:`answer` renders the text of a narrow ``sinfo``/``squeue --Format`` read
(:mod:`slurm_pool.adapters.narrow`) from parsed ``--json`` output, following
Slurm's print functions (``src/squeue/print.c``, ``src/sinfo/print.c``,
``job_state_string``); ``tests/unit/test_narrow_readers.py`` holds it to the
text recorded from the real daemons.  :func:`from_json` makes a
:class:`~slurm_pool.adapters.runner.RecordingRunner` that answers ``squeue
--json`` and the node-record command answer the narrow reads too, from what
those rules print, so tests written against JSON replies keep working.
"""

from __future__ import annotations

import json
import time
from graphlib import TopologicalSorter
from typing import Any, Mapping, Sequence

import pytest

from slurm_pool.adapters.narrow import TIME_ENV
from slurm_pool.adapters.runner import RecordingRunner, Result
from slurm_pool.adapters.slurmjson import INFINITE, number, states

#: job_state_string's order: the first flag set names the state, else the base (slurm_protocol_defs.c).
_FLAG_ORDER = (
    "COMPLETING",
    "STAGE_OUT",
    "CONFIGURING",
    "EXPEDITING",
    "RESIZING",
    "REQUEUED",
    "REQUEUE_FED",
    "REQUEUE_HOLD",
    "SPECIAL_EXIT",
    "STOPPED",
    "REVOKED",
    "RESV_DEL_HOLD",
    "SIGNALING",
)


def is_narrow(argv: Sequence[str]) -> bool:
    """Whether ``argv`` is a narrow read (``env SLURM_TIME_FORMAT=%s squeue|sinfo ...``)."""
    return len(argv) > 2 and argv[0] == "env" and argv[1] == TIME_ENV and argv[2] in ("squeue", "sinfo")


def _format(argv: Sequence[str]) -> list[tuple[str, str]]:
    """(field, suffix) pairs of the read's ``--Format=`` or ``--format=`` option."""
    for a in argv:
        if a.startswith("--Format="):
            out = []
            for tok in a[len("--Format=") :].split(","):
                name, _, rest = tok.partition(":")
                out.append((name, rest[1:] if rest.startswith("0") else rest))
            return out
        if a.startswith("--format="):
            out = []
            for tok in a[len("--format=") :].split("%")[1:]:
                out.append(({"A": "JobId", "x": "ExcNodes"}[tok[0]], tok[1:]))
            return out
    raise ValueError(f"no --Format in {argv}")


def _str(v: Any, null: str = "(null)") -> str:
    return null if v is None or v == "" else str(v)


def _num(v: Any) -> int | None:
    """A number as JSON holds it; None when unset or infinite."""
    return number(v)


def _time(v: Any) -> str:
    n = _num(v)
    return str(n) if n else "N/A"


def _limit_text(v: Any) -> str:
    if isinstance(v, dict):
        if v.get("infinite"):
            return "UNLIMITED"
        if not v.get("set", True):
            return "NOT_SET"
        v = v.get("number")
    if v is None or (isinstance(v, int) and v >= INFINITE):
        return "UNLIMITED"
    secs = int(v) * 60
    if secs > 365 * 86400:
        return "INVALID"
    days, rest = divmod(secs, 86400)
    hours, minutes = rest // 3600, rest % 3600 // 60
    if days:
        return f"{days}-{hours:02d}:{minutes:02d}:00"
    return f"{hours}:{minutes:02d}:00" if hours else f"{minutes}:00"


def _state_word(v: Any) -> str:
    words = states(v)
    for flag in _FLAG_ORDER:
        if flag in words:
            return flag
    return words[0] if words else "?"


def _end_text(j: Mapping[str, Any], now: float) -> str:
    """EndTime: NONE for a job with no time limit whose end is ahead of squeue's clock."""
    limit = j.get("time_limit")
    end = j.get("end_time")
    end = end.get("number", 0) if isinstance(end, dict) else end
    return "NONE" if _limit_text(limit) == "UNLIMITED" and (end or 0) > now else _time(j.get("end_time"))


def job_field(j: Mapping[str, Any], field: str, now: float) -> str:
    """One ``squeue --Format`` field of a ``squeue --json`` job."""
    if field == "JobId":
        return str(_num(j.get("job_id")))
    if field == "State":
        return _state_word(j.get("job_state"))
    if field == "Reason":
        return _str(j.get("state_description") or j.get("state_reason"))
    if field == "EndTime":
        return _end_text(j, now)
    if field == "TimeLimit":
        return _limit_text(j.get("time_limit"))
    if field == "Requeue":
        return "1" if j.get("requeue") else "0"
    if field == "tres-alloc":
        return _str(j.get("tres_alloc_str") or j.get("tres_req_str"), "N/A")
    if field.startswith("tres-per-"):
        return _str(j.get("tres_per_" + field[len("tres-per-") :]), "N/A")
    if field in ("SubmitTime", "StartTime", "PreemptTime"):
        return _time(
            j.get({"SubmitTime": "submit_time", "StartTime": "start_time", "PreemptTime": "preempt_time"}[field])
        )
    if field in ("RestartCnt", "NumNodes"):
        return str(_num(j.get("restart_cnt" if field == "RestartCnt" else "node_count")) or 0)
    key = {
        "Name": "name",
        "Partition": "partition",
        "QOS": "qos",
        "Account": "account",
        "UserName": "user_name",
        "NodeList": "nodes",
        "ReqNodes": "required_nodes",
        "ExcNodes": "excluded_nodes",
        "Comment": "comment",
        "Feature": "features",
    }[field]
    if field in ("Name", "Comment", "Feature"):
        return _str(j.get(key))
    return _str(j.get(key), "")


def node_field(n: Mapping[str, Any], partition: str, field: str) -> str:
    """One ``sinfo --Node --Format`` field of a node record, on the line of ``partition``."""
    if field == "NodeList":
        return str(n.get("name") or n.get("hostname") or "")
    if field == "StateComplete":
        return "+".join(dict.fromkeys(states(n.get("state")) + states(n.get("state_flags")))).lower()
    if field == "Reason":
        return _str(n.get("reason"), "none")
    if field == "PartitionName":
        return partition
    if field == "features_act":
        v = n.get("active_features") if n.get("active_features") is not None else n.get("features")
        return _str(",".join(v) if isinstance(v, list) else v)
    if field in ("CPUs", "Memory"):
        v = _num(n.get("cpus" if field == "CPUs" else "real_memory"))
        return "N/A" if v is None else str(v)
    key = {"Gres": "gres", "GresUsed": "gres_used", "NodeAddr": "address", "Version": "version"}[field]
    return _str(n.get(key))


def answer(argv: Sequence[str], nodes_doc: Any = None, jobs_doc: Any = None, now: float | None = None) -> str | None:
    """What the narrow read ``argv`` prints for these ``--json`` documents; None when argv is not one."""
    if not is_narrow(argv):
        return None
    fmt = _format(argv)
    now = time.time() if now is None else now
    lines: list[str] = []
    if argv[2] == "squeue":
        for j in (jobs_doc or {}).get("jobs") or []:
            lines.append("".join(job_field(j, f, now) + suffix for f, suffix in fmt))
    else:
        nodes = (nodes_doc or {}).get("nodes") or []
        # slurm.conf's partition order, as every node's list keeps it (sinfo --sort=#P)
        graph: TopologicalSorter[str] = TopologicalSorter()
        for n in nodes:
            parts = list(n.get("partitions") or [])
            for i, p in enumerate(parts):
                graph.add(p, *parts[:i])
        order = {p: i for i, p in enumerate(graph.static_order())}
        rows = []
        for n in nodes:
            for p in n.get("partitions") or ["n/a"]:
                rows.append((order.get(p, -1), "".join(node_field(n, p, f) + suffix for f, suffix in fmt)))
        lines = [row for _, row in sorted(rows, key=lambda r: r[0])]
    return "".join(line + "\n" for line in lines)


def _json_reply(runner: RecordingRunner, argv: tuple[str, ...]) -> Result | None:
    """What ``runner``'s rules answer ``argv`` (not recorded as a call)."""
    for prefix, fn in runner.rules:
        if argv[: len(prefix)] == prefix:
            res = fn(argv, None)
            if res is not None:
                return res
    return None


def from_json(runner: RecordingRunner) -> RecordingRunner:
    """Make ``runner`` answer the narrow reads from its ``squeue --json`` and node-record JSON rules.

    A failing JSON rule makes the narrow read fail the same way; a reply that is not
    JSON is passed on as the text.  Returns ``runner``.
    """

    def respond(argv: tuple[str, ...], _input: str | None) -> Result | None:
        if not is_narrow(argv):
            return None
        fmt = dict(_format(argv))
        if argv[2] == "squeue":
            json_argv: tuple[str, ...] = ("squeue", "--json")
        elif "Version" in fmt:
            json_argv = ("scontrol", "show", "nodes", "--json")
        else:
            json_argv = ("sinfo", "--json")
        res = _json_reply(runner, json_argv)
        if res is None:
            return Result(argv, 0, "", "")
        if not res.ok:
            return Result(argv, res.returncode, "", res.stderr)
        try:
            doc = json.loads(res.stdout or "{}")
        except ValueError:
            return Result(argv, 0, res.stdout, res.stderr)
        if not isinstance(doc, dict):
            return Result(argv, 0, res.stdout, res.stderr)
        if doc.get("errors"):  # Slurm's complaint: the text commands print it and fail
            return Result(argv, 1, "", json.dumps(doc["errors"]))
        if not isinstance(doc.get("jobs" if argv[2] == "squeue" else "nodes"), list):  # not records: as it was
            return Result(argv, 0, res.stdout, res.stderr)
        text = answer(argv, nodes_doc=doc, jobs_doc=doc)
        return Result(argv, 0, text or "", res.stderr)

    runner.respond(("env", TIME_ENV), respond)
    return runner


def answer_narrow_from_json(monkeypatch: Any) -> None:
    """Every :class:`RecordingRunner` of a test answers the narrow reads from its JSON rules (:func:`from_json`).

    For tests written against ``squeue --json`` and node-record replies: use it in an autouse fixture.
    """
    run = RecordingRunner.run

    def narrow_run(self: RecordingRunner, argv: Sequence[str], **kw: Any) -> Result:
        if is_narrow(argv) and not any(p[:1] == ("env",) for p, _ in self.rules):
            from_json(self)
        return run(self, argv, **kw)

    monkeypatch.setattr(RecordingRunner, "run", narrow_run)


@pytest.fixture
def narrow_from_json(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fixture: SlurmClient reads Slurm's narrow text; answer it from the JSON replies a test gives.

    Use it in a module as ``pytestmark = pytest.mark.usefixtures("narrow_from_json")``.
    """
    answer_narrow_from_json(monkeypatch)


def as_json_calls(calls: Sequence[Sequence[str]]) -> list[tuple[str, ...]]:
    """Recorded calls with each narrow read as the JSON read it stands for, for tests that count reads.

    A narrow ``squeue`` read is ``("squeue", "--json")`` (22.05's second, excluded-nodes read
    is left out), a narrow ``sinfo`` read the node-record command of its release.
    """
    out = []
    for c in calls:
        if not is_narrow(c):
            out.append(tuple(c))
        elif c[2] == "sinfo":
            fmt = dict(_format(c))
            out.append(("scontrol", "show", "nodes", "--json") if "Version" in fmt else ("sinfo", "--json"))
        elif any(a.startswith("--Format=") for a in c):
            out.append(("squeue", "--json"))
    return out
