"""Free GPUs per node, bucketed by count, for best-fit placement in O(node size) (pure)."""

from __future__ import annotations

import heapq
import math
from typing import Callable


class FreeIndex:
    """Free GPUs per node, bucketed by count, per scope (a project's nodes, or all)."""

    def __init__(self, sizes: list[int], members: list[int]):
        self.sizes = sizes
        self.members = members
        self.top = max((sizes[n] for n in members), default=0)
        self.buckets: list[list[int]] = [[] for _ in range(self.top + 1)]
        self.whole: list[tuple[int, int]] = []
        self.count = [0] * (self.top + 1)  # nodes with exactly k free GPUs
        self.whole_free = 0  # GPUs of the nodes with all their GPUs free
        self.level: dict[int, int] = {}  # node -> the free GPUs it is counted at

    def note(self, n: int, free: int) -> None:
        heapq.heappush(self.buckets[free], n)
        size = self.sizes[n]
        old = self.level.get(n)
        if old is not None:
            self.count[old] -= 1
            if old == size:
                self.whole_free -= size
        self.count[free] += 1
        self.level[n] = free
        if free == size:
            self.whole_free += size
            heapq.heappush(self.whole, (-free, n))

    def fits(self, g: int, whole_ok: bool) -> bool:
        """Whether :meth:`best_fit` (``g`` at most the largest node) or else, with ``whole_ok``,
        :meth:`whole_nodes` would find room for ``g`` GPUs, with nothing skipped."""
        if g <= self.top:
            count = self.count
            return any(count[k] for k in range(g, self.top + 1))
        return whole_ok and self.whole_free >= g

    def best_fit(self, free: list[int], g: int, skip: frozenset[int] = frozenset()) -> int | None:
        """The node with the fewest free GPUs, at least ``g``, not in ``skip`` (lowest index on ties)."""
        for k in range(g, self.top + 1):
            h = self.buckets[k]
            stash = []
            while h and (free[h[0]] != k or h[0] in skip):
                m = heapq.heappop(h)
                if free[m] == k:
                    stash.append(m)  # valid, only skipped: put back
            found = h[0] if h else None
            for m in stash:
                heapq.heappush(h, m)
            if found is not None:
                return found
        return None

    def whole_nodes(self, free: list[int], g: int, skip: frozenset[int] = frozenset()) -> list[int] | None:
        """Fully free nodes, largest first, covering ``g`` GPUs (None: not enough)."""
        got: list[int] = []
        popped: list[tuple[int, int]] = []
        total = 0
        while self.whole and total < g:
            e = heapq.heappop(self.whole)
            n = e[1]
            if free[n] != self.sizes[n] or (popped and popped[-1] == e):
                continue
            popped.append(e)
            if n not in skip:
                got.append(n)
                total += self.sizes[n]
        for e in popped:
            heapq.heappush(self.whole, e)
        return got if total >= g else None


class TimeIndex:
    """When a need fits on each node of a scope, in heaps kept up to date lazily (pure).

    ``dirty`` holds the nodes whose version changed since their time was computed (the engine adds
    them, :meth:`.nodestate.EngineState.bump`); :meth:`refresh` recomputes those, and entries of
    older versions are dropped as they surface.  Nodes whose time is past (-inf: free now, or a time
    the clock has reached) tie at the clock and wait in ``ready``; the others in ``timed``.  Both
    order as backfill picks nodes: by time, then (for whole nodes) largest first, then by index.
    """

    def __init__(self, members: list[int], whole: bool, sizes: list[int]):
        self.members = members
        self.whole = whole
        self.sizes = sizes
        self.ready: list[tuple[float, int, int, int]] = []  # (-inf, -size or 0, node, version)
        self.timed: list[tuple[float, int, int, int]] = []  # (time, -size or 0, node, version)
        self.current: dict[int, tuple[float, int, int, int]] = {}
        self.dirty: set[int] = set(members)

    def refresh(self, time_of: Callable[[int], float], ver: list[int]) -> None:
        """Recompute the dirty nodes' times (``time_of``), at their current versions."""
        for n in self.dirty:
            e = (time_of(n), -self.sizes[n] if self.whole else 0, n, ver[n])
            self.current[n] = e
            heapq.heappush(self.ready if e[0] == -math.inf else self.timed, e)
        self.dirty.clear()
        if len(self.ready) + len(self.timed) > 4 * len(self.current) + 64:  # mostly stale entries: rebuild
            self.ready = [e for e in self.current.values() if e[0] == -math.inf]
            self.timed = [e for e in self.current.values() if e[0] != -math.inf]
            heapq.heapify(self.ready)
            heapq.heapify(self.timed)

    def _valid(self, e: tuple[float, int, int, int], ver: list[int]) -> bool:
        return e[3] == ver[e[2]] and self.current.get(e[2]) is e

    def earliest(self, ver: list[int], count: int | None, now: float) -> tuple[list[tuple[float, int]], bool]:
        """The first nodes in order, as (time, node): one (``count`` None), or until their sizes cover
        ``count``; and whether a node's time had been reached by the clock ``now`` (it then ties with
        the nodes free now)."""
        reached = False
        t = self.timed
        while t and t[0][0] <= now:
            e = heapq.heappop(t)
            if self._valid(e, ver):
                reached = True
                e = (-math.inf, e[1], e[2], e[3])
                self.current[e[2]] = e
                heapq.heappush(self.ready, e)
        out: list[tuple[list[tuple[float, int, int, int]], tuple[float, int, int, int]]] = []
        total = 0
        for h in (self.ready, self.timed):
            while h and (count is None and not out or count is not None and total < count):
                e = heapq.heappop(h)
                if not self._valid(e, ver):
                    continue  # an older version
                out.append((h, e))
                total += self.sizes[e[2]]
        for h, e in out:
            heapq.heappush(h, e)
        return [(e[0], e[2]) for _, e in out], reached
