"""The errors slurm-pool reports to its users.

Every error meant for a user derives from :class:`PoolError`, which carries
the exit status of the command it ends; ``slurm_pool.cli.main`` prints it
(one ``error:`` line per problem, no traceback) and exits with that status.
Bad input -- the spec, a plan, a trace, a command's output -- is an
:class:`InputError` (exit 2); a failed operation is exit 1.  Stdlib only.
"""

from __future__ import annotations

from typing import Iterable, NamedTuple


class Issue(NamedTuple):
    """One problem found in user input, located by a dotted path.

    A NamedTuple, not a dataclass: the node hooks import this module on their
    fast path, and dataclasses pulls in ``inspect``.
    """

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


class PoolError(Exception):
    """An error for the user: its message, and the exit status of the command it ends."""

    exit_code = 1

    def lines(self) -> list[str]:
        """What to print, one problem per line."""
        return str(self).splitlines() or [type(self).__name__]


class InputError(PoolError, ValueError):
    """Input that cannot be used (a file, an option, a command's output).  Exit status 2."""

    exit_code = 2


class SpecError(InputError):
    """The pool spec (or another input) is invalid, problem by problem.  Exit status 2."""

    def __init__(self, issues: Iterable[Issue] | str):
        if isinstance(issues, str):
            issues = [Issue("", issues)]
        self.issues = list(issues)
        super().__init__("\n".join(str(i) for i in self.issues))

    def lines(self) -> list[str]:
        return [str(i) for i in self.issues]


def fmt_path(loc: Iterable[object]) -> str:
    """Turn ``("partitions", 2, "grace_time")`` into ``partitions[2].grace_time``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out
