"""Free GPUs per node, bucketed by count, for best-fit placement in O(node size) (pure)."""

from __future__ import annotations

import heapq


class FreeIndex:
    """Free GPUs per node, bucketed by count, per scope (a project's nodes, or all)."""

    def __init__(self, sizes: list[int], members: list[int]):
        self.sizes = sizes
        self.members = members
        self.top = max((sizes[n] for n in members), default=0)
        self.buckets: list[list[int]] = [[] for _ in range(self.top + 1)]
        self.whole: list[tuple[int, int]] = []

    def note(self, n: int, free: int) -> None:
        heapq.heappush(self.buckets[free], n)
        if free == self.sizes[n]:
            heapq.heappush(self.whole, (-free, n))

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
