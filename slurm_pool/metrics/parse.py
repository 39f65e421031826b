"""Pure parsing of what ``sinfo --json`` / ``squeue --json`` say about GPUs.

Slurm 22.05 spells a node's GRES as ``gpu:nvidia_a100-sxm4-80gb:2`` (several
joined by commas, a type-less one as ``gpu:2``, sometimes with a ``(S:0-1)``
socket suffix) and what is in use as ``gpu:nvidia_a100-sxm4-80gb:1(IDX:0)``,
``gpu:nvidia_a100_2g.10gb:0(IDX:N/A)`` or, in later releases,
``gpu:a100:2(IDX:0,2)`` -- note the comma inside the parentheses.  A job's
allocation is in ``tres_alloc_str`` (``...,gres/gpu=2,gres/gpu:<type>=2``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

#: Node base states or flags that make a node's free GPUs unusable (down).
DOWN_STATES = frozenset({"DOWN", "UNKNOWN", "FUTURE", "ERROR", "NOT_RESPONDING", "POWERED_DOWN", "POWER_DOWN"})
#: Node flags that make its free GPUs unusable on purpose (drained).
DRAIN_STATES = frozenset({"DRAIN", "DRAINED", "DRAINING", "FAIL", "FAILING"})
#: Job states whose GRES are held on a node.
HOLDING_STATES = frozenset({"RUNNING", "SUSPENDED", "COMPLETING", "STAGE_OUT"})


@dataclass(frozen=True)
class GresItem:
    """One ``name[:type]:count[(...)]`` entry of a GRES string."""

    name: str
    type: str
    count: int
    indexes: tuple[int, ...] | None = None


def split_top(text: str) -> list[str]:
    """Split at commas that are not inside parentheses."""
    parts: list[str] = []
    depth = 0
    cur: list[str] = []
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth = max(0, depth - 1)
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return [p.strip() for p in parts if p.strip()]


def parse_indexes(detail: str) -> tuple[int, ...] | None:
    """``IDX:0-1,3`` -> (0, 1, 3); ``IDX:N/A`` -> (); no IDX part -> None."""
    for field in detail.split("|"):
        field = field.strip()
        if not field.upper().startswith("IDX:"):
            continue
        spec = field[4:].strip()
        if not spec or spec.upper() == "N/A":
            return ()
        out: list[int] = []
        for rng in spec.split(","):
            lo, _, hi = rng.partition("-")
            if not lo.isdigit() or (hi and not hi.isdigit()):
                return None
            out.extend(range(int(lo), int(hi or lo) + 1))
        return tuple(out)
    return None


def parse_gres(text: str | None) -> list[GresItem]:
    """Every well-formed entry of a GRES (or GRES-used) string; the rest is ignored."""
    if not text or text.strip() in ("(null)", "N/A"):
        return []
    items: list[GresItem] = []
    for part in split_top(text):
        head, _, rest = part.partition("(")
        fields = [f for f in head.strip().split(":") if f != "no_consume"]
        if not fields or not fields[0]:
            continue
        name = fields[0]
        if len(fields) == 1:
            count_s, gtype = "1", ""
        else:
            count_s, gtype = fields[-1], ":".join(fields[1:-1])
        if not count_s.isdigit():
            # ``gpu:a100`` (type, no count) means one of that type.
            if len(fields) == 2 and count_s:
                count_s, gtype = "1", fields[1]
            else:
                continue
        items.append(GresItem(name, gtype, int(count_s), parse_indexes(rest.rstrip(")")) if rest else None))
    return items


def gpu_counts(text: str | None) -> dict[str, int]:
    """GPU units per GRES type (``""`` for type-less GPUs) in a GRES string."""
    out: dict[str, int] = {}
    for item in parse_gres(text):
        if item.name == "gpu":
            out[item.type] = out.get(item.type, 0) + item.count
    return out


def parse_tres(text: str | None) -> dict[str, float]:
    """``cpu=1,mem=1G,gres/gpu=2`` -> {"cpu": 1, "gres/gpu": 2}; sizes like ``1G`` are skipped."""
    out: dict[str, float] = {}
    for part in (text or "").split(","):
        key, sep, val = part.strip().partition("=")
        if not sep or not key:
            continue
        try:
            out[key] = float(val)
        except ValueError:
            continue
    return out


def job_gpus(raw: dict[str, Any]) -> int:
    """GPU units a job holds (all its nodes), from squeue's JSON for it."""
    tres = parse_tres(raw.get("tres_alloc_str"))
    if "gres/gpu" in tres:
        return int(tres["gres/gpu"])
    typed = [v for k, v in tres.items() if k.startswith("gres/gpu:")]
    if typed:
        return int(sum(typed))
    return sum(sum(gpu_counts(d).values()) for d in raw.get("gres_detail") or () if isinstance(d, str))


def job_nodes(raw: dict[str, Any]) -> list[str]:
    """Names of the nodes a job is allocated, from squeue's JSON for it."""
    res = raw.get("job_resources")
    if isinstance(res, dict):
        names = [n.get("nodename") for n in res.get("allocated_nodes") or () if isinstance(n, dict)]
        if names and all(isinstance(n, str) and n for n in names):
            return names  # type: ignore[return-value]
    nodes = raw.get("nodes")
    if isinstance(nodes, dict):
        nodes = nodes.get("list") or ""
    if isinstance(nodes, list):
        return [str(n) for n in nodes]
    return expand_hostlist(nodes or "")


def expand_hostlist(text: str) -> list[str]:
    """``a-gpu[1-2],b-gpu1`` -> names (ClusterShell; no spec machinery)."""
    if not text:
        return []
    from ClusterShell.NodeSet import NodeSet, NodeSetParseError

    try:
        return list(NodeSet(text))
    except (NodeSetParseError, ValueError):
        return [text]


def node_gpu_states(state: Iterable[str], gres: str, gres_used: str) -> dict[str, dict[str, int]]:
    """GPU units of one node by type and state (allocated, idle, drained, down).

    Units in use are ``allocated`` whatever the node's state; free units are
    ``drained`` on a drained/draining/failing node, ``down`` on a node that is
    down or not responding, and ``idle`` otherwise.
    """
    states = {s.upper() for s in state}
    total = gpu_counts(gres)
    used = gpu_counts(gres_used)
    if states & DRAIN_STATES:
        free_state = "drained"
    elif states & DOWN_STATES:
        free_state = "down"
    else:
        free_state = "idle"
    out: dict[str, dict[str, int]] = {}
    for gtype in list(total) + [t for t in used if t not in total]:
        n_used = used.get(gtype, 0)
        free = max(0, total.get(gtype, 0) - n_used)
        row = {"allocated": n_used, "idle": 0, "drained": 0, "down": 0}
        row[free_state] += free
        out[gtype] = row
    return out
