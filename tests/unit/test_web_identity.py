"""Who is calling the service (slurm_pool.web.identity): tokens, sessions, proxy, CSRF, login limits, the key."""

from __future__ import annotations

import base64
import json
import os
import stat
import warnings
from typing import Any, Callable

import jwt
import pytest
from starlette.datastructures import Headers

from slurm_pool.errors import InputError
from slurm_pool.spec.console import Console
from slurm_pool.web import identity
from slurm_pool.web.identity import (
    CSRF_HEADER,
    HOST_COOKIE,
    SECRET_RE,
    SESSION_COOKIE,
    Authenticator,
    AuthError,
    Caller,
    KeyFileError,
    load_key,
    mint,
    verify,
)

KEY = b"0123456789abcdef0123456789abcdef\n"
OTHER = b"fedcba9876543210fedcba9876543210"
USERS = {"alice", "bob", "carol"}
NOW = 1_800_000_000.0
PASSWORDS = {"alice": "alice-pw", "bob": "bob-pw", "carol": "carol-pw"}


def exists(user: str) -> bool:
    return user in USERS


def b64(data: Any) -> str:
    raw = json.dumps(data).encode() if not isinstance(data, bytes) else data
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def claims(**over: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"iat": int(NOW) - 10, "exp": int(NOW) + 60, "sun": "alice"}
    for k, v in over.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = v
    return out


def signed(key: bytes = KEY, alg: str = "HS256", **over: Any) -> str:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", jwt.InsecureKeyLengthWarning)  # HS512 with the cluster's own key
        return jwt.encode(claims(**over), key, algorithm=alg)


def unsigned(alg: str) -> str:
    return f"{b64({'alg': alg, 'typ': 'JWT'})}.{b64(claims())}."


class Clock:
    def __init__(self, t: float = NOW):
        self.t = t
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.t += seconds


class Checker:
    """A password check that records who it was asked about."""

    def __init__(self, fail: Exception | None = None):
        self.asked: list[str] = []
        self.fail = fail

    def __call__(self, user: str, password: str) -> bool:
        self.asked.append(user)
        if self.fail is not None:
            raise self.fail
        return PASSWORDS.get(user) == password


def make(
    clock: Clock | None = None, checker: Callable[[str, str], bool] | None = None, **console: Any
) -> Authenticator:
    spec = Console(**{"trusted_proxies": ["10.0.0.0/24", "fd00::/64"], "session_seconds": 600, **console})
    clock = clock or Clock()
    return Authenticator(
        KEY, spec, check_password=checker or Checker(), user_exists=exists, clock=clock, sleep=clock.sleep
    )


def tok(session: Caller) -> dict[str, str]:
    """The session's token header, as the console's page sends it on every request."""
    return {CSRF_HEADER: session.csrf or ""}


# -- tokens -----------------------------------------------------------------------
def test_mint_makes_what_slurm_reads() -> None:
    token = mint(KEY, "alice", lifespan=120, now=NOW)
    assert jwt.get_unverified_header(token) == {"alg": "HS256", "typ": "JWT"}
    body = jwt.decode(token, KEY, algorithms=["HS256"], options={"verify_exp": False, "verify_iat": False})
    assert body == {"iat": int(NOW), "exp": int(NOW) + 120, "sun": "alice"}
    assert verify(KEY, token, exists, now=NOW + 100) == "alice"


@pytest.mark.parametrize(
    "user,lifespan,key",
    [("alice\n", 60, KEY), ("../x", 60, KEY), ("alice", 0, KEY), ("alice", True, KEY), ("alice", 60, b"short")],
)
def test_mint_refuses_bad_input(user: str, lifespan: int, key: bytes) -> None:
    with pytest.raises(ValueError):
        mint(key, user, lifespan, now=NOW)


@pytest.mark.parametrize(
    "name,token,why",
    [
        ("empty", "", "not a JWT"),
        ("garbage", "not a token", "not a JWT"),
        ("garbage-json", "abc.def.ghi", "header cannot be read"),
        ("oversize", "a" * 2000 + "." + "b" * 2000 + "." + "c" * 200, "longer than 4096"),
        ("expired", mint(KEY, "alice", 60, now=NOW - 120), "expired"),
        ("other-key", mint(OTHER, "alice", 60, now=NOW), "signature does not match"),
        ("alg-none", unsigned("none"), "only HS256"),
        ("alg-None", unsigned("None"), "only HS256"),
        ("alg-none-signed", unsigned("none") + "c2ln", "only HS256"),
        ("hs512", signed(KEY, "HS512"), "only HS256"),
        ("rs256", f"{b64({'alg': 'RS256'})}.{b64(claims())}.c2ln", "only HS256"),
        ("no-alg", f"{b64({'typ': 'JWT'})}.{b64(claims())}.c2ln", "only HS256"),
        ("missing-sun", signed(sun=None), "no 'sun' claim"),
        ("missing-exp", signed(exp=None), "no 'exp' claim"),
        ("missing-iat", signed(iat=None), "no 'iat' claim"),
        ("exp-not-time", signed(exp="tomorrow"), "not a time"),
        ("iat-future", signed(iat=int(NOW) + 600, exp=int(NOW) + 900), "not valid yet"),
        ("nbf-future", signed(nbf=int(NOW) + 600), "not valid yet"),
        ("unknown-user", mint(KEY, "mallory", 60, now=NOW), "does not exist"),
        ("bad-user-path", signed(sun="../etc"), "not a user name"),
        ("bad-user-newline", signed(sun="alice\n"), "not a user name"),
        ("bad-user-number", signed(sun=0), "not a user name"),
        ("bad-user-empty", signed(sun=""), "not a user name"),
        ("tampered", mint(KEY, "alice", 60, now=NOW)[:-2] + "AA", "signature does not match"),
    ],
)
def test_refused_tokens(name: str, token: str, why: str) -> None:
    with pytest.raises(AuthError, match=why) as err:
        verify(KEY, token, exists, now=NOW)
    assert err.value.status == 401


@pytest.mark.parametrize("skew,ok", [(-3, True), (0, True), (4, True), (6, False), (30, False)])
def test_expiry_leeway_is_a_few_seconds(skew: float, ok: bool) -> None:
    token = mint(KEY, "alice", 60, now=NOW)
    at = NOW + 60 + skew
    if ok:
        assert verify(KEY, token, exists, now=at) == "alice"
    else:
        with pytest.raises(AuthError, match="expired"):
            verify(KEY, token, exists, now=at)


# -- who is calling -----------------------------------------------------------------
def bearer(token: str, scheme: str = "Bearer") -> dict[str, str]:
    return {"Authorization": f"{scheme} {token}"}


@pytest.mark.parametrize("scheme", ["Bearer", "bearer", "BEARER"])
def test_bearer_token_caller(scheme: str) -> None:
    auth = make()
    assert auth.caller(bearer(mint(KEY, "bob", now=NOW), scheme), {}, "192.0.2.1") == Caller("bob", "token")


def test_a_tokens_signature_is_checked_once_its_times_and_user_every_time(monkeypatch: pytest.MonkeyPatch) -> None:
    from slurm_pool.web import identity

    checked: list[str] = []
    real = identity.signed
    monkeypatch.setattr(identity, "signed", lambda key, token: checked.append(token) or real(key, token))
    clock = Clock()
    auth = make(clock)
    token = mint(KEY, "bob", lifespan=60, now=NOW)
    for _ in range(3):
        assert auth.caller(bearer(token), {}, "192.0.2.1") == Caller("bob", "token")
    assert checked == [token]
    forged = token[:-2] + ("AA" if not token.endswith("AA") else "BB")  # another string: checked, refused
    with pytest.raises(AuthError, match="signature"):
        auth.caller(bearer(forged), {}, "192.0.2.1")
    with pytest.raises(AuthError, match="signature"):
        auth.caller(bearer(forged), {}, "192.0.2.1")  # a refused token is not kept
    assert checked == [token, forged, forged]
    USERS.discard("bob")
    try:
        with pytest.raises(AuthError, match="does not exist"):
            auth.caller(bearer(token), {}, "192.0.2.1")
    finally:
        USERS.add("bob")
    clock.t = NOW + 60 + identity.LEEWAY + 1
    with pytest.raises(AuthError, match="expired"):
        auth.caller(bearer(token), {}, "192.0.2.1")
    early = mint(KEY, "bob", lifespan=600, now=NOW + 3600)
    with pytest.raises(AuthError, match="not valid yet"):
        auth.caller(bearer(early), {}, "192.0.2.1")
    with pytest.raises(AuthError, match="not valid yet"):
        auth.caller(bearer(early), {}, "192.0.2.1")


@pytest.mark.parametrize(
    "headers,why",
    [
        ({}, "not logged in"),
        ({"Authorization": "Basic YWxpY2U6cHc="}, "not 'Bearer <token>'"),
        ({"Authorization": "Bearer"}, "not 'Bearer <token>'"),
        ({"Authorization": "Bearer a b"}, "not 'Bearer <token>'"),
        ({"Authorization": "Bearer " + "a" * 5000}, "longer than"),
        (bearer(mint(OTHER, "alice", now=NOW)), "signature"),
        (bearer(unsigned("none")), "only HS256"),
    ],
)
def test_refused_callers(headers: dict[str, str], why: str) -> None:
    with pytest.raises(AuthError, match=why) as err:
        make().caller(headers, {}, "192.0.2.1")
    assert err.value.status == 401


def test_two_authorization_headers_are_refused() -> None:
    good = mint(KEY, "alice", now=NOW)
    headers = Headers(raw=[(b"authorization", f"Bearer {good}".encode())] * 2)
    with pytest.raises(AuthError, match="more than one Authorization"):
        make().caller(headers, {}, None)


def test_a_bad_token_is_not_rescued_by_a_session() -> None:
    auth = make()
    session = auth.login("alice", "alice-pw", "192.0.2.1")
    with pytest.raises(AuthError, match="signature"):
        auth.caller(bearer(mint(OTHER, "alice", now=NOW)), {SESSION_COOKIE: session.session_id or ""}, None)


@pytest.mark.parametrize(
    "client_ip,header,want",
    [
        ("10.0.0.5", {"X-Remote-User": "bob"}, Caller("bob", "proxy")),
        ("10.0.0.5", {"x-remote-user": "bob"}, Caller("bob", "proxy")),
        ("::ffff:10.0.0.5", {"X-Remote-User": "bob"}, Caller("bob", "proxy")),
        ("fd00::7", {"X-Remote-User": "carol"}, Caller("carol", "proxy")),
        ("10.0.1.5", {"X-Remote-User": "bob"}, "not logged in"),
        ("192.0.2.1", {"X-Remote-User": "bob"}, "not logged in"),
        ("fd01::7", {"X-Remote-User": "bob"}, "not logged in"),
        ("not-an-ip", {"X-Remote-User": "bob"}, "not logged in"),
        (None, {"X-Remote-User": "bob"}, "not logged in"),
        ("10.0.0.5", {}, "not logged in"),
        ("10.0.0.5", {"X-Remote-User": "mallory"}, "does not exist"),
        ("10.0.0.5", {"X-Remote-User": "bob\r\nX: y"}, "not a user name"),
        ("10.0.0.5", {"X-Remote-User": "../root"}, "not a user name"),
    ],
)
def test_proxy_header_is_believed_only_from_trusted_proxies(
    client_ip: str | None, header: dict[str, str], want: Caller | str
) -> None:
    auth = make()
    if isinstance(want, Caller):
        assert auth.caller(header, {}, client_ip) == want
    else:
        with pytest.raises(AuthError, match=want) as err:
            auth.caller(header, {}, client_ip)
        assert err.value.status == 401


def test_custom_user_header_and_duplicates() -> None:
    auth = make(user_header="X-Forwarded-User")
    assert auth.caller({"X-Forwarded-User": "bob"}, {}, "10.0.0.9") == Caller("bob", "proxy")
    with pytest.raises(AuthError, match="not logged in"):
        auth.caller({"X-Remote-User": "bob"}, {}, "10.0.0.9")
    two = Headers(raw=[(b"x-forwarded-user", b"bob"), (b"x-forwarded-user", b"alice")])
    with pytest.raises(AuthError, match="more than one"):
        auth.caller(two, {}, "10.0.0.9")


def test_no_trusted_proxies_means_no_proxy_identity() -> None:
    with pytest.raises(AuthError, match="not logged in"):
        make(trusted_proxies=[]).caller({"X-Remote-User": "bob"}, {}, "10.0.0.5")


def test_precedence_token_then_session_then_proxy() -> None:
    auth = make()
    session = auth.login("carol", "carol-pw", "192.0.2.1")
    cookies = {SESSION_COOKIE: session.session_id or ""}
    proxy = {"X-Remote-User": "bob"}
    token = bearer(mint(KEY, "alice", now=NOW))
    assert auth.caller({**token, **proxy}, cookies, "10.0.0.5").via == "token"
    assert auth.caller({**proxy, **tok(session)}, cookies, "10.0.0.5") == session
    assert auth.caller(proxy, {SESSION_COOKIE: "x" * 43}, "10.0.0.5") == Caller("bob", "proxy")
    assert auth.caller(proxy, cookies, "10.0.0.5") == Caller("bob", "proxy")  # the cookie without its token
    with pytest.raises(AuthError, match="token is missing"):
        auth.caller({}, cookies, "10.0.0.5")


# -- sessions ---------------------------------------------------------------------
def test_login_gives_a_fresh_session() -> None:
    auth = make()
    one = auth.login("alice", "alice-pw", "192.0.2.1")
    two = auth.login("alice", "alice-pw", "192.0.2.1")
    assert one.user == "alice" and one.via == "session"
    for secret in (one.session_id, one.csrf, two.session_id, two.csrf):
        assert secret is not None and SECRET_RE.fullmatch(secret)
    assert len({one.session_id, one.csrf, two.session_id, two.csrf}) == 4
    assert auth.caller(tok(one), {SESSION_COOKIE: one.session_id or ""}, None) == one


@pytest.mark.parametrize(
    "steps,ok",
    [
        ([500], True),
        ([500, 500, 500], True),  # sliding: each use restarts the clock
        ([601], False),
        ([300, 601], False),
    ],
)
def test_session_expiry_slides_with_use(steps: list[float], ok: bool) -> None:
    clock = Clock()
    auth = make(clock)
    session = auth.login("alice", "alice-pw", None)
    cookies = {SESSION_COOKIE: session.session_id or ""}
    *uses, last = steps
    for step in uses:
        clock.t += step
        auth.caller(tok(session), cookies, None)
    clock.t += last
    if ok:
        assert auth.caller(tok(session), cookies, None) == session
    else:
        with pytest.raises(AuthError, match="expired or was logged out") as err:
            auth.caller(tok(session), cookies, None)
        assert err.value.status == 401


def test_logout_refuses_the_replayed_cookie() -> None:
    auth = make()
    session = auth.login("alice", "alice-pw", None)
    cookies = {SESSION_COOKIE: session.session_id or ""}
    auth.logout(auth.caller(tok(session), cookies, None))
    with pytest.raises(AuthError, match="logged out") as err:
        auth.caller(tok(session), cookies, None)
    assert err.value.status == 401
    auth.logout(Caller("alice", "token"))  # nothing to forget


@pytest.mark.parametrize(
    "cookie", ["", "short", "x" * 44, "x" * 42 + "\n", "x" * 42 + "=", "../../" + "x" * 37, "x" * 43]
)
def test_unknown_or_malformed_cookies_are_refused(cookie: str) -> None:
    auth = make()
    auth.login("alice", "alice-pw", None)
    with pytest.raises(AuthError, match="expired or was logged out"):
        auth.caller({}, {SESSION_COOKIE: cookie}, None)


def test_sessions_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(identity, "MAX_SESSIONS", 3)
    auth = make()
    sessions = [auth.login("alice", "alice-pw", None) for _ in range(4)]
    with pytest.raises(AuthError):
        auth.caller(tok(sessions[0]), {SESSION_COOKIE: sessions[0].session_id or ""}, None)
    for s in sessions[1:]:
        assert auth.caller(tok(s), {SESSION_COOKIE: s.session_id or ""}, None) == s


@pytest.mark.parametrize("secure", [True, False])
def test_cookie_headers(secure: bool) -> None:
    auth = make()
    session = auth.login("alice", "alice-pw", None)
    value = auth.cookie_header(session, secure)
    parts = value.split("; ")
    name = HOST_COOKIE if secure else SESSION_COOKIE  # under TLS: __Host- (Secure, Path=/, no Domain)
    assert parts[0] == f"{name}={session.session_id}" and not any(p.startswith("Domain") for p in parts)
    assert {"HttpOnly", "SameSite=Strict", "Path=/"} <= set(parts)
    assert ("Secure" in parts) is secure
    cleared = auth.clear_cookie_header(secure).split("; ")
    assert cleared[0] == f"{name}=" and "Max-Age=0" in cleared and ("Secure" in cleared) is secure
    with pytest.raises(ValueError):
        auth.cookie_header(Caller("alice", "token"), secure)


# -- logins -----------------------------------------------------------------------
@pytest.mark.parametrize(
    "user,password,asked",
    [
        ("alice", "wrong", True),
        ("mallory", "whatever", True),  # an unknown user is asked about too: same answer, same path
        ("dave", "dave-pw", True),
        ("alice\n", "alice-pw", False),
        ("../root", "x", False),
        ("alice", "", False),
        ("alice", "alice-pw\x00", False),
        ("alice", "x" * 5000, False),
    ],
)
def test_failed_logins_all_say_the_same(user: str, password: str, asked: bool) -> None:
    checker = Checker()
    with pytest.raises(AuthError) as err:
        make(checker=checker).login(user, password, "192.0.2.1")
    assert (err.value.status, err.value.message) == (401, "the user name or password is not correct")
    assert checker.asked == ([user] if asked else [])


def test_a_broken_pam_is_a_failed_login() -> None:
    with pytest.raises(AuthError) as err:
        make(checker=Checker(fail=OSError("libpam"))).login("alice", "alice-pw", None)
    assert err.value.status == 401


def test_pam_yes_for_a_user_slurm_lacks_is_refused() -> None:
    def yes(user: str, password: str) -> bool:
        return True

    with pytest.raises(AuthError):
        make(checker=yes).login("dave", "x", None)


def fail(auth: Authenticator, user: str, ip: str = "192.0.2.1") -> int:
    try:
        auth.login(user, "wrong", ip)
    except AuthError as e:
        return e.status
    raise AssertionError("the login passed")


# -- CSRF -------------------------------------------------------------------------
HOST = {"Host": "pool.example:8443"}


def session_and_auth() -> tuple[Authenticator, Caller]:
    auth = make()
    return auth, auth.login("alice", "alice-pw", None)


@pytest.mark.parametrize(
    "method,extra,status",
    [
        ("GET", {}, None),
        ("HEAD", {}, None),
        ("POST", "csrf", None),
        ("post", "csrf", None),
        ("DELETE", "csrf", None),
        ("POST", {}, "no X-CSRF-Token"),
        ("PUT", {}, "no X-CSRF-Token"),
        ("PATCH", {CSRF_HEADER: "x" * 43}, "does not match"),
        ("POST", {CSRF_HEADER: "short"}, "does not match"),
        ("POST", {CSRF_HEADER: "é" * 43}, "does not match"),
        ("POST", {"csrf": True, "Origin": "https://pool.example:8443"}, None),
        ("POST", {"csrf": True, "Origin": "https://POOL.example:8443", "Sec-Fetch-Site": "same-origin"}, None),
        ("POST", {"csrf": True, "Sec-Fetch-Site": "none"}, None),
        ("POST", {"csrf": True, "Origin": "https://evil.example"}, "cross-site"),
        ("POST", {"csrf": True, "Origin": "https://pool.example:8444"}, "cross-site"),
        ("POST", {"csrf": True, "Origin": "https://pool.example"}, "cross-site"),
        ("POST", {"csrf": True, "Origin": "null"}, "cross-site"),
        ("POST", {"csrf": True, "Origin": "https://pool.example:8443/path"}, "cross-site"),
        ("POST", {"csrf": True, "Origin": "https://u@pool.example:8443"}, "cross-site"),
        ("POST", {"csrf": True, "Sec-Fetch-Site": "cross-site"}, "cross-site"),
        ("POST", {"csrf": True, "Sec-Fetch-Site": "same-site"}, "cross-site"),
        ("POST", {"csrf": True, "Origin": "https://pool.example:8443", "Sec-Fetch-Site": "cross-site"}, "cross-site"),
    ],
)
def test_session_csrf(method: str, extra: Any, status: str | None) -> None:
    auth, session = session_and_auth()
    headers = dict(HOST)
    if extra == "csrf" or (isinstance(extra, dict) and extra.pop("csrf", False)):
        headers[CSRF_HEADER] = session.csrf or ""
    if isinstance(extra, dict):
        headers.update(extra)
    if status is None:
        auth.check_csrf(session, method, headers)
    else:
        with pytest.raises(AuthError, match=status) as err:
            auth.check_csrf(session, method, headers)
        assert err.value.status == 403


def test_another_sessions_csrf_token_does_not_do() -> None:
    auth, session = session_and_auth()
    other = auth.login("alice", "alice-pw", None)
    with pytest.raises(AuthError, match="does not match"):
        auth.check_csrf(session, "POST", {**HOST, CSRF_HEADER: other.csrf or ""})


@pytest.mark.parametrize(
    "origin,host,ok",
    [
        ("http://pool.example", "pool.example", True),
        ("http://pool.example:80", "pool.example", True),
        ("http://pool.example", "pool.example:80", True),
        ("https://pool.example", "pool.example:443", True),
        ("http://[::1]:8000", "[::1]:8000", True),
        ("http://127.0.0.1:8000", "127.0.0.1:8000", True),
        ("http://127.0.0.1:8000", "127.0.0.1:8001", False),
        ("http://127.0.0.1:8000", None, False),
        ("ftp://pool.example", "pool.example", False),
        ("http://pool.example:99999", "pool.example:99999", False),
        ("http://pool.example#x", "pool.example", False),
        ("http://pool.example?", "pool.example", False),
        ("http://a@pool.example", "pool.example", False),
        ("http://pool.example:", "pool.example", False),
    ],
)
def test_origin_matches_host(origin: str, host: str | None, ok: bool) -> None:
    auth, session = session_and_auth()
    headers = {CSRF_HEADER: session.csrf or "", "Origin": origin, **({"Host": host} if host else {})}
    if ok:
        auth.check_csrf(session, "POST", headers)
    else:
        with pytest.raises(AuthError, match="cross-site"):
            auth.check_csrf(session, "POST", headers)


@pytest.mark.parametrize(
    "headers",
    [{}, {"Origin": "https://evil.example"}, {"Sec-Fetch-Site": "cross-site"}, {"Origin": "null"}],
)
def test_token_callers_are_exempt(headers: dict[str, str]) -> None:
    make().check_csrf(Caller("alice", "token"), "POST", {**HOST, **headers})


@pytest.mark.parametrize(
    "headers,why",
    [
        ({"Origin": "https://pool.example:8443"}, None),
        ({"Sec-Fetch-Site": "same-origin"}, None),
        ({}, "neither an Origin nor a Sec-Fetch-Site"),
        ({"Origin": "https://evil.example"}, "cross-site"),
        ({"Sec-Fetch-Site": "cross-site"}, "cross-site"),
    ],
)
def test_proxy_callers_must_be_same_origin(headers: dict[str, str], why: str | None) -> None:
    auth = make()
    caller = auth.caller({"X-Remote-User": "bob"}, {}, "10.0.0.5")
    auth.check_csrf(caller, "GET", {})
    if why is None:
        auth.check_csrf(caller, "POST", {**HOST, **headers})
    else:
        with pytest.raises(AuthError, match=why) as err:
            auth.check_csrf(caller, "POST", {**HOST, **headers})
        assert err.value.status == 403


@pytest.mark.parametrize(
    "headers,ok",
    [
        ({}, True),
        ({"Origin": "https://pool.example:8443"}, True),
        ({"Sec-Fetch-Site": "same-origin"}, True),
        ({"Origin": "https://evil.example"}, False),
        ({"Sec-Fetch-Site": "cross-site"}, False),
    ],
)
def test_login_origin(headers: dict[str, str], ok: bool) -> None:
    if ok:
        make().check_login_origin({**HOST, **headers})
    else:
        with pytest.raises(AuthError, match="cross-site") as err:
            make().check_login_origin({**HOST, **headers})
        assert err.value.status == 403


# -- the key file -----------------------------------------------------------------
def write(path: Any, data: bytes, mode: int) -> str:
    path.write_bytes(data)
    os.chmod(path, mode)
    return str(path)


@pytest.mark.parametrize("mode", [0o600, 0o640, 0o400, 0o660])
def test_good_key(tmp_path: Any, mode: int) -> None:
    path = write(tmp_path / "jwt.key", KEY, mode)
    assert load_key(path) == KEY  # the bytes, as Slurm reads them: the newline is part of the key


@pytest.mark.parametrize(
    "make_path,why",
    [
        (lambda d: write(d / "k", KEY, 0o644), "other users may access it"),
        (lambda d: write(d / "k", KEY, 0o602), "other users may access it"),
        (lambda d: write(d / "k", KEY, 0o601), "other users may access it"),
        (lambda d: write(d / "k", b"x" * 31, 0o600), "holds 31 bytes"),
        (lambda d: write(d / "k", b"", 0o600), "holds 0 bytes"),
        (lambda d: write(d / "k", b"x" * (64 * 1024 + 1), 0o600), "larger than|is 65537 bytes"),
        (lambda d: str(d / "missing"), "no such file"),
        (lambda d: str(d), "not a regular file"),
        (lambda d: (os.mkfifo(d / "fifo", 0o600), str(d / "fifo"))[1], "not a regular file"),
    ],
)
def test_refused_keys(tmp_path: Any, make_path: Callable[[Any], str], why: str) -> None:
    os.chmod(tmp_path, 0o700)
    path = make_path(tmp_path)
    with pytest.raises(KeyFileError, match=why) as err:
        load_key(path)
    assert path in str(err.value)
    assert isinstance(err.value, InputError) and err.value.exit_code == 2


def test_symlinked_key_is_refused(tmp_path: Any) -> None:
    target = write(tmp_path / "real.key", KEY, 0o600)
    (tmp_path / "link.key").symlink_to(target)
    with pytest.raises(KeyFileError, match="symbolic link"):
        load_key(str(tmp_path / "link.key"))


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file away needs root")
def test_key_owned_by_someone_else_is_refused(tmp_path: Any) -> None:
    path = write(tmp_path / "k", KEY, 0o600)
    os.chown(path, 4242, -1)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    with pytest.raises(KeyFileError, match="owned by uid 4242"):
        load_key(path)


def test_pam_checker_answers_false_for_a_wrong_password() -> None:
    check = identity.pam_checker("login")
    assert check("no-such-user-slurm-pool", "wrong") is False
