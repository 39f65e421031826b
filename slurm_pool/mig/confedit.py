"""Edit one node's GRES in a site's own gres.conf and slurm.conf text.

A remote ``mig apply`` changes a node's MIG layout; Slurm then needs that
node's gres.conf lines and its slurm.conf ``Gres=`` to say the same (scontrol.1,
``Gres=``: a GPU count changes only through both files).  These functions
rewrite only that node's part of the text: every other line, comment and node
stays as it was.  A line naming several nodes is split, so the others keep it.
Lines are split at ``\n`` only, as Slurm's parser does: a ``\x85`` or ``\u2028``
inside a comment stays inside it.  What is written (the node, its lines, its
``Gres=``) is checked to be one line of the node's own.  Pure text in, text out;
the caller reads and writes the files.
"""

from __future__ import annotations

import re
from typing import Sequence

from ClusterShell.NodeSet import NodeSet, NodeSetParseError

from slurm_pool.errors import InputError
from slurm_pool.text import check, check_free_text, control_chars


class ConfEditError(InputError):
    """A config file that cannot be edited safely for one node."""


_NODENAME_RE = re.compile(r"(\s*)nodename=(\S+)(.*)", re.IGNORECASE | re.DOTALL)
_GRES_RE = re.compile(r"(?i)gres=")
#: A slurm.conf ``Gres=`` value: ``gpu:TYPE:N`` items, comma-separated (empty: none).
_GRES_VALUE_RE = re.compile(r"[A-Za-z0-9_.:+-]+(?:,[A-Za-z0-9_.:+-]+)*")


def _lines(text: str) -> list[str]:
    """``text``'s lines, split where Slurm splits them (``\n``), without the last newline."""
    return text.removesuffix("\n").split("\n") if text else []


def _per_node_list(word: str) -> bool:
    """A ``NodeAddr``/``NodeHostname``/``Port`` value that lists one value per node."""
    key, _, value = word.partition("=")
    key = key.lower()
    if key in ("nodeaddr", "nodehostname"):
        return "[" in value or "," in value
    return key == "port" and any(c in value for c in "[,-")


def _nodes(hostlist: str, where: str) -> list[str]:
    if hostlist.upper() == "DEFAULT":
        return []
    try:
        return list(NodeSet(hostlist))
    except (NodeSetParseError, ValueError) as exc:
        raise ConfEditError(f"{where}: {hostlist!r} is not a valid hostlist ({exc})") from None


def _split(line: str, node: str, where: str) -> tuple[str, str, list[str]] | None:
    """(indent, rest, nodes) of a ``NodeName=`` line naming ``node``, else None."""
    m = _NODENAME_RE.fullmatch(line)
    if not m:
        return None
    nodes = _nodes(m.group(2), where)
    if node not in nodes:
        return None
    bad = [c for c in control_chars(line) if c != "\\x09"]  # a tab separates words as a space does
    if bad:
        raise ConfEditError(f"{where}: the line of {node} holds control characters ({', '.join(bad)}); edit it by hand")
    return m.group(1), m.group(3), nodes


def _others(indent: str, rest: str, nodes: list[str], node: str) -> list[str]:
    left = [n for n in nodes if n != node]
    return [f"{indent}NodeName={NodeSet.fromlist(left)}{rest}"] if left else []


def replace_node_gres_conf(text: str, node: str, lines: Sequence[str]) -> str:
    """gres.conf ``text`` with ``node``'s lines replaced by ``lines``.

    The new lines go where the node's first line was (at the end if it had none).
    ValueError when ``node`` is not a node name or a line is not one line naming it.
    """
    check("node", node, "node")
    for line in lines:
        check_free_text(line, "gres.conf line")
        if not line.startswith(f"NodeName={node} "):
            raise ValueError(f"gres.conf line: {line!r} does not start with NodeName={node}")
    out: list[str] = []
    placed = False
    for n, line in enumerate(_lines(text), 1):
        hit = _split(line, node, f"gres.conf line {n}")
        if hit is None:
            out.append(line)
            continue
        indent, rest, nodes = hit
        out.extend(_others(indent, rest, nodes, node))
        if not placed:
            out.extend(lines)
            placed = True
    if not placed:
        out.extend(lines)
    return "\n".join(out) + "\n"


def set_node_gres(text: str, node: str, gres: str) -> str:
    """slurm.conf ``text`` with ``node``'s ``Gres=`` set to ``gres`` (removed when empty).

    Raises :class:`ConfEditError` when no ``NodeName=`` line names the node, or when the
    shared line it is on gives per-node addresses or ports that cannot be split here;
    ValueError when ``node`` is not a node name or ``gres`` not a ``Gres=`` value.
    """
    check("node", node, "node")
    if gres and not _GRES_VALUE_RE.fullmatch(gres):
        raise ValueError(f"Gres: {gres!r} is not a Gres= value")
    out: list[str] = []
    found = False
    for n, line in enumerate(_lines(text), 1):
        where = f"slurm.conf line {n}"
        hit = None if line.lstrip().startswith("#") else _split(line, node, where)
        if hit is None:
            out.append(line)
            continue
        if found:
            raise ConfEditError(f"{where}: {node} has a second NodeName line; edit it by hand")
        found = True
        indent, rest, nodes = hit
        words = rest.split()
        shared = [w for w in words if _per_node_list(w)] if len(nodes) > 1 else []
        if shared:
            raise ConfEditError(
                f"{where}: {node} shares this line with per-node values ({' '.join(shared)}); "
                "give it its own NodeName line"
            )
        new = [f"Gres={gres}"] if gres else []
        mine = [x for w in words for x in (new if _GRES_RE.match(w) else [w])]
        if gres and not any(_GRES_RE.match(w) for w in words):
            mine += new
        out.extend(_others(indent, rest, nodes, node))
        out.append(f"{indent}NodeName={node} {' '.join(mine)}".rstrip())
    if not found:
        raise ConfEditError(f"slurm.conf has no NodeName line for {node}")
    return "\n".join(out) + "\n"


def node_gres(text: str, node: str) -> str | None:
    """The ``Gres=`` value slurm.conf ``text`` gives ``node`` ('' for none), or None if it names no such node."""
    for n, line in enumerate(_lines(text), 1):
        if line.lstrip().startswith("#"):
            continue
        hit = _split(line, node, f"slurm.conf line {n}")
        if hit is not None:
            for w in hit[1].split():
                if _GRES_RE.match(w):
                    return w.split("=", 1)[1]
            return ""
    return None


def node_lines(text: str, node: str, *, comments: bool = False) -> list[tuple[int, str]]:
    """(line number, line) of every ``NodeName=`` line of ``text`` whose hostlist names ``node``.

    ``comments``: whether ``#`` starts a comment line to skip (slurm.conf); gres.conf's
    comment lines never match ``NodeName=`` at their start anyway.
    """
    check("node", node, "node")
    out = []
    for n, line in enumerate(_lines(text), 1):
        if comments and line.lstrip().startswith("#"):
            continue
        if _split(line, node, f"line {n}") is not None:
            out.append((n, line))
    return out
