"""``slurm-pool run``: the checkpoint-on-preempt wrapper for batch scripts."""

from __future__ import annotations

import sys

import click

from slurm_pool.clitypes import Finite, StrictInt


@click.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option(
    "--checkpoint-dir",
    type=click.Path(),  # one that cannot be used is warned about, and the command still runs
    default=None,
    help="Checkpoint directory (default: $SLURM_POOL_CHECKPOINT_DIR, the SPANK option, "
    "or <checkpoint_base_dir>/<user>/<job id>).",
)
@click.option(
    "--warn-seconds",
    type=StrictInt(0),
    default=None,
    help="Act this long before the time limit (default: node.conf warn_seconds).",
)
@click.option(
    "--max-self-requeues",
    type=StrictInt(0),
    default=None,
    help="Time-limit self-requeues allowed per job (default: node.conf max_self_requeues).",
)
@click.option(
    "--poll",
    "poll_seconds",
    type=Finite(min=0),
    default=0.0,
    show_default=True,
    help="Also ask Slurm every N seconds whether the job is being preempted (0: only on signals).",
)
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def run(
    checkpoint_dir: str | None,
    warn_seconds: int | None,
    max_self_requeues: int | None,
    poll_seconds: float,
    command: tuple[str, ...],
) -> None:
    """Run COMMAND; on preemption or time limit, checkpoint and requeue.

    Use it as `exec slurm-pool run -- python train.py` in a batch script.
    Exit status: COMMAND's own, 85 (checkpointed, job requeued), 86 (time
    limit with the self-requeue budget spent) or 143 (cancelled).
    """
    from slurm_pool.checkpoint.settings import resolve
    from slurm_pool.checkpoint.supervisor import Supervisor

    argv = list(command)
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        raise click.UsageError("no command given (slurm-pool run [OPTIONS] -- CMD ...)")
    st = resolve(checkpoint_dir=checkpoint_dir, warn_seconds=warn_seconds, max_self_requeues=max_self_requeues)
    sys.exit(Supervisor(argv, st, poll_seconds=poll_seconds).run())
