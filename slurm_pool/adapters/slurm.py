"""The one interface to Slurm: its commands' JSON output and scontrol/sacctmgr.

Reads use node records (``sinfo --json`` on 22.05, ``scontrol show nodes
--json`` from 23.02; see :mod:`slurm_pool.adapters.records`), ``squeue
--json`` and ``sacct --json``; writes use ``scontrol`` and ``sacctmgr -i``.
Everything goes through a :class:`~slurm_pool.adapters.runner.Runner`, so unit
tests use the recording fake and integration tests the real daemons.
"""

from __future__ import annotations

from typing import Any, Protocol, Sequence

from slurm_pool.adapters.records import JobRecord, NodeRecord, RecordError, node_command, parse_jobs, parse_nodes
from slurm_pool.adapters.runner import Runner, SubprocessRunner
from slurm_pool.versions import SlurmVersion


class SlurmAPI(Protocol):
    """What the rest of slurm-pool needs from Slurm."""

    def nodes(self) -> list[NodeRecord]: ...
    def jobs(self) -> list[JobRecord]: ...
    def drain(self, node: str, reason: str) -> None: ...
    def resume(self, node: str) -> None: ...


class SlurmClient:
    """Slurm through its command-line tools."""

    def __init__(self, runner: Runner | None = None, version: SlurmVersion | None = None):
        self.runner = runner or SubprocessRunner()
        self._version = version

    # -- reads ----------------------------------------------------------
    def version(self) -> SlurmVersion:
        """The Slurm these commands are (``sinfo --version``), asked once per client."""
        if self._version is None:
            self._version = SlurmVersion.parse(
                self.runner.run(["sinfo", "--version"]).stdout, what="sinfo --version", output=True
            )
        return self._version

    def _read(self, argv: Sequence[str], parse: Any) -> Any:
        res = self.runner.run(list(argv))
        # It ran, but what it printed is not records (or carries Slurm's errors): a RecordError (exit 2)
        # that says so, not a failed command.
        return parse(res.stdout, f"{' '.join(argv)} printed no readable records")

    def nodes(self) -> list[NodeRecord]:
        """Every node's record, from the command that has them on this Slurm."""
        return self._read(node_command(self.version()), parse_nodes)

    def node(self, name: str) -> NodeRecord:
        for n in self.nodes():
            if n.name == name:
                return n
        raise KeyError(name)

    def jobs(self) -> list[JobRecord]:
        return self._read(["squeue", "--json"], parse_jobs)

    def accounting_jobs(self, *args: str) -> list[JobRecord]:
        return self._read(["sacct", "--json", *args], parse_jobs)

    # -- node control ----------------------------------------------------
    def drain(self, node: str, reason: str) -> None:
        self.runner.run(["scontrol", "update", f"NodeName={node}", "State=DRAIN", f"Reason={reason}"])

    def resume(self, node: str) -> None:
        self.runner.run(["scontrol", "update", f"NodeName={node}", "State=RESUME"])

    def requeue(self, job_id: int | str) -> None:
        self.runner.run(["scontrol", "requeue", str(job_id)])

    # -- accounting ------------------------------------------------------
    def sacctmgr_show(self, entity: str, fields: Sequence[str], where: Sequence[str] = ()) -> list[dict[str, str]]:
        """Rows of ``sacctmgr show`` as dicts keyed by the requested field names."""
        argv = ["sacctmgr", "-n", "-P", "show", entity, *where, "format=" + ",".join(fields)]
        res = self.runner.run(argv)
        n = len(fields)
        return [
            dict(zip(fields, split_parsable(row, fields)[:n], strict=True))
            for row in parsable_rows(res.stdout, fields, argv)
        ]

    def sacctmgr(self, *args: str) -> None:
        """One non-interactive sacctmgr change."""
        self.runner.run(["sacctmgr", "-i", *args])


#: sacctmgr fields that hold free text, where a "|" of -P's separator may sit.
FREE_TEXT_FIELDS = ("Description", "Descr", "Org", "Organization")


def parsable_rows(text: str, fields: Sequence[str], argv: Sequence[str] = ("sacctmgr",)) -> list[str]:
    """The rows of ``sacctmgr -n -P`` output, one per record.

    A line break a human put in a description (``sacctmgr modify account ... set
    description=...``) is printed raw, so a record may span lines: a line with
    fewer "|" than the fields need continues onto the next.  That is only
    unambiguous when the last field is not free text, so callers put a key last
    (``Descr,Account``); a break that cannot be placed, or a record still short
    at the end of the output, is a :class:`RecordError`, never a row of blanks.
    """
    rows: list[str] = []
    pending: str | None = None
    for line in text.split("\n"):
        if pending is None and not line.strip():
            continue
        row = line if pending is None else f"{pending}\n{line}"
        if row.count("|") + 1 < len(fields):
            pending = row
            continue
        pending = None
        if "\n" in row and fields[-1] in FREE_TEXT_FIELDS:
            # The break may end the last field or start the next record: it cannot be told.
            raise RecordError(f"{' '.join(argv)} printed a line break that cannot be placed: {row!r}")
        rows.append(row)
    if pending is not None and pending.strip():
        raise RecordError(f"{' '.join(argv)} printed a record with fewer fields than {','.join(fields)}: {pending!r}")
    return rows


def split_parsable(line: str, fields: Sequence[str]) -> list[str]:
    """A ``sacctmgr -P`` line split on "|"; surplus pieces go back into the one free-text field."""
    values = line.split("|")
    surplus = len(values) - len(fields)
    free = [i for i, f in enumerate(fields) if f in FREE_TEXT_FIELDS]
    if surplus > 0 and len(free) == 1:
        i = free[0]
        values = [*values[:i], "|".join(values[i : i + surplus + 1]), *values[i + surplus + 1 :]]
    return values


def installed_version(runner: Runner | None = None) -> SlurmVersion | None:
    """The Slurm on this host (its commands, else slurmctld), or None if there is none."""
    runner = runner or SubprocessRunner()
    for argv in (["sinfo", "--version"], ["slurmctld", "-V"]):
        res = runner.run(argv, check=False, timeout=20)
        if res.ok:
            return SlurmVersion.parse(res.stdout, what=" ".join(argv), output=True)
    return None
