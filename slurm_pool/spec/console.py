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

#: An HTTP header name (RFC 9110 token), matched in full.
HEADER_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]{0,63}")
#: A host name as ``Host`` carries it (no port): DNS labels, an IPv4 address, or an IPv6 address in brackets.
HOST_RE = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?|\[[0-9A-Fa-f:.]{2,45}\]")
#: Slurm's own default place for the key (slurm.conf(5), AuthAltParameters).
DEFAULT_JWT_KEY = "/var/spool/slurm/statesave/jwt_hs256.key"


def _network(v: str) -> str:
    try:
        ipaddress.ip_network(v, strict=False)
    except ValueError:
        raise ValueError(f"{v!r} is not an IP address or network (such as 10.0.0.5 or 10.0.0.0/24)") from None
    return v


def _header(v: str) -> str:
    if not HEADER_RE.fullmatch(v):
        raise ValueError(f"{v!r} is not an HTTP header name (letters, digits and '-')")
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
