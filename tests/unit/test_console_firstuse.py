"""The console's first-use list (issue 49): what a new user meets on the submit page, the job page and the history.

* the explanation reads the script's ``#SBATCH`` header and refuses what no node of the partition can hold;
* it says where the output file goes;
* error messages keep their line breaks (and nothing else that drives a terminal);
* a waiting job shows no start or end of Slurm's guessing; a job's output file is named;
* finished jobs have a history.
"""

from __future__ import annotations

from typing import Any

import pytest

from slurm_pool import text
from slurm_pool.adapters.records import JobRecord, State
from slurm_pool.adapters.runner import Result
from slurm_pool.adapters.sbatchopts import Directive, HeaderError, header
from slurm_pool.policy.tables import build_tables
from slurm_pool.versions import SlurmVersion
from slurm_pool.web import actions, fit, models, submitting, views
from tests.unit.test_web_views import example_spec

# -- the #SBATCH header ------------------------------------------------------------------------

HEADERS = [
    ("long with =", "#!/bin/sh\n#SBATCH --nodes=2\n", [("nodes", "2")]),
    ("long and value", "#SBATCH --time 10\n", [("time", "10")]),
    ("short and value", "#SBATCH -N 3 -G2\n", [("nodes", "3"), ("gpus", "2")]),
    ("quoted value", "#SBATCH -J \"my job\" --comment='a b'\n", [("job-name", "my job"), ("comment", "a b")]),
    ("a comment ends the line", "#SBATCH --gres=gpu:4 # four\n", [("gres", "gpu:4")]),
    ("# inside a word is kept", "#SBATCH --comment=a#b\n", [("comment", "a#b")]),
    ("a flag", "#SBATCH --exclusive -H\n", [("exclusive", ""), ("H", "")]),
    ("blank lines and comments", "#!/bin/bash\n\n# note\n#SBATCH -p x\n", [("partition", "x")]),
    ("the first command ends it", "#SBATCH -N 1\necho hi\n#SBATCH -N 9\n", [("nodes", "1")]),
    ("not #SBATCH", "#SBATCHX -N 9\n# SBATCH -N 9\n#SBATCH\t-N 2\n", [("nodes", "2")]),
    ("indented", "  #SBATCH -o out.txt\n", [("output", "out.txt")]),
]


@pytest.mark.parametrize(("script", "want"), [c[1:] for c in HEADERS], ids=[c[0] for c in HEADERS])
def test_header(script: str, want: list[tuple[str, str]]) -> None:
    assert [(d.name, d.value) for d in header(script)] == want
    assert all(isinstance(d, Directive) and d.line >= 1 for d in header(script))


def test_an_unclosed_quote_is_an_error() -> None:
    with pytest.raises(HeaderError, match='line 2: a " quote is not closed'):
        header('#!/bin/sh\n#SBATCH -J "open\n')


# -- the explanation ---------------------------------------------------------------------------


def req(script: str = "#!/bin/sh\ntrue\n", **kw: Any) -> models.SubmitRequest:
    return models.SubmitRequest(**{"tier": "guaranteed", "script": script, **kw})


def sh(*lines: str) -> str:
    return "\n".join(["#!/bin/sh", *lines, "srun true", ""])


# The example pool: a-owner holds a-gpu[1-2] (2 A100s each); shared is every node, 4 GPUs per job at most.
EXPLAIN = [  # fmt: skip
    ("4 GPUs on 2-GPU nodes", "alice", req(gpus=4), False, "no node of partition 'a-owner' holds 4 GPU(s)"),
    ("2 GPUs fit", "alice", req(gpus=2), True, ""),
    ("the header's --gres", "alice", req(sh("#SBATCH --gres=gpu:4"), gpus=0), False, "holds 4 GPU(s)"),
    (
        "the header's typed --gres",
        "alice",
        req(sh("#SBATCH --gres=gpu:nvidia_a100-sxm4-80gb:3"), gpus=0),
        False,
        "holds 3 GPU(s) of type nvidia_a100-sxm4-80gb: the largest holds 2",
    ),
    ("the header's --gpus-per-node", "alice", req(sh("#SBATCH --gpus-per-node=3"), gpus=0), False, "holds 3"),
    ("two nodes of two", "alice", req(sh("#SBATCH --nodes=2"), gpus=2), True, ""),
    ("more nodes than the partition", "alice", req(sh("#SBATCH -N 3"), gpus=1), False, "has 2 node(s)"),
    ("a node range: its minimum", "alice", req(sh("#SBATCH -N 2-5"), gpus=1), True, ""),
    ("--gpus past the partition", "alice", req(sh("#SBATCH -G 5"), gpus=0), False, "has 4 GPU(s) in all"),
    ("two nodes of two in shared: 4", "alice", req(sh("#SBATCH -N 2"), tier="shared", gpus=2), True, ""),
    (
        "three nodes of two in shared: 6",
        "alice",
        req(sh("#SBATCH -N 3"), tier="shared", gpus=2),
        False,
        "at most 4 GPU(s) per job; this job asks for 6",
    ),
    ("an unclosed quote", "alice", req(sh('#SBATCH -J "x')), False, "quote is not closed"),
    ("a bad --nodes", "alice", req(sh("#SBATCH --nodes=lots")), False, "--nodes=lots is not a count"),
    ("a typed request on the right nodes", "bob", req(gpu_type="nvidia_h100_80gb_hbm3", gpus=2), True, ""),
    (
        "a nodelist of a smaller node",
        "alice",
        req(tier="scavenger", checkpoint=True, gpus=3, nodes="b-gpu1"),
        False,
        "b-gpu1 hold fewer than 3",
    ),
]


@pytest.mark.parametrize(("user", "request_", "ok", "said"), [c[1:] for c in EXPLAIN], ids=[c[0] for c in EXPLAIN])
def test_the_explanation_checks_the_nodes(user: str, request_: models.SubmitRequest, ok: bool, said: str) -> None:
    spec = example_spec()
    out = submitting.explain(spec, build_tables(spec, SlurmVersion(22, 5)), views.viewer(spec, user), request_)
    assert out.ok is ok, out
    if said:
        assert any(said in r for r in out.refusals), out.refusals


NOTES = [
    ("the form's partition wins", sh("#SBATCH -p scavenger"), "#SBATCH --partition=scavenger (line 2) is overridden"),
    ("the form's time wins", sh("#SBATCH --time=5"), "--time=5 (line 2) is overridden by the form's --time=01:00:00"),
    ("the form's gres wins", sh("#SBATCH --gres=gpu:8"), "--gres=gpu:8 (line 2) is overridden by the form's --gres"),
]


@pytest.mark.parametrize(("script", "note"), [c[1:] for c in NOTES], ids=[c[0] for c in NOTES])
def test_the_explanation_says_what_the_form_overrides(script: str, note: str) -> None:
    spec = example_spec()
    out = submitting.explain(spec, build_tables(spec, SlurmVersion(22, 5)), views.viewer(spec, "alice"), req(script))
    assert out.ok and any(note in n for n in out.notes), out.notes


OUTPUTS = [
    ("sbatch's default, in the home directory", sh(), "~/slurm-%j.out"),
    ("an array", sh("#SBATCH --array=1-3"), "~/slurm-%A_%a.out"),
    ("a relative --output", sh("#SBATCH -o logs/%x-%j.txt"), "~/logs/%x-%j.txt"),
    ("an absolute --output", sh("#SBATCH --output=/scratch/o.txt"), "/scratch/o.txt"),
    ("relative to --chdir", sh("#SBATCH -D /scratch/run/", "#SBATCH -o o.txt"), "/scratch/run/o.txt"),
    ("the default in --chdir", sh("#SBATCH --chdir=/scratch"), "/scratch/slurm-%j.out"),
]


@pytest.mark.parametrize(("script", "where"), [c[1:] for c in OUTPUTS], ids=[c[0] for c in OUTPUTS])
def test_the_explanation_says_where_the_output_goes(script: str, where: str) -> None:
    spec = example_spec()
    out = submitting.explain(spec, build_tables(spec, SlurmVersion(22, 5)), views.viewer(spec, "alice"), req(script))
    assert out.output == where


def test_shapes_count_mig_instances_as_units() -> None:
    shapes = {s.group: s for s in fit.shapes(example_spec(), "c-owner")}
    (c,) = shapes.values()
    assert c.hosts == ("c-gpu1",) and c.units == 5 and c.whole == {"nvidia_a100-sxm4-40gb": 1}


# -- messages keep their lines -----------------------------------------------------------------

LINES = [
    ("two lines", "sbatch: error: a\nsbatch: error: b", "sbatch: error: a\nsbatch: error: b"),
    ("CRLF", "a\r\nb", "a\nb"),
    ("a lone CR", "a\rb", "a\\x0db"),
    ("an escape", "a\x1b[2Jb\nc", "a\\x1b[2Jb\nc"),
    ("a line separator", "a\u2028b", "a\\u2028b"),
    ("bidi", "a\u202eb", "a\\u202eb"),
    ("a tab", "a\tb", "a\\x09b"),
]


@pytest.mark.parametrize(("raw", "shown"), [c[1:] for c in LINES], ids=[c[0] for c in LINES])
def test_shown_lines(raw: str, shown: str) -> None:
    assert text.shown_lines(raw) == shown
    assert not any(text.control_chars(line) for line in text.shown_lines(raw).split("\n"))


def test_slurms_refusal_keeps_its_lines() -> None:
    said = "sbatch: error: Batch job submission failed\nsbatch: error: tier 'x' is preemptible\x1b[31m"
    err = actions.refusal(Result(("sbatch",), 1, "", said))
    assert err.message == "sbatch: error: Batch job submission failed\nsbatch: error: tier 'x' is preemptible\\x1b[31m"


# -- the job page and the history ---------------------------------------------------------------


def job(state: str, **kw: Any) -> JobRecord:
    return JobRecord(5, name="x", state=State(state), user="alice", account="proja", **kw)


@pytest.mark.parametrize(
    ("state", "shows"),
    [("PENDING", False), ("REQUEUED", False), ("RUNNING", True), ("COMPLETED", True), ("CANCELLED", True)],
)
def test_a_waiting_job_has_no_start_or_end(state: str, shows: bool) -> None:
    view = views.job_view(job(state, start_time=2000.0, end_time=5600.0))
    assert (view.start_time, view.end_time) == ((2000.0, 5600.0) if shows else (None, None))


OUTPUT_FILES = [
    ("expanded (24.05+)", {"stdout_expanded": "/home/alice/slurm-5.out", "stdout": "x"}, "/home/alice/slurm-5.out"),
    ("a pattern", {"stdout": "/scratch/%u/o-%j.txt"}, "/scratch/alice/o-5.txt"),
    ("only the directory (22.05)", {"working_directory": "/home/alice/"},
     "/home/alice/slurm-5.out (unless the script set --output)"),
    ("nothing", {}, ""),
    ("not a string", {"stdout": 7, "working_directory": ["x"]}, ""),
    ("a control character", {"stdout": "/tmp/a\nb"}, "/tmp/a\\x0ab"),
]  # fmt: skip


@pytest.mark.parametrize(("raw", "where"), [c[1:] for c in OUTPUT_FILES], ids=[c[0] for c in OUTPUT_FILES])
def test_the_output_file(raw: dict[str, Any], where: str) -> None:
    run = job("COMPLETED", raw=raw)
    assert views.output_file(run, [run]) == where
    assert views.job_detail(run, [run], [], None).output == where


def test_the_history_lists_finished_jobs_the_caller_may_see() -> None:
    spec = example_spec()
    runs = [
        JobRecord(1, user="alice", account="proja", state=State("COMPLETED"), start_time=10.0, end_time=20.0),
        JobRecord(2, user="alice", account="proja", state=State("RUNNING"), start_time=10.0),
        JobRecord(3, user="bob", account="projb", state=State("FAILED"), start_time=10.0, end_time=40.0),
        JobRecord(4, user="alice", account="proja", state=State("CANCELLED"), start_time=10.0, end_time=30.0),
        JobRecord(5, user="alice", account="proja", state=State("TIMEOUT"), end_time=25.0),
    ]
    got = views.history(views.viewer(spec, "alice"), runs)
    assert [j.job_id for j in got.jobs] == [4, 5, 1]
    assert got.hidden == {"FAILED": 1}
