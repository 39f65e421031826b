"""What Slurm's commands print differently between releases, as data with its source.

Each :class:`Quirk` is matched here and nowhere else: callers ask the
:class:`~slurm_pool.adapters.slurmcalls.SlurmCalls` methods, which read a quirk's answer
as what it means (an empty accounting), never by the message's text.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Quirk:
    """A release's way of saying something other releases say differently."""

    name: str
    before: tuple[int, int, int]  # the first release without it
    text: str  # what the command prints
    means: str
    source: str


#: 22.05's ``sacct --json`` for a query that matches no job: an ``errors`` entry, not an empty ``jobs`` list.
NOTHING_FOUND = Quirk(
    "sacct_json_nothing_found",
    (23, 2, 0),
    "Nothing found",
    "no job matched: an empty accounting, not a failure",
    "22.05.8 src/plugins/openapi/dbv0.0.38 (openapi_dbv0_0_38.so, which sacct --json dumps through) says "
    "'Nothing found' of an empty result; 23.02 dumps through data_parser (versions fact json_data_parser), "
    "which prints an empty 'jobs' list; measured on 22.05.8 (a quiet day, a job slurmdbd has not yet)",
)

QUIRKS: tuple[Quirk, ...] = (NOTHING_FOUND,)


def says(message: str, quirk: Quirk) -> bool:
    """Whether a reader's error ``message`` (a :class:`~slurm_pool.adapters.records.RecordError`) is ``quirk``."""
    return message.endswith(quirk.text)
