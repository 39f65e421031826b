"""``slurm-pool simulate``: a recorded ``sacct --json`` (Slurm 22.05, the local cluster) on the example spec."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurm_pool.cli import cli
from slurm_pool.sim import history
from slurm_pool.sim.engine import Policy
from slurm_pool.spec import load_spec

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "examples" / "pool.yaml"
SACCT = ROOT / "tests" / "data" / "slurm" / "22.05" / "sacct-history.json"


@pytest.fixture(scope="module")
def recorded():
    return json.loads(SACCT.read_text())


def test_owned_gpus_of_the_example_spec():
    assert history.owned_gpus(load_spec(SPEC)) == {"proja": 4, "projb": 2, "projc": 2}


def test_recorded_export(recorded):
    hist = history.jobs_from_sacct(recorded, {"proja": 4, "projb": 2, "projc": 2})
    assert [(j.project, j.gpus, j.work) for j in hist.jobs] == [("proja", 2, 2.0), ("projb", 1, 3.0), ("projc", 1, 1.0)]
    assert hist.jobs[0].arrival == 0.0 and all(j.arrival >= 0 for j in hist.jobs)
    assert dict(hist.skipped) == {"no GPU": 1}
    assert hist.window >= 3


def _newer(data):
    """The same export as Slurm 23.02+ writes numbers: {"set": ..., "infinite": ..., "number": ...}."""
    out = copy.deepcopy(data)
    for job in out["jobs"]:
        for k in ("submission", "start", "end"):
            job["time"][k] = {"set": True, "infinite": False, "number": job["time"][k]}
        for t in job["tres"]["allocated"]:
            t["count"] = {"set": t["count"] is not None, "infinite": False, "number": t["count"] or 0}
        job["job_id"] = job["job_id"]
    return out


def test_newer_number_objects(recorded):
    old = history.jobs_from_sacct(recorded, {"proja": 4})
    new = history.jobs_from_sacct(_newer(recorded), {"proja": 4})
    assert [(j.project, j.gpus, j.work, j.arrival) for j in old.jobs] == [
        (j.project, j.gpus, j.work, j.arrival) for j in new.jobs
    ]
    # accounts without servers in the spec are borrowers
    assert [j.project for j in new.jobs] == ["proja", None, None]


def _job(job_id, account, submit, start, end, gres):
    return {
        "job_id": job_id,
        "account": account,
        "time": {"submission": submit, "start": start, "end": end},
        "tres": {"allocated": [{"type": "gres", "name": n, "count": c} for n, c in gres]},
    }


@pytest.mark.parametrize(
    "job,skipped,gpus",
    [
        (_job(1, "a", 10, 0, 0, [("gpu", 1)]), "never ran or still running", None),
        (_job(1, "a", 10, 20, 20, [("gpu", 1)]), "ran 0 s", None),
        (_job(1, "a", 10, 20, 30, []), "no GPU", None),
        (_job(1, "a", 10, 20, 30, [("gpu", 9)]), "more GPUs than the project owns", None),
        (_job(1, "x", 10, 20, 30, [("gpu", 99)]), "more GPUs than the pool has", None),
        (_job(1, "a", 10, 20, 30, [("gpu:nvidia_a100_3g.20gb", 1), ("gpu:nvidia_a100_1g.5gb", 2)]), None, 3),
        (_job(1, "a", 10, 20, 30, [("gpu", 2), ("gpu:nvidia_a100-sxm4-80gb", 2)]), None, 2),
    ],
)
def test_which_jobs_count(job, skipped, gpus):
    keep = _job(2, "a", 5, 6, 7, [("gpu", 1)])
    hist = history.jobs_from_sacct({"jobs": [keep, job]}, {"a": 4, "b": 4})
    if skipped:
        assert dict(hist.skipped) == {skipped: 1} and len(hist.jobs) == 1
    else:
        assert hist.jobs[1].gpus == gpus


@pytest.mark.parametrize(
    "data,message",
    [
        ([], "not sacct --json output"),
        ({"jobs": {}}, "not sacct --json output"),
        ({"jobs": [1]}, r"jobs\[0\] is not an object"),
        ({"jobs": []}, "no GPU job that ran"),
        ({"jobs": [_job(1, "a", 1, 2, 3, [])]}, r"no GPU job that ran \({'no GPU': 1}\)"),
    ],
)
def test_bad_exports(data, message):
    with pytest.raises(history.HistoryError, match=message):
        history.jobs_from_sacct(data, {"a": 4}, name="x.json")


def test_pooling_helps_a_bursty_owner():
    """Project a's burst waits on its own 2 GPUs; b's idle GPUs absorb it in the pool."""
    jobs = [_job(i + 1, "proja", 1000, 1000, 4600, [("gpu", 2)]) for i in range(4)]  # ids from 1: job 0 is none
    hist = history.jobs_from_sacct({"jobs": jobs}, {"proja": 2, "projb": 6})
    from slurm_pool.sim.engine import simulate as replay

    ded = replay(hist.capacity, hist.jobs, Policy("d", pooled=False), hist.window)
    pool = replay(hist.capacity, hist.jobs, Policy("p"), hist.window)
    assert ded.wait_quantile(1.0) == 3 * 3600 and pool.wait_quantile(1.0) == 0


def _cli(*args, input=None):
    return CliRunner().invoke(cli, ["simulate", *args], input=input)


def test_cli_table_and_json():
    res = _cli("--spec", str(SPEC), "--sacct", str(SACCT))
    assert res.exit_code == 0, res.output
    assert "history: 3 GPU jobs (3 of owners, 0 of borrowers)" in res.output
    assert "left out: 1 no GPU" in res.output and "GraceTime 20 s" in res.output
    assert "pool, checkpoint-on-preempt" in res.output
    res = _cli("--spec", str(SPEC), "--sacct", "-", "--json", "--grace", "5", input=SACCT.read_text())
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out["grace_seconds"] == 5 and out["owner_jobs"] == 3 and out["capacity"]["proja"] == 4
    assert [r["policy"] for r in out["results"]] == [
        "dedicated",
        "pool-no-preemption",
        "pool-checkpoint-on-preempt",
        "pool-periodic-checkpoints",
    ]
    assert out["results"][0]["utilization_vs_dedicated"] == 1.0


@pytest.mark.parametrize(
    "content,message",
    [
        ("{", "not JSON"),
        ('{"meta": {}}', "no 'jobs' list"),
        ('{"jobs": []}', "no GPU job that ran"),
    ],
)
def test_cli_bad_input(tmp_path, content, message):
    f = tmp_path / "x.json"
    f.write_text(content)
    res = _cli("--spec", str(SPEC), "--sacct", str(f))
    assert res.exit_code == 2 and message in res.output, res.output
    assert "Traceback" not in res.output


def test_cli_missing_file(tmp_path):
    res = _cli("--spec", str(SPEC), "--sacct", str(tmp_path / "nope.json"))
    assert res.exit_code == 2 and "No such file" in res.output


def test_cli_spec_without_owners(tmp_path):
    spec = tmp_path / "p.yaml"
    spec.write_text(
        SPEC.read_text().replace("    owns: [a]\n", "").replace("    owns: [b]\n", "").replace("    owns: [c]\n", "")
    )
    res = _cli("--spec", str(spec), "--sacct", str(SACCT))
    assert res.exit_code == 1 and "no project owns a node group" in res.output, res.output


@pytest.mark.parametrize(
    "option,value", [("--grace", "nan"), ("--grace", "inf"), ("--grace", "-1"), ("--checkpoint-interval", "nan")]
)
def test_cli_non_finite_numbers_exit_2(tmp_path, option, value):
    # Issue 11, defect 11: --grace nan was accepted.
    f = tmp_path / "x.json"
    f.write_text('{"jobs": []}')
    res = _cli("--spec", str(SPEC), "--sacct", str(f), option, value)
    assert res.exit_code == 2 and option in res.output and "Traceback" not in res.output, res.output


def test_cli_sacct_file_not_utf8_exits_2(tmp_path):
    # A byte that is not UTF-8 reads escaped, as in every reader of Slurm's output (issue 49): the
    # export is then refused for what it is, cleanly.
    f = tmp_path / "x.json"
    f.write_bytes(b'{"jobs": "\xff"}')
    res = _cli("--spec", str(SPEC), "--sacct", str(f))
    assert res.exit_code == 2 and "'jobs' is not a list" in res.output, res.output
    assert "Traceback" not in res.output


def test_cli_report_writes_plots_and_page(tmp_path):
    out = tmp_path / "report"
    res = _cli("--spec", str(SPEC), "--sacct", str(SACCT), "--report", str(out))
    assert res.exit_code == 0, res.output
    for name in ("busy.png", "owner_waits.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    page = (out / "report.md").read_text()
    assert "![GPUs busy over time, by tier](busy.png)" in page and "| pool, checkpoint-on-preempt |" in page
    # per project: the recorded export has one job of each of proja, projb and projc
    for p in ("proja", "projb", "projc"):
        assert f"| {p} | 1 |" in page


def test_cli_report_into_a_file_exits_2(tmp_path):
    f = tmp_path / "file"
    f.write_text("")
    res = _cli("--spec", str(SPEC), "--sacct", str(SACCT), "--report", str(f))
    assert res.exit_code == 2 and "--report" in res.output and "Traceback" not in res.output, res.output


def test_cli_report_writes_every_file_or_none(tmp_path):
    # Issue 30 (found this session): a report.md that was a directory left the two PNGs written before it failed.
    out = tmp_path / "report"
    (out / "report.md").mkdir(parents=True)
    res = _cli("--spec", str(SPEC), "--sacct", str(SACCT), "--report", str(out))
    assert res.exit_code == 2 and "nothing written" in res.output, res.output
    assert sorted(p.name for p in out.iterdir()) == ["report.md"]


def test_report_tables_by_project_and_tier_steps():
    from slurm_pool.sim.engine import Result
    from slurm_pool.sim.report import markdown, tier_steps

    a = Result("dedicated", window=7200, capacity=4, useful_gpu_seconds=14400)
    a.owner_waits, a.owner_projects = [0.0, 600.0, 60.0], ["x", "x", "y"]
    a.tier_timeline = [(0.0, 0, 0), (3600.0, 3, 1)]
    b = Result("pool", window=7200, capacity=4, useful_gpu_seconds=28800, preemptions=2)
    b.owner_waits, b.owner_projects = [0.0, 0.0, 30.0], ["x", "x", "y"]
    assert tier_steps(a) == ([0.0, 1.0, 2.0], [0, 3, 3], [0, 1, 1])
    page = markdown([("dedicated", a), ("pool", b)], "t")
    assert "| pool | 100.0% | 2.00 | 0 | 30 | 2 | 0.0 |" in page
    assert "| x | 2 | 0 / 600 | 0 / 0 |" in page and "| y | 1 | 60 / 60 | 30 / 30 |" in page


# -- issue 30: times and GPU counts are whole numbers or unset; anything else is refused --------------


def _newer_job(**time_or_tres):
    job = _job(3, "a", 10, 20, 30, [("gpu", 1)])
    for key, value in time_or_tres.items():
        if key == "count":
            job["tres"]["allocated"][0]["count"] = value
        else:
            job["time"][key] = value
    return job


@pytest.mark.parametrize(
    "over, field",
    [
        ({"count": True}, "tres.allocated[0].count: True is not a number"),
        ({"count": "nan"}, "tres.allocated[0].count: 'nan'"),
        ({"count": "1_0"}, "tres.allocated[0].count: '1_0'"),
        ({"count": "٢"}, "tres.allocated[0].count: '٢'"),
        ({"count": 1.5}, "tres.allocated[0].count: 1.5"),
        ({"count": -2}, "tres.allocated[0].count: -2 is negative"),
        ({"count": {"set": True, "infinite": False, "number": "x"}}, "tres.allocated[0].count: 'x'"),
        ({"count": 1e400}, "tres.allocated[0].count: inf"),
        ({"start": "nan"}, "time.start: 'nan'"),
        ({"start": False}, "time.start: False is not a number"),
        ({"end": "3_0"}, "time.end: '3_0'"),
        ({"submission": "١٠"}, "time.submission: '١٠'"),
        ({"end": {"set": True, "infinite": False, "number": 1e400}}, "time.end: inf"),
    ],
)
def test_odd_numbers_in_an_export_are_refused_with_the_job_and_field(over, field):
    # Issue 30, defect 5: "count": true was read as 1 GPU (now: 0, "no GPU"), "nan" or 1e400 as unset
    # ("never ran"): the job vanished into the counts, or changed size.
    data = {"jobs": [_job(2, "a", 5, 6, 7, [("gpu", 1)]), _newer_job(**over)]}
    with pytest.raises(history.HistoryError) as err:
        history.jobs_from_sacct(data, {"a": 4}, name="x.json")
    assert str(err.value).startswith("x.json: jobs[1].") and field in str(err.value)


@pytest.mark.parametrize(
    "over",
    [{"end": 0}, {"end": None}, {"end": {"set": False, "infinite": False, "number": 0}}, {"count": None}],
)
def test_unset_values_are_still_left_out_and_counted(over):
    data = {"jobs": [_job(2, "a", 5, 6, 7, [("gpu", 1)]), _newer_job(**over)]}
    hist = history.jobs_from_sacct(data, {"a": 4})
    assert len(hist.jobs) == 1 and sum(hist.skipped.values()) == 1


@pytest.mark.parametrize("tres", ["gres/gpu=nan", "gres/gpu=1_0", "cpu=1,gres/gpu:a100=٢", "gres/gpu=inf"])
def test_odd_numbers_in_a_tres_string_are_refused(tres):
    job = {"job_id": 1, "account": "a", "submit_time": 5, "start_time": 6, "end_time": 9, "tres_alloc_str": tres}
    with pytest.raises(history.HistoryError, match=r"jobs\[0\]\.tres_alloc_str gres/gpu"):
        history.jobs_from_sacct({"jobs": [job]}, {"a": 4})


def test_cli_refuses_an_export_with_a_boolean_gpu_count(tmp_path):
    data = json.loads(SACCT.read_text())
    data["jobs"][0]["tres"]["allocated"][-2]["count"] = True
    f = tmp_path / "x.json"
    f.write_text(json.dumps(data))
    res = _cli("--spec", str(SPEC), "--sacct", str(f))
    assert res.exit_code == 2 and "jobs[0].tres.allocated[5].count: True is not a number" in res.output, res.output
    assert "Traceback" not in res.output
