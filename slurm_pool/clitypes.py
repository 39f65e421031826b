"""Option types shared by the subcommands, and the target Slurm release (``--slurm-version``) of ``render`` and ``mig``."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

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
