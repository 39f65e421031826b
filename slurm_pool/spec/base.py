"""What every spec model shares: the strict base class and the types of the words it holds.

Every string of a spec ends up in a file (slurm.conf, gres.conf, sacctmgr's
arguments, job_submit.lua, Kubernetes objects), so :class:`Strict` refuses a
control character in any string of any model, dict keys and list items
included, and the word types below match their rule of :mod:`slurm_pool.text`
in full (a trailing newline is not a match).
"""

from __future__ import annotations

import shlex
from typing import Annotated, Any, Iterator

from pydantic import AfterValidator, BaseModel, ConfigDict, field_validator

from slurm_pool import text
from slurm_pool.spec.ranges import check_time


def word(rule: str) -> AfterValidator:
    """A validator: the string matches `rule` of :mod:`slurm_pool.text` in full."""

    def check(v: str) -> str:
        if not text.matches(rule, v):
            raise ValueError(f"{v!r} does not match {text.SHAPES[rule]}")
        return v

    return AfterValidator(check)


def _plain_path(v: str) -> str:
    if not text.matches("path", v):
        raise ValueError(f"{v!r} does not match {text.SHAPES['path']}")
    if any(part in (".", "..") for part in v.split("/")):
        raise ValueError(f"{v!r} must be an absolute path without '.' or '..' components")
    return v


def _command(v: str) -> str:
    """A command line the nodes run: it must split into words as a shell would."""
    try:
        words = shlex.split(v)
    except ValueError as exc:
        raise ValueError(f"{v!r} is not a command line ({exc})") from None
    if not words:
        raise ValueError("names no command")
    return v


Name = Annotated[str, word("name")]
User = Annotated[str, word("user")]
Host = Annotated[str, word("host")]
Feature = Annotated[str, word("feature")]
#: A Slurm time limit, in Slurm's range (:func:`slurm_pool.spec.ranges.time_seconds`).
SlurmTime = Annotated[str, word("time"), AfterValidator(check_time)]
MigProfile = Annotated[str, word("mig-profile")]
K8sLabel = Annotated[str, word("k8s-label")]
K8sName = Annotated[str, word("k8s-name")]
PlainPath = Annotated[str, AfterValidator(_plain_path)]
CommandLine = Annotated[str, AfterValidator(_command)]


class NestedValueError(ValueError):
    """A bad value inside a field's list or dict: ``loc`` continues the field's path to it."""

    def __init__(self, loc: tuple[str | int, ...], message: str):
        super().__init__(message)
        self.loc = loc


def _strings(value: Any, loc: tuple[str | int, ...] = ()) -> Iterator[tuple[tuple[str | int, ...], str]]:
    """Every string in a field's value (list items and dict keys too), with its place in the value."""
    if isinstance(value, str):
        yield loc, value
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            yield from _strings(item, (*loc, i))
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _strings(key, loc)  # a bad key is reported at its dict
            yield from _strings(item, (*loc, str(key)))


class Strict(BaseModel):
    """Base model: unknown keys are errors; values are not coerced across types; no NaN or infinity;
    no control character in any string."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, allow_inf_nan=False)

    @field_validator("*", mode="after")
    @classmethod
    def _no_control_characters(cls, v: Any) -> Any:
        for loc, s in _strings(v):
            bad = text.control_chars(s)
            if bad:
                raise NestedValueError(loc, f"{s!r} holds control characters ({', '.join(dict.fromkeys(bad))})")
        return v
