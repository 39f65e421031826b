"""``slurm-pool elastic submit|node``: elastic torchrun training on the pool (see :mod:`.plan`)."""

from __future__ import annotations

import json
import os
import shlex
import sys

import click

from slurm_pool.clitypes import JobIdParam, StrictInt
from slurm_pool.elastic.plan import (
    ENV_SHARE_STORE,
    ElasticJob,
    core_job,
    core_sbatch_args,
    core_script,
    extension_job,
    extension_name,
    extension_sbatch_args,
    extension_script,
    torchrun_argv,
)
from slurm_pool.jobid import JobId
from slurm_pool.text import shown

#: Nodes one elastic job may span (torchrun's own limit is far higher; this keeps typos out).
MAX_NODES = 256


@click.group()
def elastic() -> None:
    """Elastic torchrun training: a guaranteed core that grows into idle GPUs and shrinks when they are taken back."""


def _split(values: tuple[str, ...], option: str) -> tuple[str, ...]:
    out: list[str] = []
    for v in values:
        try:
            out.extend(shlex.split(v))
        except ValueError as exc:
            raise click.BadParameter(f"{v!r}: {exc}", param_hint=option) from None
    return tuple(out)


@elastic.command()
@click.option("--min", "min_nodes", type=StrictInt(1, MAX_NODES), required=True, help="Nodes of the core.")
@click.option("--max", "max_nodes", type=StrictInt(1, MAX_NODES), required=True, help="Nodes at most.")
@click.option("--core", "core_args", multiple=True, help="sbatch options of the core (its tier: guaranteed or shared).")
@click.option("--extension", "ext_args", multiple=True, help="sbatch options of each extension (a preemptible tier).")
@click.option("--sbatch", "common_args", multiple=True, help="sbatch options of every job (--gres, --time, -D, -o).")
@click.option("--torchrun", default="torchrun", show_default=True, help="The torchrun the nodes run.")
@click.option("--nproc-per-node", type=StrictInt(1, 64), default=1, show_default=True)
@click.option("--max-restarts", type=StrictInt(0, 100000), default=100, show_default=True,
              help="torchrun's --max-restarts (every leave counts).")  # fmt: skip
@click.option(
    "--leave-seconds",
    type=StrictInt(1, 86400),
    default=20,
    show_default=True,
    help="SIGTERM this many seconds before a preempted extension is stopped (at most its tier's GraceTime).",
)
@click.option("--dry-run", is_flag=True, help="Print the batch scripts and sbatch options; submit nothing.")
@click.argument("command", nargs=-1, required=True)
def submit(
    min_nodes: int,
    max_nodes: int,
    core_args: tuple[str, ...],
    ext_args: tuple[str, ...],
    common_args: tuple[str, ...],
    torchrun: str,
    nproc_per_node: int,
    max_restarts: int,
    leave_seconds: int,
    dry_run: bool,
    command: tuple[str, ...],
) -> None:
    """Submit the core job and its extensions; print their job ids as JSON.

    COMMAND is the training script and its arguments, as torchrun takes them (after ``--``).
    """
    if max_nodes < min_nodes:
        raise click.BadParameter(f"{max_nodes} is less than --min {min_nodes}", param_hint="--max")
    job = ElasticJob(
        min_nodes=min_nodes,
        max_nodes=max_nodes,
        command=command,
        core_sbatch=_split(core_args, "--core"),
        extension_sbatch=_split(ext_args, "--extension"),
        common_sbatch=_split(common_args, "--sbatch"),
        torchrun=torchrun,
        nproc_per_node=nproc_per_node,
        max_restarts=max_restarts,
        leave_seconds=leave_seconds,
        slurm_pool=(sys.executable, "-m", "slurm_pool.cli"),
    )
    if dry_run:
        click.echo("# core: sbatch " + shlex.join(core_sbatch_args(job)) + "\n" + core_script(job))
        click.echo(f"# {job.extensions} x extension: sbatch " + shlex.join(extension_sbatch_args(job, 0)))
        click.echo(extension_script(job, 0))
        return
    from slurm_pool.adapters.runner import CommandError, SubprocessRunner
    from slurm_pool.adapters.slurmcalls import SlurmCalls

    slurm = SlurmCalls(SubprocessRunner(keep_job_defaults=True))  # the user's own SBATCH_* defaults apply

    try:
        core = slurm.submit(core_job(job), core_script(job))
    except (CommandError, ValueError) as exc:
        raise click.ClickException(f"the core job was not submitted: {exc}") from None
    extensions: list[int] = []
    try:
        for _ in range(job.extensions):
            extensions.append(slurm.submit(extension_job(job, core), extension_script(job, core)))
    except (CommandError, ValueError) as exc:
        # Nothing half-submitted: the core and the extensions so far go again.
        slurm.cancel([core, *extensions])
        raise click.ClickException(
            f"an extension was not submitted ({exc}); cancelled job {core} and its extensions"
        ) from None
    click.echo(json.dumps({"core": core, "extensions": extensions, "extension_name": extension_name(core)}))


@elastic.command(hidden=True)
@click.option("--core", "core_ref", type=JobIdParam(plain=True), required=True)
@click.option("--min", "min_nodes", type=StrictInt(1, MAX_NODES), required=True)
@click.option("--max", "max_nodes", type=StrictInt(1, MAX_NODES), required=True)
@click.option("--torchrun", required=True)
@click.option("--nproc-per-node", type=StrictInt(1, 64), default=1)
@click.option("--max-restarts", type=StrictInt(0, 100000), default=100)
@click.option("--last-call-timeout", type=StrictInt(1, 86400), default=3)
@click.argument("command", nargs=-1, required=True)
def node(
    core_ref: JobId,
    min_nodes: int,
    max_nodes: int,
    torchrun: str,
    nproc_per_node: int,
    max_restarts: int,
    last_call_timeout: int,
    command: tuple[str, ...],
) -> None:
    """Inside a job: become this node's torchrun agent on the core's rendezvous (exec)."""
    from slurm_pool.adapters.records import RecordError
    from slurm_pool.adapters.runner import CommandError
    from slurm_pool.adapters.slurm import SlurmClient
    from slurm_pool.spec.hosts import expand
    from slurm_pool.text import matches

    slurm = SlurmClient()
    core_id = core_ref.job
    try:
        core = next((j for j in slurm.jobs() if j.job_id == core_id), None)
    except CommandError as exc:
        raise click.ClickException(f"cannot read the core job {core_id}: {exc}") from None
    if core is None or not core.running or not core.nodes:
        state = "gone" if core is None else str(core.state)
        click.echo(f"slurm-pool elastic: core job {core_id} is {shown(state)}; nothing to join", err=True)
        raise SystemExit(0)
    host = expand(core.nodes)[0]
    try:
        address = next((n.address for n in slurm.nodes() if n.name == host and n.address), host)
    except (CommandError, RecordError):
        address = host
    if not matches("host", address):  # Slurm's NodeAddr goes into torchrun's --rdzv-endpoint
        raise click.ClickException(f"the core's node address {shown(repr(address))} is not a host name or address")
    is_host = os.environ.get("SLURM_JOB_ID") == str(core_id) and os.environ.get("SLURM_NODEID", "0") == "0"
    job = ElasticJob(min_nodes, max_nodes, command, torchrun=torchrun, nproc_per_node=nproc_per_node,
                     max_restarts=max_restarts, last_call_timeout=last_call_timeout)  # fmt: skip
    argv = torchrun_argv(job, core_id, address, is_host)
    env = {**os.environ, ENV_SHARE_STORE: "1"}
    click.echo(
        f"slurm-pool elastic: {'hosting' if is_host else 'joining'} {address} as a node of job {core_id}", err=True
    )
    sys.stdout.flush()
    try:
        os.execvpe(argv[0], argv, env)
    except OSError as exc:
        raise click.ClickException(f"cannot run {argv[0]}: {exc.strerror or exc}") from None
