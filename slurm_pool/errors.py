"""Errors that carry a path into the spec and a user-facing message."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable


@dataclass(frozen=True)
class Issue:
    """One problem found in user input, located by a dotted path."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


class SpecError(ValueError):
    """The pool spec (or another input) is invalid.  Exit status 2."""

    exit_code = 2

    def __init__(self, issues: Iterable[Issue] | str):
        if isinstance(issues, str):
            issues = [Issue("", issues)]
        self.issues = list(issues)
        super().__init__("\n".join(str(i) for i in self.issues))


def fmt_path(loc: Iterable[object]) -> str:
    """Turn ``("partitions", 2, "grace_time")`` into ``partitions[2].grace_time``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out
