"""Hostlist handling, delegated to ClusterShell's NodeSet."""

from __future__ import annotations

import re

from ClusterShell.NodeSet import NodeSet, NodeSetParseError

from slurm_pool import text
from slurm_pool.errors import InputError


class HostlistError(InputError):
    pass


#: The most nodes one hostlist may name (NodeSet takes minutes on ``n[1-100000000]``).
MAX_NODES = 65536
_BRACKET_RE = re.compile(r"\[([^\[\]]*)\]")
_RANGE_RE = re.compile(r"\s*(\d{1,12})(?:\s*-\s*(\d{1,12}))?(?:\s*/\s*(\d{1,12}))?\s*")
_HOST_RE = re.compile(r"[A-Za-z0-9._/\-\[\],]*")


def _patterns(hostlist: str) -> list[str]:
    """The top-level comma-separated patterns (commas inside brackets are ranges)."""
    out, depth, cur = [], 0, ""
    for ch in hostlist:
        depth += (ch == "[") - (ch == "]")
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    return [*out, cur]


def size_bound(hostlist: str) -> int:
    """How many names ``hostlist`` can expand to, from its brackets alone (no expansion)."""
    total = 0
    for pattern in _patterns(hostlist):
        size = 1
        for body in _BRACKET_RE.findall(pattern):
            n = 0
            for item in body.split(","):
                m = _RANGE_RE.fullmatch(item)
                if m is None:
                    continue  # NodeSet reports the syntax error
                lo, hi, step = int(m.group(1)), int(m.group(2) or m.group(1)), int(m.group(3) or 1)
                n += max(0, hi - lo) // max(step, 1) + 1
            size *= max(n, 1)
        total += size
    return total


def expand(hostlist: str) -> list[str]:
    """Expand ``a-gpu[01-03]`` into its node names, in order."""
    if not hostlist.isascii() or not _HOST_RE.fullmatch(hostlist):
        raise HostlistError(
            f"{hostlist!r} is not a valid hostlist (host names are ASCII letters, digits, '-', '_', '.')"
        )
    if size_bound(hostlist) > MAX_NODES:
        raise HostlistError(f"{hostlist!r} names more than {MAX_NODES} nodes")
    try:
        nodes = list(NodeSet(hostlist))
    except (NodeSetParseError, ValueError) as exc:
        raise HostlistError(f"{hostlist!r} is not a valid hostlist ({exc})") from exc
    if not nodes:
        raise HostlistError(f"{hostlist!r} names no nodes")
    for node in nodes:  # '/' outside brackets, a leading '-' or '.': a path or an option, not a node name
        if not text.matches("node", node):
            raise HostlistError(f"{hostlist!r} names {node!r}, which is not {text.SHAPES['node']}")
    return nodes


def fold(nodes: list[str] | set[str]) -> str:
    """Fold node names into a compact, sorted hostlist string."""
    return str(NodeSet.fromlist(sorted(nodes)))
