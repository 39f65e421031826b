"""Loopback ports of local clusters: which are free, which cluster holds one, and a free port base.

Every local cluster takes ports from its port base up (:meth:`Layout.port`, and
one slurmd port per node from ``base + 100``).  A second cluster on the same
base used to wait 60 s for "MariaDB" -- the first cluster's -- and fail; now
``up`` checks its ports first and names the cluster holding one, and a new
cluster without a chosen base takes the first free one.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Iterable

#: Ports one cluster may use from its base (services, then one per node from +100).
SPAN = 200
#: Bases tried for a new cluster: the default, then every SPAN ports up.
TRIES = 40


def busy(port: int) -> bool:
    """Something listens on (or holds) 127.0.0.1:``port``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def clusters(roots: Iterable[Path]) -> list[tuple[Path, str, int]]:
    """``(state dir, cluster name, port base)`` of every cluster recorded under ``roots``' parents."""
    out: list[tuple[Path, str, int]] = []
    seen: set[Path] = set()
    for parent in {r.parent for r in roots}:
        try:
            dirs = sorted(p for p in parent.iterdir() if p.is_dir())
        except OSError:
            continue
        for d in dirs:
            if d in seen:
                continue
            seen.add(d)
            try:
                saved = json.loads((d / "cluster.json").read_text())
            except (OSError, ValueError):
                continue
            base = saved.get("port_base") if isinstance(saved, dict) else None
            if isinstance(base, int) and not isinstance(base, bool):
                out.append((d, str(saved.get("cluster", d.name)), base))
    return out


def holder(port: int, others: list[tuple[Path, str, int]], me: Path) -> str:
    """Who holds ``port``, in words: a recorded local cluster whose ports cover it, else "another program"."""
    for root, name, base in others:
        if root != me and base <= port < base + SPAN:
            return f"the local cluster {name!r} (state {root}, port base {base})"
    return "another program"


def free_base(start: int, others: list[tuple[Path, str, int]], wanted: Iterable[int]) -> int:
    """The first base from ``start`` (in SPAN steps) that no recorded cluster uses and whose ports are free;
    ``wanted``: the offsets from the base this cluster needs."""
    offsets = list(wanted)
    taken = [b for _, _, b in others]
    for i in range(TRIES):
        base = start + i * SPAN
        if base + SPAN > 65535:
            break
        if any(abs(base - b) < SPAN for b in taken):
            continue
        if not any(busy(base + o) for o in offsets):
            return base
    return start


__all__ = ["SPAN", "busy", "clusters", "free_base", "holder"]
