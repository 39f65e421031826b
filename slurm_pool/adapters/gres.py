"""GRES and TRES strings as Slurm prints them, every supported release.  Stdlib only.

A node's GRES reads ``gpu:nvidia_a100-sxm4-80gb:2`` (several joined by commas,
a type-less one as ``gpu:2``, sometimes with a ``(S:0-1)`` socket suffix); what
is in use reads ``gpu:nvidia_a100-sxm4-80gb:1(IDX:0)``,
``gpu:nvidia_a100_2g.10gb:0(IDX:N/A)`` or ``gpu:a100:2(IDX:0,2)`` -- note the
comma inside the parentheses.  A job's allocation is a TRES string
(``cpu=1,mem=1G,gres/gpu=2,gres/gpu:<type>=2``); ``sacct --json`` gives TRES as
lists of ``{type, name, count}``.  Recorded examples: ``tests/data/slurm/``.

Counts are what Slurm's 64-bit fields hold (:data:`~slurm_pool.adapters.slurmjson.UINT64_MAX`):
a GRES entry past it is no entry (:func:`parse_gres`), and a GPU or shard count in a
job's TRES that is not a whole number in range is
:class:`~slurm_pool.adapters.slurmjson.Unusable` (its record is reported and skipped).
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any, Iterable, NamedTuple

from slurm_pool.adapters.slurmjson import UINT64_MAX, Unusable, whole


class GresItem(NamedTuple):
    """One ``name[:type]:count[(...)]`` entry of a GRES string (a NamedTuple: the node
    hooks import this module, and a dataclass would pull in ``inspect``)."""

    name: str
    type: str
    count: int  # type: ignore[assignment]  # shadows tuple.count on purpose: the GRES field name
    indexes: tuple[int, ...] | None = None


def split_top(text: str) -> list[str]:
    """Split at commas that are not inside parentheses."""
    if "," not in text:  # one entry, the common case: no character loop
        return [text.strip()] if text.strip() else []
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
            if not (lo.isascii() and lo.isdigit()) or (hi and not (hi.isascii() and hi.isdigit())):
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
        if not (count_s.isascii() and count_s.isdigit()):
            # ``gpu:a100`` (type, no count) means one of that type.
            if len(fields) == 2 and count_s:
                count_s, gtype = "1", fields[1]
            else:
                continue
        if len(count_s) > 20 or int(count_s) > UINT64_MAX:  # past what Slurm holds: no count
            continue
        items.append(GresItem(name, gtype, int(count_s), parse_indexes(rest.rstrip(")")) if rest else None))
    return items


def check_gres(text: str, what: str) -> str:
    """``text`` if every count in it is one Slurm holds; :class:`Unusable` naming the first that is not."""
    for part in split_top(text or ""):
        fields = part.partition("(")[0].strip().split(":")
        count = fields[-1] if len(fields) > 1 else ""
        if count.isascii() and count.isdigit() and (len(count) > 20 or int(count) > UINT64_MAX):
            raise Unusable(f"{what} {part[:64]!r}: count past {UINT64_MAX}")
    return text


def gpu_counts(text: str | None) -> dict[str, int]:
    """GPU units per GRES type (``""`` for type-less GPUs) in a GRES string."""
    out: dict[str, int] = {}
    for item in parse_gres(text):
        if item.name == "gpu":
            out[item.type] = out.get(item.type, 0) + item.count
    return out


_COUNT_RE = re.compile(r"[0-9]{1,18}(?:\.[0-9]{1,9})?")


def parse_tres(text: str | None) -> dict[str, float]:
    """``cpu=1,mem=1G,gres/gpu=2`` -> {"cpu": 1, "gres/gpu": 2}; sizes like ``1G`` are skipped."""
    out: dict[str, float] = {}
    for part in (text or "").split(","):
        key, sep, val = part.strip().partition("=")
        if not sep or not key:
            continue
        if _COUNT_RE.fullmatch(val):  # ASCII digits only: float() also takes "1_0", "١" and "nan"
            out[key] = float(val)
    return out


def _gres_tres(text: str | None) -> dict[str, float]:
    """:func:`parse_tres`, with every GPU and shard count checked: :class:`Unusable` unless a whole count."""
    tres = parse_tres(text)
    for part in (text or "").split(","):
        key, sep, val = part.strip().partition("=")
        if sep and (key in ("gres/gpu", "gres/shard") or key.startswith(("gres/gpu:", "gres/shard:"))):
            tres[key] = whole(val, f"TRES {key}", most=UINT64_MAX)
    return tres


def tres_gpus(text: str | None) -> int:
    """GPU units in a TRES string: ``gres/gpu``, else the sum of its typed entries."""
    tres = _gres_tres(text)
    if "gres/gpu" in tres:
        return int(tres["gres/gpu"])
    return int(sum(v for k, v in tres.items() if k.startswith("gres/gpu:")))


def tres_gpu_types(text: str | None) -> Counter[str]:
    """GPU units per GRES type in a TRES string (``gres/gpu:TYPE=N``)."""
    out: Counter[str] = Counter()
    for k, v in _gres_tres(text).items():
        if k.startswith("gres/gpu:"):
            out[k[len("gres/gpu:") :]] += int(v)
    return out


def tres_list_gpus(items: Iterable[Any]) -> tuple[int, Counter[str]]:
    """GPU units and units per type in ``sacct --json``'s TRES lists (``{type, name, count}``)."""
    total: int = 0
    typed: Counter[str] = Counter()
    for it in items:
        if not isinstance(it, dict) or it.get("type") != "gres":
            continue
        name = str(it.get("name") or "")
        if name != "gpu" and not name.startswith("gpu:"):
            continue
        count = whole(it.get("count"), f"TRES gres/{name} count", most=UINT64_MAX)
        if name == "gpu":
            total = max(total, count)
        elif name.startswith("gpu:"):
            typed[name[4:]] += count
    return (total or sum(typed.values())), typed


_SHARD_REQUEST_RE = re.compile(r"gres[:/]shard(?::(?![0-9]+\Z)[^:=]+)?(?::([0-9]+))?")


def tres_shards(value: Any) -> int:
    """Shards (``gres/shard``) in a TRES string or list, or a request such as ``gres/shard:2``.

    Allocations read ``gres/shard=2`` (squeue's ``tres_alloc_str``) or
    ``{type: gres, name: shard, count: 2}`` (sacct); requests read
    ``gres:shard:2`` on 22.05 and ``gres/shard:2`` later (``tres_per_node``).
    """
    if isinstance(value, list):
        return sum(
            whole(it.get("count"), "TRES gres/shard count", most=UINT64_MAX)
            for it in value
            if isinstance(it, dict) and it.get("type") == "gres" and str(it.get("name") or "").split(":")[0] == "shard"
        )
    if not isinstance(value, str):
        return 0
    tres = _gres_tres(value)
    if "gres/shard" in tres:
        return int(tres["gres/shard"])
    typed = int(sum(v for k, v in tres.items() if k.startswith("gres/shard:")))
    if typed:
        return typed
    total = 0
    for item in value.split(","):
        m = _SHARD_REQUEST_RE.fullmatch(item.strip())
        if m:
            total += int(m.group(1) or 1)
    return total
