"""The exporter's finished runs, read whole once and then only what ended since (predict.live.RecentRuns)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from slurm_pool.predict.live import RecentRuns
from slurm_pool.predict.runtimes import Finished

DAY = 86400.0
T0 = 1_796_000_000.0


def rec(user: str, end: float, seconds: float, state: str = "COMPLETED") -> SimpleNamespace:
    return SimpleNamespace(
        user=user, partition="shared", gpus=1, state=SimpleNamespace(base=state), start_time=end - seconds,
        end_time=end,
    )  # fmt: skip


class Sacct:
    """Answers each read with the records that ended in its window, and keeps what it was asked."""

    def __init__(self, records: list[SimpleNamespace], clock: list[float]):
        self.records, self.clock, self.asked = records, clock, []

    def accounting(self, since: str, until: str, *, all_users: bool) -> list[SimpleNamespace]:
        self.asked.append(since)
        unit = {"days": DAY, "minutes": 60.0}
        count, word = since.removeprefix("now-").rstrip("abcdefghijklmnopqrstuvwxyz"), since.lstrip("now-0123456789")
        start = self.clock[0] - int(count) * unit[word]
        return [r for r in self.records if r.end_time >= start and r.start_time <= self.clock[0]]


@pytest.mark.parametrize(
    ("later", "asked"),
    [
        (600.0, "now-15minutes"),  # 600 s since the last read, and 300 s more
        (3 * DAY, "now-4325minutes"),
        (14 * DAY, "now-14days"),  # the whole window has passed: read it whole again
    ],
)
def test_later_reads_ask_for_what_ended_since_and_keep_the_window(later, asked):
    clock = [T0]
    records = [rec("old", T0 - 13.9 * DAY, 100.0), rec("a", T0 - 100.0, 50.0), rec("cancelled", T0, 9.0, "CANCELLED")]
    sacct = Sacct(records, clock)
    recent = RecentRuns(sacct, days=14, clock=lambda: clock[0])  # type: ignore[arg-type]
    assert recent() == [Finished("old", "shared", 1, T0 - 13.9 * DAY, 100.0), Finished("a", "shared", 1, T0 - 100, 50)]
    records.append(rec("b", T0 + later - 10.0, 30.0))
    clock[0] = T0 + later
    got = recent()
    assert sacct.asked == ["now-14days", asked]
    whole = RecentRuns(Sacct(records, clock), days=14, clock=lambda: clock[0])()  # type: ignore[arg-type]
    assert got == whole
    assert ("old" in {f.user for f in got}) == (later < 0.1 * DAY) and "b" in {f.user for f in got}
