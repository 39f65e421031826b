"""What every spec model shares: the strict base class and the name rules."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

NAME_RE = r"^[a-z][a-z0-9_-]{0,62}$"
USER_RE = r"^[a-z_][a-z0-9_-]{0,31}$"


class Strict(BaseModel):
    """Base model: unknown keys are errors; values are not coerced across types."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)
