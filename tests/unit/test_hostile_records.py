"""Hostile Slurm output (issue 49): bytes that are not UTF-8, records without a usable id or count.

* One decoder for what commands print (``runner.decode_output``): a byte that is
  not UTF-8 reads ``\\xNN`` from text, JSON and a stream alike, never a traceback.
* A record whose job id or count is missing, negative, fractional, boolean or
  past what Slurm's field holds is reported and skipped, never read as 0.
"""

from __future__ import annotations

import io
import json
import logging
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from slurm_pool.adapters import narrow
from slurm_pool.adapters.gres import check_gres, gpu_counts, parse_gres, tres_list_gpus, tres_shards
from slurm_pool.adapters.records import RecordError, RecordSkipped, convert_record, job_record, parse_jobs, parse_nodes
from slurm_pool.adapters.runner import (
    CommandError,
    EscapedJSON,
    RecordingRunner,
    SubprocessRunner,
    decode_output,
    json_text,
    stream_output,
)
from slurm_pool.adapters.sacct_stream import job_records
from slurm_pool.adapters.slurmjson import UINT64_MAX, Unusable, whole
from tests.support import fake_slurm_bin
from tests.unit.test_metrics import recorded
from tests.unit.test_narrow_readers import TOK, V26, job_line

ROOT = Path(__file__).resolve().parents[2]
FLOATING = ROOT / "examples" / "pool-floating.yaml"
SPEC = ROOT / "examples" / "pool.yaml"

# -- one decoder ------------------------------------------------------------------------------

#: (bytes Slurm printed, the text every reader reads)
BYTES = [
    (b"plain", "plain"),
    (b"caf\xc3\xa9 \xe4\xb8\xad", "caf\u00e9 \u4e2d"),  # UTF-8 stays as it is
    (b"\xff", "\\xff"),
    (b"a\xfe\xffb", "a\\xfe\\xffb"),
    (b"cut \xe2\x82", "cut \\xe2\\x82"),  # a sequence cut short
    (b"\xed\xa0\x80", "\\xed\\xa0\\x80"),  # an encoded surrogate is no UTF-8
    (b"\xc0\xaf", "\\xc0\\xaf"),  # an overlong '/'
    (b"\x80x", "\\x80x"),
]


@pytest.mark.parametrize("raw, text", BYTES, ids=ascii)
def test_the_one_decoder_escapes_what_is_not_utf8(raw, text):
    assert decode_output(raw) == text


def _run(*code: str) -> list[str]:
    return [sys.executable, "-c", "; ".join(("import sys", *code))]


@pytest.mark.parametrize("raw, text", BYTES, ids=ascii)
def test_a_real_command_printing_any_bytes_is_read_through_the_decoder(raw, text):
    res = SubprocessRunner().run(_run(f"sys.stdout.buffer.write({raw!r})", f"sys.stderr.buffer.write({raw!r})"))
    assert (res.stdout, res.stderr) == (text, text)
    with pytest.raises(CommandError) as err:  # a failure's message too
        SubprocessRunner().run(_run(f"sys.stderr.buffer.write({raw!r})", "sys.exit(3)"))
    assert text in str(err.value)


def _sacct_doc(name: bytes) -> bytes:
    job = {"job_id": 7, "name": "MARK", "account": "proja", "time": {"submission": 1, "start": 2, "end": 3}}
    return json.dumps({"jobs": [job, {**job, "job_id": 8, "name": "ok"}]}).encode().replace(b"MARK", name)


@pytest.mark.parametrize("raw, text", BYTES, ids=ascii)
def test_every_reader_reads_the_same_name(raw, text):
    """Narrow text, JSON read whole, JSON streamed (real command and canned): the same name."""
    line = decode_output(job_line(Name="MARK").encode().replace(b"MARK", raw))
    (from_text,) = narrow.parse_job_text([line], V26, TOK).records
    from_json = parse_jobs(decode_output(_sacct_doc(raw)))
    with SubprocessRunner().stream(_run(f"sys.stdout.buffer.write({_sacct_doc(raw)!r})")) as out:
        streamed = list(job_records(out, "sacct --json"))
    canned = RecordingRunner()
    canned.on(["sacct"], _sacct_doc(raw))  # bytes go through the one decoder
    with stream_output(canned, ["sacct", "--json"]) as out:
        fallback = list(job_records(out, "sacct --json"))
    for recs in (from_json, streamed, fallback):
        assert [(r.job_id, r.name) for r in recs] == [(7, text), (8, "ok")]
    assert from_text.name == text


class _Trickle:
    """A stream that hands out ``n`` bytes at a time (chunk edges inside escapes and characters)."""

    def __init__(self, data: bytes, n: int):
        self.data, self.n = io.BytesIO(data), n

    def read(self, k: int = -1) -> bytes:
        return self.data.read(self.n if k else 0)


@pytest.mark.parametrize("n", [1, 2, 3, 5, 7, 64])
def test_a_stream_reads_the_same_in_any_chunks(n):
    doc = _sacct_doc(b"a\xff\\\\\xe2\x82\xac\xe2\x82")  # a byte, an escaped backslash, a euro sign, a cut one
    whole_read = EscapedJSON(io.BytesIO(doc)).read(-1)
    parts = []
    stream = EscapedJSON(_Trickle(doc, n))  # type: ignore[arg-type]
    while chunk := stream.read(n):
        parts.append(chunk)
    assert b"".join(parts) == whole_read
    assert json.loads(whole_read)["jobs"][0]["name"] == "a\\xff\\\u20ac\\xe2\\x82"


@pytest.mark.parametrize(
    "text, want",
    [
        ('{"n": "\\\\x41"}', "\\x41"),  # JSON's escaped backslash, then x: unchanged
        ('{"n": "\\\\\\x41"}', "\\\\x41"),  # an escaped backslash, then a decoder escape
        ('{"n": "\\xff"}', "\\xff"),  # a decoder escape
        ('{"n": "\\u0041\\n"}', "A\n"),  # JSON's own escapes
    ],
)
def test_json_text_makes_decoder_escapes_json_escapes(text, want):
    assert json.loads(json_text(text))["n"] == want


# -- ids and counts -----------------------------------------------------------------------------

#: job_id values that are no job's id
BAD_IDS: list[Any] = [
    None,
    0,
    -5,
    5.5,
    5.0,
    True,
    False,
    "5x",
    "",
    "-5",
    " 5",
    "\u0665",
    4294967294,  # INFINITE
    2**32,
    2**64,
    10**30,
    [5],
    {"set": False, "infinite": False, "number": 5},
    {"set": True, "infinite": True, "number": 0},
    {"set": True, "number": -1},
    {"set": True, "number": True},
]


@pytest.mark.parametrize("value", BAD_IDS, ids=ascii)
def test_whole_refuses_what_is_no_id(value):
    with pytest.raises(Unusable, match="job_id"):
        whole(value, "job_id", least=1)


@pytest.mark.parametrize(
    "value, want", [(1, 1), ("42", 42), ({"set": True, "infinite": False, "number": 9}, 9), (4294967293, 4294967293)]
)
def test_whole_reads_ids(value, want):
    assert whole(value, "job_id", least=1) == want


def _squeue_job(job_id: Any, **more: Any) -> dict[str, Any]:
    out = {"name": "j", "job_state": "PENDING", "account": "proja", **more}
    if job_id is not ...:
        out["job_id"] = job_id
    return out


@pytest.mark.parametrize("value", [..., *BAD_IDS], ids=ascii)
def test_a_job_without_a_usable_id_is_reported_and_skipped_in_every_json_reader(value, caplog):
    doc = {"jobs": [_squeue_job(value), _squeue_job(9)]}
    text = json.dumps(doc)
    assert [r.job_id for r in parse_jobs(text, "squeue --json")] == [9]
    if isinstance(value, int) and value >= 2**64:  # past what the stream's C parser reads: the export is refused
        with pytest.raises(RecordError, match=r"jobs\[0\] or after: not JSON: parse error: integer overflow"):
            list(job_records(io.BytesIO(text.encode()), "sacct --json"))
    else:
        assert [r.job_id for r in job_records(io.BytesIO(text.encode()), "sacct --json")] == [9]
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert said and all("skipped a record" in m and "jobs[0]" in m and "job_id" in m for m in said), said


@pytest.mark.parametrize(
    "tres",
    [
        [{"type": "gres", "name": "gpu", "count": -1}],
        [{"type": "gres", "name": "gpu", "count": 1.5}],
        [{"type": "gres", "name": "gpu", "count": True}],
        [{"type": "gres", "name": "gpu", "count": None}],
        [{"type": "gres", "name": "gpu:a100", "count": 2**64}],
        [{"type": "gres", "name": "gpu:a100", "count": "2x"}],
        [{"type": "gres", "name": "shard", "count": -3}],
    ],
    ids=ascii,
)
def test_a_job_with_an_unusable_gpu_count_is_skipped_not_read_as_zero(tres, caplog):
    doc = {"jobs": [_squeue_job(5, tres={"allocated": tres}), _squeue_job(6)]}
    assert [r.job_id for r in parse_jobs(json.dumps(doc))] == [6]
    assert "skipped a record" in caplog.text and "jobs[0]" in caplog.text


@pytest.mark.parametrize(
    "alloc", ["gres/gpu=100000000000000000000", "gres/gpu=-1", "gres/gpu:a100=2.5", "gres/shard=x", "gres/gpu="]
)
def test_a_tres_string_with_an_unusable_gpu_count_is_unusable(alloc):
    with pytest.raises(RecordSkipped, match="TRES gres/"):
        convert_record(job_record, {"job_id": 5, "tres_alloc_str": f"cpu=1,{alloc}"}, "jobs[0]")


def test_counts_in_range_still_read():
    assert tres_list_gpus([{"type": "gres", "name": "gpu", "count": {"set": True, "number": 3}}])[0] == 3
    assert tres_shards("gres/shard=4,gres/gpumem=80G") == 4  # gpumem is no GPU count
    rec = job_record({"job_id": 5, "tres_alloc_str": "cpu=1,gres/gpu=2,gres/gpumem=80G", "restart_cnt": 3})
    assert (rec.gpus, rec.restart_count) == (2, 3)
    assert job_record({"job_id": 5}).restart_count == 0  # absent: none


@pytest.mark.parametrize(
    "gres, counts",
    [
        ("gpu:a100:100000000000000000000", {}),  # 10**20: past 64 bits
        (f"gpu:a100:{2**64}", {}),
        (f"gpu:a100:{UINT64_MAX},gpu:h100:2", {"a100": UINT64_MAX, "h100": 2}),
        ("gpu:a100:2(S:0-1)", {"a100": 2}),
    ],
)
def test_gres_counts_past_what_slurm_holds_are_no_count(gres, counts):
    assert gpu_counts(gres) == counts
    assert all(item.count <= UINT64_MAX for item in parse_gres(gres))


@pytest.mark.parametrize("field", ["gres", "gres_used"])
@pytest.mark.parametrize("count", ["100000000000000000000", str(2**64), "1" * 40])
def test_a_node_with_an_absurd_gres_count_is_reported_and_skipped(field, count, caplog):
    good = {"name": "n2", "state": "idle", "gres": "gpu:2", "gres_used": "gpu:0"}
    bad = {**good, "name": "n1", field: f"gpu:a100:{count}"}
    assert [n.name for n in parse_nodes(json.dumps({"nodes": [bad, good]}), "sinfo --json")] == ["n2"]
    assert "skipped a record: sinfo --json: nodes[0]" in caplog.text and "count past" in caplog.text
    with pytest.raises(Unusable):
        check_gres(bad[field], field)


@pytest.mark.parametrize("name", [None, "", 7, ["n1"]], ids=ascii)
def test_a_node_without_a_name_is_reported_and_skipped(name, caplog):
    doc = {"nodes": [{"name": name, "state": "idle"}, {"name": "n2", "state": "idle"}]}
    assert [n.name for n in parse_nodes(json.dumps(doc))] == ["n2"]
    assert "skipped a record" in caplog.text and "node name" in caplog.text


# -- the commands, with a Slurm on PATH that prints the bytes ----------------------------------


def _busy_docs() -> tuple[Any, Any]:
    """The recorded busy scene; its running owner job and its pending dependent job named with MARK."""
    text = recorded("squeue-busy.json")
    text = text.replace('"name": "owner-run"', '"name": "MARK"').replace('"name": "waits-on-owner"', '"name": "wMARK"')
    return json.loads(text), json.loads(recorded("nodes-busy.json"))


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "slurm_pool", *args],
        env=env,
        cwd=str(ROOT),
        capture_output=True,
        text=True,
        errors="replace",
        timeout=120,
    )


MARKS = [b"\xff", b"a\xfe\xffb\xe2\x82", b"\xed\xa0\x80\xc0\xaf"]


@pytest.mark.parametrize("mark", MARKS, ids=ascii)
def test_status_and_why_with_a_job_name_that_is_not_utf8(tmp_path, mark):
    jobs, nodes = _busy_docs()
    env = fake_slurm_bin.install(tmp_path / "bin", jobs, nodes, mark)
    status = _cli(env, "status", "--json", "--state-dir", "", "--usage-hours", "0")
    assert status.returncode == 0, status.stderr
    assert "Traceback" not in status.stderr
    assert json.loads(status.stdout)["gpus"]["total"] > 0  # the jobs and nodes are all read
    text = _cli(env, "status", "--state-dir", "", "--usage-hours", "0")
    assert text.returncode == 0 and "Traceback" not in text.stderr and "\x1b" not in text.stdout
    waiting = next(j["job_id"] for j in jobs["jobs"] if j["name"] == "wMARK")
    why = _cli(env, "why", str(waiting), "--spec", str(SPEC), "--json")
    assert why.returncode == 0, why.stderr
    assert "Traceback" not in why.stderr and json.loads(why.stdout)["job_id"] == waiting


def _reconcile_jobs(bad_id: Any) -> dict[str, Any]:
    from tests.unit.test_guarantee_reconcile import TAG_D, squeue_job

    jobs = [
        squeue_job("22.05", 1, "guaranteed-projd", "floating", "RUNNING", 2, ""),
        squeue_job("22.05", 5, "shared", "shared", "PENDING", 2, TAG_D),  # the oldest: moved if it were read
        squeue_job("22.05", 6, "shared", "shared", "PENDING", 2, TAG_D),
    ]
    jobs[1]["name"] = "MARK"
    if bad_id is ...:
        del jobs[1]["job_id"]
    else:
        jobs[1]["job_id"] = bad_id
    return {"jobs": jobs}


@pytest.mark.parametrize("bad_id", [..., None, 0, -5, 5.5, 5.0, True, "5", 2**64, "5x"], ids=ascii)
def test_reconcile_never_moves_a_job_without_a_usable_id(tmp_path, bad_id):
    env = fake_slurm_bin.install(tmp_path / "bin", _reconcile_jobs(bad_id), {"nodes": []}, b"\xff")
    res = _cli(env, "guarantees", "reconcile", "--spec", str(FLOATING))
    assert "Traceback" not in res.stderr
    updates = [c for c in fake_slurm_bin.calls(tmp_path / "bin") if c[0] == "scontrol"]
    if bad_id == "5":  # ASCII digits are an id: job 5, the oldest, is moved
        assert res.returncode == 0, res.stderr
        assert [c[2] for c in updates] == ["JobId=5"]
        return
    assert res.returncode == 0, res.stderr
    assert [c[2] for c in updates] == ["JobId=6"]  # never JobId=0, -5 or 5
    assert "skipped a record: squeue --json printed no readable records: jobs[1]: job_id" in res.stderr


@pytest.mark.parametrize("mark", MARKS, ids=ascii)
def test_checkpoints_prune_with_a_job_name_that_is_not_utf8(tmp_path, mark):
    base = tmp_path / "ckpt"
    (base / "alice" / "5").mkdir(parents=True)
    (base / "alice" / "6").mkdir(parents=True)
    jobs = _reconcile_jobs(5)
    env = fake_slurm_bin.install(tmp_path / "bin", jobs, {"nodes": []}, mark)
    res = _cli(env, "checkpoints", "prune", "--base", str(base), "--dry-run")
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in res.stderr
    assert f"keep   {base}/alice/5: job still in the queue" in res.stdout
    assert f"keep   {base}/alice/6: job still in the queue" in res.stdout


@pytest.mark.parametrize("bad_id", [..., -5, 5.5, True, 2**64], ids=ascii)
def test_checkpoints_prune_refuses_a_queue_with_a_job_it_cannot_name(tmp_path, bad_id):
    """Prune removes what the queue does not hold: a job it cannot name could hold any directory."""
    base = tmp_path / "ckpt"
    (base / "alice" / "5").mkdir(parents=True)
    env = fake_slurm_bin.install(tmp_path / "bin", _reconcile_jobs(bad_id), {"nodes": []}, b"\xff")
    res = _cli(env, "checkpoints", "prune", "--base", str(base), "--keep-days", "0")
    assert res.returncode == 2, res.stderr
    assert "cannot read the queue, nothing removed" in res.stderr and "Traceback" not in res.stderr
    assert (base / "alice" / "5").is_dir()


@pytest.mark.parametrize("mark", MARKS, ids=ascii)
def test_the_console_lists_every_job_when_a_name_is_not_utf8(tmp_path, mark):
    from slurm_pool.adapters.slurm import SlurmClient
    from slurm_pool.web.reader import PoolReader
    from tests.unit.test_web_views import Clock

    jobs, nodes = _busy_docs()
    env = fake_slurm_bin.install(tmp_path / "bin", jobs, nodes, mark)
    snap = PoolReader(SlurmClient(SubprocessRunner(env={"PATH": env["PATH"]})), 10, Clock()).snapshot(wait=60)
    assert snap.fresh and snap.error == ""
    assert sorted(j.job_id for j in snap.jobs) == sorted(j["job_id"] for j in jobs["jobs"])
    assert {j.name for j in snap.jobs if j.name.endswith(decode_output(mark))} == {
        decode_output(mark),
        "w" + decode_output(mark),
    }


@pytest.mark.parametrize("field", ["restart_cnt", "node_count"])
@pytest.mark.parametrize("value", [-1, 1.5, True, "2x", 2**40, {"set": True, "number": -3}], ids=ascii)
def test_a_job_with_an_unusable_count_is_skipped(field, value):
    with pytest.raises(RecordSkipped, match=field):
        convert_record(job_record, {"job_id": 5, field: value}, "jobs[0]")


@pytest.mark.parametrize(
    "value, want", [(None, None), (3, 3), ({"set": False, "number": 0}, None), (4294967294, None), ("2", 2)]
)
def test_an_unset_count_is_none_not_a_problem(value, want):
    assert job_record({"job_id": 5, "node_count": value}).node_count == want
