"""The login limiter: failed logins slow the next try down; nobody is locked out, and a correct password is
never refused for someone else's failures.

Failures are counted per (client address, user) and per user (from any address) within a sliding
window.  The next login of that pair waits before PAM is asked: nothing for the first few failures,
then twice as long after each one, up to a cap; a user guessed at from many addresses makes every
login of that user wait a little (a smaller cap).  Failures from one address under other names never
delay anyone else: behind a site's proxy every browser shares one address.  One login per pair is
checked at a time (a second one at once gets 429), so waiting cannot be skipped by sending many.
"""

from __future__ import annotations

import threading
from collections import OrderedDict, deque
from dataclasses import dataclass
from typing import Callable, Hashable

#: Seconds a failure is remembered.
WINDOW = 300.0
#: Failures of one (address, user) pair before its logins wait, the first wait, and the longest.
PAIR_FREE = 3
PAIR_FIRST = 1.0
PAIR_MAX = 15.0
#: Failures of one user (any address) before every login of that user waits, the first wait, and the longest.
USER_FREE = 10
USER_FIRST = 0.25
USER_MAX = 3.0
#: Pairs and users remembered at once (the oldest are forgotten first).
MAX_TRACKED = 10_000


def backoff(failures: int, free: int, first: float, cap: float) -> float:
    """Seconds to wait after ``failures``: 0 for the first ``free``, then ``first`` doubling, at most ``cap``."""
    if failures < free:
        return 0.0
    return min(cap, first * 2.0 ** min(failures - free, 32))


class Failures:
    """Times of failures per key within a sliding window, for at most :data:`MAX_TRACKED` keys."""

    def __init__(self, window: float = WINDOW, keep: int = 64):
        self.window = window
        self.keep = keep
        self.seen: OrderedDict[Hashable, deque[float]] = OrderedDict()

    def count(self, key: Hashable, now: float) -> int:
        times = self.seen.get(key)
        if times is None:
            return 0
        while times and times[0] <= now - self.window:
            times.popleft()
        if not times:
            del self.seen[key]
        return len(times)

    def add(self, key: Hashable, now: float) -> None:
        self.count(key, now)
        times = self.seen.setdefault(key, deque(maxlen=self.keep))
        self.seen.move_to_end(key)
        times.append(now)
        while len(self.seen) > MAX_TRACKED:
            self.seen.popitem(last=False)

    def clear(self, key: Hashable) -> None:
        self.seen.pop(key, None)


@dataclass(frozen=True)
class Ticket:
    """One login being checked: who from where, and how long it waits before PAM is asked."""

    address: str
    user: str
    delay: float


class Busy(Exception):
    """A login of the same user from the same address is being checked already."""


class LoginThrottle:
    """Delays for logins after failures; see the module's docstring."""

    def __init__(self, clock: Callable[[], float], waits: bool = True):
        """``waits`` False: failures are counted but nobody waits (a sweep of hostile inputs, not of guessing)."""
        self._clock = clock
        self._waits = waits
        self._pairs = Failures()
        self._users = Failures()
        self._checking: set[tuple[str, str]] = set()
        self._lock = threading.Lock()

    def begin(self, address: str, user: str) -> Ticket:
        """A ticket for a login of ``user`` from ``address``; :class:`Busy` while another one of the pair runs."""
        now = self._clock()
        pair = (address, user)
        with self._lock:
            if pair in self._checking:
                raise Busy(user)
            self._checking.add(pair)
            delay = max(
                backoff(self._pairs.count(pair, now), PAIR_FREE, PAIR_FIRST, PAIR_MAX),
                backoff(self._users.count(user, now), USER_FREE, USER_FIRST, USER_MAX),
            )
        return Ticket(address, user, delay if self._waits else 0.0)

    def end(self, ticket: Ticket, ok: bool | None) -> None:
        """The login is over: ``ok`` True clears the pair's failures, False counts one, None (not asked) neither."""
        now = self._clock()
        pair = (ticket.address, ticket.user)
        with self._lock:
            self._checking.discard(pair)
            if ok is True:
                self._pairs.clear(pair)
            elif ok is False:
                self._pairs.add(pair, now)
                self._users.add(ticket.user, now)

    def tracked(self) -> int:
        """Keys remembered (pairs and users)."""
        return len(self._pairs.seen) + len(self._users.seen)
