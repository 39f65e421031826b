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

A run that held the Lease leaves its record on it when it gives it back
(:func:`run_annotations`: how long it took, when it ended, how many steps it
carried out), kept across later claims; the exporter reads it back with
:func:`last_run` (the values are checked: anyone who may edit the Lease may
write them).
"""

from __future__ import annotations

import math
import re
from datetime import datetime, timedelta, timezone
from typing import Any, Mapping

from slurm_pool.bridge.objects import Unreadable, count, ident, mapping, show, string
from slurm_pool.errors import PoolError
from slurm_pool.text import shown

#: The MicroTime format of Lease times (RFC 3339 with microseconds).
_FMT = "%Y-%m-%dT%H:%M:%S.%fZ"
#: Annotations of the last run that held the Lease (what it took, when it ended, steps carried out).
RUN_SECONDS = "slurm-pool/last-run-seconds"
RUN_END = "slurm-pool/last-run-end"
RUN_STEPS = "slurm-pool/last-run-steps"
_SECONDS = re.compile(r"[0-9]{1,12}(?:\.[0-9]{1,9})?")
_STEPS = re.compile(r"[0-9]{1,9}")
_END = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]{1,6})?Z")


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


def _annotations(lease: Mapping[str, Any] | None) -> dict[str, str]:
    """The Lease's annotations that are text (kept by a replace, which would otherwise drop them)."""
    meta = lease.get("metadata") if isinstance(lease, Mapping) else None
    found = meta.get("annotations") if isinstance(meta, Mapping) else None
    if not isinstance(found, Mapping):
        return {}
    return {k: v for k, v in found.items() if isinstance(k, str) and isinstance(v, str)}


def run_annotations(seconds: float, end: datetime, steps: int | None = None) -> dict[str, str]:
    """The record a run leaves on the Lease it gives back."""
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"run seconds {seconds!r}: not a finite number >= 0")
    out = {RUN_SECONDS: f"{seconds:.3f}", RUN_END: _stamp(end)}
    if steps is not None:
        out[RUN_STEPS] = str(int(steps))
    return out


def last_run(lease: Mapping[str, Any] | None) -> dict[str, float]:
    """The last run's record on ``lease``: ``seconds``, ``end`` (Unix time) and ``steps``, those it has.

    Each value must match its form in full (a plain decimal number, an RFC 3339
    UTC time as :func:`run_annotations` writes it, a count): :class:`Unreadable`
    names the annotation and shows the value otherwise.
    """
    found = _annotations(lease)
    out: dict[str, float] = {}
    for key, name, form in ((RUN_SECONDS, "seconds", _SECONDS), (RUN_STEPS, "steps", _STEPS), (RUN_END, "end", _END)):
        if key not in found:
            continue
        text = found[key]
        if not form.fullmatch(text):
            raise Unreadable(
                f"{ident('Lease', lease)}: annotation {key}: {show(text)} is not {name} as a run writes it"
            )
        if name == "end":
            try:
                out[name] = datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
            except ValueError:
                raise Unreadable(f"{ident('Lease', lease)}: annotation {key}: {show(text)} is not a time") from None
        else:
            out[name] = float(text)
    return out


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
        kept = _annotations(lease)
        if kept:
            meta["annotations"] = kept
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


def released(lease: Mapping[str, Any], holder: str, record: Mapping[str, str] | None = None) -> dict[str, Any] | None:
    """The body that frees ``lease`` if ``holder`` still holds it (else None: leave it alone).

    ``record`` (:func:`run_annotations`) goes onto it, over the annotations it has.
    """
    if not isinstance(lease, Mapping) or not isinstance(lease.get("spec"), Mapping):
        return None
    spec = dict(lease["spec"])
    meta = lease.get("metadata")
    if spec.get("holderIdentity") != holder or not isinstance(meta, Mapping):
        return None
    spec.update(holderIdentity=None, renewTime=None, acquireTime=None)
    out_meta: dict[str, Any] = {"name": meta.get("name"), "resourceVersion": meta.get("resourceVersion")}
    annotations = {**_annotations(lease), **(record or {})}
    if annotations:
        out_meta["annotations"] = annotations
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": out_meta, "spec": spec}
