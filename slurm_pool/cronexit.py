"""How the commands meant for cron end: a non-zero exit always says why, in one line on stderr.

cron mails (or a log keeps) what a run wrote; a run that exits 1 with its reason
only inside a JSON report on stdout, or as a traceback, leaves the operator
guessing.  :func:`for_cron` wraps such a command: any error it raises becomes
``error: <reason>`` on one terminal-safe line on stderr and its exit status;
:func:`fail` is that same line for a command that decided to fail itself.  The
report on stdout stays as it was.  ``SLURM_POOL_TRACEBACK=1`` lets an
unexpected error through with its traceback (for a bug report).
"""

from __future__ import annotations

import functools
import os
from typing import Any, Callable, NoReturn, TypeVar

import click

from slurm_pool.errors import PoolError
from slurm_pool.text import shown

F = TypeVar("F", bound=Callable[..., Any])

#: The variable that lets an unexpected error keep its traceback.
TRACEBACK_ENV = "SLURM_POOL_TRACEBACK"


def one_line(text: object) -> str:
    """``text`` as one terminal-safe line: its lines joined with ``; ``, controls escaped."""
    parts = [p.strip() for p in str(text).splitlines()]
    return shown("; ".join(p for p in parts if p)) or "failed"


def fail(reason: object, code: int = 1) -> NoReturn:
    """Print ``error: <reason>`` (one line) on stderr and exit with ``code``."""
    click.echo(f"error: {one_line(reason)}", err=True)
    raise click.exceptions.Exit(code)


def for_cron(fn: F) -> F:
    """Wrap a command's callback so that every error ends it with :func:`fail`'s line and status."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (click.exceptions.Exit, click.Abort):
            raise
        except click.ClickException as exc:
            fail(exc.format_message(), exc.exit_code)
        except PoolError as exc:
            fail("; ".join(exc.lines()), exc.exit_code)
        except Exception as exc:
            if os.environ.get(TRACEBACK_ENV) == "1":
                raise
            fail(f"unexpected {type(exc).__name__}: {exc}", 1)

    return wrapper  # type: ignore[return-value]


__all__ = ["TRACEBACK_ENV", "fail", "for_cron", "one_line"]
