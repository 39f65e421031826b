"""The one interface to Slurm: its commands' output and scontrol/sacctmgr.

Reads of node and job records are narrow by default (``sinfo --Format`` and
``squeue --Format`` with only the records' fields; see
:mod:`slurm_pool.adapters.narrow`); the JSON reads stay (:meth:`SlurmClient.nodes_json`,
:meth:`SlurmClient.jobs_json`: ``sinfo --json`` on 22.05, ``scontrol show nodes
--json`` from 23.02, ``squeue --json``) for what needs a job's whole JSON, and
``sacct --json`` for finished jobs; writes use ``scontrol`` and ``sacctmgr -i``.
Everything goes through a :class:`~slurm_pool.adapters.runner.Runner`, so unit
tests use the recording fake and integration tests the real daemons.
"""

from __future__ import annotations

import re
import time
from typing import Any, Callable, ClassVar, Protocol, Sequence

from slurm_pool.adapters import narrow, queuestream
from slurm_pool.adapters.partitions import PartitionRecord, parse_partition_text
from slurm_pool.adapters.records import (
    JobRecord,
    NodeRecord,
    RecordError,
    node_command,
    parse_config_text,
    parse_jobs,
    parse_nodes,
    skipped,
)
from slurm_pool.adapters.runner import CommandError, Result, Runner, SubprocessRunner, stream_output
from slurm_pool.adapters.slurmcalls import SlurmCalls
from slurm_pool.versions import SlurmVersion


class SlurmAPI(Protocol):
    """What the rest of slurm-pool needs from Slurm."""

    def nodes(self) -> list[NodeRecord]: ...
    def jobs(self) -> list[JobRecord]: ...
    def drain(self, node: str, reason: str) -> None: ...
    def resume(self, node: str) -> None: ...


class SlurmClient(SlurmCalls):
    """Slurm through its command-line tools (and the pool's vocabulary of :class:`SlurmCalls`)."""

    def __init__(self, runner: Runner | None = None, version: SlurmVersion | None = None):
        self.runner = runner or SubprocessRunner()
        self._version = version
        #: What Slurm printed for the last read of each source ("nodes", "jobs"): (bytes, seconds of the commands).
        self.last_read: dict[str, tuple[int, float]] = {}

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

    def _narrow(self, argv: list[str]) -> str:
        """A narrow read's output; a failure names the command, not its long --Format."""
        res = self.runner.run(argv, check=False)
        if not res.ok:
            raise CommandError(Result((argv[2], "--Format"), res.returncode, res.stdout, res.stderr))
        return res.stdout

    def _timed(self, source: str, argvs: list[list[str]]) -> list[str]:
        """The outputs of a read's commands; their size and time go to :attr:`last_read`."""
        start = time.monotonic()
        outs = [self._narrow(a) if a[:1] == ["env"] else self.runner.run(a).stdout for a in argvs]
        size = sum(len(o.encode("utf-8", "surrogateescape")) for o in outs)
        self.last_read[source] = (size, time.monotonic() - start)
        return outs

    def nodes(self) -> list[NodeRecord]:
        """Every node's record, through the narrow ``sinfo --Format`` read (the JSON records' values)."""
        v, tok = self.version(), narrow.Tokens.fresh()
        (out,) = self._timed("nodes", [narrow.node_command(v, tok)])
        return narrow.parse_node_text(out, v, tok, "sinfo --Format printed no readable records")

    def nodes_json(self) -> list[NodeRecord]:
        """Every node's record, from the JSON command that has them on this Slurm."""
        (out,) = self._timed("nodes", [node_command(self.version())])
        return parse_nodes(out, f"{' '.join(node_command(self.version()))} printed no readable records")

    def node(self, name: str) -> NodeRecord:
        for n in self.nodes():
            if n.name == name:
                return n
        raise KeyError(name)

    def jobs(self) -> list[JobRecord]:
        """The queue's job records, through the narrow ``squeue --Format`` read (the JSON records' values).

        Jobs text cannot say exactly (23.02+ state flags, a reason Slurm replaced by its
        description, ...: :mod:`slurm_pool.adapters.narrow`) are read again as JSON, by id.
        ``raw`` is the text's values, not the JSON: use :meth:`jobs_json` for that.
        """
        v, tok = self.version(), narrow.Tokens.fresh()
        outs = self._timed("jobs", narrow.job_commands(v, tok))
        text = narrow.parse_job_text(outs, v, tok, "squeue --Format printed no readable records")
        if not text.fallback_ids:
            return text.records
        argv = narrow.fallback_command(text.fallback_ids)
        if len(text.fallback_ids) > narrow.FALLBACK_LIST_MAX:  # the whole queue: streamed, only those jobs kept
            with stream_output(self.runner, argv) as out:
                what = f"{' '.join(argv)} printed no readable records"
                return narrow.merge(text, queuestream.wanted_records(out, text.fallback_ids, what))
        return narrow.merge(text, self._read(argv, parse_jobs))

    def jobs_json(self) -> list[JobRecord]:
        """The queue's job records from ``squeue --json`` (``raw`` is each job's JSON)."""
        (out,) = self._timed("jobs", [["squeue", "--json"]])
        return parse_jobs(out, "squeue --json printed no readable records")

    def accounting_jobs(self, *args: str) -> list[JobRecord]:
        return self._read(["sacct", "--json", *args], parse_jobs)

    # -- node control ----------------------------------------------------
    def partitions(self) -> tuple[list[PartitionRecord], list[str]]:
        """Every partition (``scontrol show partition -o``), and the lines skipped, each said why."""
        return parse_partition_text(self.runner.run(["scontrol", "show", "partition", "-o"]).stdout)

    def drain(self, node: str, reason: str) -> None:
        self.runner.run(["scontrol", "update", f"NodeName={node}", "State=DRAIN", f"Reason={reason}"])

    def resume(self, node: str) -> None:
        self.runner.run(["scontrol", "update", f"NodeName={node}", "State=RESUME"])

    # -- accounting ------------------------------------------------------
    def sacctmgr_show(self, entity: str, fields: Sequence[str], where: Sequence[str] = ()) -> list[dict[str, str]]:
        """Rows of ``sacctmgr show`` as dicts keyed by the requested field names.

        A row with more fields than asked for (a "|" in a name: an account ``projb|zzz``) cannot be
        split for sure: it is reported and skipped (:func:`~slurm_pool.adapters.records.skipped`),
        never cut to the fields asked for.
        """
        argv = ["sacctmgr", "-n", "-P", "show", entity, *where, "format=" + ",".join(fields)]
        res = self.runner.run(argv)
        out = []
        for row in parsable_rows(res.stdout, fields, argv):
            values = split_parsable(row, fields)
            if len(values) != len(fields):
                skipped(f"sacctmgr show {entity}: {row[:200]!r} has {len(values)} fields, not {len(fields)}")
                continue
            out.append(dict(zip(fields, values, strict=True)))
        return out

    def sacctmgr(self, *args: str) -> None:
        """One non-interactive sacctmgr change."""
        self.runner.run(["sacctmgr", "-i", *args])

    def qos_priority_raw(self) -> bool:
        """Whether slurmctld takes a QOS's Priority as its factor unnormalised (``PriorityFlags=NO_NORMAL_QOS``).

        False also where ``scontrol show config`` cannot be read: the normalised
        case is the one in which a QOS's Priority moves other jobs' factors.
        """
        res = self.runner.run(["scontrol", "show", "config"], check=False)
        if not res.ok:
            return False
        flags = parse_config_text(res.stdout).get("PriorityFlags", "")
        return "NO_NORMAL_QOS" in {f.strip().upper() for f in flags.split(",")}

    # -- the console's calls (slurm_pool.web) -------------------------------------------------
    # Its users' actions run through a runner of the user who asked (their uid, their token), so
    # Slurm decides what they may do; these return the command's Result and never raise for it.

    #: The console's job actions: Slurm's command for each, after which comes the job id.
    CONSOLE_ACTIONS: ClassVar[dict[str, tuple[str, ...]]] = {
        "cancel": ("scancel",),
        "hold": ("scontrol", "hold"),
        "release": ("scontrol", "release"),
        "requeue": ("scontrol", "requeue"),
    }
    #: Actions whose command takes a range of array tasks (``scancel 4_[1-3]``).
    RANGED_ACTIONS: ClassVar[frozenset[str]] = frozenset({"cancel"})

    def console_action(self, action: str, job: str, timeout: float | None = None) -> Result:
        """``action`` (a key of :data:`CONSOLE_ACTIONS`) on ``job`` in Slurm's notation (``4_2``: task 2 of
        array 4).  scancel may print "error:" and still exit 0 on some releases: that result says exit 1."""
        res = self.runner.run([*self.CONSOLE_ACTIONS[action], job], check=False, timeout=timeout)
        if res.ok and res.argv[:1] == ("scancel",) and "error:" in res.stderr:
            return Result(res.argv, 1, res.stdout, res.stderr)
        return res

    def submit_batch(self, options: Sequence[str], script: str, timeout: float | None = None) -> Result:
        """``sbatch --parsable OPTIONS`` with ``script`` on stdin (see :meth:`submitted_id`)."""
        opts = list(options) if "--parsable" in options else ["--parsable", *options]
        return self.runner.run(["sbatch", *opts], check=False, input=script, timeout=timeout)

    @staticmethod
    def submitted_id(stdout: str) -> int | None:
        """The job id ``sbatch --parsable`` printed (its last line: the id, then ``;cluster`` on a federation)."""
        lines = [ln for ln in stdout.strip().splitlines() if ln.strip()]
        m = re.fullmatch(r"([0-9]{1,20})(?:;[A-Za-z0-9_.-]+)?", lines[-1].strip()) if lines else None
        return int(m.group(1)) if m else None

    @staticmethod
    def submit_option(options: Sequence[str], name: str) -> str | None:
        """The value of sbatch option ``--NAME=VALUE`` among ``options`` (the first), None if absent."""
        return next((o.split("=", 1)[1] for o in options if o.startswith(f"--{name}=")), None)

    def runs_since(self, since: float) -> list[JobRecord]:
        """Every user's allocations from ``since`` (seconds since the epoch) until now, requeued runs each."""
        start = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(since))
        return self.accounting(start, "now", all_users=True, allocations=True, duplicates=True)

    def account_coordinators(self) -> list[tuple[str, str]]:
        """``(account, coordinators)`` of every account (``sacctmgr show account withcoord``), as Slurm
        prints them (coordinators comma-separated)."""
        rows = self.sacctmgr_show("account", ["Coordinators", "Account"], ["withcoord"])
        return [(row.get("Account", ""), row.get("Coordinators", "")) for row in rows]

    # -- doctor, diff, guarantees and spank build --------------------------
    def config(self) -> dict[str, str]:
        """slurmctld's settings (``scontrol show config``); CommandError when it cannot be asked."""
        return parse_config_text(self.runner.run(["scontrol", "show", "config"]).stdout)

    def partitions_text(self) -> str:
        """Every partition as ``scontrol show partition -o`` prints it, one line each (:meth:`partitions` parses it)."""
        return self.runner.run(["scontrol", "show", "partition", "-o"]).stdout

    def submit_help(self) -> Result:
        """``sbatch --help``: its options show which SPANK plugins loaded; a failure is in the Result."""
        return self.runner.run(["sbatch", "--help"], check=False)

    @staticmethod
    def install_prefix() -> str | None:
        """The prefix the Slurm commands on PATH are installed under (``PREFIX/bin/scontrol``); None off PATH."""
        import shutil
        from pathlib import Path

        found = shutil.which("scontrol")
        return str(Path(found).resolve().parent.parent) if found else None


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


def read_records(read: Callable[[], list[Any]], what: str, kind: str) -> list[Any]:
    """The records ``read`` returns (a :class:`~slurm_pool.adapters.slurm.SlurmClient` read).

    A command that fails raises :class:`~slurm_pool.errors.PoolError` (exit 1);
    one whose output cannot be read raises
    :class:`~slurm_pool.adapters.records.RecordError` (exit 2) saying so, e.g.
    ``squeue --Format printed no readable job records: ...``.  Both
    messages show Slurm's words, never pass them to the terminal raw.
    """
    from slurm_pool.adapters.records import RecordError
    from slurm_pool.adapters.runner import CommandError
    from slurm_pool.errors import PoolError
    from slurm_pool.text import shown

    try:
        return read()
    except CommandError as exc:
        raise PoolError(shown(exc)) from None
    except OSError as exc:  # could not be run at all (not executable, say)
        raise PoolError(shown(f"{what}: {exc}")) from None
    except RecordError as exc:
        detail = str(exc).split(" printed no readable records", 1)[-1]  # ": why", or " (%x): why"
        raise RecordError(shown(f"{what} printed no readable {kind}{detail}")) from None
