"""The fast reader of ``sacct --json`` (jobs cut apart by their indent, msgspec) against the reference (ijson)."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

import pytest

from slurm_pool.adapters import jobsplit
from slurm_pool.adapters.records import JobRecord, RecordError, job_record
from slurm_pool.adapters.sacct_stream import JOB_FIELDS, sacct_jobs
from slurm_pool.sim import history
from tests.support.sacct import finished

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = sorted((ROOT / "tests" / "data" / "slurm").glob("*/sacct*.json"))
CAPACITY = {"proja": 4, "projb": 2, "projc": 2}


def _job(job_id: Any = 1, **extra: Any) -> dict[str, Any]:
    return {
        "account": "proja",
        "job_id": job_id,
        "name": f"run-{job_id}",
        "steps": [{"step": {"id": f"{job_id}.batch"}, "nodes": {"list": ["a-gpu1"]}}],
        "time": {"submission": 100, "start": 110, "end": 200 + (job_id if isinstance(job_id, int) else 0)},
        "tres": {"allocated": [{"type": "gres", "name": "gpu", "count": 1}]},
        **extra,
    }


HOLE = 987654321123


def _doc(jobs: list[Any], hole: str = "0", tail: str = '"meta": {},\n "warnings": []') -> bytes:
    """``jobs`` printed as Slurm prints them (one-space indent, each job at two); the value ``HOLE`` becomes ``hole``."""
    texts = ["\n".join("  " + line for line in json.dumps(j, indent=1).split("\n")) for j in jobs]
    text = '{\n "errors": [],\n "jobs": [\n' + ",\n".join(texts) + "\n ],\n " + tail + "\n}\n"
    return text.replace(str(HOLE), hole).encode()


def _outcome(text: bytes, fields: tuple[str, ...] | None) -> tuple[list[tuple[int, dict[str, Any]]], str]:
    """What the reader yields (each job cut to JOB_FIELDS) and how it ends."""
    got: list[tuple[int, dict[str, Any]]] = []
    try:
        for i, job in sacct_jobs(io.BytesIO(text), "x.json", RecordError, fields):
            got.append((i, {k: job[k] for k in JOB_FIELDS if k in job}))
    except Exception as exc:  # noqa: BLE001  # the exact failure is what is compared
        return got, f"{type(exc).__name__}: {exc}"
    return got, "end"


def _same_as_reference(text: bytes) -> tuple[list[tuple[int, dict[str, Any]]], str]:
    """The same jobs and the same end; before a refusal, each reader may have handed on fewer of the jobs
    before it (the reference parses 64 KiB ahead), never others."""
    fast, reference = _outcome(text, JOB_FIELDS), _outcome(text, None)
    # "jobs[N] or after": the reference names the job after the last it handed on; so may the fast reader, later
    where = [re.search(r"jobs\[(\d+)\] or after", end) for end in (fast[1], reference[1])]
    if where[0] and where[1]:
        assert int(where[0].group(1)) >= int(where[1].group(1))
        assert fast[1].replace(where[0].group(0), "") == reference[1].replace(where[1].group(0), "")
    else:
        assert fast[1] == reference[1]
    n = len(fast[0]) if fast[1] == "end" else min(len(fast[0]), len(reference[0]))
    assert (fast[1] != "end" or len(fast[0]) == len(reference[0])) and fast[0][:n] == reference[0][:n]
    return fast


def _bulk(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the jobs msgspec decodes (so that a test knows the fast path ran)."""
    counts: list[int] = []
    made = jobsplit.Splitter._dict

    def counted(self: jobsplit.Splitter, job: Any) -> Any:
        counts.append(1)
        return made(self, job)

    monkeypatch.setattr(jobsplit.Splitter, "_dict", counted)
    return counts


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: f"{p.parent.name}/{p.name}")
@pytest.mark.parametrize("copies", [1, 300])
def test_recorded_fixtures_read_the_same_as_the_reference(path, copies, tmp_path, monkeypatch):
    doc = finished(json.loads(path.read_text()))
    doc["jobs"] = [dict(j, job_id=n + 1) for n, j in enumerate(doc["jobs"] * copies)]
    text = _doc(doc["jobs"])
    counts = _bulk(monkeypatch)
    fast, end = _same_as_reference(text)
    assert end == "end" and len(fast) == len(doc["jobs"])
    assert sum(counts) == len(doc["jobs"]) - 1  # all but the last job, which the reference reads with the tail
    (tmp_path / "sacct.json").write_bytes(text)
    streamed = history.read_sacct(str(tmp_path / "sacct.json"), CAPACITY)
    whole = history.jobs_from_sacct(json.loads(text), CAPACITY, name=str(tmp_path / "sacct.json"))
    assert (streamed.jobs, streamed.skipped, streamed.start, streamed.end) == (
        whole.jobs,
        whole.skipped,
        whole.start,
        whole.end,
    )


BIG = "1" * 400


@pytest.mark.parametrize(
    "jobs, hole",
    [
        pytest.param([_job(1), _job(2, steps=HOLE), _job(3)], "12345678901234567890", id="int-past-64-bits-skipped"),
        pytest.param([_job(1), _job(2, steps=HOLE), _job(3)], "-9223372036854775808", id="int64-min-skipped"),
        pytest.param([_job(1), _job(2, steps=HOLE), _job(3)], "1e400", id="float-overflow-skipped"),
        pytest.param([_job(1), _job(2, steps=HOLE), _job(3)], "1e-400", id="float-underflow-skipped"),
        pytest.param([_job(1), _job(2, steps=HOLE), _job(3)], BIG + ".5", id="long-mantissa-skipped"),
        pytest.param([_job(1), _job(HOLE), _job(3)], "12345678901234567890", id="int-past-64-bits-id"),
        pytest.param([_job(1), _job(2, name=HOLE), _job(3)], '"1234567890123456789012 e+999"', id="digits-in-a-string"),
        pytest.param([_job(1), _job(2, steps=HOLE), _job(3)], '"\\ud800"', id="lone-surrogate"),
        pytest.param([_job(1), _job(2, steps=HOLE), _job(3)], '"a\x01b"', id="raw-control-character"),
        pytest.param([_job(1), _job(2, name=HOLE), _job(3)], '"a\\u0001b"', id="escaped-control-character"),
        pytest.param([_job(1), _job(2, steps=HOLE), _job(3)], "\x0c1", id="form-feed-as-space"),
        pytest.param([_job(1), _job(2, steps=HOLE), _job(3)], "[" * 3000 + "]" * 3000, id="deep-nesting"),
        pytest.param([_job(1), _job(2, steps=HOLE), _job(3)], "NaN", id="nan"),
        pytest.param([_job(1), _job(2, steps=HOLE), _job(3)], "[1,]", id="trailing-comma"),
        pytest.param([_job(1), _job(2, name=HOLE), _job(3)], '"' + "x" * 5_000_000 + '"', id="huge-string"),
        pytest.param([_job(1), _job(None), _job(3)], "0", id="id-null"),
        pytest.param([_job(1), {"account": "proja"}, _job(3)], "0", id="id-missing"),
        pytest.param([_job(1), _job("abc"), _job(3)], "0", id="id-a-string"),
        pytest.param([_job(1), _job(2, time=[1, 2]), _job(3)], "0", id="time-a-list"),
        pytest.param([_job(1), _job(2, tres="gpu"), _job(3)], "0", id="tres-a-string"),
        pytest.param([_job(1), _job(2, account={"a": 1}), _job(3)], "0", id="account-an-object"),
        pytest.param([_job(1), _job(2, **{"job_id ": 3}), _job(3)], "0", id="near-duplicate-key"),
        pytest.param([_job(1), 7, _job(3)], "0", id="a-job-that-is-a-number"),
        pytest.param([_job(1), [_job(2)], _job(3)], "0", id="a-job-that-is-a-list"),
        pytest.param([_job(1), _job(2, comment={"job": "\n  },\n  {"}), _job(3)], "0", id="cut-in-a-string"),
    ],
)
def test_hostile_jobs_read_the_same_as_the_reference(jobs, hole):
    _same_as_reference(_doc(jobs, hole))


def _misprinted(text: bytes) -> bytes:
    """The last job's nested object printed with the jobs' indent: the last cut is not between jobs."""
    at = text.rindex(b'"steps": [')
    return text[:at] + b'"steps": [\n  {"a": 1\n  },\n  {"b": 2}, ' + text[at + 10 :]


@pytest.mark.parametrize(
    "text",
    [
        pytest.param(_doc([_job(k) for k in range(1, 5)]), id="clean"),
        pytest.param(_doc([_job(k) for k in range(1, 5)])[:-200], id="truncated-in-the-last-job"),
        pytest.param(_doc([_job(k) for k in range(1, 5)])[:700], id="truncated-in-a-job"),
        pytest.param(_doc([_job(k) for k in range(1, 5)])[:-3], id="truncated-in-the-tail"),
        pytest.param(_doc([_job(k) for k in range(1, 5)]) + b"x", id="trailing-garbage"),
        pytest.param(_doc([_job(1), _job(2)], tail='"errors": ["boom"]'), id="errors-after-the-jobs"),
        pytest.param(_doc([_job(1), _job(2)], tail='"jobs": [{"job_id": 9}]'), id="a-second-jobs-list"),
        pytest.param(_misprinted(_doc([_job(k) for k in range(1, 5)])), id="a-cut-inside-a-job"),
        pytest.param(_doc([_job(k) for k in range(1, 5)]).replace(b"},\n  {", b"}\n  {", 1), id="a-missing-comma"),
        pytest.param(_doc([_job(1), _job(1), _job(2)]), id="a-repeated-job"),
        pytest.param(_doc([_job(1), _job(2)]).replace(b'"account"', b'"job_id": 5, "account"'), id="a-repeated-key"),
        pytest.param(_doc([_job(k) for k in range(1, 5)]).replace(b"\n", b"\r\n"), id="crlf"),
        pytest.param(json.dumps({"jobs": [_job(1), _job(2)]}).encode(), id="not-printed-by-slurm"),
        pytest.param(b"\xef\xbb\xbf" + _doc([_job(1), _job(2)]), id="byte-order-mark"),
        pytest.param(_doc([_job(1), _job(2, name="\udcff")]).replace(b"\\udcff", b"\xff"), id="not-utf-8"),
    ],
)
def test_hostile_documents_read_the_same_as_the_reference(text):
    _same_as_reference(text)


def test_a_cut_inside_a_job_hands_the_rest_to_the_reference(monkeypatch):
    counts = _bulk(monkeypatch)
    jobs, end = _same_as_reference(_misprinted(_doc([_job(k) for k in range(1, 5)])))
    assert [i for i, _ in jobs] == [0, 1, 2, 3] and end == "end"
    assert sum(counts) == 3  # jobs 0-2 decoded by msgspec; the last, cut inside, read by the reference


def test_a_job_without_a_usable_id_is_skipped_and_counted_never_read_as_0(tmp_path):
    path = tmp_path / "sacct.json"
    path.write_bytes(_doc([_job(1), _job(None), {"account": "proja", "time": {}}, _job(0), _job(4)]))
    hist = history.read_sacct(str(path), CAPACITY)
    assert [j.id.split("#")[0] for j in hist.jobs] == ["1", "4"]
    assert hist.skipped["no usable job id or count"] == 3


def test_job_fields_hold_every_key_job_record_reads():
    class Reads(dict[str, Any]):
        seen: set[str] = set()

        def get(self, key: str, default: Any = None) -> Any:
            self.seen.add(key)
            return super().get(key, default)

        def __contains__(self, key: object) -> bool:
            self.seen.add(str(key))
            return super().__contains__(key)

        def __getitem__(self, key: str) -> Any:
            self.seen.add(key)
            return super().__getitem__(key)

    for path in FIXTURES:
        for raw in json.loads(path.read_text())["jobs"]:
            job = Reads(raw)
            assert isinstance(job_record(job), JobRecord)
            history.check_numbers(job, "x")
    assert Reads.seen and Reads.seen <= set(JOB_FIELDS)


@pytest.mark.parametrize(
    "text, expected",
    [(b"1234567890123456789", True), (b"123456789012345678", False), (b"1e309", True), (b"1E-400", True)]
    + [(b"1e+308", True), (b"1e+30", False), (b'"name"', False), (b"1.5e10", False)],
)
def test_the_number_screen(text, expected):
    assert jobsplit.suspect(text) is expected
