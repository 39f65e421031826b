"""The narrow readers give exactly the JSON readers' records, on every recorded scene of both ends.

Fixtures: ``tests/data/slurm/<version>/narrow/<scene>.json``, recorded from the
real daemons by ``tests/record_slurm_fixtures.py`` (the narrow reads' argv and
output beside the JSON of the same moment).
"""

from __future__ import annotations

import dataclasses
import io
import json
from pathlib import Path
from typing import Any

import pytest

from slurm_pool.adapters import narrow, queuestream
from slurm_pool.adapters.records import JobRecord, NodeRecord, RecordError, job_record, parse_jobs, parse_nodes
from slurm_pool.adapters.runner import RecordingRunner
from slurm_pool.adapters.slurm import SlurmClient
from slurm_pool.versions import SlurmVersion
from tests.record_slurm_fixtures import RECORD_TOKENS
from tests.support import narrow_text

DATA = Path(__file__).resolve().parents[1] / "data" / "slurm"
FIXTURES = sorted(DATA.glob("*/narrow/*.json"))
V22, V26 = SlurmVersion.parse("22.05.8"), SlurmVersion.parse("26.05.3")


def values(r: NodeRecord | JobRecord) -> dict[str, Any]:
    return {f.name: getattr(r, f.name) for f in dataclasses.fields(r) if f.name != "raw"}


def load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def text_records(doc: dict[str, Any]) -> tuple[list[NodeRecord], narrow.JobText]:
    v = SlurmVersion.parse(doc["version"])
    outs = [c["stdout"] for c in doc["commands"]]
    return narrow.parse_node_text(outs[-1], v, RECORD_TOKENS), narrow.parse_job_text(outs[:-1], v, RECORD_TOKENS)


def test_fixtures_of_both_ends_are_recorded():
    assert {p.parent.parent.name for p in FIXTURES} == {"22.05", "26.05"}
    assert {p.stem for p in FIXTURES} >= {"idle", "busy", "requeued", "hostile"}


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: f"{p.parent.parent.name}-{p.stem}")
def test_narrow_records_equal_json_records(path):
    doc = load(path)
    v = SlurmVersion.parse(doc["version"])
    assert [c["argv"] for c in doc["commands"]] == [
        *narrow.job_commands(v, RECORD_TOKENS),
        narrow.node_command(v, RECORD_TOKENS),
    ]
    nodes, jobs = text_records(doc)
    json_nodes = parse_nodes(json.dumps(doc["nodes"]))
    json_jobs = parse_jobs(json.dumps(doc["jobs"]))
    assert sorted(map(values, nodes), key=lambda n: n["name"]) == sorted(
        map(values, json_nodes), key=lambda n: n["name"]
    )
    by_id = {j.job_id: values(j) for j in json_jobs}
    for j in jobs.records:  # what text said alone
        assert values(j) == by_id[j.job_id], j.job_id
    assert [values(j) for j in narrow.merge(jobs, json_jobs)] == [by_id[k] for k in sorted(by_id)]
    assert len(jobs.fallback_ids) * 3 <= len(json_jobs), "most jobs must come from text alone"


def test_hostile_scene_keeps_every_value_whole():
    doc = load(DATA / "26.05" / "narrow" / "hostile.json")
    _, jobs = text_records(doc)
    names = {j.name: j for j in jobs.records}
    forged = "line\n2~ab|c\t99|forged|RUNNING"
    assert names[forged].comment == "comment|with\nnewline"
    assert names[forged].state.base == "PENDING"
    assert names["\x1b[31mred\x07 \u2028sep \u00e9\u4e2d"].comment == "~sep5f3a9c1e7b2"
    assert names[" lead and trail "].comment == "%s %x ,:0"
    assert 99 not in {j.job_id for j in jobs.records}


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: f"{p.parent.parent.name}-{p.stem}")
def test_rendered_text_reads_like_the_recorded_text(path):
    """tests/support/narrow_text.answer (the fakes' Slurm) prints what the real commands printed."""
    doc = load(path)
    for c in doc["commands"]:
        got = narrow_text.answer(c["argv"], doc["nodes"], doc["jobs"], now=doc["now"])
        assert got is not None
        assert sorted(got.splitlines()) == sorted(c["stdout"].splitlines()), c["argv"][2]


# -- hostile and malformed text -------------------------------------------------------------

TOK = narrow.Tokens("~s1", "~e1")
J26 = narrow.job_fields(V26)


def job_line(**over: str) -> str:
    base = {
        "JobId": "7",
        "Name": "n",
        "State": "PENDING",
        "Reason": "Priority",
        "Partition": "p",
        "QOS": "normal",
        "Account": "a",
        "UserName": "u",
        "NodeList": "",
        "ReqNodes": "",
        "RestartCnt": "0",
        "Comment": "(null)",
        "Requeue": "1",
        "SubmitTime": "1700000000",
        "StartTime": "N/A",
        "EndTime": "N/A",
        "PreemptTime": "N/A",
        "TimeLimit": "1-02:03:00",
        "tres-alloc": "cpu=1,gres/gpu=2,gres/gpu:a100=2",
        "tres-per-node": "gres/gpu:a100:2",
        "tres-per-job": "N/A",
        "tres-per-socket": "N/A",
        "tres-per-task": "N/A",
        "NumNodes": "1",
        "Feature": "(null)",
        "ExcNodes": "",
    }
    base.update(over)
    return TOK.sep.join(base[f] for f in J26) + TOK.end + "\n"


@pytest.mark.parametrize(
    "name",
    [
        "a\n8~s0PENDING\n",
        "x" + "|" * 5 + "\t\t",
        "\u00e9\u4e2d\U0001f600",
        "\x1b[2J\x00\x7f\x9b",
        "~s",
        "%j %A",
        "",
        "~e0\n9",
    ],
)
def test_any_name_stays_in_its_field(name):
    recs = narrow.parse_job_text([job_line(Name=name) + job_line(JobId="8")], V26, TOK).records
    assert [r.job_id for r in recs] == [7, 8]
    assert recs[0].name == name and recs[1].name == "n"
    assert recs[0].time_limit == 93780.0 and recs[0].gpus == 2 and dict(recs[0].gpu_types) == {"a100": 2}
    assert recs[0].comment == "" and recs[0].start_time is None and recs[0].submit_time == 1700000000.0


@pytest.mark.parametrize(
    "text, where",
    [
        (job_line().replace(TOK.end + "\n", ""), "ends inside a record"),
        (job_line(Name="a" + TOK.sep + "b"), "record 1 ('7') has 27 fields"),
        (job_line() + "junk" + TOK.end + "\n", "record 2 ('junk') has 1 fields"),
        (job_line(Requeue="yes"), "Requeue 'yes'"),
        (job_line(SubmitTime="2024-01-01T00:00:00"), "SubmitTime"),
        (job_line(TimeLimit="soon"), "TimeLimit 'soon'"),
    ],
)
def test_malformed_text_is_a_record_error_naming_the_record(text, where):
    with pytest.raises(RecordError, match="record") as err:
        narrow.parse_job_text([text], V26, TOK)
    assert where in str(err.value)


@pytest.mark.parametrize(
    "over, where",
    [
        ({"JobId": "7x"}, "JobId '7x'"),
        ({"JobId": "0"}, "JobId '0'"),
        ({"JobId": "-5"}, "JobId '-5'"),
        ({"JobId": "5.0"}, "JobId '5.0'"),
        ({"JobId": "4294967294"}, "JobId '4294967294'"),  # INFINITE: no job's id
        ({"JobId": "1" * 21}, "JobId"),
        ({"NumNodes": "-1"}, "NumNodes '-1'"),
        ({"RestartCnt": "true"}, "RestartCnt 'true'"),
        ({"tres-alloc": "cpu=1,gres/gpu=100000000000000000000"}, "TRES gres/gpu '100000000000000000000'"),
        ({"tres-alloc": "cpu=1,gres/gpu:a100=-2"}, "TRES gres/gpu:a100 '-2'"),
        ({"tres-alloc": "cpu=1,gres/shard=1.5"}, "TRES gres/shard '1.5'"),
    ],
)
def test_a_record_without_a_usable_id_or_count_is_reported_and_skipped(over, where, caplog):
    recs = narrow.parse_job_text([job_line(**over) + job_line(JobId="8")], V26, TOK).records
    assert [r.job_id for r in recs] == [8]  # the other record stays; none is read as job 0
    assert [r.getMessage() for r in caplog.records if where in r.getMessage()], caplog.text
    assert all("skipped a record: squeue --Format: record 1" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(
    "over, fallback",
    [
        ({}, False),
        ({"Reason": "Nodes required for job are DOWN"}, True),  # state_desc, not the reason word
        ({"State": "COMPLETING"}, True),  # a flag: JSON lists the base beside it
        ({"TimeLimit": "INVALID"}, True),  # over a year
        ({"EndTime": "NONE"}, False),  # pending, no limit: no end, as job_record says
        ({"EndTime": "NONE", "State": "SUSPENDED", "StartTime": "100"}, True),  # end not printed
        ({"EndTime": "NONE", "State": "RUNNING", "StartTime": "100"}, False),
    ],
)
def test_what_text_cannot_say_is_read_as_json(over, fallback):
    res = narrow.parse_job_text([job_line(**over)], V26, TOK)
    assert res.fallback_ids == ([7] if fallback else [])
    if not fallback and "StartTime" in over:
        assert res.records[0].end_time == 100 + narrow.YEAR_SECONDS


def test_a_flag_state_is_exact_on_22_05():
    fields = narrow.job_fields(V22)
    line = TOK.sep.join(job_line(State="COMPLETING")[: -len(TOK.end) - 1].split(TOK.sep)[: len(fields)])
    res = narrow.parse_job_text([line + TOK.end + "\n", f"7{TOK.sep}n9{TOK.end}\n"], V22, TOK)
    assert res.fallback_ids == [] and str(res.records[0].state) == "COMPLETING"
    assert res.records[0].excluded_nodes == "n9"


@pytest.mark.parametrize(
    "line, where",
    [
        ("a1~s1idle~s1none~s1(null)~s1(null)~s1p1~s1(null)~s14~s1N/A~s1h~e1\n", None),
        ("a1~s1idle~s1none~s1(null)~s1(null)~s1p1~s1(null)~s14~s1N/A~e1\n", "record 1 ('a1') has 9 fields, not 10"),
    ],
)
def test_node_lines(line, where):
    two = line + line.replace("p1", "p2") if where is None else line
    if where is None:
        (n,) = narrow.parse_node_text(two, V22, TOK)
        assert n.partitions == ("p1", "p2") and n.reason == "" and n.features == () and n.memory_mb is None
        assert n.gres == "" and n.cpus == 4 and n.address == "h"
    else:
        with pytest.raises(RecordError, match="record 1") as err:
            narrow.parse_node_text(two, V22, TOK)
        assert where in str(err.value)


@pytest.mark.parametrize(
    "line, where",
    [
        ("~s1idle~s1none~s1(null)~s1(null)~s1p1~s1(null)~s14~s1N/A~s1h~e1\n", "no node name"),
        ("a1~s1idle~s1none~s1gpu:a100:100000000000000000000~s1(null)~s1p1~s1(null)~s14~s1N/A~s1h~e1\n", "count past"),
        ("a1~s1idle~s1none~s1gpu:2~s1gpu:18446744073709551616~s1p1~s1(null)~s14~s1N/A~s1h~e1\n", "gres_used"),
    ],
)
def test_a_node_line_without_a_name_or_with_an_absurd_gres_count_is_reported_and_skipped(line, where, caplog):
    good = "b2~s1idle~s1none~s1gpu:2~s1(null)~s1p1~s1(null)~s14~s1N/A~s1h~e1\n"
    (n,) = narrow.parse_node_text(line + good, V22, TOK)
    assert n.name == "b2" and n.gres == "gpu:2"
    assert where in caplog.text and "skipped a record: sinfo --Format" in caplog.text


def test_lines_of_one_node_must_agree_beyond_the_partition():
    a = "a1~s1idle~s1none~s1(null)~s1(null)~s1p1~s1(null)~s14~s1N/A~s1h~e1\n"
    with pytest.raises(RecordError, match="record 2 .*beyond its partition"):
        narrow.parse_node_text(a + a.replace("idle", "down").replace("p1", "p2"), V22, TOK)


# -- commands per version -------------------------------------------------------------------


def test_commands_per_version():
    tok = narrow.Tokens.fresh()
    (q26,) = narrow.job_commands(V26, tok)
    q22, x22 = narrow.job_commands(V22, tok)
    assert "--states=all" in q22 and "--states=all" not in q26
    assert "ExcNodes:0" in q26[-1] and "ExcNodes" not in q22[-1]
    assert x22[-1] == f"--format=%A{tok.sep}%x{tok.end}"
    assert "Version:0" in narrow.node_command(V26, tok)[-1] and "Version" not in narrow.node_command(V22, tok)[-1]
    for argv in (q26, q22, narrow.node_command(V26, tok)):
        assert argv[:2] == ["env", "SLURM_TIME_FORMAT=%s"] and "--noheader" in argv
        fmt = argv[-1].partition("=")[2]
        assert all(":0~" in f for f in fmt.split(","))  # width 0: never cut


def test_every_read_draws_fresh_tokens():
    seen = {narrow.new_token() for _ in range(50)}
    assert len(seen) == 50 and all(t[0] == "~" and len(t) == 17 for t in seen)


# -- SlurmClient -----------------------------------------------------------------------------


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: f"{p.parent.parent.name}-{p.stem}")
def test_client_reads_narrow_and_keeps_json(path):
    doc = load(path)
    v = SlurmVersion.parse(doc["version"])
    runner = RecordingRunner()
    runner.on(["squeue", "--json"], json.dumps(doc["jobs"]))
    runner.on(["scontrol", "show", "nodes", "--json"], json.dumps(doc["nodes"]))
    runner.on(["sinfo", "--json"], json.dumps(doc["nodes"]))
    narrow_text.from_json(runner)
    c = SlurmClient(runner, version=v)
    assert [values(j) for j in c.jobs()] == sorted(map(values, c.jobs_json()), key=lambda j: j["job_id"])
    assert sorted(map(values, c.nodes()), key=lambda n: n["name"]) == sorted(
        map(values, c.nodes_json()), key=lambda n: n["name"]
    )
    narrow_calls = [a for a in runner.calls if a[0] == "env"]
    assert len(narrow_calls) == (2 if v.series == "22.05" else 1) + 1
    again = [a for a in runner.calls if a[:2] == ("squeue", "--json") and len(a) == 3]
    assert all(a[2].startswith("--jobs=") for a in again)


def test_many_fallbacks_take_one_whole_json_read():
    assert narrow.fallback_command(list(range(narrow.FALLBACK_LIST_MAX + 1))) == ["squeue", "--json"]
    assert narrow.fallback_command([3, 4]) == ["squeue", "--json", "--jobs=3,4"]


class StreamingRunner(RecordingRunner):
    """A RecordingRunner that notes which commands were read as a stream."""

    streamed: list[tuple[str, ...]]

    def stream(self, argv, *, timeout=None):
        self.streamed.append(tuple(argv))
        return super().stream(argv, timeout=timeout)


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: f"{p.parent.parent.name}-{p.stem}")
def test_many_fallbacks_stream_the_whole_json_and_keep_only_those_jobs(path, monkeypatch):
    """Past FALLBACK_LIST_MAX the whole ``squeue --json`` is streamed: the same records, none holding its JSON."""
    monkeypatch.setattr(narrow, "FALLBACK_LIST_MAX", 0)
    doc = load(path)
    v = SlurmVersion.parse(doc["version"])
    runner = StreamingRunner()
    runner.streamed = []
    runner.on(["squeue", "--json"], json.dumps(doc["jobs"]))
    narrow_text.from_json(runner)
    jobs = SlurmClient(runner, version=v).jobs()
    again = text_records(doc)[1].fallback_ids
    assert [values(j) for j in jobs] == sorted(
        map(values, parse_jobs(json.dumps(doc["jobs"]))), key=lambda j: j["job_id"]
    )
    assert runner.streamed == ([("squeue", "--json")] if again else [])
    assert all(not j.raw for j in jobs)


def test_the_streamed_fallback_converts_only_the_jobs_asked_for(caplog):
    doc = {"jobs": [{"job_id": 7, "job_state": ["PENDING", "REQUEUED"]}, {"job_id": 8, "restart_cnt": "x"}]}
    got = list(queuestream.wanted_records(io.BytesIO(json.dumps(doc).encode()), [7], "squeue --json"))
    assert [(j.job_id, str(j.state)) for j in got] == [(7, "PENDING+REQUEUED")] and not caplog.records
    got = list(queuestream.wanted_records(io.BytesIO(json.dumps(doc).encode()), [7, 8], "squeue --json"))
    assert [j.job_id for j in got] == [7]  # job 8's count is unusable: reported and skipped
    assert "squeue --json: jobs[1]: restart_cnt 'x'" in caplog.text


def test_a_failed_narrow_read_fails_like_the_json_one():
    runner = narrow_text.from_json(RecordingRunner())
    runner.fail(["squeue", "--json"], stderr="slurm_load_jobs error: Unable to contact slurm controller")
    with pytest.raises(Exception, match="Unable to contact"):
        SlurmClient(runner, version=V26).jobs()


@pytest.mark.parametrize(
    "state, limit, end",
    [
        (["PENDING"], {"set": False, "infinite": True, "number": 0}, None),  # Slurm's estimate: no end
        (["PENDING"], {"set": True, "infinite": False, "number": 30}, 1827770704.0),  # a limited estimate stays
        (["RUNNING"], {"set": False, "infinite": True, "number": 0}, 1827770704.0),
    ],
)
def test_json_drops_the_end_of_an_unlimited_job_that_has_not_started(state, limit, end):
    # Slurm sets an unlimited pending job's end to its estimated start plus a year (job_end_time_reset), or
    # plus INFINITE*60 wrapped to 32 bits (backfill.c; recorded on 26.05, past INFINITE: unset already).
    j = {"job_id": 5, "job_state": state, "time_limit": limit, "end_time": {"set": True, "number": 1827770704}}
    assert job_record(j).end_time == end


# -- the per-line builder is job_record(job_dict(...)) --------------------------------------------

#: Values each field takes in the lines below: ordinary, unset, hostile and out of range.
LINE_VALUES: dict[str, list[str]] = {
    "JobId": ["7", "0", "4294967293", "4294967294", "7x", "\u0667", "12" * 11],
    "Name": ["n", "(null)", "N/A", ""],
    "State": ["PENDING", "RUNNING", "SUSPENDED", "COMPLETING", "REQUEUED", "CANCELLED"],
    "Reason": ["Priority", "None", "N/A", "Nodes required for job are DOWN"],
    "NodeList": ["", "n[1-2]", "(null)"],
    "RestartCnt": ["0", "3", "-1", "4294967294"],
    "Comment": ["(null)", "N/A", "c"],
    "Requeue": ["0", "1", "yes"],
    "StartTime": ["N/A", "100", "Unknown", "4294967294", "99999999999999999999"],
    "EndTime": ["N/A", "NONE", "200", "4294967295", "soon"],
    "PreemptTime": ["N/A", "150"],
    "TimeLimit": ["1-02:03:00", "UNLIMITED", "INVALID", "5", "71582788:00:00", "soon"],
    "tres-alloc": ["cpu=1,gres/gpu=2,gres/gpu:a100=2", "N/A", "cpu=1", "cpu=1,gres/shard=3", "cpu=1,gres/gpu=-2"],
    "tres-per-node": ["gres/gpu:a100:2", "N/A", "gres/shard:1"],
    "tres-per-job": ["N/A", "gres/gpu:1"],
    "NumNodes": ["1", "0", "-1"],
    "Feature": ["(null)", "a100&nvlink"],
    "ExcNodes": ["", "n9"],
}


def reference(line: str, version: SlurmVersion) -> object:
    """What the JSON-shaped path makes of one line: a record, a job id to read again, or the error's text."""
    values = line[: -len(TOK.end) - 1].split(TOK.sep)
    fields = narrow.job_fields(version)
    try:
        job = narrow.job_dict(values, fields, "where")
        if not narrow.exact(job, version):
            return job["job_id"]
        return values_of(job_record(job, keep_raw=False))
    except Exception as exc:  # noqa: BLE001 -- compared by kind and text (either unusable kind: skipped)
        kind = "RecordSkipped" if type(exc).__name__ == "Unusable" else type(exc).__name__
        return f"{kind}: {str(exc).removeprefix('where: ')}"


def built(line: str, version: SlurmVersion) -> object:
    values = line[: -len(TOK.end) - 1].split(TOK.sep)
    try:
        got = narrow.TextJobs(narrow.job_fields(version), version, None).record(values)
    except Exception as exc:  # noqa: BLE001
        kind = "RecordSkipped" if type(exc).__name__ == "Unusable" else type(exc).__name__
        return f"{kind}: {exc}"
    return got if isinstance(got, int) else values_of(got)


def values_of(r: JobRecord) -> dict[str, Any]:
    return values(r)


@pytest.mark.parametrize("field", sorted(LINE_VALUES))
def test_each_line_builds_what_job_record_makes_of_its_json_shape(field):
    for value in LINE_VALUES[field]:
        for state in ("PENDING", "RUNNING"):
            for limit in ("1-02:03:00", "UNLIMITED"):
                over = {"State": state, "TimeLimit": limit, "StartTime": "100", field: value}
                for version in (V22, V26):
                    line = job_line(**over)
                    if version is V22:  # no ExcNodes field: the line is cut to 22.05's fields
                        cut = line[: -len(TOK.end) - 1].split(TOK.sep)[: len(narrow.job_fields(V22))]
                        line = TOK.sep.join(cut) + TOK.end + "\n"
                    want = reference(line, version)
                    got = built(line, version)
                    assert got == want, (field, value, state, limit, version)
