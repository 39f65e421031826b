"""Hostlist handling, delegated to ClusterShell's NodeSet."""

from __future__ import annotations

from ClusterShell.NodeSet import NodeSet, NodeSetParseError

from slurm_pool.errors import InputError


class HostlistError(InputError):
    pass


def expand(hostlist: str) -> list[str]:
    """Expand ``a-gpu[01-03]`` into its node names, in order."""
    try:
        nodes = list(NodeSet(hostlist))
    except (NodeSetParseError, ValueError) as exc:
        raise HostlistError(f"{hostlist!r} is not a valid hostlist ({exc})") from exc
    if not nodes:
        raise HostlistError(f"{hostlist!r} names no nodes")
    return nodes


def fold(nodes: list[str] | set[str]) -> str:
    """Fold node names into a compact, sorted hostlist string."""
    return str(NodeSet.fromlist(sorted(nodes)))
