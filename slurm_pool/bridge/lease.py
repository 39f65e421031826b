"""One rebalance run at a time, with a Kubernetes Lease (``coordination.k8s.io/v1``).

The lock lives in the API server, not in a local file, so it holds across
hosts and survives a crash: a run that dies leaves a Lease that expires after
``leaseDurationSeconds``.  Creating and updating it carry the
``resourceVersion`` just read, so of two runs racing for a free Lease the API
server lets exactly one win (409 for the other).  Pure: the bodies are plain
dicts; :class:`slurm_pool.bridge.k8s.K8sAPI` does the calls.

A Lease the run cannot read (a field of the wrong shape) is never taken for a
free one: :func:`claim` raises :class:`~slurm_pool.bridge.objects.Unreadable`,
so the run stops before it changes anything.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any, Mapping

from slurm_pool.bridge.objects import Unreadable, count, ident, mapping, show, string
from slurm_pool.errors import PoolError
from slurm_pool.text import shown

#: The MicroTime format of Lease times (RFC 3339 with microseconds).
_FMT = "%Y-%m-%dT%H:%M:%S.%fZ"


class LeaseHeld(PoolError):
    """Another run holds the Lease (``rebalance`` then changes nothing and exits 0)."""


def _time(spec: Mapping[str, Any], key: str) -> datetime | None:
    """A Lease time (RFC 3339, as the API server or the client writes it); UTC when it has no offset."""
    text = string(spec, key, f"spec.{key}")
    if not text:
        return None
    try:
        t = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise Unreadable(f"spec.{key}: {show(text)} is not an RFC 3339 time") from None
    return t if t.tzinfo else t.replace(tzinfo=timezone.utc)


def _stamp(t: datetime) -> str:
    return t.astimezone(timezone.utc).strftime(_FMT)


def _spec(lease: Any) -> Mapping[str, Any]:
    if not isinstance(lease, Mapping):
        raise Unreadable(f"Lease: {show(lease)} is not an object")
    return mapping(lease, "spec", "spec")


def holder_of(lease: Mapping[str, Any] | None, now: datetime) -> tuple[str, datetime] | None:
    """``(holder, expiry)`` while someone holds ``lease`` at ``now``; None when it is free or expired.

    :class:`Unreadable` when a field it reads has the wrong shape.
    """
    if lease is None:
        return None
    try:
        spec = _spec(lease)
        holder = string(spec, "holderIdentity", "spec.holderIdentity")
        renewed = _time(spec, "renewTime") or _time(spec, "acquireTime")
        duration = spec.get("leaseDurationSeconds")
        seconds = None if duration is None else count(duration, "spec.leaseDurationSeconds")
    except Unreadable as exc:
        raise Unreadable(f"{ident('Lease', lease)}: {exc}") from None
    if not holder or renewed is None or seconds is None:
        return None
    try:
        expiry = renewed + timedelta(seconds=seconds)
    except OverflowError:
        expiry = datetime.max.replace(tzinfo=timezone.utc)
    return (holder, expiry) if now < expiry else None


def claim(lease: Mapping[str, Any] | None, name: str, holder: str, now: datetime, duration: int) -> dict[str, Any]:
    """The Lease body that makes ``holder`` its holder for ``duration`` s from ``now``.

    ``lease`` is the one just read (None: it does not exist yet).  Raises
    :class:`LeaseHeld` while another holder's Lease is live.
    """
    current = holder_of(lease, now)
    if current is not None and current[0] != holder:
        raise LeaseHeld(
            f"another rebalance run ({shown(current[0])}) holds Lease {name} until {_stamp(current[1])}; not running"
        )
    meta: dict[str, Any] = {"name": name}
    transitions = 0
    if lease is not None:
        try:
            rv = string(mapping(lease, "metadata", "metadata"), "resourceVersion", "metadata.resourceVersion")
            raw = _spec(lease).get("leaseTransitions")
            transitions = 0 if raw is None else count(raw, "spec.leaseTransitions")
        except Unreadable as exc:
            raise Unreadable(f"{ident('Lease', lease)}: {exc}") from None
        if rv:
            meta["resourceVersion"] = rv
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
    if not isinstance(lease, Mapping) or not isinstance(lease.get("spec"), Mapping):
        return None
    spec = dict(lease["spec"])
    meta = lease.get("metadata")
    if spec.get("holderIdentity") != holder or not isinstance(meta, Mapping):
        return None
    spec.update(holderIdentity=None, renewTime=None, acquireTime=None)
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": meta.get("name"), "resourceVersion": meta.get("resourceVersion")},
        "spec": spec,
    }
