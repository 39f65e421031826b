"""The bridge's cost model: how long a lend lasts, which node to lend, when to give one back (pure).

See ``docs/bridge.md`` ("Cost model and forecast").  The planner
(:mod:`slurm_pool.bridge.plan`) calls these with its snapshot, the nodes it
keeps lent so far and the :class:`~slurm_pool.bridge.forecast.Forecast`.
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta
from typing import Mapping, Sequence

from slurm_pool.bridge.forecast import Forecast
from slurm_pool.bridge.model import Snapshot, sum_resources
from slurm_pool.bridge.windows import off_peak
from slurm_pool.spec.bridge import Bridge


def gpus_of(snap: Snapshot, names: Sequence[str]) -> int:
    """GPUs Kubernetes can allocate on ``names``."""
    return sum(snap.k8s_nodes[n].gpus for n in names if n in snap.k8s_nodes)


def resources_of(snap: Snapshot, names: Sequence[str], gpu_resource: str) -> dict[str, int]:
    """GPU-like resources (``gpu_resource``, MIG slices ``nvidia.com/mig-*``) Kubernetes can allocate on ``names``."""
    return sum_resources((snap.k8s_nodes[n] for n in names if n in snap.k8s_nodes), gpu_resource)


def shortfall(need: Mapping[str, int], have: Mapping[str, int]) -> dict[str, int]:
    """Per resource, how much of ``need`` ``have`` leaves unmet (only the unmet ones)."""
    return {r: v - have.get(r, 0) for r, v in sorted(need.items()) if v > have.get(r, 0)}


def lease_left(snap: Snapshot, n: str, t: float, config: Bridge) -> float:
    """Seconds of ``n``'s minimum lease still to run (0: it may go back for a drop in demand).

    Never more than the lease itself: a clock here behind slurmctld's (a start
    time after ``t``) must not hold a node longer than ``min_lease_seconds``.
    """
    starts = [p.start_time for p in snap.placeholders_on(n) if p.running and p.start_time]
    if not starts:
        return 0.0
    lease = float(config.min_lease_seconds)
    return max(0.0, min(lease, min(starts) + lease - t))


class Groups:
    """The forecast's node groups as the planner lends: each group's load, and what of it is lent so far.

    Kept up to date as nodes are lent (:meth:`add`), so the cost and the veto of a node
    cost the same whatever is lent already.
    """

    def __init__(self, snap: Snapshot, fc: Forecast | None, t: float, horizon: float, keep: Sequence[str] = ()):
        self.snap, self.fc, self.t, self.horizon = snap, fc, t, horizon
        self.lent: Counter[str] = Counter()
        self.gpus: Counter[str] = Counter()
        self._peak: dict[str, float] = {}
        for n in keep:
            self.add(n)

    def group(self, n: str) -> str | None:
        """``n``'s node group (None: the forecast has none for it, or there is no forecast)."""
        return None if self.fc is None else self.fc.group_of.get(n)

    def add(self, n: str) -> None:
        """``n`` is lent from now on."""
        g = self.group(n)
        if g is not None:
            self.lent[g] += 1
            self.gpus[g] += gpus_of(self.snap, [n])

    def remove(self, n: str) -> None:
        """``n`` is not lent after all (undoes :meth:`add`)."""
        g = self.group(n)
        if g is not None:
            self.lent[g] -= 1
            self.gpus[g] -= gpus_of(self.snap, [n])

    def peak(self, g: str) -> float:
        """The GPUs group ``g``'s Slurm jobs want at most within the horizon."""
        if g not in self._peak:
            self._peak[g] = self.fc.slurm_peak(g, self.t, self.horizon) if self.fc is not None else 0.0
        return self._peak[g]

    def cost(self, g: str | None, n: str) -> tuple[float, int, str]:
        """Reclaim cost of lending ``n`` of group ``g``: its group's forecast Slurm load, then how many of it are lent."""
        if g is None or self.fc is None:
            return 0.0, 0, n
        load = self.peak(g) / max(self.fc.capacity.get(g, 0), 1) if self.fc.enabled else 0.0
        return round(load, 3), self.lent[g], n

    def veto(self, n: str) -> str:
        """Why lending ``n`` now would take GPUs that Slurm's forecast wants back within the horizon ("" if none)."""
        fc = self.fc
        if fc is None or not fc.enabled or n not in fc.group_of:
            return ""
        g = fc.group_of[n]
        cap = fc.capacity.get(g, 0)
        left = cap - (self.gpus[g] + gpus_of(self.snap, [n]))
        peak = self.peak(g)
        if peak <= left:
            return ""
        return (
            f"forecast: group {g}'s Slurm jobs want {peak:.1f} of its {cap} GPU(s) within {self.horizon:.0f}s, "
            f"lending the node would leave {left}"
        )


def ahead_returns(
    snap: Snapshot, config: Bridge, now: datetime, keep: Sequence[str], fc: Forecast | None
) -> dict[str, str]:
    """Nodes to give back now, ahead of the windows' end or a forecast Slurm rise: one per run and cause.

    With ``m`` nodes lent, the first goes back ``return_ahead + (m - 1) x stagger``
    seconds ahead, the next one ``stagger`` later, and so on: never all at once.
    """
    out: dict[str, str] = {}
    order = sorted(keep, key=lambda n: (len(snap.workload_pods(n)), n))
    stagger, t = config.stagger_seconds, now.timestamp()
    if order and stagger and not config.lend_outside_off_peak and config.off_peak:
        later = stagger * (len(order) - 1)
        if not off_peak(config, now + timedelta(seconds=later)):
            out[order[0]] = f"the off-peak windows close within {later}s: nodes go back one per run, {stagger}s apart"
    if fc is None or not fc.enabled:
        return out
    by_group: dict[str, list[str]] = {}
    for n in order:
        if n in fc.group_of:
            by_group.setdefault(fc.group_of[n], []).append(n)
    for g in sorted(by_group):
        mine = [n for n in by_group[g] if n not in out]
        if not mine:
            continue
        horizon = config.return_ahead_seconds + stagger * (len(mine) - 1)
        peak, unlent = fc.slurm_peak(g, t, horizon), fc.capacity.get(g, 0) - gpus_of(snap, mine)
        if peak > unlent:
            out[mine[0]] = (
                f"forecast: group {g}'s Slurm jobs want {peak:.1f} GPU(s) within {horizon}s and {unlent} are not "
                "lent: nodes go back ahead of it, one per run"
            )
    return out
