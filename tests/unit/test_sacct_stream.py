"""Issue 32: ``sacct --json`` read as a stream (``simulate`` and the forecast), with no size cap."""

from __future__ import annotations

import io
import json
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurm_pool import textio
from slurm_pool.adapters.records import RecordError, parse_jobs
from slurm_pool.adapters.runner import CommandError, RecordingRunner, Result, SubprocessRunner, stream_output
from slurm_pool.adapters.sacct_stream import job_records, sacct_jobs
from slurm_pool.adapters.slurm import SlurmClient
from slurm_pool.bridge.history import Sources, build_forecast
from slurm_pool.cli import cli
from slurm_pool.sim import history
from slurm_pool.spec import load_spec
from slurm_pool.spec.bridge import Bridge, ForecastSettings
from tests.support.sacct import finished

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "examples" / "pool.yaml"
DATA = ROOT / "tests" / "data" / "slurm"
FIXTURES = sorted(DATA.glob("*/sacct*.json"))
CAPACITY = {"proja": 4, "projb": 2, "projc": 2}


def _job(job_id, account, submit, start, end, gpus=1):
    return {
        "job_id": job_id,
        "account": account,
        "time": {"submission": submit, "start": start, "end": end},
        "tres": {"allocated": [{"type": "gres", "name": "gpu", "count": gpus}]},
    }


def _streamed(text: bytes, capacity=None, mig=None, name="x.json"):
    return history.jobs_from_records(
        sacct_jobs(io.BytesIO(text), name, history.HistoryError), capacity or CAPACITY, name, mig
    )


def _whole(doc, capacity=None, mig=None, name="x.json"):
    return history.jobs_from_sacct(doc, capacity or CAPACITY, name=name, mig=mig)


def _same(a: history.History, b: history.History) -> None:
    assert a.jobs == b.jobs and a.skipped == b.skipped and (a.start, a.end) == (b.start, b.end)


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: f"{p.parent.name}/{p.name}")
@pytest.mark.parametrize("indent", [None, 1])
def test_the_stream_reads_every_recorded_fixture_as_the_whole_document_reader(path, indent):
    doc = finished(json.loads(path.read_text()))
    text = json.dumps(doc, indent=indent).encode()
    spec = load_spec(SPEC)
    _same(_streamed(text), _whole(doc))
    mig = history.mig_nodes(spec)
    _same(_streamed(text, history.owned_gpus(spec), mig), _whole(doc, history.owned_gpus(spec), mig))
    # the forecast's records too: the same as parse_jobs of the whole output
    assert list(job_records(io.BytesIO(text), "sacct")) == parse_jobs(text.decode(), "sacct")


@pytest.mark.parametrize(
    "doc",
    [
        {"jobs": [_job(1, "proja", 10, 20, 30), _job(2, "projc", 11, 0, 0), _job(3, "x", 12, 13, 13)]},
        {"jobs": [_job(1, "proja", 10, 20, 30, 9), _job(2, "zz", 11, 12, 50, 2), _job(3, "projb", 5, 6, 7, 0)]},
        {"meta": {"plugin": {}}, "jobs": [_job(7, "projb", 1, 2, 3)], "warnings": [], "errors": []},
        {
            "jobs": [
                {
                    "job_id": 1,
                    "account": "proja",
                    "submit_time": 5,
                    "start_time": 6,
                    "end_time": 9,
                    "tres_alloc_str": "cpu=1,gres/gpu=2",
                }
            ]
        },
    ],
)
def test_the_stream_agrees_with_the_whole_document_reader(doc):
    _same(_streamed(json.dumps(doc).encode()), _whole(doc))


@pytest.mark.parametrize(
    "text, message",
    [
        (b'{"jobs": [{"job_id": 1, "time": {"start": NaN}}]}', r"x\.json: jobs\[0\] or after: not JSON: lexical error"),
        (b'{"jobs": [{"job_id": 1, "time": {"start": Infinity}}]}', r"jobs\[0\] or after: not JSON"),
        (b'{"jobs": [{"job_id": 1, "time": {"start": 1e400}}]}', r"jobs\[0\] or after: not JSON: .*overflow"),
        (b'{"jobs": [{"job_id": 1, "time": {"start": 99999999999999999999}}]}', r"jobs\[0\] or after: .*overflow"),
        (b'{"jobs": [{"job_id": 1, "time": {"start": 9223372036854775808}}]}', r"jobs\[0\] or after: .*overflow"),
        (b'{"jobs": [{"job_id": 1, "time": {"start": true}}]}', r"jobs\[0\]\.time\.start: True is not a number"),
        (b'{"jobs": [{"job_id": 1, "time": {"start": "1_0"}}]}', r"jobs\[0\]\.time\.start: '1_0'"),
        (b'{"jobs": [{"job_id": 1, "time": {"start": "\xd9\xa1"}}]}', r"jobs\[0\]\.time\.start: '\u0661'"),
        (b'{"jobs": [{"job_id": 1, "time": {"start": 1.5}}]}', r"jobs\[0\]\.time\.start: 1\.5"),
        (b'{"jobs": [{"name": "\xff"}]}', r"no GPU job that ran \(\{'no usable job id or count': 1\}\)"),
        (b'{"jobs": [{"name": "a\nb"}]}', r"not JSON: lexical error: invalid character inside string"),
        (
            b'{"jobs": [{"job_id": 1}, {"job_id": 2, "na',
            r"x\.json: jobs\[1\] or after: not JSON: parse error: premature EOF",
        ),
        (b'{"jobs": [{"job_id": 1}]} {}', r"jobs\[\d\] or after: not JSON: parse error: trailing garbage"),
        (b"", r"x\.json: not JSON: parse error: premature EOF"),
        (b"[]", r"x\.json: not a JSON object"),
        (b'{"jobs": {}}', r"'jobs' is not a list"),
        (b'{"jobs": {"item": {"job_id": 1}}}', r"'jobs' is not a list"),
        (b'{"meta": {}}', r"x\.json: no 'jobs' list"),
        (b'{"jobs": [1]}', r"jobs\[0\] is int, not an object"),
        (b'{"jobs": []}', r"no GPU job that ran \(no jobs\)"),
        (b'{"errors": [{"error": "Unable to connect"}], "jobs": []}', r"Slurm reported errors: Unable to connect"),
        (b'{"errors": "down", "jobs": [{"job_id": 1}]}', r"Slurm reported errors: down"),
        (b'{"jobs": [], "meta": {"a": [[1], {"errors": 2}]}, "errors": ["x"]}', r"Slurm reported errors: x\Z"),
        (b'{"jobs": [], "errors": [{"description": "d", "error": "e"}], "warnings": []}', r"errors: d\Z"),
    ],
    ids=ascii,
)
def test_hostile_and_broken_exports_are_refused_naming_where(text, message):
    with pytest.raises(history.HistoryError, match=message):
        _streamed(text)


def test_an_errors_list_after_the_jobs_refuses_the_whole_export():
    # Slurm prints ``errors`` after ``jobs``: jobs are handed on as they are read, then the stream
    # refuses at the end, before it is done, so a reader that returns at the end returns nothing.
    jobs = [_job(k, "proja", 10, 20, 30) for k in range(3000)]  # several chunks of the parser
    text = json.dumps({"jobs": jobs, "meta": {}, "errors": [{"description": "sacct: timeout"}]}).encode()
    seen = []
    with pytest.raises(RecordError, match="x.json: Slurm reported errors: sacct: timeout"):
        for i, _ in sacct_jobs(io.BytesIO(text), "x.json"):
            seen.append(i)
    assert 0 < len(seen) <= len(jobs)
    with pytest.raises(history.HistoryError, match="Slurm reported errors"):
        _streamed(text)


def test_an_errors_list_before_the_jobs_refuses_before_the_first_job():
    text = json.dumps({"errors": [{"error": "e"}], "jobs": [_job(1, "proja", 10, 20, 30)]}).encode()
    with pytest.raises(RecordError, match="Slurm reported errors: e"):
        next(sacct_jobs(io.BytesIO(text), "x.json"))


def test_errors_nested_in_a_job_or_empty_are_not_slurm_errors():
    doc = {"jobs": [{**_job(1, "proja", 10, 20, 30), "errors": ["not Slurm's"]}], "errors": [], "warnings": [{}]}
    _same(_streamed(json.dumps(doc).encode()), _whole(doc))


def test_a_byte_order_mark_is_skipped():
    doc = {"jobs": [_job(1, "proja", 10, 20, 30)]}
    _same(_streamed(b"\xef\xbb\xbf" + json.dumps(doc).encode()), _whole(doc))


def test_simulate_reads_a_history_past_the_whole_file_cap(tmp_path, monkeypatch):
    # No cap on a history: with the whole-file cap lowered to 1 KiB (256 MiB in use), an export 16 times
    # larger still replays, from a file and from standard input; what is read whole is still capped.
    monkeypatch.setattr(textio, "MAX_BYTES", 1024)
    doc = {"jobs": [_job(k + 1, "proja", 10 + k, 20 + k, 90 + k) for k in range(200)]}  # ids from 1: job 0 is none
    f = tmp_path / "big.json"
    f.write_text(json.dumps(doc, indent=1))
    assert f.stat().st_size > 16 * textio.MAX_BYTES
    for args, stdin in (([str(f)], None), (["-"], f.read_bytes())):
        res = CliRunner().invoke(cli, ["simulate", "--spec", str(SPEC), "--sacct", *args, "--json"], input=stdin)
        assert res.exit_code == 0, res.output
        assert json.loads(res.output)["owner_jobs"] == 200
    with pytest.raises(textio.InputError, match="larger than 0 MiB"):
        textio.read_json(str(f))


# -- the runner's stream -------------------------------------------------------------------------


def test_the_recording_runner_streams_canned_output_and_injected_failures():
    r = RecordingRunner()
    r.on(["sacct", "--json"], '{"jobs": [{"job_id": 4}]}')
    with r.stream(["sacct", "--json", "-a"]) as out:
        assert [rec.job_id for rec in job_records(out, "sacct")] == [4]
    assert r.commands("sacct") == [("sacct", "--json", "-a")]
    r.fail(["sacct"], 1, "sacct: error: slurmdbd down")
    with pytest.raises(CommandError, match="slurmdbd down"):
        with r.stream(["sacct", "--json"]):
            pass


class _WholeOnly:
    """A runner with no ``stream`` (such as a wrapper): its output is read whole."""

    def run(self, argv, *, check=True, input=None, timeout=None):
        return Result(tuple(argv), 0, '{"jobs": []}', "")


def test_stream_output_falls_back_to_a_whole_read():
    with stream_output(_WholeOnly(), ["sacct", "--json"]) as out:
        assert out.read() == b'{"jobs": []}'


PY = sys.executable


@pytest.mark.parametrize(
    "code, timeout, outcome",
    [
        ("import sys; sys.stdout.write('{\"jobs\": [' + ','.join(['{\"job_id\": 1}'] * 5000) + ']}')", 30, 5000),
        ("import sys; sys.stderr.write('sacct: error: down'); sys.exit(1)", 30, "exited 1: sacct: error: down"),
        ('import sys; sys.stdout.write(\'{"jobs": [{"job_id": 1}\'); sys.exit(3)', 30, "exited 3"),
        ("import time; time.sleep(30)", 0.5, "exited 124: timed out after 0.5s"),
    ],
)
def test_the_subprocess_runner_streams_and_reports_failures(code, timeout, outcome):
    argv = [PY, "-c", code]
    if isinstance(outcome, int):
        with SubprocessRunner().stream(argv, timeout=timeout) as out:
            assert sum(1 for _ in job_records(out, "x")) == outcome
        return
    with pytest.raises(CommandError, match=outcome):
        with SubprocessRunner().stream(argv, timeout=timeout) as out:
            list(job_records(out, "x"))


def test_a_missing_command_is_a_command_error():
    with pytest.raises(CommandError, match="exited 127"):
        with SubprocessRunner().stream(["/nonexistent/sacct", "--json"]):
            pass


# -- the forecast ----------------------------------------------------------------------------------


def _forecast(stdout: str):
    runner = RecordingRunner()
    runner.on(["sacct", "--json"], stdout)
    cfg = Bridge(forecast=ForecastSettings(history_days=1))
    now = datetime(2026, 12, 7, 3, tzinfo=timezone.utc)
    fc, _notes = build_forecast(load_spec(SPEC), cfg, Sources(SlurmClient(runner), lambda *a: []), now)
    return fc, runner


def test_the_forecast_streams_sacct():
    end = datetime(2026, 12, 7, 3, tzinfo=timezone.utc).timestamp()
    job = {**_job(1, "proja", end - 7200, end - 7200, end - 3600, 2), "nodes": "a-gpu1", "partition": "gpu"}
    fc, runner = _forecast(json.dumps({"jobs": [job], "errors": []}))
    assert [c[:2] for c in runner.calls] == [("sacct", "--json")]
    idle, _ = _forecast(json.dumps({"jobs": [], "errors": []}))
    assert set(fc.slurm) == set(idle.slurm) and fc.slurm != idle.slurm  # the job was read


def test_the_forecast_refuses_sacct_output_with_slurm_errors_after_the_jobs():
    text = json.dumps({"jobs": [_job(1, "proja", 1, 2, 3)], "errors": [{"error": "Unable to contact slurmdbd"}]})
    with pytest.raises(RecordError, match="printed no readable records: Slurm reported errors: Unable to contact"):
        _forecast(text)
