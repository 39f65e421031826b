"""Who is calling the service: Slurm JWTs, browser sessions, a site proxy's header; CSRF and login limits.

Three ways in, tried in this order (the first one a request carries decides):

* **Token** -- ``Authorization: Bearer <jwt>``, as ``scontrol token`` prints it: HS256 only, signed
  with the cluster's ``jwt_key``, claims ``iat``, ``exp`` and ``sun`` (Slurm's user claim), the user a
  valid login name that exists.  A token is no ambient credential (a browser never adds it on its own),
  so token callers need no CSRF token.
* **Session** -- the ``slurm_pool_session`` cookie a PAM login gave (HttpOnly, SameSite=Strict; under
  TLS ``Secure`` and named ``__Host-slurm_pool_session``) *and* the session's token in ``X-CSRF-Token``
  on every request, reads included.  The token is handed out once, in the login's answer (the page keeps
  it in its own origin's storage), never by a GET: a browser sends the cookie to every port of its host,
  so a cookie alone, replayed by whoever received it, can neither read nor act.  Sessions live in memory
  only: an id and a token of 256 random bits each, an expiry that slides with use, a bounded count per
  user and in all (the oldest go first), and logout forgets the id.  State-changing requests must also
  not come from another site (``Origin`` an allowed host and the same as ``Host``; ``Sec-Fetch-Site``
  ``same-origin`` or ``none``).
* **Proxy** -- a site proxy that authenticated the user itself names them in ``console.user_header``.
  The header is believed only from ``console.trusted_proxies``; from anywhere else it is ignored.
  A proxy's browser users carry an ambient credential too (the proxy's own cookie), and have no CSRF
  token of ours: their state-changing requests must carry ``Origin`` or ``Sec-Fetch-Site`` (every
  current browser sends them), and both must say same-origin.  The proxy must pass ``Host`` through.

Failed logins slow the next ones of the same user from the same address down (:mod:`.throttle`), never
lock anyone out; a wrong user and a wrong password get the same answer.
"""

from __future__ import annotations

import hmac
import ipaddress
import math
import os
import re
import secrets
import stat
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Literal, Mapping, Optional
from urllib.parse import urlsplit

import jwt

from slurm_pool import text
from slurm_pool.errors import InputError, ServiceError
from slurm_pool.spec.console import Console
from slurm_pool.web.hosts import AllowedHosts, split_host
from slurm_pool.web.throttle import Busy, LoginThrottle, Ticket
from slurm_pool.wellknown import CSRF_HEADER

SESSION_COOKIE = "slurm_pool_session"
#: The cookie's name under TLS: the browser keeps it only if Secure, Path=/ and without Domain.
HOST_COOKIE = "__Host-" + SESSION_COOKIE
#: Longest token (and Authorization header) read at all; Slurm's are a few hundred bytes.
MAX_TOKEN = 4096
#: Seconds of clock skew forgiven on ``exp``, ``iat`` and ``nbf``.
LEEWAY = 5
#: Shortest HS256 key accepted, in bytes (RFC 7518 3.2: at least the hash's size).
MIN_KEY = 32
#: Largest key file read.
MAX_KEY = 64 * 1024
#: Sessions kept at once; past it the least recently used is dropped.
MAX_SESSIONS = 10_000
#: Sessions one user may have at once; a new login past it ends their least recently used one.
MAX_USER_SESSIONS = 16
#: Tokens whose signature was checked, kept (the least recently used go first).
MAX_TOKENS = 10_000
#: Longest password passed to PAM.
MAX_PASSWORD = 1024

#: A session id or CSRF secret: ``secrets.token_urlsafe(32)``, 43 URL-safe base64 characters.
SECRET_RE = re.compile(r"[A-Za-z0-9_-]{43}")
#: A compact JWS: header.payload.signature (the signature may be empty, as ``alg: none`` makes it).
JWT_RE = re.compile(r"[A-Za-z0-9_-]{1,4096}\.[A-Za-z0-9_-]{1,4096}\.[A-Za-z0-9_-]{0,4096}")
BEARER_RE = re.compile(r"(?i:bearer)[ ]+(\S+)")
_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_SAME_SITE = frozenset({"same-origin", "none"})
_BAD_LOGIN = "the user name or password is not correct"


class AuthError(ServiceError):
    """A request refused for who is (not) calling: 401, 403 or 429, with a message for the client."""

    def __init__(self, status: int, message: str):
        super().__init__(status, message)


class KeyFileError(InputError):
    """The JWT key file cannot be used.  Exit status 2."""


@dataclass(frozen=True)
class Caller:
    """An authenticated caller: the user, and how they proved it."""

    user: str
    via: Literal["token", "session", "proxy"]
    session_id: Optional[str] = None
    csrf: Optional[str] = None


# -- the key and tokens -------------------------------------------------------------
def load_key(path: str, owners: Iterable[int] = ()) -> bytes:
    """The HS256 key at ``path``, as Slurm reads it (the file's bytes); KeyFileError when it is unsafe.

    Not a symbolic link, a regular file, owned by root, the service's user or one of ``owners`` (SlurmUser,
    for a service that is not root), nothing for "other" (group may read it: a service that is not root
    reads it through its group or an ACL), and at least 32 bytes.
    """
    where = f"console.jwt_key: {text.shown(path)}"
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise KeyFileError(f"{where}: no such file") from None
    except PermissionError:
        raise KeyFileError(f"{where}: cannot be read (permission denied)") from None
    except OSError as e:
        if os.path.islink(path):
            raise KeyFileError(f"{where}: is a symbolic link; name the key file itself") from None
        raise KeyFileError(f"{where}: cannot be opened ({e.strerror})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise KeyFileError(f"{where}: is not a regular file")
        trusted = (0, os.geteuid(), *owners)
        if st.st_uid not in trusted:
            others = "".join(f", SlurmUser (uid {u})" for u in owners)
            raise KeyFileError(
                f"{where}: is owned by uid {st.st_uid}; it must be owned by root{others} or by the service's user "
                f"(uid {os.geteuid()})"
            )
        if st.st_mode & 0o007:
            mode = stat.S_IMODE(st.st_mode)
            raise KeyFileError(f"{where}: other users may access it (mode {mode:04o}); run chmod o-rwx on it")
        if st.st_size > MAX_KEY:
            raise KeyFileError(f"{where}: is {st.st_size} bytes; a key is at most {MAX_KEY}")
        data = b""
        while len(data) <= MAX_KEY:
            chunk = os.read(fd, MAX_KEY + 1 - len(data))
            if not chunk:
                break
            data += chunk
    finally:
        os.close(fd)
    if len(data) > MAX_KEY:
        raise KeyFileError(f"{where}: is larger than {MAX_KEY} bytes")
    if len(data) < MIN_KEY:
        raise KeyFileError(f"{where}: holds {len(data)} bytes; an HS256 key needs at least {MIN_KEY}")
    return data


def mint(key: bytes, user: str, lifespan: int = 60, now: float | None = None) -> str:
    """A token Slurm's auth/jwt accepts for ``user``: HS256, claims ``iat``, ``exp`` and ``sun``."""
    text.check("login", user, "user")
    if isinstance(lifespan, bool) or not isinstance(lifespan, int) or lifespan < 1:
        raise ValueError(f"lifespan: {lifespan!r} is not a positive whole number of seconds")
    if len(key) < MIN_KEY:
        raise ValueError(f"an HS256 key needs at least {MIN_KEY} bytes")
    issued = int(time.time() if now is None else now)
    claims = {"iat": issued, "exp": issued + lifespan, "sun": user}
    return jwt.encode(claims, key, algorithm="HS256", headers={"typ": "JWT"})


def _time_claim(claims: Mapping[str, Any], name: str) -> float | None:
    value = claims.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise AuthError(401, f"the token's {name!r} claim is not a time")
    return float(value)


@dataclass(frozen=True)
class Signed:
    """What a token whose signature matches says: its user and its times (``nbf`` may be absent)."""

    user: Any  # the claim as sent: checked by :meth:`check`
    exp: float
    iat: float
    nbf: float | None

    def check(self, user_exists: Callable[[str], bool], now: float) -> str:
        """The user, when the token is current now and the user exists; AuthError(401) else."""
        if self.exp + LEEWAY < now:
            raise AuthError(401, "the token has expired")
        if self.iat - LEEWAY > now or (self.nbf is not None and self.nbf - LEEWAY > now):
            raise AuthError(401, "the token is not valid yet (issued in the future)")
        if not text.matches("login", self.user):
            raise AuthError(401, f"the token's user {text.shown(str(self.user))[:80]!r} is not a user name")
        if not user_exists(self.user):
            raise AuthError(401, f"the token's user {self.user!r} does not exist")
        return str(self.user)


def verify(key: bytes, token: str, user_exists: Callable[[str], bool], now: float | None = None) -> str:
    """The user ``token`` was minted for; AuthError(401) unless it is a valid, current Slurm token."""
    return signed(key, token).check(user_exists, time.time() if now is None else now)


def signed(key: bytes, token: str) -> Signed:
    """What ``token`` says, once its shape, algorithm (HS256 only) and signature are checked; AuthError(401)
    else.  Its times and user are :meth:`Signed.check`'s to judge."""
    if not isinstance(token, str) or len(token) > MAX_TOKEN:
        raise AuthError(401, f"the token is longer than {MAX_TOKEN} characters")
    if not JWT_RE.fullmatch(token):
        raise AuthError(401, "the token is not a JWT (header.payload.signature)")
    try:
        header = jwt.get_unverified_header(token)
    except jwt.PyJWTError:
        raise AuthError(401, "the token's header cannot be read") from None
    alg = header.get("alg")
    if alg != "HS256":
        raise AuthError(401, f"the token is signed with {text.shown(str(alg))[:32]!r}; only HS256 is accepted")
    try:
        claims = jwt.decode(
            token,
            key,
            algorithms=["HS256"],
            options={
                "require": ["exp", "iat", "sun"],
                "verify_exp": False,  # checked below, against ``now``
                "verify_iat": False,
                "verify_nbf": False,
                "enforce_minimum_key_length": True,
            },
        )
    except jwt.InvalidSignatureError:
        raise AuthError(401, "the token's signature does not match the cluster's key") from None
    except jwt.MissingRequiredClaimError as e:
        raise AuthError(401, f"the token has no {e.claim!r} claim") from None
    except jwt.PyJWTError as e:
        raise AuthError(401, f"the token is not valid ({text.shown(str(e))[:120]})") from None
    exp, iat, nbf = (_time_claim(claims, n) for n in ("exp", "iat", "nbf"))
    assert exp is not None and iat is not None  # required above
    return Signed(claims["sun"], exp, iat, nbf)


def pam_checker(service: str) -> Callable[[str, str], bool]:
    """A password check against PAM ``service`` (authentication and account), for :class:`Authenticator`."""
    import pamela  # type: ignore[import-untyped]

    def check(user: str, password: str) -> bool:
        try:
            pamela.authenticate(user, password, service=service, resetcred=0)
        except pamela.PAMError:
            return False
        return True

    return check


# -- helpers ----------------------------------------------------------------------
def _one(headers: Mapping[str, str], name: str, status: int) -> str | None:
    """The one value of header ``name`` (any case); AuthError(status) when it is sent twice."""
    lower = name.lower()
    found = [v for k, v in headers.items() if k.lower() == lower]
    if len(found) > 1:
        raise AuthError(status, f"the request has more than one {name} header")
    return found[0] if found else None


def _netloc(origin: str) -> str | None:
    """``host[:port]`` of an ``Origin`` (default ports dropped, lower case); None when it is not one."""
    try:
        parts = urlsplit(origin)
        port = parts.port
    except ValueError:
        return None
    extra = parts.path or parts.query or parts.fragment or "@" in parts.netloc or "#" in origin or "?" in origin
    if parts.scheme not in ("http", "https") or not parts.hostname or extra:
        return None
    default = 80 if parts.scheme == "http" else 443
    host = parts.netloc.rsplit(":", 1)[0] if port is not None else parts.netloc
    return host.lower() if port in (None, default) else f"{host.lower()}:{port}"


def _host(host: str) -> set[str]:
    """The ways a ``Host`` header can be written as an origin's ``host[:port]``."""
    host = host.lower()
    forms = {host}
    for default in (":80", ":443"):
        if host.endswith(default):
            forms.add(host[: -len(default)])
    return forms


def _check_site(headers: Mapping[str, str], required: bool, hosts: AllowedHosts | None = None) -> None:
    """AuthError(403) for a request another site made (``Origin``, ``Sec-Fetch-Site``); with ``hosts``, an
    ``Origin`` must also name an allowed host."""
    site = _one(headers, "Sec-Fetch-Site", 403)
    origin = _one(headers, "Origin", 403)
    if required and site is None and origin is None:
        raise AuthError(403, "the request has neither an Origin nor a Sec-Fetch-Site header")
    if site is not None and site.lower() not in _SAME_SITE:
        raise AuthError(403, f"cross-site request refused (Sec-Fetch-Site: {text.shown(site)[:40]})")
    if origin is not None:
        host = _one(headers, "Host", 403)
        netloc = _netloc(origin)
        named = split_host(netloc) if netloc is not None else None
        foreign = hosts is not None and (named is None or not hosts.name_ok(named[0]))
        if netloc is None or host is None or netloc not in _host(host) or foreign:
            raise AuthError(403, f"cross-site request refused (Origin {text.shown(origin)[:100]!r})")


@dataclass
class _Session:
    user: str
    csrf: str
    used: float


class Authenticator:
    """Decides who a request comes from, keeps browser sessions, and guards logins and state changes."""

    def __init__(
        self,
        key: bytes,
        console: Console,
        *,
        check_password: Callable[[str, str], bool],
        user_exists: Callable[[str], bool],
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
        hosts: AllowedHosts | None = None,
        throttle: LoginThrottle | None = None,
    ):
        self._key = key
        self._sleep = sleep
        self.hosts = hosts
        self.throttle = throttle or LoginThrottle(clock)
        self._console = console
        self._check_password = check_password
        self._user_exists = user_exists
        self._clock = clock
        self._proxies = [ipaddress.ip_network(n, strict=False) for n in console.trusted_proxies]
        self._sessions: OrderedDict[str, _Session] = OrderedDict()
        self._tokens: OrderedDict[str, Signed] = OrderedDict()  # tokens whose signature matched, by use
        self._lock = threading.Lock()

    # -- who is calling --------------------------------------------------------------
    def caller(self, headers: Mapping[str, str], cookies: Mapping[str, str], client_ip: str | None) -> Caller:
        """The caller: Bearer token, else session (cookie and token), else trusted proxy header; AuthError(401)."""
        auth = _one(headers, "Authorization", 401)
        if auth is not None:
            if len(auth) > MAX_TOKEN + 16:
                raise AuthError(401, f"the token is longer than {MAX_TOKEN} characters")
            m = BEARER_RE.fullmatch(auth)
            if m is None:
                raise AuthError(401, "the Authorization header is not 'Bearer <token>'")
            return Caller(self._signed(m.group(1)).check(self._user_exists, self._clock()), "token")
        cookie = cookies.get(HOST_COOKIE, cookies.get(SESSION_COOKIE))
        session, refused = None, None
        if cookie is not None:
            try:
                session = self._session(cookie, _one(headers, CSRF_HEADER, 401))
            except AuthError as e:  # the cookie without its token: no session (a trusted proxy may still say who)
                refused = e
        if session is not None:
            return session
        proxied = self._proxied(headers, client_ip)
        if proxied is not None:
            return proxied
        if refused is not None:
            raise refused
        if cookie is not None:
            raise AuthError(401, "the session has expired or was logged out; log in again")
        raise AuthError(401, "not logged in: log in, or send 'Authorization: Bearer <token>' (scontrol token)")

    def _signed(self, token: str) -> Signed:
        """:func:`signed` once per token: a client sends the same token on every request, and checking its
        signature again would say the same (its times and user are checked on every request still)."""
        with self._lock:
            hit = self._tokens.get(token)
            if hit is not None:
                self._tokens.move_to_end(token)
                return hit
        found = signed(self._key, token)
        with self._lock:
            self._tokens[token] = found
            while len(self._tokens) > MAX_TOKENS:
                self._tokens.popitem(last=False)
        return found

    def _session(self, cookie: str, token: str | None) -> Caller | None:
        """The cookie's live session; AuthError(401) when ``token`` (the X-CSRF-Token header) is not its own."""
        if not SECRET_RE.fullmatch(cookie):
            return None
        now = self._clock()
        with self._lock:
            session = self._sessions.get(cookie)
            if session is None:
                return None
            if now - session.used > self._console.session_seconds:
                del self._sessions[cookie]
                return None
            if token is None:
                raise AuthError(401, f"the session's token is missing ({CSRF_HEADER}); the console's page sends it")
            if not SECRET_RE.fullmatch(token) or not hmac.compare_digest(token.encode(), session.csrf.encode()):
                raise AuthError(401, f"the {CSRF_HEADER} header does not match the session")
            session.used = now
            self._sessions.move_to_end(cookie)
            return Caller(session.user, "session", cookie, session.csrf)

    def _trusted(self, client_ip: str | None) -> bool:
        if not client_ip or not self._proxies:
            return False
        try:
            addr = ipaddress.ip_address(client_ip)
        except ValueError:
            return False
        if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
            addr = addr.ipv4_mapped
        return any(addr in net for net in self._proxies)

    def _proxied(self, headers: Mapping[str, str], client_ip: str | None) -> Caller | None:
        if not self._trusted(client_ip):
            return None  # the header is anyone's to send: never read it
        name = self._console.user_header
        user = _one(headers, name, 401)
        if user is None:
            return None
        if not text.matches("login", user):
            raise AuthError(401, f"the proxy's {name} header {text.shown(user)[:80]!r} is not a user name")
        if not self._user_exists(user):
            raise AuthError(401, f"the proxy's user {user!r} does not exist")
        return Caller(user, "proxy")

    # -- sessions ------------------------------------------------------------------
    def login(self, user: str, password: str, client_ip: str | None) -> Caller:
        """A new session for ``user`` when PAM takes ``password``, after the throttle's wait; AuthError(401)."""
        ticket = self.begin_login(user, client_ip)
        try:
            self._sleep(ticket.delay)
        except BaseException:
            self.throttle.end(ticket, None)
            raise
        return self.finish_login(ticket, password)

    def begin_login(self, user: str, client_ip: str | None) -> Ticket:
        """The login's ticket: how long to wait before :meth:`finish_login`; AuthError(429) while the same
        user's login from the same address is being checked."""
        key = user if isinstance(user, str) and text.matches("login", user) else ""
        try:
            return self.throttle.begin(client_ip or "-", key)
        except Busy:
            raise AuthError(429, "a login for this user from this address is being checked; wait for it") from None

    def finish_login(self, ticket: Ticket, password: str) -> Caller:
        """Ask PAM (the ticket's wait is over); a new session, or AuthError(401).  Ends the ticket."""
        user = ticket.user
        ok: bool | None = None
        try:
            valid = bool(user) and isinstance(password, str) and 0 < len(password) <= MAX_PASSWORD
            ok = False
            if valid and "\x00" not in password:
                try:
                    ok = bool(self._check_password(user, password)) and bool(self._user_exists(user))
                except Exception:  # a broken PAM stack is a failed login, not a 500
                    ok = False
        finally:
            self.throttle.end(ticket, ok)
        if not ok:
            raise AuthError(401, _BAD_LOGIN)
        with self._lock:
            return self._new_session(user, self._clock())

    def _new_session(self, user: str, now: float) -> Caller:
        """Called with the lock held."""
        limit = self._console.session_seconds
        while self._sessions:
            oldest = next(iter(self._sessions.values()))
            if now - oldest.used <= limit and len(self._sessions) < MAX_SESSIONS:
                break
            self._sessions.popitem(last=False)
        mine = [sid for sid, s in self._sessions.items() if s.user == user]  # least recently used first
        for sid in mine[: max(0, len(mine) - MAX_USER_SESSIONS + 1)]:
            del self._sessions[sid]
        sid, csrf = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
        self._sessions[sid] = _Session(user, csrf, now)
        return Caller(user, "session", sid, csrf)

    def logout(self, caller: Caller) -> None:
        """Forget the caller's session (a token or proxy caller has none)."""
        if caller.via == "session" and caller.session_id is not None:
            with self._lock:
                self._sessions.pop(caller.session_id, None)

    # -- cross-site requests -------------------------------------------------------
    def check_csrf(self, caller: Caller, method: str, headers: Mapping[str, str]) -> None:
        """AuthError(403) for a state-changing request a browser may have been tricked into sending."""
        if method.upper() in _SAFE_METHODS or caller.via == "token":
            return
        _check_site(headers, required=caller.via == "proxy", hosts=self.hosts)
        if caller.via == "session":
            given = _one(headers, CSRF_HEADER, 403)
            if given is None:
                raise AuthError(403, f"the request has no {CSRF_HEADER} header")
            if caller.csrf is None or not SECRET_RE.fullmatch(given):
                raise AuthError(403, f"the {CSRF_HEADER} header does not match the session")
            if not hmac.compare_digest(given.encode("ascii"), caller.csrf.encode("ascii")):
                raise AuthError(403, f"the {CSRF_HEADER} header does not match the session")

    def check_login_origin(self, headers: Mapping[str, str]) -> None:
        """AuthError(403) for a login POST from another site (which would log the browser in as someone else)."""
        _check_site(headers, required=False, hosts=self.hosts)

    # -- cookies -------------------------------------------------------------------
    def cookie_header(self, caller: Caller, secure: bool) -> str:
        """The ``Set-Cookie`` value for the caller's session (a browser-session cookie; the server expires it);
        under TLS ``Secure`` and ``__Host-`` prefixed (Path=/, no Domain: no other host may set or read it)."""
        if caller.via != "session" or caller.session_id is None or not SECRET_RE.fullmatch(caller.session_id):
            raise ValueError("only a session caller has a session cookie")
        name = HOST_COOKIE if secure else SESSION_COOKIE
        return f"{name}={caller.session_id}; Path=/; HttpOnly; SameSite=Strict" + ("; Secure" if secure else "")

    def clear_cookie_header(self, secure: bool) -> str:
        """The ``Set-Cookie`` value that removes the session cookie."""
        name = HOST_COOKIE if secure else SESSION_COOKIE
        return f"{name}=; Path=/; Max-Age=0; HttpOnly; SameSite=Strict" + ("; Secure" if secure else "")


#: Seconds an answer of the user database is reused: every API call checks its token's user, and
#: ``getpwnam`` reads /etc/passwd (or asks NSS) each time.  A removed user's tokens die within this.
USER_TTL = 30.0
_users: dict[str, tuple[float, bool]] = {}
_users_lock = threading.Lock()


def user_exists(user: str, clock: Callable[[], float] = time.monotonic) -> bool:
    """The system knows ``user`` (a token for anyone else is refused); asked again after :data:`USER_TTL` s."""
    import pwd

    now = clock()
    with _users_lock:
        hit = _users.get(user)
    if hit is not None and now - hit[0] < USER_TTL:
        return hit[1]
    try:
        pwd.getpwnam(user)
        known = True
    except (KeyError, ValueError):
        known = False
    with _users_lock:
        if len(_users) >= MAX_SESSIONS:
            _users.clear()
        _users[user] = (now, known)
    return known
