"""The one job-id type: Slurm's notation accepted and refused (with the reason), what an id names in the queue,
and each record's own name from the JSON of squeue (22.05, 23.02+) and sacct."""

from __future__ import annotations

import json

import pytest

from slurm_pool.adapters.jobnames import named, own_name
from slurm_pool.adapters.records import JobRecord, parse_jobs
from slurm_pool.clitypes import JobIdParam
from slurm_pool.jobid import MAX_ARRAY_TASK, MAX_HET_COMPONENT, MAX_JOB_ID, JobId, JobIdError, names, parse_tasks
from tests.unit.test_metrics import recorded

ACCEPTED = [
    # text, ranges allowed, the id
    ("1", False, JobId(1)),
    ("123", False, JobId(123)),
    ("4294967292", False, JobId(MAX_JOB_ID)),  # below MAX_FED_JOB_ID (0xfffffffd)
    ("4_2", False, JobId(4, task=2)),
    ("4_0", False, JobId(4, task=0)),  # task ids start at 0
    ("4_4000000", False, JobId(4, task=MAX_ARRAY_TASK)),
    ("5+1", False, JobId(5, component=1)),
    ("5+0", False, JobId(5, component=0)),  # the het job's leader
    ("5+127", False, JobId(5, component=MAX_HET_COMPONENT)),
    ("4_[1-3]", True, JobId(4, tasks=((1, 3),))),
    ("4_[1,3,5-7]", True, JobId(4, tasks=((1, 1), (3, 3), (5, 7)))),
    ("4_[0-4000000]", True, JobId(4, tasks=((0, MAX_ARRAY_TASK),))),
]


@pytest.mark.parametrize(("text", "ranges", "want"), ACCEPTED)
def test_accepted(text: str, ranges: bool, want: JobId) -> None:
    got = JobId.parse(text, ranges=ranges)
    assert got == want and str(got) == text  # and it is written back as Slurm writes it


REFUSED = [
    # value, ranges allowed, what the message says
    ("+3", False, "it has a sign"),
    ("-3", False, "it has a sign"),
    ("03", False, "it has a leading zero"),
    ("4_02", False, "it has a leading zero"),
    ("5+01", False, "it has a leading zero"),
    ("3.0", False, "it is not a whole number"),
    ("1e3", False, "it is not a whole number"),
    (" 3", False, "it holds blanks"),
    ("3 ", False, "it holds blanks"),
    ("3\n", False, "is not a Slurm job id"),
    ("4__2", False, "at most one array task or het component"),
    ("4_2_1", False, "at most one array task or het component"),
    ("4_2+1", False, "at most one array task or het component"),  # Slurm refuses an array het job too
    ("5++1", False, "is not a Slurm job id"),
    ("1_000", False, "leading zero"),
    ("\u0663", False, "other than ASCII"),  # Arabic-Indic digit three
    ("\uff13", False, "other than ASCII"),  # fullwidth three
    ("", False, "it is empty"),
    ("0", False, "a job id is 1 to 4294967292 in Slurm, not 0"),
    ("4294967293", False, "a job id is 1 to 4294967292 in Slurm, not 4294967293"),
    ("99999999999", False, "is not a Slurm job id"),  # more digits than a uint32 has
    ("4_4000001", False, "an array task id is 0 to 4000000 in Slurm"),
    ("5+128", False, "a het component is 0 to 127 in Slurm"),
    ("4_", False, "is not a Slurm job id"),
    ("4+", False, "is not a Slurm job id"),
    ("4_[1-3]", False, "a range of array tasks is not taken here"),
    ("4_[3-1]", True, "the range 3-1 ends before it starts"),
    ("4_[1-3", True, "is not a Slurm job id"),
    ("4_[]", True, "is not a Slurm job id"),
    ("4_[1-3]+1", True, "is not a Slurm job id"),
    ("4_[1:2]", True, "is not a Slurm job id"),
    ("4_[" + ",".join(map(str, range(65))) + "]", True, "more than 64 ranges"),
    (True, False, "is not a Slurm job id"),
    (3.0, False, "is not a Slurm job id"),
    (None, False, "is not a Slurm job id"),
    (0, False, "a job id is 1 to 4294967292 in Slurm, not 0"),
    (2**32, False, "a job id is 1 to 4294967292"),
]


@pytest.mark.parametrize(("value", "ranges", "said"), REFUSED)
def test_refused_with_the_reason(value: object, ranges: bool, said: str) -> None:
    with pytest.raises(JobIdError) as exc:
        JobId.parse(value, "job_id", ranges=ranges)
    msg = str(exc.value)
    assert msg.startswith("job_id: ") and said in msg, msg
    assert "\n" not in msg  # a value's control characters are shown escaped


def test_an_int_is_a_plain_id_and_a_long_value_is_cut_short() -> None:
    assert JobId.parse(42) == JobId(42)
    msg = str(pytest.raises(JobIdError, JobId.parse, "9" * 5000).value)
    assert len(msg) < 400 and "..." in msg


@pytest.mark.parametrize(
    ("fields", "said"),
    [
        ({"job": 0}, "a job id is 1 to"),
        ({"job": 4, "task": -1}, "an array task id is 0 to"),
        ({"job": 4, "component": 128}, "a het component is 0 to"),
        ({"job": 4, "task": 1, "component": 1}, "exclude each other"),
        ({"job": 4, "tasks": ((3, 1),)}, "an array task range end is 3 to"),
        ({"job": True}, "is not a whole number"),
    ],
)
def test_the_type_itself_holds_only_slurms_ids(fields: dict, said: str) -> None:
    with pytest.raises(JobIdError, match=said):
        JobId(**fields)


@pytest.mark.parametrize(
    ("ref", "unique", "own", "want"),
    [
        # what is asked, the record's unique id, its own name (squeue %i), whether the one names the other
        ("7", 7, "4_2", True),  # a task by its own id
        ("4", 7, "4_2", True),  # the whole array
        ("4_2", 7, "4_2", True),
        ("4_3", 7, "4_2", False),
        ("42", 7, "4_2", False),  # 4_2 is never 42
        ("42", 42, "42", True),
        ("4_2", 42, "42", False),
        ("4_2", 4, "4_[1-3]", True),  # a task still in its array's one record
        ("4_4", 4, "4_[1-3]", False),
        ("4_[3-9]", 4, "4_[1-3]", True),
        ("4_[4-9]", 4, "4_[1-3]", False),
        ("4_[1-2]", 9, "4_2", True),
        ("5", 6, "5+1", True),  # the whole het job
        ("5+1", 6, "5+1", True),
        ("5+0", 6, "5+1", False),
        ("6", 6, "5+1", True),
        ("5_1", 6, "5+1", False),
        ("51", 6, "5+1", False),
    ],
)
def test_what_an_id_names(ref: str, unique: int, own: str, want: bool) -> None:
    assert names(JobId.parse(ref, ranges=True), unique, JobId.parse(own, ranges=True)) is want


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("1-3", ((1, 3),)),
        ("1,3", ((1, 1), (3, 3))),
        ("1-3%2", ((1, 3),)),  # at most 2 running at once
        ("1-7:3", ((1, 1), (4, 4), (7, 7))),
        ("0", ((0, 0),)),
        ("1-3,5...", None),  # squeue cut it short
        ("3-1", None),
        ("", None),
        ("1-99999999", None),
    ],
)
def test_slurms_array_task_strings(text: str, want: object) -> None:
    assert parse_tasks(text) == want


def _n(value: int | None) -> dict:
    """A number as 23.02+ writes it."""
    return {"set": value is not None, "infinite": False, "number": value or 0}


@pytest.mark.parametrize(
    ("raw", "want"),
    [
        # 22.05 squeue --json (recorded): a plain job, an array not started, a het job's components
        ({"job_id": 3, "array_job_id": 0, "array_task_id": None, "array_task_string": "", "het_job_id": 0,
          "het_job_offset": 0}, "3"),
        ({"job_id": 4, "array_job_id": 4, "array_task_id": None, "array_task_string": "1-3", "het_job_id": 0,
          "het_job_offset": 0}, "4_[1-3]"),
        ({"job_id": 8, "array_job_id": 4, "array_task_id": 2, "array_task_string": "", "het_job_id": 0,
          "het_job_offset": 0}, "4_2"),
        ({"job_id": 6, "array_job_id": 0, "array_task_id": 4294967294, "array_task_string": "", "het_job_id": 5,
          "het_job_offset": 1}, "5+1"),
        # 23.02+: numbers as {set, infinite, number}
        ({"job_id": 8, "array_job_id": _n(4), "array_task_id": _n(2), "het_job_id": _n(0),
          "het_job_offset": _n(0)}, "4_2"),
        ({"job_id": 3, "array_job_id": _n(0), "array_task_id": _n(None), "het_job_id": _n(0),
          "het_job_offset": _n(0)}, "3"),
        ({"job_id": 6, "array_job_id": _n(0), "array_task_id": _n(None), "het_job_id": _n(5),
          "het_job_offset": _n(1)}, "5+1"),
        # sacct --json: nested
        ({"job_id": 8, "array": {"job_id": 4, "task_id": 2, "task": ""}, "het": {"job_id": 0, "job_offset": None}},
         "4_2"),
        ({"job_id": 6, "array": {"job_id": 0, "task_id": None}, "het": {"job_id": 5, "job_offset": 1}}, "5+1"),
        ({"job_id": 6, "array": {"job_id": _n(0), "task_id": _n(None)}, "het": {"job_id": _n(5),
          "job_offset": _n(1)}}, "5+1"),
        # read from text (no JSON): its unique id
        ({}, "9"),
    ],
)  # fmt: skip
def test_a_records_own_name(raw: dict, want: str) -> None:
    unique = raw.get("job_id", 9)
    own = own_name(JobRecord(unique, raw=raw))
    assert own is not None and str(own) == want


def test_records_without_a_usable_id_have_no_name_and_are_never_named() -> None:
    broken = JobRecord(0, raw={"job_id": 0})
    assert own_name(broken) is None
    assert named(JobId(4), [broken, JobRecord(4)]) == [JobRecord(4)]


def test_the_recorded_queue_by_name() -> None:
    jobs = parse_jobs(recorded("squeue-array-het.json"))
    assert [str(own_name(j)) for j in jobs] == ["1", "2", "3", "4_[1-3]", "5+0", "5+1"]
    for ref, ids in (("4_2", [4]), ("5", [5, 6]), ("5+1", [6]), ("6", [6]), ("42", []), ("4_7", [])):
        assert [j.job_id for j in named(JobId.parse(ref), jobs)] == ids, ref


def test_the_cli_type_names_the_value_and_keeps_plain_ids_plain() -> None:
    import click

    with pytest.raises(click.BadParameter, match=r"'4_2': a job's own id is needed"):
        JobIdParam(plain=True).convert("4_2", None, None)
    with pytest.raises(click.BadParameter, match=r"'\+3' is not a Slurm job id.*sign"):
        JobIdParam().convert("+3", None, None)
    assert JobIdParam(ranges=True).convert("4_[1-3]", None, None) == JobId(4, tasks=((1, 3),))
    assert json.dumps(str(JobIdParam().convert("5+1", None, None))) == '"5+1"'
