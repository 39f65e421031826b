"""Placement checking: does a multiset of MIG profiles fit one GPU?

A *layout* is a list of profile names (order irrelevant).  A *placement*
assigns each instance a start memory slot.  A layout is valid when some
placement exists in which every instance starts at an allowed position, no two
instances share a memory slot, the per-profile counts and the one-``+me`` rule
hold and the compute slices add up to at most the GPU's total.
"""

from __future__ import annotations

from collections import Counter
from functools import lru_cache
from typing import Iterable, Sequence

from slurm_pool.mig.profiles import GEOMETRIES, MigGeometry, MigProfile

Layout = tuple[str, ...]
Placement = tuple[tuple[str, int], ...]


def canonical(geo: MigGeometry, profiles: Iterable[str]) -> Layout:
    """``profiles`` sorted largest first (memory, then compute, then name)."""

    def key(name: str) -> tuple[int, int, str]:
        p = geo.profiles[name]
        return (-p.memory, -p.compute, name)

    return tuple(sorted(profiles, key=key))


def _unknown(model: str, profiles: Sequence[str]) -> str | None:
    geo = GEOMETRIES.get(model)
    if geo is None:
        return f"unknown MIG-capable GPU model {model!r} (known: {', '.join(GEOMETRIES)})"
    for name in profiles:
        if name not in geo.profiles:
            return f"unknown profile {name!r} for {model} (known: {', '.join(geo.profiles)})"
    return None


def _search(geo: MigGeometry, profs: list[MigProfile]) -> list[int] | None:
    """Start slots for ``profs`` (same order) without overlap, or None."""
    order = sorted(range(len(profs)), key=lambda i: (len(profs[i].starts), -profs[i].memory))
    starts = [0] * len(profs)

    def go(k: int, used: int) -> bool:
        if k == len(order):
            return True
        i = order[k]
        p = profs[i]
        # Identical profiles are placed in increasing start order (symmetry).
        lo = -1
        if k > 0 and profs[order[k - 1]].name == p.name:
            lo = starts[order[k - 1]]
        for s in p.starts:
            if s <= lo:
                continue
            mask = ((1 << p.memory) - 1) << s
            if s + p.memory <= geo.memory_slots and not used & mask:
                starts[i] = s
                if go(k + 1, used | mask):
                    return True
        return False

    return starts if go(0, 0) else None


def _rule_problem(geo: MigGeometry, profiles: Sequence[str]) -> str | None:
    """Count, +me and totals; None when those rules hold."""
    counts = Counter(profiles)
    for name, n in counts.items():
        p = geo.profiles[name]
        if n > p.max_count:
            return f"count: {n} x {name} but at most {p.max_count} fit on one {geo.model}"
    me = [n for n in profiles if geo.profiles[n].media_ext]
    if len(me) > 1:
        return f"count: {len(me)} media-extension (+me) instances ({', '.join(me)}) but at most 1 per GPU"
    compute = sum(geo.profiles[n].compute for n in profiles)
    if compute > geo.compute_slices:
        return f"compute total: {compute} compute slices but {geo.model} has {geo.compute_slices}"
    memory = sum(geo.profiles[n].memory for n in profiles)
    if memory > geo.memory_slots:
        return f"overlap: {memory} memory slots needed but {geo.model} has {geo.memory_slots}"
    return None


def _starts_text(p: MigProfile) -> str:
    s = ", ".join(str(x) for x in p.starts)
    return f"{p.name} starts only at {s} ({p.memory} slot{'s' if p.memory > 1 else ''})"


def layout_problem(model: str, profiles: Sequence[str]) -> str | None:
    """None when some placement realises ``profiles`` on ``model``, else why not.

    The reason names an unknown profile, a count, the compute total, an
    overlap or a start position.
    """
    profiles = list(profiles)
    bad = _unknown(model, profiles)
    if bad:
        return bad
    geo = GEOMETRIES[model]
    bad = _rule_problem(geo, profiles)
    if bad:
        return bad
    if _search(geo, [geo.profiles[n] for n in profiles]) is not None:
        return None
    uniq = list(dict.fromkeys(canonical(geo, profiles)))
    return "start position: every placement overlaps; " + "; ".join(_starts_text(geo.profiles[n]) for n in uniq)


def _placements(geo: MigGeometry, profs: list[MigProfile]) -> list[list[int]]:
    """Every placement (start per instance, same order as ``profs``) up to symmetry."""
    order = sorted(range(len(profs)), key=lambda i: (-profs[i].memory, profs[i].name))
    starts = [0] * len(profs)
    out: list[list[int]] = []

    def go(k: int, used: int) -> None:
        if k == len(order):
            out.append(list(starts))
            return
        i = order[k]
        p = profs[i]
        lo = starts[order[k - 1]] if k > 0 and profs[order[k - 1]].name == p.name else -1
        for s in p.starts:
            mask = ((1 << p.memory) - 1) << s
            if s > lo and s + p.memory <= geo.memory_slots and not used & mask:
                starts[i] = s
                go(k + 1, used | mask)

    go(0, 0)
    return out


def _largest_addable(geo: MigGeometry, used: int, names: list[str]) -> int:
    best = 0
    compute = sum(geo.profiles[n].compute for n in names)
    for p in geo.profiles.values():
        if p.compute <= best or compute + p.compute > geo.compute_slices:
            continue
        if names.count(p.name) >= p.max_count or (p.media_ext and any(geo.profiles[n].media_ext for n in names)):
            continue
        if any(not used & (((1 << p.memory) - 1) << s) for s in p.starts if s + p.memory <= geo.memory_slots):
            best = p.compute
    return best


def find_placement(model: str, profiles: Sequence[str]) -> Placement | None:
    """A placement ``((profile, start), ...)`` sorted by start, or None.

    Of all placements, the one leaving room for the largest further profile
    is returned (ties: lowest starts for the largest instances).
    """
    if layout_problem(model, profiles) is not None:
        return None
    geo = GEOMETRIES[model]
    names = list(canonical(geo, profiles))
    profs = [geo.profiles[n] for n in names]
    best: tuple[int, list[int]] | None = None
    for starts in _placements(geo, profs):
        used = 0
        for p, s in zip(profs, starts, strict=False):
            used |= ((1 << p.memory) - 1) << s
        free = _largest_addable(geo, used, names)
        if best is None or free > best[0]:
            best = (free, starts)
    assert best is not None
    return tuple(sorted(zip(names, best[1], strict=False), key=lambda t: t[1]))


def placement_problem(model: str, placement: Sequence[tuple[str, int]]) -> str | None:
    """None when an explicit placement obeys every rule, else why not."""
    names = [n for n, _ in placement]
    bad = _unknown(model, names)
    if bad:
        return bad
    geo = GEOMETRIES[model]
    used = 0
    for name, start in placement:
        p = geo.profiles[name]
        if start not in p.starts:
            return f"start position: {_starts_text(p)}, not at {start}"
        mask = ((1 << p.memory) - 1) << start
        if used & mask:
            return f"overlap: {name} at {start} overlaps another instance"
        used |= mask
    return _rule_problem(geo, names)


@lru_cache(maxsize=None)
def valid_layouts(model: str) -> frozenset[Layout]:
    """Every valid layout of ``model`` (canonical order), including ``()``."""
    geo = GEOMETRIES[model]
    slots = [(p, s) for p in geo.profiles.values() for s in p.starts if s + p.memory <= geo.memory_slots]
    found: set[Layout] = set()

    def go(i: int, used: int, chosen: list[str]) -> None:
        if i == len(slots):
            if _rule_problem(geo, chosen) is None:
                found.add(canonical(geo, chosen))
            return
        go(i + 1, used, chosen)
        p, s = slots[i]
        mask = ((1 << p.memory) - 1) << s
        if not used & mask:
            chosen.append(p.name)
            go(i + 1, used | mask, chosen)
            chosen.pop()

    go(0, 0, [])
    return frozenset(found)


@lru_cache(maxsize=None)
def maximal_layouts(model: str) -> tuple[Layout, ...]:
    """Valid layouts to which no further instance can be added, sorted."""
    geo = GEOMETRIES[model]
    valid = valid_layouts(model)
    out = []
    for lay in valid:
        if not any(canonical(geo, lay + (n,)) in valid for n in geo.profiles):
            out.append(lay)
    return tuple(sorted(out))
