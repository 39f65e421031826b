"""Slurm's commands in the pool's vocabulary: what the packages ask of Slurm, by what they mean.

:class:`SlurmCalls` builds each command line (its program, flags and field
names), runs it through a :class:`~slurm_pool.adapters.runner.Runner` and reads
the answer, release quirks included (:mod:`slurm_pool.adapters.quirks`).
:class:`~slurm_pool.adapters.slurm.SlurmClient` has every method; code that must
stay light (the node hooks, the checkpoint wrapper) uses a :class:`SlurmCalls`
of its own, with ``scontrol`` where node.conf says it is (the other programs beside it).
A batch job is a :class:`BatchJob`; :func:`batch_argv` is its command line.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Mapping

from slurm_pool.adapters import nodeattrs, quirks
from slurm_pool.adapters.records import (
    JobRecord,
    NodeRecord,
    RecordError,
    job_objects,
    parse_job_text,
    parse_jobs,
    parse_node_text,
    parse_nodes,
    skipped,
)

if TYPE_CHECKING:
    from slurm_pool.adapters.runner import Result, Runner
    from slurm_pool.versions import SlurmVersion


@dataclass(frozen=True)
class BatchJob:
    """A batch job to submit, in the pool's words (None/False: not asked for; Slurm's default)."""

    name: str | None = None
    submit_as: str | None = None  # a user to submit as (only root may)
    after: int | None = None  # a job this one starts after (it has started)
    requeue: bool | None = None  # True: may be requeued; False: never requeued
    signal: str | None = None  # ``[B:]SIG@seconds`` before its end
    partition: str | None = None
    qos: str | None = None
    account: str | None = None
    nodelist: str | None = None
    nodes: int | None = None
    exclusive: bool = False
    mem_mb: int | None = None  # per node; 0: all of it
    comment: str | None = None
    output: str | None = None
    chdir: str | None = None
    options: tuple[str, ...] = ()  # a user's own sbatch options, passed on as given, last


def batch_options(job: BatchJob) -> list[str]:
    """sbatch's options for ``job`` (``--parsable`` first, so that its answer is the job id)."""
    valued: tuple[tuple[str, object], ...] = (
        ("--uid", job.submit_as),
        ("--job-name", job.name),
        ("--dependency", None if job.after is None else f"after:{job.after}"),
        ("--requeue", True if job.requeue else None),
        ("--signal", job.signal),
        ("--partition", job.partition),
        ("--qos", job.qos),
        ("--account", job.account),
        ("--nodelist", job.nodelist),
        ("--nodes", job.nodes),
        ("--exclusive", True if job.exclusive else None),
        ("--mem", job.mem_mb),
        ("--comment", job.comment),
        ("--output", job.output),
        ("--chdir", job.chdir),
        ("--no-requeue", True if job.requeue is False else None),
    )
    opts = ["--parsable"]
    for flag, value in valued:
        if value is True:
            opts.append(flag)
        elif value is not None:
            opts.append(f"{flag}={value}")
    return [*opts, *job.options]


def batch_argv(job: BatchJob, sbatch: str = "sbatch") -> list[str]:
    """The whole sbatch command line of ``job``."""
    return [sbatch, *batch_options(job)]


def batch_directives(nodes: int, tasks_per_node: int | None = None) -> list[str]:
    """A batch script's ``#SBATCH`` lines for its node count (and tasks on each node)."""
    lines = [f"#SBATCH --nodes={nodes}"]
    return lines + ([f"#SBATCH --ntasks-per-node={tasks_per_node}"] if tasks_per_node is not None else [])


def on_every_node(command_line: str) -> str:
    """A batch script's line running ``command_line`` (shell text) once on each of the job's nodes; one that
    fails stops none of the others."""
    return f"srun --ntasks-per-node=1 --kill-on-bad-exit=0 {command_line}"


def cancel_own_named(name: str) -> str:
    """A batch script's line cancelling the user's own jobs named ``name`` (shell text); failing is no error."""
    return f'scancel --name={name} --user="$(id -un)" || true'


def node_in_json(text: str, name: str) -> NodeRecord | None:
    """The record of ``name`` in ``scontrol --json show node`` output (23.02+), else None."""
    try:
        return next((n for n in parse_nodes(text) if n.name == name), None)
    except RecordError:
        return None


def _found(records: Iterator[JobRecord]) -> Iterator[JobRecord]:
    """``records``, ended quietly where Slurm says it found none (:data:`~slurm_pool.adapters.quirks.NOTHING_FOUND`)."""
    try:
        yield from records
    except RecordError as exc:
        if not quirks.says(str(exc), quirks.NOTHING_FOUND):
            raise


class SlurmCalls:
    """What the packages ask of Slurm (reads, job and node changes), through ``runner``.

    ``scontrol``: the scontrol to run; squeue, sacct, sbatch and scancel are taken from its
    directory when it names one (``/opt/slurm/bin/scontrol``), else from ``PATH``.
    """

    runner: Runner
    scontrol: str = "scontrol"

    def __init__(self, runner: Runner, scontrol: str = "scontrol"):
        self.runner = runner
        self.scontrol = scontrol

    def program(self, name: str) -> str:
        """Slurm's command ``name``, beside :attr:`scontrol`."""
        where = os.path.dirname(self.scontrol)
        return os.path.join(where, name) if where else name

    # -- accounting (sacct) -------------------------------------------------------
    def _accounting_argv(
        self, since: str, until: str | None, all_users: bool, allocations: bool, duplicates: bool
    ) -> list[str]:
        argv = [self.program("sacct"), "--json"]
        argv += ["--allusers"] * all_users + ["--allocations"] * allocations + ["--duplicates"] * duplicates
        argv += ["--starttime", since] + (["--endtime", until] if until is not None else [])
        return argv

    def _sacct(self, argv: list[str]) -> list[JobRecord]:
        res = self.runner.run(argv)
        try:
            return parse_jobs(res.stdout, f"{' '.join(argv)} printed no readable records")
        except RecordError as exc:
            if quirks.says(str(exc), quirks.NOTHING_FOUND):
                return []
            raise

    def accounting(
        self,
        since: str,
        until: str | None = None,
        *,
        all_users: bool = False,
        allocations: bool = False,
        duplicates: bool = False,
    ) -> list[JobRecord]:
        """The jobs of the accounting between ``since`` and ``until`` (Slurm's time words: ``now``,
        ``now-7days``, ISO 8601; None: now).  ``all_users``: everyone's the caller may see;
        ``allocations``: the jobs, not their steps; ``duplicates``: every run of a requeued job.
        None matched: an empty list, on every release."""
        return self._sacct(self._accounting_argv(since, until, all_users, allocations, duplicates))

    def accounting_stream(
        self,
        since: str,
        until: str | None = None,
        *,
        all_users: bool = False,
        allocations: bool = False,
        duplicates: bool = False,
    ) -> contextlib.AbstractContextManager[Iterator[JobRecord]]:
        """:meth:`accounting` read as a stream, one job at a time (a site's history need not fit in memory)."""
        return self._stream(self._accounting_argv(since, until, all_users, allocations, duplicates))

    @contextlib.contextmanager
    def _stream(self, argv: list[str]) -> Iterator[Iterator[JobRecord]]:
        from slurm_pool.adapters.runner import stream_output
        from slurm_pool.adapters.sacct_stream import job_records

        with stream_output(self.runner, argv) as out:
            yield _found(job_records(out, f"{' '.join(argv)} printed no readable records"))

    def job_runs(self, job: str, *, every_run: bool = False) -> list[JobRecord]:
        """The accounting's records of ``job`` (Slurm's notation: ``123``, ``123_4``, ``123+1``);
        ``every_run``: each run of a requeued job, else its last.  None: an empty list."""
        argv = [self.program("sacct"), "--json", *(["--duplicates"] if every_run else []), "--jobs", str(job)]
        return self._sacct(argv)

    # -- the queue (squeue, scontrol show) -------------------------------------------
    def queue_objects(self, *, timeout: float | None = None) -> list[Mapping[str, Any]]:
        """Every job object of ``squeue --json``, none left out (CommandError: squeue failed;
        RecordError: its answer is not a clean list of jobs)."""
        res = self.runner.run([self.program("squeue"), "--json"], timeout=timeout)
        return job_objects(res.stdout, "squeue --json")

    def job(self, job_id: int | str, *, timeout: float = 10.0) -> JobRecord | None:
        """The queue's record of one job; None when Slurm cannot be asked.

        ``squeue --json`` has the comment, PreemptTime and EndTime on every release;
        ``scontrol --json show job`` exists from 23.02 on; plain text is the last resort.
        """
        jid = str(job_id)
        try:
            for argv in (
                [self.program("squeue"), "--json", "--jobs", jid],
                [self.scontrol, "--json", "show", "job", jid],
            ):
                res = self.runner.run(argv, check=False, timeout=timeout)
                if res.ok:
                    try:
                        found = [j for j in parse_jobs(res.stdout) if str(j.job_id) == jid]
                    except RecordError:
                        continue
                    if found:
                        return found[0]
            res = self.runner.run([self.scontrol, "show", "job", jid], check=False, timeout=timeout)
            return parse_job_text(res.stdout, job_id) if res.ok else None
        except OSError:
            return None

    def job_state(self, job_id: int) -> tuple[str, str]:
        """(state, reason) of a job in the queue; ``("", "")`` once it is gone (or squeue failed)."""
        argv = [self.program("squeue"), "-h", "-j", str(job_id), "-o", "%T|%r"]
        res = self.runner.run(argv, check=False)
        line = res.stdout.strip().splitlines()[0] if res.ok and res.stdout.strip() else ""
        state, _, reason = line.partition("|")
        return state.strip().upper(), reason.strip()

    def jobs_on_node(self, node: str) -> list[tuple[str, str]]:
        """(job id, state) of each job squeue lists on ``node`` (CommandError: squeue failed)."""
        argv = [self.program("squeue"), "-h", "-w", node, "-o", "%i %T"]
        out = []
        for line in self.runner.run(argv).stdout.splitlines():
            parts = line.split()
            if parts:
                out.append((parts[0], parts[1] if len(parts) > 1 else ""))
        return out

    def node_record(self, name: str, *, timeout: float = 15.0) -> NodeRecord | None:
        """One node's record, from JSON (23.02+) else plain text (22.05's scontrol has no JSON);
        None if Slurm cannot be asked."""
        res = self.runner.run([self.scontrol, "--json", "show", "node", name], check=False, timeout=timeout)
        found = node_in_json(res.stdout, name) if res.ok else None
        if found is not None:
            return found
        res = self.runner.run([self.scontrol, "show", "node", name], check=False, timeout=timeout)
        return parse_node_text(res.stdout, name) if res.ok else None

    def node_attributes(self) -> dict[str, dict[str, str]]:
        """Every node's ``NodeName=`` attributes as slurmctld holds them, by slurm.conf key
        (:mod:`~slurm_pool.adapters.nodeattrs`); a line without a usable name is reported and skipped."""
        res = self.runner.run([self.scontrol, *nodeattrs.COMMAND[1:]], check=True)
        nodes, left_out = nodeattrs.parse_node_attributes(res.stdout)
        for why in left_out:
            skipped(why)
        return nodes

    def command_version(self, *, timeout: float | None = None) -> SlurmVersion | None:
        """The release scontrol says it is (``--version``); None when it cannot say."""
        from slurm_pool.versions import SlurmVersion, VersionError

        res = self.runner.run([self.scontrol, "--version"], check=False, timeout=timeout)
        if not res.ok:
            return None
        try:
            return SlurmVersion.parse(res.stdout, what="scontrol --version", output=True)
        except VersionError:
            return None

    # -- changes ------------------------------------------------------------------
    def update_job(
        self,
        job_id: int | str,
        *,
        partition: str | None = None,
        qos: str | None = None,
        comment: str | None = None,
        admin_comment: str | None = None,
        check: bool = True,
        timeout: float | None = None,
    ) -> Result:
        """Change a job's partition, QOS, comment or admin comment ("": clear it)."""
        argv = [self.scontrol, "update", f"JobId={job_id}"]
        for key, value in (
            ("Partition", partition),
            ("QOS", qos),
            ("Comment", comment),
            ("AdminComment", admin_comment),
        ):
            if value is not None:
                argv.append(f"{key}={value}")
        return self.runner.run(argv, check=check, timeout=timeout)

    def update_node(
        self, name: str, state: str, reason: str | None = None, *, check: bool = True, timeout: float | None = None
    ) -> Result:
        """Set a node's state (``DRAIN`` with a reason, ``UNDRAIN``, ``RESUME``)."""
        argv = [self.scontrol, "update", f"NodeName={name}", f"State={state}"]
        if reason is not None:
            argv.append(f"Reason={reason}")
        return self.runner.run(argv, check=check, timeout=timeout)

    def requeue(self, job_id: int | str, *, check: bool = True, timeout: float | None = None) -> Result:
        """Requeue a job (it starts again from its batch script)."""
        return self.runner.run([self.scontrol, "requeue", str(job_id)], check=check, timeout=timeout)

    def cancel(self, job_ids: Iterable[int | str], *, check: bool = True) -> Result | None:
        """Cancel jobs (None: there were none)."""
        ids = [str(j) for j in job_ids]
        return self.runner.run([self.program("scancel"), *ids], check=check) if ids else None

    def reconfigure(self) -> Result:
        """Make slurmctld (and, from 23.11, the slurmd) read the configuration again."""
        return self.runner.run([self.scontrol, "reconfigure"])

    def submit(self, job: BatchJob, script: str) -> int:
        """Submit ``job`` running ``script``; its job id (CommandError: refused, or no job id in the answer)."""
        from slurm_pool.adapters.runner import CommandError
        from slurm_pool.text import strict_int

        res = self.runner.run(batch_argv(job, self.program("sbatch")), input=script)
        try:
            job_id = strict_int(res.stdout.strip().split(";")[0], "sbatch's job id")
        except ValueError:
            raise CommandError(res) from None
        if job_id <= 0:
            raise CommandError(res)
        return job_id
