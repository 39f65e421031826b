"""``slurm-pool guarantees reconcile``: move overflowed jobs back into their guarantee.

One level-triggered pass (run it from cron, or by hand): read the queue
(``squeue --json``), plan with :func:`slurm_pool.policy.overflow.plan_moves`,
and move each planned job with ``scontrol update`` (job_submit.lua checks the
move again: into the guarantee only while it fits).  Idempotent: a moved job
loses its tag.  A move Slurm refuses (the job started, or the guarantee filled
meanwhile) is reported and left for the next pass.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

import click

from slurm_pool.adapters.runner import Runner
from slurm_pool.cronexit import for_cron
from slurm_pool.errors import InputError
from slurm_pool.policy.overflow import Move, plan_moves, waiting_jobs
from slurm_pool.spec import load_spec
from slurm_pool.spec.model import PoolSpec
from slurm_pool.text import shown


@dataclass(frozen=True)
class Outcome:
    """One planned move and what became of it."""

    move: Move
    done: bool  # moved (False: a dry run, or Slurm refused)
    error: str = ""  # what Slurm said when it refused


@dataclass(frozen=True)
class Report:
    outcomes: tuple[Outcome, ...]
    waiting: int  # tagged pending jobs before the pass
    dry_run: bool


def reconcile(spec: PoolSpec, runner: Runner, dry_run: bool = False) -> Report:
    """Plan from the queue as Slurm has it now and, unless ``dry_run``, make the moves."""
    from slurm_pool.adapters.slurm import SlurmClient

    if spec.guarantees is None:
        raise InputError("guarantees: the spec has no guarantees section, so no job overflows a guarantee")
    slurm = SlurmClient(runner)
    jobs = slurm.jobs_json()
    outcomes = []
    for move in plan_moves(spec, jobs):
        if dry_run:
            outcomes.append(Outcome(move, False))
            continue
        res = slurm.update_job(move.job_id, partition=move.partition, qos=move.qos, admin_comment="", check=False)
        err = (res.stderr or res.stdout).strip()
        outcomes.append(Outcome(move, res.ok, "" if res.ok else err or f"exit status {res.returncode}"))
    return Report(tuple(outcomes), waiting_jobs(spec, jobs), dry_run)


def lines(report: Report) -> list[str]:
    """One line per move, then the summary."""
    out = []
    for o in report.outcomes:
        m = o.move
        what = f"job {m.job_id} of {m.project} ({m.gpus} GPUs) into {m.qos} (partition {m.partition})"
        if report.dry_run:
            out.append(f"would move {what}")
        elif o.done:
            out.append(f"moved {what}")
        else:
            out.append(f"not moved: {what}: {o.error}")
    moved = sum(1 for o in report.outcomes if o.done)
    verb = "would move" if report.dry_run else "moved"
    count = len(report.outcomes) if report.dry_run else moved
    out.append(f"guarantees reconcile: {verb} {count} of {report.waiting} overflowed pending jobs")
    return out


@click.group()
def guarantees() -> None:
    """Floating guarantees: keep jobs that overflowed a guarantee from waiting once it frees."""


@guarantees.command("reconcile")
@click.option("--spec", "spec_path", required=True, type=click.Path(dir_okay=False), help="The pool spec.")
@click.option("--dry-run", is_flag=True, help="Print the moves; change nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print the moves as JSON.")
@for_cron
def reconcile_cmd(spec_path: str, dry_run: bool, as_json: bool) -> None:
    """Move pending jobs that overflowed a full guarantee back into it, oldest first, while they fit.

    Only jobs job_submit.lua tagged (admin comment "slurm-pool: overflow of <QOS>")
    and left where it sent them; running jobs stay.  Exit status 0 (a move Slurm refused
    is reported and left for the next pass); 1 when Slurm cannot be asked, 2 on bad input,
    each with its reason in one line on stderr.
    """
    from slurm_pool.adapters.runner import SubprocessRunner

    report = reconcile(load_spec(spec_path), SubprocessRunner(), dry_run=dry_run)
    if as_json:
        doc = {
            "dry_run": report.dry_run,
            "waiting": report.waiting,
            "moves": [{**asdict(o.move), "done": o.done, "error": o.error} for o in report.outcomes],
        }
        click.echo(json.dumps(doc, indent=2))
        return
    for line in lines(report):
        click.echo(shown(line))  # Slurm's refusal may quote a job's text


__all__ = ["guarantees", "reconcile", "Report", "Outcome"]
