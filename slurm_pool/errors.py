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


# -- one kind of failure, three voices ----------------------------------------------------------
class Kind(NamedTuple):
    """A kind of failure and what it is to each of the project's three voices: the service's HTTP status,
    the CLI's exit status and the SDK's exception (a class of :mod:`slurm_pool.client`)."""

    name: str
    http: int
    exit_code: int
    sdk: str


#: Every kind, mapped once.  A request that is bad input ends a command with exit status 2, as any bad input
#: does; anything else is a failed operation (1).  HTTP 0: the service could not be reached at all.
KINDS: tuple[Kind, ...] = (
    Kind("bad_request", 400, 2, "BadRequest"),
    Kind("unauthenticated", 401, 1, "Unauthenticated"),
    Kind("forbidden", 403, 1, "Forbidden"),
    Kind("not_found", 404, 1, "NotFound"),
    Kind("conflict", 409, 1, "Conflict"),
    Kind("too_large", 413, 2, "TooLarge"),
    Kind("invalid", 422, 2, "Invalid"),
    Kind("throttled", 429, 1, "Throttled"),
    Kind("internal", 500, 1, "ServerError"),
    Kind("slurm_failed", 502, 1, "SlurmFailed"),
    Kind("unavailable", 503, 1, "Unavailable"),
    Kind("timed_out", 504, 1, "TimedOut"),
    Kind("unreachable", 0, 1, "Unreachable"),
)
_BY_STATUS = {k.http: k for k in KINDS}


def kind_of(status: int) -> Kind | None:
    """The kind of HTTP status ``status`` (None: a status no part of slurm-pool gives)."""
    return _BY_STATUS.get(status)


class ServiceError(PoolError):
    """A refusal or failure with an HTTP status, a message and maybe the field it is about: what the service
    answers (a Problem), what the SDK raises, and a command's exit status by its :class:`Kind`."""

    def __init__(self, status: int, message: str, field: str | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.field = field

    @property
    def kind(self) -> Kind | None:
        return kind_of(self.status)

    @property
    def exit_code(self) -> int:  # type: ignore[override]
        kind = self.kind
        return kind.exit_code if kind else 1
