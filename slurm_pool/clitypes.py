"""Option types shared by the subcommands, the target Slurm release (``--slurm-version``) of ``render`` and
``mig``, and the progress bar long commands show on a terminal."""

from __future__ import annotations

import math
import sys
from typing import IO, TYPE_CHECKING, Any, Protocol

import click

from slurm_pool.jobid import JobId, JobIdError
from slurm_pool.text import strict_float, strict_int

if TYPE_CHECKING:
    from slurm_pool.versions import SlurmVersion


class Finite(click.FloatRange):
    """A float in a range that is also a real number: ``nan`` and ``inf`` pass FloatRange, not this."""

    name = "finite float range"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        out = super().convert(value, param, ctx)
        if not math.isfinite(out):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return out


class StrictInt(click.ParamType):
    """A whole number in ASCII digits (no ``1_0``, no other scripts' digits), within bounds."""

    name = "integer"

    def __init__(self, minimum: int, maximum: int | None = None):
        self.minimum, self.maximum = minimum, maximum

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        try:
            out = strict_int(value)
        except ValueError:
            self.fail(f"{value!r} is not a whole number in ASCII digits", param, ctx)
        if out < self.minimum or (self.maximum is not None and out > self.maximum):
            top = "" if self.maximum is None else f" and at most {self.maximum}"
            self.fail(f"{out} is not at least {self.minimum}{top}", param, ctx)
        return out


class PositiveSeconds(click.ParamType):
    """A finite number of seconds above zero (no NaN or infinity)."""

    name = "seconds"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        try:
            out = strict_float(value)
        except ValueError:
            self.fail(f"{value!r} is not a finite number", param, ctx)
        if out <= 0:
            self.fail(f"{value!r} is not above zero", param, ctx)
        return out


class JobIdParam(click.ParamType):
    """A job id in Slurm's notation (:class:`~slurm_pool.jobid.JobId`): ``123``, ``123_4``, ``123+1``.

    ``plain``: only ``123`` (a job's unique id); ``ranges``: also ``123_[1-3]``.
    """

    name = "job id"

    def __init__(self, *, plain: bool = False, ranges: bool = False):
        self.plain, self.ranges = plain, ranges

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> JobId:
        if isinstance(value, JobId):
            return value
        try:
            out = JobId.parse(value, "", ranges=self.ranges)
        except JobIdError as exc:
            self.fail(str(exc).removeprefix(": "), param, ctx)
        if self.plain and not out.plain:
            self.fail(f"{str(out)!r}: a job's own id is needed here (digits only), not an array task or component")
        return out


def target_version(explicit: str | None) -> SlurmVersion:
    """``--slurm-version``, else the installed Slurm's, else 22.05 with a warning."""
    from slurm_pool.adapters.slurm import installed_version
    from slurm_pool.versions import DEFAULT_VERSION, SlurmVersion

    if explicit:
        return SlurmVersion.parse(explicit)
    found = installed_version()
    if found is not None:
        return found
    click.echo(f"warning: Slurm not found; using {DEFAULT_VERSION}'s names (use --slurm-version)", err=True)
    return DEFAULT_VERSION


slurm_version_option = click.option(
    "--slurm-version", help="Target Slurm release, e.g. 22.05 or 24.11.5 (default: the installed one)."
)


class Advance(Protocol):
    """What a long step reports: how much is done, of how much (None: as before, or not known yet)."""

    def __call__(self, done: float, of: float | None = None, /) -> None: ...


def _quiet(done: float, of: float | None = None, /) -> None:
    """No bar: stderr is not a terminal, or the output is JSON."""


class Progress:
    """Rich's progress bars on stderr, one per step, each with what it does and the time left; only where stderr
    is a terminal and the command does not print JSON (``shown=False``), so logs and pipes get nothing.

    ``with Progress(not as_json) as bars: tick = bars.step("reading", total); tick(done)``.
    """

    def __init__(self, shown: bool = True, stream: IO[str] | None = None):
        self.stream = stream if stream is not None else sys.stderr
        self.shown = shown and self.stream.isatty()
        self._bars: Any = None

    def __enter__(self) -> Progress:
        if self.shown:
            from rich.console import Console
            from rich.progress import BarColumn, TaskProgressColumn, TextColumn, TimeRemainingColumn
            from rich.progress import Progress as Bars

            console = Console(file=self.stream, stderr=self.stream is sys.stderr)
            self._bars = Bars(
                TextColumn("{task.description}"),
                BarColumn(),
                TaskProgressColumn(),
                TextColumn("left"),
                TimeRemainingColumn(),
                console=console,
                transient=True,
                # the command's own lines go above the bar where stdout is the terminal too, and stay on stdout
                # (a pipe, a file) otherwise
                redirect_stdout=sys.stdout.isatty(),
            )
            self._bars.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bars is not None:
            self._bars.stop()
            self._bars = None

    @property
    def steps(self) -> list[tuple[str, float, float | None]]:
        """Each bar shown: what it does, how much is done, of how much."""
        return [] if self._bars is None else [(t.description, t.completed, t.total) for t in self._bars.tasks]

    def step(self, what: str, total: float | None = None) -> Advance:
        """A bar for ``what`` (text of the program's own, never data); the callable sets how much is done."""
        if self._bars is None:
            return _quiet
        bars, task = self._bars, self._bars.add_task(what, total=total)

        def advance(done: float, of: float | None = None, /) -> None:
            bars.update(task, completed=done, **({"total": of} if of is not None else {}))

        return advance
