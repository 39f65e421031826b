"""The login limiter (slurm_pool.web.throttle, issue 49): failures slow the same user from the same address
down, never lock anyone out, and never delay or refuse another user's correct password."""

from __future__ import annotations

import pytest

from slurm_pool.spec.console import Console
from slurm_pool.web import identity, throttle
from slurm_pool.web.identity import Authenticator, AuthError
from slurm_pool.web.throttle import LoginThrottle, backoff
from tests.unit.test_web_identity import Clock

NOW = 1_800_000_000.0
PASSWORDS = {"alice": "alice-pw", "bob": "bob-pw", "carol": "carol-pw"}


def make(clock: Clock) -> Authenticator:
    return Authenticator(
        b"k" * 32, Console(session_seconds=600), check_password=lambda u, p: PASSWORDS.get(u) == p,
        user_exists=lambda u: u in PASSWORDS, clock=clock, sleep=clock.sleep,
    )  # fmt: skip


def attempt(auth: Authenticator, clock: Clock, user: str, password: str, ip: str) -> tuple[int, float]:
    """The login's status (200 or the AuthError's) and how long it waited."""
    before = len(clock.slept)
    try:
        auth.login(user, password, ip)
        status = 200
    except AuthError as e:
        status = e.status
    return status, sum(clock.slept[before:])


@pytest.mark.parametrize(
    "failures,free,first,cap,wait",
    [(0, 3, 1.0, 15.0, 0.0), (2, 3, 1.0, 15.0, 0.0), (3, 3, 1.0, 15.0, 1.0), (4, 3, 1.0, 15.0, 2.0),
     (6, 3, 1.0, 15.0, 8.0), (7, 3, 1.0, 15.0, 15.0), (10**6, 3, 1.0, 15.0, 15.0)],
)  # fmt: skip
def test_backoff_doubles_up_to_its_cap(failures: int, free: int, first: float, cap: float, wait: float) -> None:
    assert backoff(failures, free, first, cap) == wait


# Each case: failed logins (user, address) first, then one more login; its status and the most it may wait.
CASES = [
    ("25 failures from one address, mixed names; another user's correct password",
     [(f"user{i % 7}", "192.0.2.1") for i in range(25)], ("bob", "bob-pw", "192.0.2.1"), 200, 0.0),
    ("20 failures from one address as others; carol from there, right away",
     [(f"x{i}", "192.0.2.1") for i in range(20)], ("carol", "carol-pw", "192.0.2.1"), 200, 0.0),
    ("five wrong passwords for alice from elsewhere; alice's correct password, slowed at most",
     [("alice", f"198.51.100.{i}") for i in range(5)], ("alice", "alice-pw", "192.0.2.9"), 200, 0.0),
    ("30 wrong passwords for alice from many addresses; alice still gets in, a little later",
     [("alice", f"198.51.100.{i}") for i in range(30)], ("alice", "alice-pw", "192.0.2.9"), 200, throttle.USER_MAX),
    ("six failures of one pair; that pair's correct password waits, and gets in",
     [("alice", "192.0.2.1")] * 6, ("alice", "alice-pw", "192.0.2.1"), 200, throttle.PAIR_MAX),
    ("six failures of one pair; its next wrong password is still only a 401",
     [("alice", "192.0.2.1")] * 6, ("alice", "nope", "192.0.2.1"), 401, throttle.PAIR_MAX),
]  # fmt: skip


@pytest.mark.parametrize("what,failures,last,status,most", CASES, ids=[c[0][:40] for c in CASES])
def test_nobody_is_locked_out(what: str, failures: list, last: tuple, status: int, most: float) -> None:
    clock = Clock()
    auth = make(clock)
    for user, ip in failures:
        assert attempt(auth, clock, user, "wrong", ip)[0] == 401
    got, waited = attempt(auth, clock, *last)
    assert got == status, what
    assert waited <= most, (what, waited)


def test_a_pair_waits_longer_after_each_failure_and_resets_on_success() -> None:
    clock = Clock()
    auth = make(clock)
    waits = [attempt(auth, clock, "alice", "wrong", "192.0.2.1")[1] for _ in range(7)]
    assert waits == [0, 0, 0, 1, 2, 4, 8]
    assert attempt(auth, clock, "alice", "alice-pw", "192.0.2.1") == (200, 15.0)
    assert attempt(auth, clock, "alice", "wrong", "192.0.2.1")[1] == 0.0  # the pair's failures are forgotten
    clock.t += throttle.WINDOW + 1
    assert attempt(auth, clock, "alice", "wrong", "192.0.2.2")[1] == 0.0


def test_one_check_per_pair_at_a_time() -> None:
    auth = make(Clock())
    ticket = auth.begin_login("alice", "192.0.2.1")
    with pytest.raises(AuthError) as err:
        auth.begin_login("alice", "192.0.2.1")
    assert err.value.status == 429
    assert auth.begin_login("alice", "192.0.2.2").delay == 0.0  # another address is another pair
    assert auth.begin_login("bob", "192.0.2.1").delay == 0.0
    assert auth.finish_login(ticket, "alice-pw").user == "alice"  # ends the ticket
    auth.throttle.end(auth.begin_login("alice", "192.0.2.1"), None)  # a client that left: not counted
    assert auth.begin_login("alice", "192.0.2.1").delay == 0.0


def test_limiter_memory_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(throttle, "MAX_TRACKED", 10)
    t = LoginThrottle(lambda: NOW)
    for i in range(50):
        t.end(t.begin(f"198.51.100.{i}", f"user{i}"), False)
    assert t.tracked() <= 20


@pytest.mark.parametrize("logins,kept", [(3, 3), (identity.MAX_USER_SESSIONS, identity.MAX_USER_SESSIONS), (40, 16)])
def test_sessions_per_user_are_bounded(logins: int, kept: int) -> None:
    clock = Clock()
    auth = make(clock)
    sessions = [auth.login("alice", "alice-pw", "192.0.2.1") for _ in range(logins)]
    bob = auth.login("bob", "bob-pw", "192.0.2.1")

    def alive(s: identity.Caller) -> bool:
        try:
            return (
                auth.caller({identity.CSRF_HEADER: s.csrf or ""}, {identity.SESSION_COOKIE: s.session_id or ""}, None)
                == s
            )
        except AuthError:
            return False

    assert [alive(s) for s in sessions] == [False] * (logins - kept) + [True] * kept  # the oldest went
    assert alive(bob)  # alice's churn never ends another user's session


@pytest.mark.parametrize("waits,delays", [(True, [0.0, 0.0, 0.0, 1.0, 2.0]), (False, [0.0] * 5)])
def test_a_throttle_that_counts_without_waiting(waits: bool, delays: list[float]) -> None:
    t = LoginThrottle(lambda: NOW, waits=waits)
    got = []
    for _ in delays:
        ticket = t.begin("192.0.2.1", "alice")
        got.append(ticket.delay)
        t.end(ticket, False)
    assert got == delays and t.tracked() == 2
