"""Demand-driven MIG layouts with the least reconfiguration.

Objective, lexicographic (earlier levels strictly dominate later ones):

1. cover as many demanded compute slices as possible (sum over profiles of
   ``compute * min(demand, instances)``),
2. then as many demanded instances as possible,
3. then change as few GPUs as possible (busy GPUs are never changed; a GPU
   is changed when its layout, as a multiset, differs from the current one),
4. then use as few GPUs as possible (GPUs with at least one instance),
5. then leave the largest free profiles (sum over GPUs of the compute slices
   of the largest profile that could still be added),
6. then create as few instances as possible (no surplus).

Exact method: GPUs with the same current layout and busy flag are
interchangeable, and a changed GPU may receive any valid layout whatever it
had before.  So an integer program over ``k_t`` (GPUs of type ``t`` kept) and
``y_L`` (changed GPUs given layout ``L``, over *all* valid layouts of the
model) plus the covered counts is exact and has a size independent of the
number of GPUs.  Each level is solved with HiGHS (``scipy.optimize.milp``)
with the earlier optima fixed as constraints.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Iterable, Mapping, NamedTuple, Sequence

import numpy as np

from slurm_pool.errors import InputError
from slurm_pool.mig.placement import Layout, canonical, layout_problem, valid_layouts
from slurm_pool.mig.profiles import GEOMETRIES, geometry
from slurm_pool.text import matches, shown, strict_int

#: Bounds on a plan read from a file: GPU indexes per node (as the spec's gpus.count) and demand counts.
MAX_GPU_INDEX = 64
MAX_DEMAND = 100_000


class PlanError(InputError):
    """The planner's input is invalid (unknown profile, invalid layout, ...)."""


@dataclass(frozen=True)
class Gpu:
    """One physical GPU: where it is, its current layout and whether jobs run on it.

    ``current`` is ``None`` when MIG is off (a whole GPU), else a layout
    (``()`` is an empty MIG GPU).
    """

    node: str
    index: int
    current: Layout | None = ()
    busy: bool = False


class Score(NamedTuple):
    """The plan's objective values, one per level."""

    covered_slices: int
    covered: int
    changed: int
    used: int
    free: int
    instances: int

    def key(self) -> tuple[int, ...]:
        """Larger is better, lexicographically."""
        return (self.covered_slices, self.covered, -self.changed, -self.used, self.free, -self.instances)


@dataclass
class Plan:
    """Per-GPU layouts plus what demand they cover."""

    model: str
    gpus: list[Gpu]
    layouts: list[Layout | None]
    demand: dict[str, int]
    covered: dict[str, int]
    unmet: dict[str, int]
    score: Score
    method: str = "milp"
    notes: list[str] = field(default_factory=list)

    def changed(self) -> list[int]:
        """Indices (into ``gpus``) of the GPUs whose layout changes."""
        return [i for i, (g, lay) in enumerate(zip(self.gpus, self.layouts, strict=False)) if lay != g.current]

    def to_dict(self) -> dict[str, object]:
        """Machine form; :func:`plan_from_dict` reads it back (``mig apply --plan``)."""
        return {
            "version": 1,
            "model": self.model,
            "gpus": [
                {
                    "node": g.node,
                    "index": g.index,
                    "busy": g.busy,
                    "current": None if g.current is None else list(g.current),
                    "layout": None if lay is None else list(lay),
                    "changed": lay != g.current,
                }
                for g, lay in zip(self.gpus, self.layouts, strict=False)
            ],
            "demand": dict(self.demand),
            "covered": dict(self.covered),
            "unmet": {p: n for p, n in self.unmet.items() if n},
            "score": self.score._asdict(),
            "method": self.method,
        }


def plan_from_dict(data: Mapping[str, object]) -> Plan:
    """Read a plan written by :meth:`Plan.to_dict`; PlanError when malformed."""
    try:
        if not isinstance(data, Mapping):
            raise PlanError(f"a plan is a JSON object, not {type(data).__name__}")
        model = data["model"]
        if not isinstance(model, str) or model not in GEOMETRIES:
            raise PlanError(f"model: {model!r} is not a MIG-capable GPU model (known: {', '.join(GEOMETRIES)})")
        rows = data["gpus"]
        if not isinstance(rows, list):
            raise PlanError("gpus: not a list")
        geo = geometry(model)
        gpus, layouts = [], []
        seen: set[tuple[str, int]] = set()
        for i, row in enumerate(rows):
            if not isinstance(row, Mapping):
                raise PlanError(f"gpus[{i}]: not an object")
            node, index, busy = row["node"], row["index"], row.get("busy", False)
            if not matches("node", node):
                raise PlanError(f"gpus[{i}].node: {node!r} is not a node name")
            if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < MAX_GPU_INDEX:
                raise PlanError(f"gpus[{i}].index: {index!r} is not a GPU index (0 to {MAX_GPU_INDEX - 1})")
            if (node, index) in seen:
                raise PlanError(f"gpus[{i}]: {node}:{index} is listed twice")
            seen.add((node, index))
            if not isinstance(busy, bool):
                raise PlanError(f"gpus[{i}].busy: {busy!r} is not true or false")
            cur, lay = row["current"], row["layout"]
            for label, value in (("current", cur), ("layout", lay)):
                if value is None:
                    continue
                if not isinstance(value, list) or not all(isinstance(p, str) for p in value):
                    raise PlanError(f"gpus[{i}].{label}: {value!r} is not a list of profile names or null")
                bad = layout_problem(model, value)
                if bad:
                    raise PlanError(f"gpus[{i}].{label}: {shown(','.join(value))} is not a valid {model} layout: {bad}")
            gpus.append(Gpu(node, index, None if cur is None else canonical(geo, cur), busy))
            layouts.append(None if lay is None else canonical(geo, lay))
        raw_demand = data.get("demand", {})
        if not isinstance(raw_demand, Mapping):
            raise PlanError("demand: not an object")
        demand: dict[str, int] = {}
        for k, v in raw_demand.items():
            if geo.profile(k) is None:
                raise PlanError(f"demand: unknown profile {k!r} for {model} (known: {', '.join(geo.profiles)})")
            if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= MAX_DEMAND:
                raise PlanError(f"demand.{k}: {v!r} is not a count (0 to {MAX_DEMAND})")
            demand[k] = v
        method = data.get("method", "milp")
        if not isinstance(method, str) or not method.isascii() or not method.isalnum():
            raise PlanError(f"method: {method!r} is not a planner method name")
    except PlanError:
        raise
    except (KeyError, TypeError, ValueError) as exc:
        raise PlanError(f"malformed plan: {exc}") from None
    score, covered, unmet = evaluate(model, gpus, layouts, demand)
    return Plan(model, gpus, layouts, demand, covered, unmet, score, method)


@lru_cache(maxsize=None)
def _tables(model: str) -> tuple[tuple[Layout, ...], dict[Layout, int]]:
    """All valid layouts (sorted) and each one's free value."""
    geo = GEOMETRIES[model]
    valid = valid_layouts(model)
    free: dict[Layout, int] = {}
    for lay in valid:
        free[lay] = max(
            (p.compute for p in geo.profiles.values() if canonical(geo, lay + (p.name,)) in valid),
            default=0,
        )
    return tuple(sorted(valid, key=lambda lay: (len(lay), lay))), free


def free_of(model: str, layout: Layout | None) -> int:
    """Compute slices of the largest profile that could still be added."""
    return 0 if layout is None else _tables(model)[1][layout]


def evaluate(
    model: str, gpus: Sequence[Gpu], layouts: Sequence[Layout | None], demand: Mapping[str, int]
) -> tuple[Score, dict[str, int], dict[str, int]]:
    """Score an assignment and return (score, covered, unmet) per profile."""
    geo = GEOMETRIES[model]
    supply: Counter[str] = Counter()
    changed = used = free = inst = 0
    for g, lay in zip(gpus, layouts, strict=False):
        if lay != g.current:
            changed += 1
        if lay:
            used += 1
            supply.update(lay)
            inst += len(lay)
        free += free_of(model, lay)
    covered = {p: min(n, supply[p]) for p, n in demand.items()}
    unmet = {p: n - covered[p] for p, n in demand.items()}
    slices = sum(geo.profiles[p].compute * c for p, c in covered.items())
    return Score(slices, sum(covered.values()), changed, used, free, inst), covered, unmet


def _check_inputs(model: str, gpus: Sequence[Gpu], demand: Mapping[str, int]) -> None:
    if model not in GEOMETRIES:
        raise PlanError(f"unknown MIG-capable GPU model {model!r} (known: {', '.join(GEOMETRIES)})")
    geo = GEOMETRIES[model]
    for p, n in demand.items():
        if not isinstance(p, str) or p not in geo.profiles:
            raise PlanError(f"unknown profile {p!r} for {model} (known: {', '.join(geo.profiles)})")
        if n < 0:
            raise PlanError(f"demand for {p} is negative ({n})")
    seen: set[tuple[str, int]] = set()
    for g in gpus:
        if not matches("node", g.node):
            raise PlanError(f"GPU node {g.node!r} is not a node name")
        if (g.node, g.index) in seen:
            raise PlanError(f"GPU {g.node}:{g.index} is listed twice")
        seen.add((g.node, g.index))
        if g.current is not None:
            bad = layout_problem(model, g.current)
            if bad:
                raise PlanError(f"current layout of {g.node}:{g.index} ({','.join(g.current)}) is invalid: {bad}")


def plan(model: str, gpus: Sequence[Gpu], demand: Mapping[str, int]) -> Plan:
    """The optimal plan (see the module docstring for the objective)."""
    _check_inputs(model, gpus, demand)
    geo = GEOMETRIES[model]
    gpus = [Gpu(g.node, g.index, None if g.current is None else canonical(geo, g.current), g.busy) for g in gpus]
    demand = {p: int(n) for p, n in demand.items()}
    keep, targets = _solve(model, gpus, {p: n for p, n in demand.items() if n > 0})
    layouts = _assign(gpus, keep, targets)
    score, covered, unmet = evaluate(model, gpus, layouts, demand)
    return Plan(model, list(gpus), layouts, demand, covered, unmet, score)


TypeKey = tuple[Layout | None, bool]


def _solve(model: str, gpus: Sequence[Gpu], demand: Mapping[str, int]) -> tuple[dict[TypeKey, int], Counter[Layout]]:
    """Solve the aggregated integer program; returns kept counts per type and target layouts."""
    from scipy.optimize import Bounds, LinearConstraint, milp

    geo = GEOMETRIES[model]
    layouts, free = _tables(model)
    types: Counter[TypeKey] = Counter((g.current, g.busy) for g in gpus)
    tkeys = sorted(types, key=lambda t: (t[1], t[0] is None, t[0] or ()))
    profs = sorted(demand)
    nt, nl, np_ = len(tkeys), len(layouts), len(profs)
    total = len(gpus)
    if total == 0:
        return {}, Counter()
    nv = nt + nl + np_

    def supply_row(p: str) -> np.ndarray:
        row = np.zeros(nv)
        for i, (cur, _) in enumerate(tkeys):
            row[i] = (cur or ()).count(p)
        for j, lay in enumerate(layouts):
            row[nt + j] = lay.count(p)
        return row

    a_rows, lo, hi = [], [], []
    for q, p in enumerate(profs):  # cov_p <= supply_p
        row = -supply_row(p)
        row[nt + nl + q] = 1.0
        a_rows.append(row)
        lo.append(-np.inf)
        hi.append(0.0)
    row = np.zeros(nv)  # every GPU is kept or given a layout
    row[: nt + nl] = 1.0
    a_rows.append(row)
    lo.append(total)
    hi.append(total)

    lb = np.zeros(nv)
    ub = np.zeros(nv)
    for i, (cur, busy) in enumerate(tkeys):
        ub[i] = types[(cur, busy)]
        lb[i] = types[(cur, busy)] if busy else 0
    ub[nt : nt + nl] = total - sum(types[t] for t in tkeys if t[1])
    for q, p in enumerate(profs):
        ub[nt + nl + q] = demand[p]

    def vec(tfun, lfun, pfun) -> np.ndarray:
        v = np.zeros(nv)
        for i, (cur, _) in enumerate(tkeys):
            v[i] = tfun(cur)
        for j, lay in enumerate(layouts):
            v[nt + j] = lfun(lay)
        for q, p in enumerate(profs):
            v[nt + nl + q] = pfun(p)
        return v

    # Each level as a maximisation.
    levels = [
        vec(lambda c: 0, lambda lay: 0, lambda p: geo.profiles[p].compute),
        vec(lambda c: 0, lambda lay: 0, lambda p: 1),
        vec(lambda c: 1, lambda lay: 0, lambda p: 0),  # kept GPUs
        vec(lambda c: -1 if c else 0, lambda lay: -1 if lay else 0, lambda p: 0),
        vec(lambda c: free_of(model, c), lambda lay: free[lay], lambda p: 0),
        vec(lambda c: -len(c or ()), lambda lay: -len(lay), lambda p: 0),
    ]
    integrality = np.ones(nv)
    x = None
    for obj in levels:
        if not obj.any():
            continue
        res = milp(
            -obj,
            constraints=LinearConstraint(np.array(a_rows), lo, hi),
            bounds=Bounds(lb, ub),
            integrality=integrality,
            options={"mip_rel_gap": 0.0},
        )
        if res.x is None:  # pragma: no cover - the program is always feasible
            raise RuntimeError(f"MIG planner: HiGHS failed: {res.message}")
        x = np.round(res.x)
        best = float(obj @ x)
        a_rows.append(obj)
        lo.append(best - 0.5)
        hi.append(np.inf)
    assert x is not None
    keep = {t: int(x[i]) for i, t in enumerate(tkeys)}
    targets: Counter[Layout] = Counter({lay: int(x[nt + j]) for j, lay in enumerate(layouts) if x[nt + j] > 0})
    return keep, targets


def _assign(gpus: Sequence[Gpu], keep: Mapping[TypeKey, int], targets: Counter[Layout]) -> list[Layout | None]:
    """Pick which GPUs change (grouped on few nodes) and give them the target layouts."""
    by_type: dict[TypeKey, list[int]] = defaultdict(list)
    for i, g in enumerate(gpus):
        by_type[(g.current, g.busy)].append(i)
    to_change: list[int] = []
    touched: set[str] = set()
    per_node: Counter[str] = Counter(g.node for g in gpus if not g.busy)
    for t in sorted(by_type, key=lambda t: len(by_type[t]) - keep.get(t, len(by_type[t]))):
        idx = by_type[t]
        n_change = len(idx) - keep.get(t, len(idx))
        if n_change <= 0:
            continue
        order = sorted(
            idx, key=lambda i: (gpus[i].node not in touched, -per_node[gpus[i].node], gpus[i].node, gpus[i].index)
        )
        chosen = order[:n_change]
        to_change.extend(chosen)
        touched.update(gpus[i].node for i in chosen)
    layouts: list[Layout | None] = [g.current for g in gpus]
    pool = sorted(targets.elements(), key=lambda lay: (-len(lay), lay))
    for i, lay in zip(sorted(to_change, key=lambda i: (gpus[i].node, gpus[i].index)), pool, strict=False):
        layouts[i] = lay
    return layouts


def gpus_from_count(count: int, node: str = "gpu") -> list[Gpu]:
    """``count`` empty, idle MIG GPUs (``--gpus N``)."""
    return [Gpu(node, i, (), False) for i in range(count)]


def parse_demand(model: str, text: str) -> dict[str, int]:
    """``"1g.10gb=10,3g.40gb=3"`` -> counts; PlanError naming the bad entry."""
    geo = geometry(model)
    out: Counter[str] = Counter()
    for item in filter(None, (s.strip() for s in text.split(","))):
        name, sep, num = item.partition("=")
        if not sep:
            raise PlanError(f"bad demand entry {item!r} (expected PROFILE=COUNT)")
        if name not in geo.profiles:
            raise PlanError(f"unknown profile {name!r} for {model} (known: {', '.join(geo.profiles)})")
        try:
            n = strict_int(num, f"demand {name}")
        except ValueError as exc:
            raise PlanError(str(exc)) from None
        if not 0 <= n <= MAX_DEMAND:
            raise PlanError(f"demand {name}: {num!r} is not a count (0 to {MAX_DEMAND})")
        out[name] += n
    return dict(out)


def profile_for_need(model: str, memory_gb: float, compute: float = 0.0) -> str | None:
    """Smallest profile (memory slots, then compute, then memory) meeting a job's needs.

    ``memory_gb`` is GPU memory in GB (compared with the profile name's GB
    figure); ``compute`` is a fraction of a whole GPU (0..1), rounded up to
    whole compute slices.  ``+me`` profiles are never chosen.  None when even
    the whole GPU is too small.
    """
    geo = geometry(model)
    need_slices = 0 if compute <= 0 else -(-round(compute * geo.compute_slices * 1000) // 1000)
    fits = [
        p
        for p in geo.profiles.values()
        if not p.media_ext and p.memory_gb >= memory_gb - 1e-9 and p.compute >= need_slices
    ]
    if not fits:
        return None
    return min(fits, key=lambda p: (p.memory, p.compute, p.memory_gb)).name


def demand_from_needs(model: str, needs: Iterable[tuple[float, float, int]]) -> tuple[dict[str, int], int]:
    """Map (memory_gb, compute fraction, count) rows to demand; also returns how many did not fit."""
    out: Counter[str] = Counter()
    too_big = 0
    for mem, comp, count in needs:
        prof = profile_for_need(model, mem, comp)
        if prof is None:
            too_big += count
        else:
            out[prof] += count
    return dict(out), too_big
