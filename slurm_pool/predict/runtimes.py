"""How long a job will run, from its user's own recent jobs (pure).

Tsafrir, Etsion and Feitelson ("Backfilling using system-generated
predictions rather than user runtime estimates", IEEE TPDS 2007) predict a
job's runtime as the mean of the same user's last two jobs, capped by the job's
time limit; it beats the time limit users give, which they over-ask.  Here a
job is compared first with the user's jobs in the same partition asking the
same GPUs, then with any of the user's jobs; without history the time limit
stands, and without a limit either, :data:`DEFAULT` seconds.
"""

from __future__ import annotations

from collections import defaultdict, deque
from dataclasses import dataclass
from typing import Iterable

#: Seconds assumed for a job with no history and no time limit.
DEFAULT = 3600.0
#: How many of a user's most recent comparable runs the estimate averages.
KEEP = 2
#: How a run that ended counts: states whose run time says how long the work took.
ENDED = frozenset({"COMPLETED", "FAILED", "TIMEOUT", "OUT_OF_MEMORY"})


@dataclass(frozen=True, slots=True)
class Finished:
    """One run that ended: who, where, how many GPUs, when it ended and how long it ran."""

    user: str
    partition: str
    gpus: int
    end: float
    seconds: float


@dataclass(frozen=True, slots=True)
class Estimate:
    """A runtime in seconds and what it rests on (``history``, ``user history``, ``time limit``, ``default``)."""

    seconds: float
    basis: str


class Runtimes:
    """Each user's last :data:`KEEP` runs, per (partition, GPUs) and over all."""

    def __init__(self, finished: Iterable[Finished]):
        self._same: dict[tuple[str, str, int], deque[float]] = defaultdict(lambda: deque(maxlen=KEEP))
        self._user: dict[str, deque[float]] = defaultdict(lambda: deque(maxlen=KEEP))
        for f in sorted(finished, key=lambda f: f.end):
            if f.seconds > 0:
                self._same[(f.user, f.partition, f.gpus)].append(f.seconds)
                self._user[f.user].append(f.seconds)

    def estimate(self, user: str, partition: str, gpus: int, limit: float | None) -> Estimate:
        """The job's expected runtime: the mean of the user's last comparable runs, capped by ``limit``."""
        for runs, basis in (
            (self._same.get((user, partition, gpus)), "history"),
            (self._user.get(user), "user history"),
        ):
            if runs:
                mean = sum(runs) / len(runs)
                return Estimate(min(mean, limit) if limit is not None else mean, basis)
        if limit is not None:
            return Estimate(limit, "time limit")
        return Estimate(DEFAULT, "default")


def remaining(expected: float, elapsed: float, limit: float | None) -> float:
    """Seconds a running job has left: its expected runtime less what it ran; once past it, as long
    again as it has run (a job's age is the best guess of its future), and never past its limit."""
    left = expected - elapsed if elapsed < expected else max(elapsed, 1.0)
    if limit is not None:
        left = min(left, limit - elapsed)
    return max(left, 1.0)
