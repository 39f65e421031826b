"""The node engine's units: each node's whole GPUs, and its MIG instances per profile (pure).

:mod:`.nodes` places jobs on *units*.  Unit ``n`` holds node ``n``'s whole
GPUs (none when every GPU of it is partitioned); after those come one unit
per node and MIG profile, holding the node's instances of that profile
(counted over all its partitioned GPUs, as Slurm counts a typed GRES).  A
whole-GPU job runs on whole-GPU units only, a MIG job on units of its own
profile only, so the engine's best fit, whole nodes, backfill and preemption
work per kind of unit unchanged.

Accounting is in GPU-equivalents: an instance of ``Ng.XXgb`` is N of the
GPU's compute slices (7, or 4 on an A30).  They are kept exact as integers in
1/``den`` of a GPU, ``den`` the least common multiple of the partitioned
nodes' slice counts (1 without MIG, so that counts stay whole numbers).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Protocol, Sequence

_PROFILE_RE = re.compile(r"([0-9]+)g\.[0-9]+gb(?:\+me)?")


class NodeShape(Protocol):
    """What the units are made of (:class:`.nodes.Node`)."""

    @property
    def name(self) -> str: ...

    @property
    def gpus(self) -> int: ...

    @property
    def mig(self) -> tuple[tuple[str, ...], ...]: ...

    @property
    def slices_per_gpu(self) -> int: ...


def compute_slices(profile: str) -> int | None:
    """N of a MIG profile name ``Ng.XXgb`` (``+me`` or not); None when it is not one."""
    m = _PROFILE_RE.fullmatch(profile)
    return int(m.group(1)) if m else None


def check_mig(nd: NodeShape) -> None:
    """ValueError naming the node and the value when its MIG layouts cannot be."""
    if nd.slices_per_gpu < 1:
        raise ValueError(f"nodes: node {nd.name!r} has slices_per_gpu {nd.slices_per_gpu}, not at least 1")
    if len(nd.mig) > nd.gpus:
        raise ValueError(f"nodes: node {nd.name!r} has {len(nd.mig)} MIG layouts {nd.mig} for {nd.gpus} GPUs")
    for layout in nd.mig:
        slices = [compute_slices(p) for p in layout]
        if None in slices:
            raise ValueError(f"nodes: node {nd.name!r} has MIG layout {layout}: not all MIG profile names (3g.20gb)")
        if sum(s or 0 for s in slices) > nd.slices_per_gpu:
            raise ValueError(
                f"nodes: node {nd.name!r} has MIG layout {layout}: more than its {nd.slices_per_gpu} compute slices"
            )


def mig_counts(nd: NodeShape) -> Counter[str]:
    """A node's MIG instances per profile, in the order of first appearance."""
    return Counter(p for layout in nd.mig for p in layout)


def describe(nd: NodeShape) -> str:
    """``c-gpu1 1 + (3g.20gb, 2g.10gb, 2x1g.5gb)``: whole GPUs, then its instances."""
    if not nd.mig:
        return f"{nd.name} {nd.gpus}"
    inst = ", ".join(p if c == 1 else f"{c}x{p}" for p, c in mig_counts(nd).items())
    return f"{nd.name} {nd.gpus - len(nd.mig)} + ({inst or 'no instances'})"


@dataclass
class Units:
    """Per unit: its node, its kind (None: whole GPUs; else the profile), size and cost of one."""

    node: list[int] = field(default_factory=list)
    kind: list[str | None] = field(default_factory=list)
    size: list[int] = field(default_factory=list)
    #: One GPU or instance of the unit, in 1/``den`` of a GPU.
    cost: list[int] = field(default_factory=list)
    den: int = 1

    def add(self, node: int, kind: str | None, size: int, cost: int) -> None:
        self.node.append(node)
        self.kind.append(kind)
        self.size.append(size)
        self.cost.append(cost)

    def equiv(self, amount: int) -> float:
        """``amount`` in 1/``den`` GPU as GPU-equivalents (an int without MIG)."""
        return amount // self.den if self.den == 1 else amount / self.den

    def weight(self, u: int) -> float:
        """One GPU or instance of unit ``u`` in GPU-equivalents (1 for whole GPUs)."""
        return 1 if self.kind[u] is None else self.cost[u] / self.den


def expand_units(nodes: Sequence[NodeShape]) -> Units:
    """The units of ``nodes``: their whole GPUs first (unit ``n`` is node ``n``'s), then their instances."""
    den = math.lcm(*(nd.slices_per_gpu for nd in nodes if nd.mig)) if any(nd.mig for nd in nodes) else 1
    out = Units(den=den)
    for n, nd in enumerate(nodes):
        out.add(n, None, nd.gpus - len(nd.mig), den)
    for n, nd in enumerate(nodes):
        for profile, count in mig_counts(nd).items():
            slices = compute_slices(profile)
            assert slices is not None  # check_mig
            out.add(n, profile, count, slices * den // nd.slices_per_gpu)
    return out
