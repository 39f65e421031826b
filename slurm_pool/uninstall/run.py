"""``slurm-pool uninstall``: take the pool out of a site's cluster, leaving the site's objects as they are.

Assert, then apply: :func:`build` reads slurmdbd, the queue and the files and
decides every step (:mod:`slurm_pool.accounting.remove`,
:mod:`slurm_pool.uninstall.files`); it refuses (exit 2, nothing changed) while
a job of the pool's is still pending or running, or a node is lent to
Kubernetes.  :func:`execute` prints each step (``would remove ...`` under
``--dry-run``, ``removed ...`` otherwise), checks that no file changed since it
was read, then applies them.  A second run finds nothing to do.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from slurm_pool.accounting.remove import Removal, pool_objects, removal
from slurm_pool.adapters.records import ON_NODE, WAITING, JobRecord
from slurm_pool.adapters.runner import CommandError, Runner
from slurm_pool.adapters.slurm import SlurmClient
from slurm_pool.adapters.systemd import reload_units, stop_and_disable
from slurm_pool.errors import InputError
from slurm_pool.spec.model import PoolSpec
from slurm_pool.uninstall.files import FilePlan, FileStep, Paths, apply_step, check, plan

#: The verbs of each kind of step: (dry run, done).
_VERBS = {"remove": ("would remove", "removed"), "edit": ("would remove", "removed"), "move": ("would move", "moved")}


class StillInUse(InputError):
    """The pool still has jobs, or nodes lent to Kubernetes: uninstall refuses, exit 2, nothing changed."""


@dataclass(frozen=True)
class Plan:
    accounting: Removal
    files: FilePlan

    def empty(self) -> bool:
        return not self.accounting.changes and not self.files.steps


def in_use(spec: PoolSpec, jobs: list[JobRecord], qos: set[str], accounts: set[str]) -> list[str]:
    """One line per job of the pool's still pending or running (its partition, QOS or account is the pool's)."""
    partitions = {p.name for p in spec.partitions}
    adopted = {a.name for a in spec.adopt.accounts}
    accounts = (accounts | {p.name for p in spec.projects}) - adopted
    qos = qos | {t.name for t in spec.tiers}
    lend = spec.bridge.partition if spec.bridge is not None else None
    out = []
    for j in sorted(jobs, key=lambda j: j.job_id):
        if not j.state.any(ON_NODE | WAITING):
            continue
        parts = {p for p in j.partition.split(",") if p}
        if lend is not None and lend in parts:
            where = f"on {j.nodes}" if j.nodes else "pending"
            out.append(f"job {j.job_id} ({j.state}, {where}) holds nodes lent to Kubernetes (partition {lend})")
        elif parts & partitions or j.qos in qos or j.account in accounts:
            out.append(
                f"job {j.job_id} ({j.state}) of user {j.user}: partition {j.partition}, qos {j.qos}, account {j.account}"
            )
    return out


def build(spec: PoolSpec, slurm: SlurmClient, paths: Paths) -> Plan:
    """Every step of the uninstall, decided before any is taken; StillInUse while the pool is in use."""
    files = plan(spec, paths)
    qos, accounts = pool_objects(spec, slurm)
    busy = in_use(spec, slurm.jobs_json(), qos, accounts)
    if busy:
        raise StillInUse(
            "\n".join(
                [
                    *busy,
                    f"uninstall: {len(busy)} job(s) of the pool are pending or running; nothing changed: "
                    "stop the rebalancer, take lent nodes back (`slurm-pool rebalance`), let the pool's jobs end "
                    "or cancel them, then run uninstall again",
                ]
            )
        )
    return Plan(removal(spec, slurm), files)


def _line(step: FileStep, dry_run: bool) -> list[str]:
    verb = _VERBS[step.action][0 if dry_run else 1]
    out = []
    if step.unit:
        out.append(f"{'would stop and disable' if dry_run else 'stopped and disabled'} unit {step.unit}")
    out.extend(f"{verb} {line}" for line in step.lines)
    return out


def execute(
    p: Plan, slurm: SlurmClient, runner: Runner, *, dry_run: bool = False, echo: Callable[[str], None] = print
) -> None:
    """Print every step and (unless ``dry_run``) take it: accounting first, then the files, the manifest last."""
    for line in p.accounting.kept:
        echo(f"left: {line}")
    for line in p.files.left:
        echo(f"left: {line}")
    if p.empty():
        echo("uninstall: nothing to do")
        return
    verb = "would remove" if dry_run else "removed"
    if dry_run:
        for c in p.accounting.changes:
            echo(f"{verb} {c.summary}")
        for s in p.files.steps:
            for line in _line(s, True):
                echo(line)
        echo(f"uninstall: {len(p.accounting.changes) + len(p.files.steps)} step(s) (dry run, nothing changed)")
        return
    check(p.files.steps)
    for done, c in enumerate(p.accounting.changes):
        try:
            slurm.sacctmgr(*c.argv)
        except CommandError:
            echo(f"uninstall: this step failed: remove {c.summary} ({done} of {len(p.accounting.changes)} done)")
            echo("uninstall: nothing else was changed; run it again once the cause is fixed")
            raise
        echo(f"{verb} {c.summary}")
    units = False
    for s in p.files.steps:
        if s.unit:
            stop_and_disable(runner, s.unit)
            units = True
        apply_step(s)
        for line in _line(s, False):
            echo(line)
    if units:
        reload_units(runner)
    echo(
        f"uninstall: done, {len(p.accounting.changes) + len(p.files.steps)} step(s); restart slurmctld and the "
        "slurmds for the pool's nodes and partitions to go"
    )
