"""The Slurm side of an elastic torchrun job, as plain data and text (:class:`BatchJob`).  Pure.

An elastic job is one core batch job of ``min_nodes`` nodes in a tier that is
not preempted for it (guaranteed or shared), and ``max_nodes - min_nodes``
one-node extension jobs in a preemptible tier.  Every node runs one torchrun
agent; all agents join one c10d rendezvous whose TCP store the core's first
node hosts (``is_host``), so an extension that starts makes the job grow and
one that is preempted makes it shrink, each time from the last checkpoint.

Facts measured with torch 2.15.0 (gloo, CPU) that the plan follows:

* join and leave work only with ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1``
  (without it a joining node hangs on ``MASTER_ADDR``, or ranks swap and
  gloo's full mesh fails);
* ``last_call_timeout=3`` makes a join re-form in seconds;
* a leave counts against ``--max-restarts``, so it is set high.

Extensions start after the core (``--dependency=after:<core>``) and are named
``elastic-<core>-ext``; the core cancels them when its training ends.  An
extension is requeueable and asks for ``--signal=B:TERM@<grace>``: the batch
process is torchrun itself (``exec``), which stops its workers on SIGTERM, and
the other agents re-form without it.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field

from slurm_pool.adapters.slurmcalls import (
    BatchJob,
    batch_directives,
    batch_options,
    cancel_own_named,
    on_every_node,
)

#: Rendezvous ports: one per core job, so jobs on one node do not collide.
PORT_BASE, PORT_SPAN = 29500, 20000
ENV_SHARE_STORE = "TORCH_DISABLE_SHARE_RDZV_TCP_STORE"


@dataclass(frozen=True)
class ElasticJob:
    """What ``slurm-pool elastic submit`` was asked for."""

    min_nodes: int
    max_nodes: int
    command: tuple[str, ...]
    core_sbatch: tuple[str, ...] = ()
    extension_sbatch: tuple[str, ...] = ()
    common_sbatch: tuple[str, ...] = ()
    torchrun: str = "torchrun"
    nproc_per_node: int = 1
    max_restarts: int = 100
    last_call_timeout: int = 3
    #: Seconds before its end a preempted extension hears SIGTERM (its tier's GraceTime).
    leave_seconds: int = 20
    #: How the job runs ``slurm-pool`` (a Python and ``-m slurm_pool.cli``).
    slurm_pool: tuple[str, ...] = ("slurm-pool",)
    env: dict[str, str] = field(default_factory=dict)

    @property
    def extensions(self) -> int:
        return self.max_nodes - self.min_nodes


def extension_name(core_id: int | str) -> str:
    return f"elastic-{core_id}-ext"


def rdzv_port(core_id: int | str) -> int:
    return PORT_BASE + int(core_id) % PORT_SPAN


#: The core's own job id in its script: the one word the shell expands (the job's words never are).
CORE_ID = '"$SLURM_JOB_ID"'


def _node_line(job: ElasticJob, core: str) -> str:
    """The ``elastic node`` command as one shell line.

    ``core`` is shell text the tool owns (:data:`CORE_ID`, or a quoted job id);
    every other word -- the job's command, ``--torchrun`` -- is quoted, so the
    job gets it as it was given, ``$SLURM_JOB_ID`` and all.
    """
    head = [*job.slurm_pool, "elastic", "node", "--core"]
    tail = [
        "--min", str(job.min_nodes), "--max", str(job.max_nodes),
        "--torchrun", job.torchrun, "--nproc-per-node", str(job.nproc_per_node),
        "--max-restarts", str(job.max_restarts), "--last-call-timeout", str(job.last_call_timeout),
        "--", *job.command,
    ]  # fmt: skip
    return " ".join([shlex.join(head), core, shlex.join(tail)])


def _exports(job: ElasticJob) -> list[str]:
    return [f"export {k}={shlex.quote(v)}" for k, v in sorted(job.env.items())]


def core_script(job: ElasticJob) -> str:
    """The core's batch script: one agent per node (srun), then the extensions are cancelled."""
    lines = [
        "#!/bin/bash",
        *batch_directives(job.min_nodes, tasks_per_node=1),
        *_exports(job),
        on_every_node(_node_line(job, CORE_ID)),
        "rc=$?",
        cancel_own_named('"' + extension_name("$SLURM_JOB_ID") + '"'),
        "exit $rc",
        "",
    ]
    return "\n".join(lines)


def extension_script(job: ElasticJob, core_id: int) -> str:
    """One extension's batch script: torchrun is the batch process, so the leave signal reaches it."""
    return "\n".join(
        [
            "#!/bin/bash",
            *batch_directives(1),
            *_exports(job),
            f"exec {_node_line(job, shlex.quote(str(core_id)))}",
            "",
        ]
    )


def core_job(job: ElasticJob) -> BatchJob:
    """The core batch job: the user's options only."""
    return BatchJob(options=(*job.common_sbatch, *job.core_sbatch))


def extension_job(job: ElasticJob, core_id: int) -> BatchJob:
    """An extension: named for its core, started after it, requeueable, told ``leave_seconds`` before it goes."""
    return BatchJob(
        name=extension_name(core_id),
        after=core_id,
        requeue=True,
        signal=f"B:TERM@{job.leave_seconds}",
        options=(*job.common_sbatch, *job.extension_sbatch),
    )


def core_sbatch_args(job: ElasticJob) -> list[str]:
    return batch_options(core_job(job))


def extension_sbatch_args(job: ElasticJob, core_id: int) -> list[str]:
    return batch_options(extension_job(job, core_id))


def torchrun_argv(job: ElasticJob, core_id: int, endpoint: str, is_host: bool) -> list[str]:
    """The agent of one node: ``--nnodes=MIN:MAX`` on the core's c10d rendezvous."""
    conf = f"is_host={'true' if is_host else 'false'},last_call_timeout={job.last_call_timeout}"
    return [
        job.torchrun, f"--nnodes={job.min_nodes}:{job.max_nodes}", f"--nproc-per-node={job.nproc_per_node}",
        "--rdzv-backend=c10d", f"--rdzv-endpoint={endpoint}:{rdzv_port(core_id)}", f"--rdzv-id=elastic-{core_id}",
        f"--rdzv-conf={conf}", f"--max-restarts={job.max_restarts}", "--monitor-interval=1", *job.command,
    ]  # fmt: skip
