"""One rebalance run at a time, with a Kubernetes Lease (``coordination.k8s.io/v1``).

The lock lives in the API server, not in a local file, so it holds across
hosts and survives a crash: a run that dies leaves a Lease that expires after
``leaseDurationSeconds``.  Creating and updating it carry the
``resourceVersion`` just read, so of two runs racing for a free Lease the API
server lets exactly one win (409 for the other).  Pure: the bodies are plain
dicts; :class:`slurm_pool.bridge.k8s.K8sAPI` does the calls.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any, Mapping

from slurm_pool.errors import PoolError

#: The MicroTime format of Lease times (RFC 3339 with microseconds).
_FMT = "%Y-%m-%dT%H:%M:%S.%fZ"


class LeaseHeld(PoolError):
    """Another run holds the Lease (``rebalance`` then changes nothing and exits 0)."""


def _time(text: str | None) -> datetime | None:
    """A Lease time (RFC 3339, as the API server or the client writes it); UTC when it has no offset."""
    if not text:
        return None
    try:
        t = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return t if t.tzinfo else t.replace(tzinfo=timezone.utc)


def _stamp(t: datetime) -> str:
    return t.astimezone(timezone.utc).strftime(_FMT)


def holder_of(lease: Mapping[str, Any] | None, now: datetime) -> tuple[str, datetime] | None:
    """``(holder, expiry)`` while someone holds ``lease`` at ``now``; None when it is free or expired."""
    spec = (lease or {}).get("spec") or {}
    holder = spec.get("holderIdentity")
    renewed = _time(spec.get("renewTime")) or _time(spec.get("acquireTime"))
    duration = spec.get("leaseDurationSeconds")
    if not holder or renewed is None or not isinstance(duration, int):
        return None
    expiry = renewed + timedelta(seconds=duration)
    return (holder, expiry) if now < expiry else None


def claim(lease: Mapping[str, Any] | None, name: str, holder: str, now: datetime, duration: int) -> dict[str, Any]:
    """The Lease body that makes ``holder`` its holder for ``duration`` s from ``now``.

    ``lease`` is the one just read (None: it does not exist yet).  Raises
    :class:`LeaseHeld` while another holder's Lease is live.
    """
    current = holder_of(lease, now)
    if current is not None and current[0] != holder:
        raise LeaseHeld(
            f"another rebalance run ({current[0]}) holds Lease {name} until {_stamp(current[1])}; not running"
        )
    meta: dict[str, Any] = {"name": name}
    rv = ((lease or {}).get("metadata") or {}).get("resourceVersion")
    if rv:
        meta["resourceVersion"] = rv
    transitions = ((lease or {}).get("spec") or {}).get("leaseTransitions") or 0
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": meta,
        "spec": {
            "holderIdentity": holder,
            "leaseDurationSeconds": duration,
            "acquireTime": _stamp(now),
            "renewTime": _stamp(now),
            "leaseTransitions": transitions + (current is None and lease is not None),
        },
    }


def released(lease: Mapping[str, Any], holder: str) -> dict[str, Any] | None:
    """The body that frees ``lease`` if ``holder`` still holds it (else None: leave it alone)."""
    spec = dict(lease.get("spec") or {})
    if spec.get("holderIdentity") != holder:
        return None
    meta = lease.get("metadata") or {}
    spec.update(holderIdentity=None, renewTime=None, acquireTime=None)
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": meta.get("name"), "resourceVersion": meta.get("resourceVersion")},
        "spec": spec,
    }
