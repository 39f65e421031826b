"""The console section of the spec: ``slurm-pool serve``'s web console and REST API.

Present, it also turns on Slurm's ``auth/jwt`` (``AuthAltTypes``), whose HS256
key (``jwt_key``) both slurmctld and the service read: API clients send a
token minted by ``scontrol token``, and the service mints one per action for
the user it acts for, so Slurm itself decides what that user may do.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Annotated, Optional

from pydantic import AfterValidator, Field

from slurm_pool.spec.base import Name, PlainPath, Strict, User
from slurm_pool.spec.bridge import Url

#: A host name as ``Host`` carries it (no port): DNS labels, an IPv4 address, or an IPv6 address in brackets.
HOST_RE = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?|\[[0-9A-Fa-f:.]{2,45}\]")
#: Slurm's own default place for the key (slurm.conf(5), AuthAltParameters).
DEFAULT_JWT_KEY = "/var/spool/slurm/statesave/jwt_hs256.key"
#: The header a trusted proxy names the user in: ``X-`` and words (``X-Remote-User``, ``X-Forwarded-User``), or
#: ``Remote-User``: a header no browser writes on its own.
HEADER_RE = re.compile(r"X(?:-[A-Za-z0-9]+){1,8}|Remote-User", re.IGNORECASE)
#: Headers a client writes or a proxy passes along (lower case): hop-by-hop (RFC 9110 section 7.6.1), the
#: request's own (RFC 9110, 9111, 6265, 6454, the Fetch standard), and the X- headers clients and proxies
#: set for other meanings.  The user's name must come in none of them.
CLIENT_HEADERS = frozenset(
    {
        "x-forwarded-for", "x-forwarded-host", "x-forwarded-proto", "x-forwarded-port", "x-forwarded-prefix",
        "x-forwarded-server", "x-real-ip", "x-client-ip", "x-cluster-client-ip", "x-original-url",
        "x-rewrite-url", "x-original-forwarded-for", "x-http-method-override", "x-http-method",
        "x-method-override", "x-requested-with", "x-csrf-token", "x-xsrf-token", "x-api-key", "x-auth-token",
        "x-access-token", "x-amz-security-token", "x-request-id", "x-correlation-id", "x-att-deviceid",
        "x-wap-profile", "x-uidh", "x-do-not-track", "x-powered-by", "x-frame-options", "x-content-type-options",
    }
)  # fmt: skip
#: The widest network a ``trusted_proxies`` entry may be: a proxy is a host or a few (a wider network lets
#: every client in it name any user).
MIN_PREFIX = {4: 24, 6: 64}
#: IPv6 blocks whose last 32 bits are an IPv4 address (RFC 4291 mapped and compatible, RFC 6052 NAT64): a
#: network there is as wide as its IPv4 part.
IPV4_IN_IPV6 = tuple(ipaddress.IPv6Network(n) for n in ("::ffff:0:0/96", "::/96", "64:ff9b::/96"))


def _network(v: str) -> str:
    try:
        net = ipaddress.ip_network(v, strict=False)
    except ValueError:
        raise ValueError(f"{v!r} is not an IP address or network (such as 10.0.0.5 or 10.0.0.0/24)") from None
    ip = ipaddress.ip_interface(v).ip
    if net.network_address != ip:
        whole = f", or {net} if that whole network is proxies" if net.prefixlen >= MIN_PREFIX[net.version] else ""
        raise ValueError(
            f"{v!r} has host bits set: it means all of {net} ({net.num_addresses} addresses), not the one proxy "
            f"{ip}; write {ip}{whole}"
        )
    embedded = net.version == 6 and any(net.subnet_of(block) for block in IPV4_IN_IPV6)
    if embedded and net.prefixlen - 96 < MIN_PREFIX[4]:
        raise ValueError(
            f"{v!r} holds {net.num_addresses} IPv4 addresses (IPv4 written in IPv6), and every client among them "
            f"could name any user: a trusted proxy network is at most /{96 + MIN_PREFIX[4]} there"
        )
    if net.prefixlen < MIN_PREFIX[net.version]:
        raise ValueError(
            f"{v!r} is {net.num_addresses} addresses, and every client among them could name any user: a trusted "
            f"proxy network is at most /{MIN_PREFIX[net.version]} (IPv{net.version})"
        )
    if net.is_unspecified or net.is_multicast:
        raise ValueError(f"{v!r} is no proxy's address")
    return v


def _header(v: str) -> str:
    if not HEADER_RE.fullmatch(v) or v.lower() in CLIENT_HEADERS:
        raise ValueError(
            f"{v!r} cannot name the user: browsers, clients or proxies write that header for other meanings; "
            "use a header of the proxy's own such as X-Remote-User (X- and words, or Remote-User)"
        )
    return v


def _host_name(v: str) -> str:
    if not HOST_RE.fullmatch(v) or len(v) > 253:
        raise ValueError(f"{v!r} is not a host name or IP address (such as pool.example.org or 10.0.0.5)")
    return v.lower()


Network = Annotated[str, AfterValidator(_network)]
HeaderName = Annotated[str, AfterValidator(_header)]
HostName = Annotated[str, AfterValidator(_host_name)]


class Console(Strict):
    """Who may use the web console and REST API, and how they prove who they are."""

    #: slurmctld's HS256 key (AuthAltParameters=jwt_key=...): readable by SlurmUser and the service only.
    jwt_key: PlainPath = DEFAULT_JWT_KEY
    #: Users who see every job and every node (Slurm's own operators still decide what they may change).
    operators: list[User] = []
    #: The PAM service browser logins are checked against.
    pam_service: Name = "login"
    #: A site proxy that authenticates users itself and names them in ``user_header``; trusted only from these.
    trusted_proxies: list[Network] = []
    user_header: HeaderName = "X-Remote-User"
    #: Seconds between reads of Slurm, whatever the number of clients.
    refresh_seconds: int = Field(default=10, ge=1, le=3600)
    #: Seconds a browser session lasts without use.
    session_seconds: int = Field(default=8 * 3600, ge=60, le=7 * 86400)
    #: Utilisation history is read from here when set, else kept by the service (short).
    prometheus_url: Optional[Url] = None
    #: The notebook tier's JupyterHub, linked from the console.
    hub_url: Optional[Url] = None
    #: The address users open (``https://pool.example.org/``): its host is allowed, and an https one makes the
    #: session cookie ``Secure`` and ``__Host-`` prefixed even behind a proxy that ends TLS.
    public_url: Optional[Url] = None
    #: Host names the service answers to (``Host``, ``Origin``); besides them: public_url's host, the
    #: address it listens on, and loopback (localhost, 127.0.0.1, [::1]).
    allowed_hosts: list[HostName] = []
    #: Seconds a connection may take to send a whole request, counted from when it opens or its last answer.
    request_seconds: int = Field(default=10, ge=1, le=300)
    #: Connections one client address may hold; past it, its oldest idle one is closed.
    connections_per_address: int = Field(default=256, ge=4, le=65536)
