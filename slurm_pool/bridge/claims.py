"""Which pending Slurm jobs claim which nodes back from lending (pure, near-linear in jobs and nodes).

A job claims as many nodes as it asks for, of those it could run on
(:meth:`~slurm_pool.bridge.model.PendingJob.could_use`: partitions, node lists,
one node's share of its GPUs by type, simple constraints): idle nodes first,
then the lent ones with the fewest pods, then busy ones.  So a job that fits
nowhere claims nothing, and a 1-node job takes back at most one node.  A job
whose tier does not preempt the placeholders (``PendingJob.preempts_lend``: a
spot job) never claims a lent node that serves pods: taking it would cost
inference a cold start for work that pays less.  Such a job waits (second
list) when that left it with fewer nodes than it asks for.

How it stays fast at 10,000 nodes and 200,000 jobs: every node gets its rank
once; nodes are grouped by partition and by *resource shape* (GPUs per type
and features, all :meth:`PendingJob.fits` reads), each group in rank order.
A job's need (:attr:`PendingJob.need`) is checked once per shape, not per
node; the nodes it could use are walked in rank order, merged lazily per
partition and set of fitting shapes (shared by every job of that set), and only
as far as the job takes nodes.  A job naming its nodes (``--nodelist``) is
checked on those alone.
"""

from __future__ import annotations

import heapq
from itertools import islice
from typing import Callable, Iterator

from slurm_pool.bridge.model import Need, PendingJob, SlurmNodeView, Snapshot, has
from slurm_pool.spec.bridge import Bridge

#: What :meth:`PendingJob.fits` reads of a node: its GPUs per type and its features.
Shape = tuple[tuple[tuple[str, int], ...], frozenset[str]]


def _shape(node: SlurmNodeView) -> Shape:
    return node.gpus, frozenset(node.features)


class _Stream:
    """Names merged lazily from lists sorted by the same key; what was read is kept for the next reader."""

    def __init__(self, lists: list[list[str]], key: Callable[[str], int]):
        self.seen: list[str] = []
        self._rest: Iterator[str] = heapq.merge(*lists, key=key) if len(lists) > 1 else iter(lists[0] if lists else ())

    def at(self, i: int) -> str | None:
        """The ``i``-th name (None past the end)."""
        while len(self.seen) <= i:
            nxt = next(self._rest, None)
            if nxt is None:
                return None
            self.seen.append(nxt)
        return self.seen[i]


class ClaimIndex:
    """The available Slurm nodes of one snapshot, ranked and grouped for :func:`claims`."""

    def __init__(self, snap: Snapshot):
        self.snap = snap
        nodes = {n: s for n, s in snap.slurm_nodes.items() if not s.unavailable}
        self.nodes = nodes
        ranked = sorted(nodes, key=self._cost)
        self.pos = {n: i for i, n in enumerate(ranked)}
        #: Lent nodes that serve pods: a job whose tier does not preempt placeholders never takes them.
        self.serving = frozenset(n for n in nodes if self._lent(n) and snap.workload_pods(n))
        #: partition -> shape -> its nodes (all, and all but ``serving``), in rank order
        self.groups: dict[str, dict[Shape, tuple[list[str], list[str]]]] = {}
        self.sample: dict[Shape, SlurmNodeView] = {}
        for n in ranked:
            s = nodes[n]
            shape = _shape(s)
            self.sample.setdefault(shape, s)
            for p in dict.fromkeys(s.partitions):
                every, allowed = self.groups.setdefault(p, {}).setdefault(shape, ([], []))
                every.append(n)
                if n not in self.serving:
                    allowed.append(n)
        #: a job's need -> the number of the set of shapes that meet it (jobs of one such set share streams)
        self._fits: dict[Need, int] = {}
        self._sets: list[frozenset[Shape]] = []
        self._numbers: dict[frozenset[Shape], int] = {}
        self._streams: dict[tuple[str, int, bool], _Stream] = {}

    def _lent(self, name: str) -> bool:
        k = self.snap.k8s_nodes.get(name)
        return bool(self.snap.placeholders_on(name)) or (k is not None and k.lent)

    def _cost(self, name: str) -> tuple[int, int, str]:
        """Idle Slurm nodes first (the job can start there now), then lent ones, then busy ones."""
        if self._lent(name):
            rank = 1
        else:
            rank = 2 if self.snap.busy.get(name) or not self.snap.slurm_nodes[name].idle else 0
        return rank, len(self.snap.workload_pods(name)), name

    def _fit(self, job: PendingJob) -> int:
        """The number of the set of node shapes that meet ``job``'s need (:meth:`PendingJob.fits`)."""
        need = job.need
        if need not in self._fits:
            fit = frozenset(shape for shape, node in self.sample.items() if has(node, need))
            if fit not in self._numbers:
                self._numbers[fit] = len(self._sets)
                self._sets.append(fit)
            self._fits[need] = self._numbers[fit]
        return self._fits[need]

    def _stream(self, partition: str, job: PendingJob, allowed: bool) -> _Stream:
        """The nodes of ``partition`` that meet ``job``'s need, in rank order (``allowed``: none serving pods)."""
        number = self._fit(job)
        key = (partition, number, allowed)
        if key not in self._streams:
            fit = self._sets[number]
            lists = [pair[allowed] for shape, pair in self.groups.get(partition, {}).items() if shape in fit]
            self._streams[key] = _Stream([ns for ns in lists if ns], self.pos.__getitem__)
        return self._streams[key]

    def first(self, job: PendingJob, want: int, allowed: bool = False) -> list[str]:
        """The first ``want`` nodes ``job`` could use, in rank order (``allowed``: none that serve pods)."""
        if job.required:
            fit = [n for n in job.required if n in self.nodes and job.could_use(self.nodes[n])]
            if allowed:
                fit = [n for n in fit if n not in self.serving]
            return sorted(fit, key=self.pos.__getitem__)[:want]
        return list(islice(self._walk(job, allowed), want))

    def _walk(self, job: PendingJob, allowed: bool) -> Iterator[str]:
        """The nodes ``job`` could use, in rank order: its partitions' streams merged, each node once."""
        streams = [self._stream(p, job, allowed) for p in dict.fromkeys(job.partitions)]
        at = [0] * len(streams)
        last = None
        while True:
            best, which = None, -1
            for i, s in enumerate(streams):
                n = s.at(at[i])
                if n is not None and (best is None or self.pos[n] < self.pos[best]):
                    best, which = n, i
            if best is None:
                return
            at[which] += 1
            if best != last and best not in job.excluded:
                yield best
            last = best


def claims(snap: Snapshot, config: Bridge) -> tuple[dict[str, list[int]], list[int]]:
    """Node -> the pending jobs that claim it, and the jobs left waiting for inference (module docstring)."""
    out: dict[str, list[int]] = {}
    waiting: list[int] = []
    index = ClaimIndex(snap)
    for job in sorted(snap.pending, key=lambda j: j.job_id):
        if job.reason in config.ignore_pending_reasons:
            continue
        want = max(job.node_count, 1)
        taken = index.first(job, want, allowed=not job.preempts_lend)
        if not job.preempts_lend and len(taken) < want and len(taken) < len(index.first(job, want)):
            waiting.append(job.job_id)
        for name in taken:
            out.setdefault(name, []).append(job.job_id)
    return out, waiting
