"""Which host names the service answers to: ``Host`` and ``Origin`` checked against one allowed list.

A request whose ``Host`` is not on the list is refused (a DNS name an attacker points at the service,
as in DNS rebinding, never reaches the application), and an ``Origin`` must name an allowed host too.
The list is the spec's ``console.allowed_hosts``, the host of ``console.public_url``, the address
``serve`` listens on, and loopback.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from typing import Iterable
from urllib.parse import urlsplit

#: Loopback names, always allowed: a browser on the service's own machine.
LOOPBACK = ("localhost", "127.0.0.1", "[::1]")
#: ``host[:port]`` as a Host header carries it.
_HOST_HEADER_RE = re.compile(r"(?P<host>[A-Za-z0-9.-]{1,253}|\[[0-9A-Fa-f:.]{2,45}\])(?::(?P<port>[0-9]{1,5}))?")
_WILDCARDS = frozenset({"0.0.0.0", "::", "[::]", ""})


def host_form(host: str) -> str:
    """``host`` as a Host header writes it: lower case, an IPv6 address in brackets."""
    host = host.strip().lower()
    if ":" in host and not host.startswith("["):
        return f"[{host}]"
    return host


def split_host(value: str) -> tuple[str, int | None] | None:
    """The host (lower case) and port of a ``Host`` header value; None when it is not one."""
    m = _HOST_HEADER_RE.fullmatch(value.strip())
    if m is None:
        return None
    port = int(m["port"]) if m["port"] is not None else None
    if port is not None and not 0 < port < 65536:
        return None
    return m["host"].lower(), port


@dataclass(frozen=True)
class AllowedHosts:
    """The host names (no ports) a request may name in ``Host`` and ``Origin``."""

    names: frozenset[str]

    @classmethod
    def of(cls, configured: Iterable[str], public_url: str | None = None, listen: str | None = None) -> AllowedHosts:
        """The list for a service: ``configured``, ``public_url``'s host, ``listen`` (unless a wildcard) and loopback."""
        names = {host_form(h) for h in configured}
        names.update(LOOPBACK)
        if public_url:
            host = urlsplit(public_url).hostname
            if host:
                names.add(host_form(host))
        if listen is not None and listen.strip().lower() not in _WILDCARDS:
            names.add(host_form(listen))
        return cls(frozenset(names))

    def host_ok(self, value: str | None) -> bool:
        """``value`` (a Host header) names an allowed host."""
        if value is None:
            return False
        parts = split_host(value)
        return parts is not None and self.name_ok(parts[0])

    def name_ok(self, host: str) -> bool:
        """``host`` (no port) is allowed."""
        host = host_form(host)
        if host in self.names:
            return True
        try:  # another spelling of an allowed address (127.000.000.001 is not one: ip_address refuses it)
            addr = ipaddress.ip_address(host.strip("[]"))
        except ValueError:
            return False
        return any(host_form(str(addr)) == n or (addr.is_loopback and n in LOOPBACK) for n in self.names)
