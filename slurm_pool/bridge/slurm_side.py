"""The bridge's Slurm adapter: read nodes and jobs, submit and cancel placeholders.

A lent node is held in Slurm by one placeholder job in the lend partition and
QOS (lowest priority, preempted by every other tier), exclusive on the node
with all its GPUs and memory.  With ``--signal=B:TERM`` it gets SIGTERM the
moment a preempting job is scheduled and exits 0, so the owner's job starts
within about a second instead of after GraceTime.  What then happens to it
depends on the release (``preempt_requeues_exited_job`` in
:mod:`slurm_pool.versions`), measured on the real daemons:

* 22.05.8: it ends COMPLETED, not requeued.  ``--no-requeue`` is not used
  there: it makes Slurm wait for GraceTime and then kill the job;
* 26.05.3: slurmctld records a requeueable job that exits after its grace
  signal as PREEMPTED and requeues it, so the placeholder would come back.
  With ``--no-requeue`` it ends PREEMPTED at once (the owner ran 0.4 s after
  submission) and does not return.

A placeholder that is requeued anyway exits at once when it restarts
(``SLURM_RESTART_COUNT`` > 0), and the next reconcile cancels it.  With
``bridge.fence_kubeconfig`` the placeholder fences its node before it exits
(:mod:`slurm_pool.bridge.fence`).
"""

from __future__ import annotations

import os
import shlex
from typing import Iterable

from slurm_pool.adapters.records import JobRecord, NodeRecord
from slurm_pool.adapters.slurm import SlurmClient
from slurm_pool.adapters.slurmcalls import BatchJob, batch_argv
from slurm_pool.bridge.gangs import GROUP_ID
from slurm_pool.bridge.model import LEND_COMMENT, PLACEHOLDER_NAME
from slurm_pool.errors import InputError
from slurm_pool.spec.bridge import Bridge
from slurm_pool.text import matches, shown

PLACEHOLDER_SCRIPT = """#!/bin/sh
# slurm-pool placeholder: holds this node for the Kubernetes inference tier
# until Slurm preempts it or `slurm-pool rebalance` gives the node back.
[ "${SLURM_RESTART_COUNT:-0}" -gt 0 ] && exit 0
sleep infinity &
trap 'kill $! 2>/dev/null; exit 0' TERM INT
wait
"""

FENCED_PLACEHOLDER_SCRIPT = """#!/bin/sh
# slurm-pool placeholder: holds this node for the Kubernetes inference tier
# until Slurm preempts it or `slurm-pool rebalance` gives the node back.
# Preempted, it first takes the node from Kubernetes (cordon, delete its pods),
# so the job that preempts it never shares the GPUs with a pod.
[ "${SLURM_RESTART_COUNT:-0}" -gt 0 ] && exit 0
fence() {
  kill $! 2>/dev/null
  %(fence)s
  exit 0
}
sleep infinity &
trap fence TERM INT
wait
"""


def _node(node: str) -> str:
    """``node`` if it is a valid Slurm node name (it goes into sbatch's options and the script)."""
    if not matches("node", node):
        raise InputError(f"node {shown(repr(node))} is not a valid Slurm node name: no placeholder for it")
    return node


def placeholder_script(config: Bridge, node: str, k8s_node: str | None = None) -> str:
    """The placeholder's batch script: with the fence when ``bridge.fence_kubeconfig`` is set.

    ``k8s_node``: the node's Kubernetes Node, which the fence closes (default: the same name).
    """
    _node(node)
    if not config.fence_kubeconfig:
        return PLACEHOLDER_SCRIPT
    k8s_node = node if k8s_node is None else k8s_node
    if not matches("k8s-name", k8s_node):
        raise InputError(f"{shown(repr(k8s_node))} is not a Kubernetes node name: no fence for {node}")
    argv = [*shlex.split(config.fence_command), "fence-node", k8s_node]
    argv += ["--kubeconfig", config.fence_kubeconfig, "--seconds", str(config.fence_seconds)]
    return FENCED_PLACEHOLDER_SCRIPT % {"fence": shlex.join(argv)}


def submit_identity(config: Bridge, euid: int, login: str | None) -> tuple[str | None, tuple[str, ...]]:
    """Whom placeholders are submitted as (``--uid``; None: the caller itself), and notes on it.

    Only root may pass ``--uid`` (``arg_set_uid`` in Slurm's ``src/common/slurm_opt.c``); run as
    ``bridge.user`` itself the rebalancer needs no root, and submits as itself.
    """
    user = config.user
    if not user or login == user:
        return None, ()
    if euid == 0:
        return user, ()
    who = shown(login or f"uid {euid}")
    return None, (
        f"running as {who}, neither root nor bridge.user {user}: placeholders are submitted as {who}, "
        f"and Slurm takes them only if {who} may use account {config.account} and QOS {config.qos}",
    )


def current_login() -> str | None:
    """The login name of the effective user (None when it has none)."""
    import pwd

    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return None


class SlurmSide:
    """Slurm as the bridge uses it, through :class:`SlurmClient` and its runner."""

    def __init__(self, client: SlurmClient, config: Bridge, submit_as: str | None = None):
        self.client = client
        self.config = config
        #: What the report should say about whom placeholders are submitted as.
        self.notes: tuple[str, ...] = ()
        if submit_as is None:
            submit_as, self.notes = submit_identity(config, os.geteuid(), current_login())
        self.submit_as = submit_as

    def nodes(self) -> list[NodeRecord]:
        return self.client.nodes()

    def jobs(self) -> list[JobRecord]:
        return self.client.jobs()

    def placeholder_job(self, node: str, group: str = "") -> BatchJob:
        """The placeholder batch job for ``node`` (:class:`InputError` for a name Slurm cannot have).

        ``group``: the gang group it is lent for, named in its comment (``gang=<id>``), so that a lend
        stopped before the node is marked in Kubernetes is still known to be the group's.
        """
        _node(node)
        if group and not matches(GROUP_ID, group):
            raise InputError(f"gang group {shown(repr(group))} is not a group id: no placeholder for {node}")
        c = self.config
        return BatchJob(
            name=PLACEHOLDER_NAME,
            submit_as=self.submit_as or None,
            partition=c.partition,
            qos=c.qos,
            account=c.account,
            nodelist=node,
            nodes=1,
            exclusive=True,
            mem_mb=0,
            signal="B:TERM@60",
            comment=f"{LEND_COMMENT} node={node}" + (f" gang={group}" if group else ""),
            output="/dev/null",
            chdir="/",
            # From 24.05 Slurm requeues a requeueable job that exits after its grace signal itself.
            requeue=False if self.client.version().has("preempt_requeues_exited_job") else None,
        )

    def placeholder_argv(self, node: str, group: str = "") -> list[str]:
        """The sbatch command line of :meth:`placeholder_job`."""
        return batch_argv(self.placeholder_job(node, group))

    def submit_placeholder(self, node: str, k8s_node: str | None = None, group: str = "") -> int:
        """Submit the placeholder for ``node`` (whose Kubernetes Node is ``k8s_node``; ``group``: the gang group
        it is lent for); return its job id."""
        script = placeholder_script(self.config, node, k8s_node)
        return self.client.submit(self.placeholder_job(node, group), script)

    def job_state(self, job_id: int) -> tuple[str, str]:
        """(state, reason) of a job in the queue; ``("", "")`` once it is gone."""
        return self.client.job_state(job_id)

    def cancel(self, job_ids: Iterable[int]) -> None:
        self.client.cancel(job_ids)
