"""``slurm-pool why JOBID``: why a pending job waits, when it will start, and what would start it sooner."""

from __future__ import annotations

import json
import time
from typing import Any

import click

from slurm_pool.clitypes import JobIdParam, StrictInt
from slurm_pool.errors import InputError
from slurm_pool.jobid import JobId
from slurm_pool.text import shown


def _when(t: float | None, now: float) -> str:
    if t is None:
        return "none"
    from slurm_pool.predict.explain import duration

    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))
    return f"{stamp} (in {duration(t - now)})" if t > now else f"{stamp} (now)"


def not_waiting(slurm: Any, ref: JobId) -> InputError:
    """The error for a job that is not in the queue the caller sees: ended, or unknown."""
    from slurm_pool.adapters.runner import CommandError

    try:
        runs = slurm.job_runs(str(ref))
    except (CommandError, OSError, ValueError):
        runs = []
    if runs:
        last = runs[-1]
        return InputError(f"job {ref} has ended ({last.state.base or 'unknown state'}): it is not waiting")
    return InputError(f"job_id: there is no job {ref} in the queue you can see")


def waiting(fc: Any, slurm: Any, ref: JobId) -> list[int]:
    """The pending jobs ``ref`` names (every component of a het job, every waiting task of an array);
    InputError when it names none: not in the queue, or running."""
    ids = fc.named(ref)
    if not ids:
        raise not_waiting(slurm, ref)
    pending = [j for j in ids if fc.jobs[j].state == "pending" and j in fc.predictions]
    if not pending:
        job = fc.jobs[ids[0]]
        raise InputError(f"job {ref} is {job.state}, not waiting (since {_when(job.start, fc.now)})")
    return pending


@click.command()
@click.argument("job_id", type=JobIdParam())
@click.option("--spec", "spec_path", type=click.Path(exists=True, dir_okay=False), required=True, help="The pool spec.")
@click.option("--json", "as_json", is_flag=True, help="Print the answer as JSON.")
@click.option(
    "--history-days",
    type=StrictInt(0, 365),
    default=14,
    show_default=True,
    help="Days of accounting (sacct) read for each user's recent runtimes (0: none; time limits only).",
)
@click.option("--no-alternatives", is_flag=True, help="Skip the other ways to submit it (one forward run each).")
def why(job_id: JobId, spec_path: str, as_json: bool, history_days: int, no_alternatives: bool) -> None:
    """Why pending job JOB_ID waits, when the pool's model starts it, and what would start it sooner.

    JOB_ID is in Slurm's notation: 123, an array task 123_4, a het component 123+1;
    123 answers for every waiting task of array 123 or component of het job 123.
    The queue is run forward in the simulator with each user's recent runtimes;
    the range runs it again with every job using its whole time limit.
    """
    from slurm_pool.adapters.runner import SubprocessRunner
    from slurm_pool.adapters.slurm import SlurmClient, read_records
    from slurm_pool.predict.explain import explain, together
    from slurm_pool.predict.live import forecast
    from slurm_pool.spec import load_spec

    spec = load_spec(spec_path)
    slurm = SlurmClient(SubprocessRunner())
    fc = read_records(lambda: [forecast(slurm, spec, history_days=history_days)], "squeue --json", "job records")[0]
    ids = waiting(fc, slurm, job_id)
    answers = [explain(fc, j, alternatives_too=not no_alternatives) for j in ids]
    het = together(fc, ids)
    if as_json:
        parts = [{"name": fc.name(ex.job_id), "slurm_estimate": fc.slurm_start.get(ex.job_id), **ex.as_dict()}
                 for ex in answers]  # fmt: skip
        out: dict[str, Any] = {"now": fc.now, **parts[0]}
        if len(parts) > 1:
            out["parts"] = parts
        if het is not None:
            out["het_start"] = het[1]
        click.echo(json.dumps(out, indent=2))
        return
    lines: list[str] = []
    if het is not None:
        lines.append(
            f"Heterogeneous job {het[0]}: Slurm starts its {len(ids)} waiting components together, "
            f"so it starts when the last can: {_when(het[1], fc.now)}."
        )
    elif len(ids) > 1:
        lines.append(f"Job {job_id} names {len(ids)} waiting jobs: {', '.join(fc.name(j) for j in ids)}.")
    for ex in answers:
        lines += _answer(fc, ex)
    for line in lines:
        click.echo(shown(line))


def _answer(fc: Any, ex: Any) -> list[str]:
    """One pending job's answer, in lines."""
    from slurm_pool.predict.explain import duration

    job, p, name = fc.jobs[ex.job_id], ex.prediction, fc.name(ex.job_id)
    called = f"Job {name}" + (f" (job id {ex.job_id})" if name != str(ex.job_id) else "")
    lines = [
        f"{called} ({job.user}, partition {job.partition}, {job.gpus} {job.profile or 'GPU'}"
        f"{'s' if job.gpus != 1 and not job.profile else ''}) is pending: {job.reason or 'no reason'}: {ex.reason_text}.",
        f"Predicted start: {_when(p.start, fc.now)}"
        + (f", range {_when(p.low, fc.now)} to {_when(p.high, fc.now)}" if p.low != p.high else "")
        + (f" ({p.note})" if p.note else ""),
        f"Its runtime: {duration(p.runtime.seconds)}, from {p.runtime.basis}.",
        f"Slurm's own estimate (squeue --start): {_when(fc.slurm_start.get(ex.job_id), fc.now)}",
    ]
    if ex.causes:
        lines.append("It waits for:")
        lines += [f"  - {c.text}" + (f" (jobs {', '.join(map(str, c.jobs))})" if c.jobs else "") for c in ex.causes]
    sooner = [a for a in ex.alternatives if a.start is not None and (p.start is None or a.start < p.start - 1)]
    if sooner:
        lines.append("It would start sooner with:")
        lines += [
            f"  - {a.what}: {_when(a.start, fc.now)}; {a.how}" for a in sorted(sooner, key=lambda a: a.start or 0)
        ]
    elif ex.alternatives:
        lines.append("No other way to submit it starts it sooner in the model.")
    return lines
