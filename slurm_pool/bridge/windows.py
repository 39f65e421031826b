"""Off-peak windows and the times the bridge keeps in annotations (pure)."""

from __future__ import annotations

from datetime import datetime, timezone

from slurm_pool.spec.bridge import DAYS, Bridge, OffPeakWindow


def _minutes(clock: str) -> int:
    h, m = clock.split(":")
    return int(h) * 60 + int(m)


def in_window(window: OffPeakWindow, local: datetime) -> bool:
    """Whether ``local`` (wall-clock time in the bridge's zone) lies in ``window``."""
    start, end = _minutes(window.start), _minutes(window.end)
    minute = local.hour * 60 + local.minute
    today, yesterday = DAYS[local.weekday()], DAYS[(local.weekday() - 1) % 7]
    if start < end:
        return today in window.days and start <= minute < end
    return (today in window.days and minute >= start) or (yesterday in window.days and minute < end)


def local_time(config: Bridge, now: datetime) -> datetime:
    """``now`` in the bridge's time zone (naive times are taken as already local)."""
    if now.tzinfo is None:
        return now
    if config.timezone:
        from zoneinfo import ZoneInfo

        return now.astimezone(ZoneInfo(config.timezone))
    return now.astimezone()


def off_peak(config: Bridge, now: datetime) -> bool:
    """Whether lending is allowed at ``now``: inside a window, or at any time when ``off_peak`` is empty."""
    if not config.off_peak:
        return True
    local = local_time(config, now)
    return any(in_window(w, local) for w in config.off_peak)


def parse_time(value: str | None) -> datetime | None:
    """An ISO 8601 time from an annotation; naive times are taken as UTC."""
    if not value:
        return None
    try:
        t = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return t if t.tzinfo else t.replace(tzinfo=timezone.utc)
