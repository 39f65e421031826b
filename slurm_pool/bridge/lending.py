"""The planner's two loops over the managed nodes: what stays lent, and what is lent next (pure).

:func:`give_back` drops the lent nodes demand no longer needs; :func:`lend_more`
lends free nodes while demand is not met.  Both keep running sums (the GPU-like
resources of what is lent, each forecast group's share of it) instead of adding
up the lent nodes again for every node they look at, so a run costs about
``nodes x (resources + groups)``, not ``nodes x lent nodes``.
"""

from __future__ import annotations

from collections import Counter
from typing import Callable, Iterable, Mapping, Sequence

from slurm_pool.bridge.cost import Groups, lease_left, resources_of, shortfall
from slurm_pool.bridge.model import Snapshot
from slurm_pool.spec.bridge import Bridge

#: Why a free node is not lent after all while the windows close (see :func:`lend_more`).
CLOSING = "the off-peak windows close before a lend would pay"


class Supply:
    """GPU-like resources Kubernetes can allocate per node (read once per node), and sums of them."""

    def __init__(self, snap: Snapshot, gpu_resource: str):
        self.snap, self.gpu_resource = snap, gpu_resource
        self._of: dict[str, dict[str, int]] = {}

    def of(self, n: str) -> dict[str, int]:
        """``n``'s resources (:func:`~slurm_pool.bridge.cost.resources_of` of ``[n]``)."""
        if n not in self._of:
            self._of[n] = resources_of(self.snap, [n], self.gpu_resource)
        return self._of[n]

    def total(self, names: Iterable[str]) -> dict[str, int]:
        out: dict[str, int] = {}
        for n in names:
            out = plus(out, self.of(n))
        return out


def plus(total: Mapping[str, int], more: Mapping[str, int], sign: int = 1) -> dict[str, int]:
    """``total`` with ``more`` added (``sign`` -1: taken away)."""
    out = dict(total)
    for r, c in more.items():
        out[r] = out.get(r, 0) + sign * c
    return out


def amounts(by: Mapping[str, int], base: Mapping[str, int], gres: str) -> str:
    """``by`` plus what Kubernetes has outside Slurm, as text: ``4 GPU(s) + 2 nvidia.com/mig-3g.20gb``."""
    total = {r: by.get(r, 0) + base.get(r, 0) for r in sorted(set(by) | set(base) | {gres})}
    parts = [f"{total.pop(gres)} GPU(s)"] + [f"{v} {r}" for r, v in total.items() if v]
    return " + ".join(parts)


def _covered(need_by: Mapping[str, int], mine: Mapping[str, int], rest: Mapping[str, int], pad: int) -> bool:
    """``rest`` meets every resource's need, with ``pad`` (the hysteresis) on those the node offers."""
    return all(rest.get(r, 0) >= v + (pad if r in mine and v > 0 else 0) for r, v in need_by.items())


def give_back(
    snap: Snapshot,
    config: Bridge,
    keep: Sequence[str],
    need_by: Mapping[str, int],
    base: Mapping[str, int],
    cap: int,
    *,
    frozen: bool,
    t: float,
    supply: Supply,
) -> tuple[list[str], dict[str, str], dict[str, str]]:
    """What stays of ``keep``, the nodes dropped (and why), and those kept only for their minimum lease.

    Nodes already being reclaimed first, then those with the fewest pods: one
    goes back when there are more than ``cap`` (``bridge.max_lent_nodes``), or when the
    rest meets demand with the hysteresis and its minimum lease ran.
    ``frozen``: demand is not known whole, so nothing goes back for it.
    """
    gres = config.gpu_resource
    kept = dict.fromkeys(keep)
    have = supply.total(keep)
    dropped: dict[str, str] = {}
    held: dict[str, str] = {}
    for n in sorted(keep, key=lambda n: (snap.k8s_nodes[n].reclaim_since is None, len(snap.workload_pods(n)), n)):
        mine = supply.of(n)
        rest = plus(have, mine, -1)
        if len(kept) > cap:
            dropped[n] = f"more than bridge.max_lent_nodes ({cap}) lent"
        elif not frozen and _covered(need_by, mine, rest, config.hysteresis_gpus):
            left = lease_left(snap, n, t, config)
            if left > 0:
                held[n] = f"kept for its minimum lease ({left:.0f}s left) though demand dropped"
                continue
            dropped[n] = (
                f"inference demand dropped: {amounts(need_by, base, gres)} wanted, "
                f"{amounts(rest, base, gres)} without this node"
            )
        else:
            continue
        del kept[n]
        have = rest
    return list(kept), dropped, held


class Offers:
    """The free nodes offering each resource: how many, and per forecast group, by name."""

    def __init__(self, free: Iterable[str], supply: Supply, group: Callable[[str], str | None]):
        self.supply = supply
        self.left = set(free)
        self._count: Counter[str] = Counter()
        self._lists: dict[str, dict[str | None, list[str]]] = {}
        self._at: dict[tuple[str, str | None], int] = {}
        for n in sorted(self.left):
            for r in self._offered(n):
                self._count[r] += 1
                self._lists.setdefault(r, {}).setdefault(group(n), []).append(n)

    def _offered(self, n: str) -> list[str]:
        return [r for r, c in self.supply.of(n).items() if c > 0]

    def count(self, r: str) -> int:
        """How many free nodes offer ``r``."""
        return self._count[r]

    def remove(self, n: str) -> None:
        """``n`` is no longer free."""
        self.left.discard(n)
        for r in self._offered(n):
            self._count[r] -= 1

    def cheapest(self, r: str, cost: Callable[[str | None, str], tuple[float, int, str]]) -> str:
        """The free node offering ``r`` whose ``cost(group, node)`` is least (:meth:`Groups.cost`)."""
        best: tuple[tuple[float, int, str], str] | None = None
        for g, names in self._lists.get(r, {}).items():
            i = self._at.get((r, g), 0)
            while i < len(names) and names[i] not in self.left:
                i += 1
            self._at[(r, g)] = i
            if i < len(names):
                key = cost(g, names[i])
                if best is None or key < best[0]:
                    best = (key, names[i])
        if best is None:
            raise KeyError(r)
        return best[1]


def lend_more(
    snap: Snapshot,
    keep: Sequence[str],
    free: Sequence[str],
    need_by: Mapping[str, int],
    cap: int,
    groups: Groups,
    *,
    closing: bool,
    supply: Supply,
) -> tuple[list[str], dict[str, str]]:
    """``keep`` with the nodes lent while demand is not met, and the free nodes that were vetoed (and why).

    The scarcest resource still short first (a MIG slice few nodes offer), then
    the cheapest node offering it (:meth:`Groups.cost`).  A node the forecast
    vetoes (:meth:`Groups.veto`), or any while ``closing`` (the windows close
    before a lend would pay), stays with Slurm.
    """
    kept = list(keep)
    offers = Offers(free, supply, groups.group)
    have = supply.total(kept)
    vetoed: dict[str, str] = {}
    while offers.left and len(kept) < cap:
        short = [r for r in shortfall(need_by, have) if offers.count(r)]
        if not short:
            break
        scarce = min(short, key=lambda r: (offers.count(r), r))
        n = offers.cheapest(scarce, groups.cost)
        offers.remove(n)
        veto = CLOSING if closing else groups.veto(n)
        if veto:
            vetoed[n] = veto
            continue
        kept.append(n)
        groups.add(n)
        have = plus(have, supply.of(n))
    return kept, vetoed
