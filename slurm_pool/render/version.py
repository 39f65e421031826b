"""Slurm version handling: which parameter names a given release expects."""

from __future__ import annotations

import re
from dataclasses import dataclass

from slurm_pool.errors import SpecError

MIN_SUPPORTED = (22, 5)
MAX_SUPPORTED = (25, 11)


@dataclass(frozen=True, order=True)
class SlurmVersion:
    major: int
    minor: int

    @classmethod
    def parse(cls, text: str) -> "SlurmVersion":
        """Parse ``22.05``, ``22.05.8`` or ``slurm-wlm 22.05.8``."""
        m = re.search(r"(\d{2})\.(\d{1,2})", text)
        if not m:
            raise SpecError(f"--slurm-version: {text!r} is not a Slurm version like 22.05 or 24.11")
        v = cls(int(m.group(1)), int(m.group(2)))
        if not (MIN_SUPPORTED <= (v.major, v.minor) <= MAX_SUPPORTED):
            raise SpecError(
                f"--slurm-version: {v} is not supported (supported: "
                f"{MIN_SUPPORTED[0]}.{MIN_SUPPORTED[1]:02d} to {MAX_SUPPORTED[0]}.{MAX_SUPPORTED[1]:02d})"
            )
        return v

    def __str__(self) -> str:
        return f"{self.major}.{self.minor:02d}"

    def at_least(self, major: int, minor: int) -> bool:
        return (self.major, self.minor) >= (major, minor)

    def features(self) -> dict[str, object]:
        """Parameter spellings that changed between releases."""
        return {
            # 23.02 moved preempt_send_user_signal from SlurmctldParameters
            # to PreemptParameters=send_user_signal.
            "preempt_params_line": self.at_least(23, 2),
        }
