"""``slurm-pool guarantees reconcile``: overflowed jobs move back into their guarantee once it frees.

The plan (:func:`slurm_pool.policy.overflow.plan_moves`) table-driven on job
records; the command through the recording runner, on squeue JSON shaped as
22.05 and 26.05 print it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from slurm_pool.adapters.records import JobRecord, job_state
from slurm_pool.adapters.runner import RecordingRunner
from slurm_pool.adapters.slurmcalls import SlurmCalls
from slurm_pool.cli import cli
from slurm_pool.policy.overflow import Move, array_tasks, overflow_tag, plan_moves, waiting_jobs
from slurm_pool.spec import load_spec

ROOT = Path(__file__).resolve().parents[2]
FLOATING = ROOT / "examples" / "pool-floating.yaml"  # projd: 4 GPUs of any type; proje: 2 H100s
H100 = "nvidia_h100_80gb_hbm3"
TAG_D, TAG_E = overflow_tag("guaranteed-projd"), overflow_tag("guaranteed-proje")
IN_D, IN_E = ("guaranteed-projd", "floating"), ("guaranteed-proje", "floating")
SHARED = ("shared", "shared")


def job(
    job_id: int,
    account: str,
    where: tuple[str, str],
    state: str,
    gpus: int,
    *,
    submit: float | None = None,
    tag: str | None = None,
    types: dict[str, int] | None = None,
    reason: str = "",
    array: str | None = None,
) -> JobRecord:
    raw: dict[str, Any] = {"admin_comment": tag or ""}
    if array is not None:
        raw["array_task_string"] = array
    return JobRecord(
        job_id=job_id,
        state=job_state(state),
        reason=reason,
        qos=where[0],
        partition=where[1],
        account=account,
        submit_time=float(job_id * 10) if submit is None else submit,
        gpus=gpus,
        gpu_types=types or {},
        raw=raw,
    )


def d_waiting(job_id: int, gpus: int = 2, **kw: Any) -> JobRecord:
    """A pending job of projd that the Lua sent to the shared tier, tagged."""
    return job(job_id, "projd", SHARED, "PENDING", gpus, tag=TAG_D, **kw)


def d_moves(*ids_gpus: tuple[int, int]) -> list[Move]:
    return [Move(i, "projd", "floating", "guaranteed-projd", n) for i, n in ids_gpus]


RUN_D2 = job(1, "projd", IN_D, "RUNNING", 2)
RUN_D4 = job(1, "projd", IN_D, "RUNNING", 4)

# (case, jobs, the moves)
PLAN_CASES: list[tuple[str, list[JobRecord], list[Move]]] = [
    ("fits", [RUN_D2, d_waiting(5)], d_moves((5, 2))),
    ("does not fit", [RUN_D4, d_waiting(5)], []),
    ("one of two fits", [RUN_D2, d_waiting(5, 3), d_waiting(6, 2)], d_moves((6, 2))),
    ("moves count into the guarantee", [d_waiting(5), d_waiting(6), d_waiting(7)], d_moves((5, 2), (6, 2))),
    ("oldest submission first", [RUN_D2, d_waiting(5, submit=90.0), d_waiting(6, submit=80.0)], d_moves((6, 2))),
    ("pending in the guarantee counts", [RUN_D2, job(2, "projd", IN_D, "PENDING", 2), d_waiting(5)], []),
    ("suspended in the guarantee counts", [job(2, "projd", IN_D, "SUSPENDED", 4), d_waiting(5)], []),
    (
        "finished in the guarantee does not count",
        [job(2, "projd", IN_D, "COMPLETED", 4), d_waiting(5)],
        d_moves((5, 2)),
    ),
    ("another account in the QOS does not count", [job(2, "projx", IN_D, "RUNNING", 4), d_waiting(5)], d_moves((5, 2))),
    ("untagged jobs untouched", [job(5, "projd", SHARED, "PENDING", 2)], []),
    ("another tag untouched", [job(5, "projd", SHARED, "PENDING", 2, tag="site: keep")], []),
    ("another project's job with projd's tag untouched", [job(5, "projx", SHARED, "PENDING", 2, tag=TAG_D)], []),
    ("projd's job with proje's tag untouched", [job(5, "projd", SHARED, "PENDING", 2, tag=TAG_E)], []),
    ("a running overflow job stays", [job(5, "projd", SHARED, "RUNNING", 2, tag=TAG_D)], []),
    (
        "a tagged job someone moved elsewhere stays",
        [job(5, "projd", ("scavenger", "scavenger"), "PENDING", 2, tag=TAG_D)],
        [],
    ),
    ("a held job stays", [d_waiting(5, reason="JobHeldUser")], []),
    ("a pending array counts every task: fits", [RUN_D2, d_waiting(5, 1, array="0-1")], d_moves((5, 2))),
    ("a pending array counts every task: beyond", [RUN_D2, d_waiting(5, 1, array="0-2")], []),
    (
        "typed guarantee: fits",
        [
            job(1, "proje", IN_E, "RUNNING", 1, types={H100: 1}),
            job(5, "proje", SHARED, "PENDING", 1, tag=TAG_E, types={H100: 1}),
        ],
        [Move(5, "proje", "floating", "guaranteed-proje", 1)],
    ),
    (
        "typed guarantee: full",
        [
            job(1, "proje", IN_E, "RUNNING", 2, types={H100: 2}),
            job(5, "proje", SHARED, "PENDING", 1, tag=TAG_E, types={H100: 1}),
        ],
        [],
    ),
    (
        "typed guarantee: a record of no type counts against the type",
        [job(1, "proje", IN_E, "RUNNING", 2), job(5, "proje", SHARED, "PENDING", 1, tag=TAG_E, types={H100: 1})],
        [],
    ),
    (
        "typed guarantee: GPUs of another type in its QOS do not count against the type",
        [
            job(1, "proje", IN_E, "RUNNING", 2, types={"nvidia_a100_80gb_pcie": 2}),
            job(5, "proje", SHARED, "PENDING", 2, tag=TAG_E, types={H100: 2}),
        ],
        [Move(5, "proje", "floating", "guaranteed-proje", 2)],
    ),
    ("typed guarantee: a job of no type stays", [job(5, "proje", SHARED, "PENDING", 1, tag=TAG_E)], []),
    (
        "typed guarantee: a job of another type stays",
        [job(5, "proje", SHARED, "PENDING", 1, tag=TAG_E, types={"nvidia_a100_80gb_pcie": 1})],
        [],
    ),
    (
        "each project against its own guarantee",
        [RUN_D4, d_waiting(5), job(6, "proje", SHARED, "PENDING", 2, tag=TAG_E, types={H100: 2})],
        [Move(6, "proje", "floating", "guaranteed-proje", 2)],
    ),
]


@pytest.mark.parametrize("case,jobs,moves", PLAN_CASES, ids=[c[0] for c in PLAN_CASES])
def test_plan(case: str, jobs: list[JobRecord], moves: list[Move]) -> None:
    assert plan_moves(load_spec(FLOATING), jobs) == moves


def test_the_plan_is_idempotent_once_the_moves_are_made() -> None:
    """After the moves (tag cleared, now in the guarantee) a second plan moves nothing more."""
    spec = load_spec(FLOATING)
    jobs = [RUN_D2, d_waiting(5), d_waiting(6)]
    assert plan_moves(spec, jobs) == d_moves((5, 2))
    after = [RUN_D2, job(5, "projd", IN_D, "PENDING", 2), d_waiting(6)]
    assert (plan_moves(spec, after), waiting_jobs(spec, after)) == ([], 1)


@pytest.mark.parametrize(
    "text,tasks", [(None, 1), ("", 1), ("0-9", 10), ("1,3,5-7", 5), ("0-15:4", 4), ("0-9%2", 10), ("x,2", 1)]
)
def test_array_tasks(text: str | None, tasks: int) -> None:
    assert array_tasks(text) == tasks


def test_a_move_clears_the_tag() -> None:
    # The reconcile moves a job through the adapter's update_job (test_reconcile_moves_the_oldest_that_fits).
    m, r = d_moves((5, 2))[0], RecordingRunner()
    SlurmCalls(r).update_job(m.job_id, partition=m.partition, qos=m.qos, admin_comment="", check=False)
    assert r.calls == [("scontrol", "update", "JobId=5", "Partition=floating", "QOS=guaranteed-projd", "AdminComment=")]


# -- the command ------------------------------------------------------------------------------


def squeue_job(version: str, job_id: int, qos: str, partition: str, state: str, gpus: int, tag: str) -> dict[str, Any]:
    """One job of ``squeue --json`` as ``version`` prints it (the fields the reconcile reads)."""
    tres = f"cpu=1,mem=1000M,node=1,billing=1,gres/gpu={gpus}"
    out: dict[str, Any] = {
        "job_id": job_id,
        "account": "projd",
        "qos": qos,
        "partition": partition,
        "admin_comment": tag,
        "tres_req_str": tres,
        "tres_alloc_str": tres if state == "RUNNING" else "",
        "state_reason": "None" if state == "RUNNING" else "Priority",
    }
    if version == "22.05":
        out.update(job_state=state, submit_time=1000 + job_id)
    else:
        out.update(job_state=[state], submit_time={"set": True, "infinite": False, "number": 1000 + job_id})
    return out


def fake_slurm(monkeypatch: pytest.MonkeyPatch, version: str, refuse: bool = False) -> RecordingRunner:
    """projd runs 2 GPUs in its guarantee; jobs 5 and 6 (2 GPUs each) wait in shared, tagged."""
    jobs = [
        squeue_job(version, 1, "guaranteed-projd", "floating", "RUNNING", 2, ""),
        squeue_job(version, 5, "shared", "shared", "PENDING", 2, TAG_D),
        squeue_job(version, 6, "shared", "shared", "PENDING", 2, TAG_D),
        squeue_job(version, 7, "shared", "shared", "PENDING", 2, ""),
    ]
    r = RecordingRunner()
    r.on(["squeue", "--json"], json.dumps({"jobs": jobs}))
    if refuse:
        r.on(["scontrol", "update"], "", 1, "slurm_update error: Job violates accounting/QOS policy\x1b[2J")
    monkeypatch.setattr("slurm_pool.adapters.runner.SubprocessRunner", lambda **kw: r)
    return r


MOVE_5 = ("scontrol", "update", "JobId=5", "Partition=floating", "QOS=guaranteed-projd", "AdminComment=")


@pytest.mark.parametrize("version", ["22.05", "26.05"])
def test_reconcile_moves_the_oldest_that_fits(monkeypatch: pytest.MonkeyPatch, version: str) -> None:
    r = fake_slurm(monkeypatch, version)
    res = CliRunner().invoke(cli, ["guarantees", "reconcile", "--spec", str(FLOATING)])
    assert res.exit_code == 0, res.output
    assert r.commands("scontrol") == [MOVE_5]
    assert res.output.splitlines() == [
        "moved job 5 of projd (2 GPUs) into guaranteed-projd (partition floating)",
        "guarantees reconcile: moved 1 of 2 overflowed pending jobs",
    ]


def test_dry_run_makes_no_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    r = fake_slurm(monkeypatch, "26.05")
    res = CliRunner().invoke(cli, ["guarantees", "reconcile", "--spec", str(FLOATING), "--dry-run", "--json"])
    assert res.exit_code == 0, res.output
    assert r.commands("scontrol") == []
    assert json.loads(res.output) == {
        "dry_run": True,
        "waiting": 2,
        "moves": [
            {
                "job_id": 5,
                "project": "projd",
                "partition": "floating",
                "qos": "guaranteed-projd",
                "gpus": 2,
                "done": False,
                "error": "",
            }
        ],
    }


def test_a_refused_move_is_reported_and_left_for_the_next_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    r = fake_slurm(monkeypatch, "22.05", refuse=True)
    res = CliRunner().invoke(cli, ["guarantees", "reconcile", "--spec", str(FLOATING)])
    assert res.exit_code == 0, res.output
    assert r.commands("scontrol") == [MOVE_5]
    assert "not moved: job 5 of projd" in res.output and "accounting/QOS policy" in res.output
    assert "\x1b" not in res.output  # Slurm's text is shown, not sent to the terminal
    assert res.output.splitlines()[-1] == "guarantees reconcile: moved 0 of 2 overflowed pending jobs"


def test_a_spec_without_guarantees_is_bad_input(monkeypatch: pytest.MonkeyPatch) -> None:
    r = fake_slurm(monkeypatch, "26.05")
    res = CliRunner().invoke(cli, ["guarantees", "reconcile", "--spec", str(ROOT / "examples" / "pool.yaml")])
    assert res.exit_code == 2, res.output
    assert "error: guarantees: the spec has no guarantees section" in res.output
    assert "Traceback" not in res.output and r.calls == []
