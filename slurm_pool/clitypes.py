"""Option types shared by the subcommands."""

from __future__ import annotations

import math
from typing import Any

import click


class Finite(click.FloatRange):
    """A float in a range that is also a real number: ``nan`` and ``inf`` pass FloatRange, not this."""

    name = "finite float range"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        out = super().convert(value, param, ctx)
        if not math.isfinite(out):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return out
