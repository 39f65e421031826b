"""Floating guarantees over random small workloads: a promise kept whenever it can be.

The property (``test_a_guarantee_with_room_starts_within_grace``), for each job J of a floating project
p submitted at t with g GPUs, where "held at t" means placed at or before t and not yet released
(a run that finished holds its GPUs ``release_delay`` more; J itself never counts):

* *within its guarantee*: p's guaranteed runs held at t, plus g, are at most p's guarantee;
* *capacity exists*: on the nodes nobody owns (the floating partition), counting as taken only the GPUs
  of guaranteed runs (of any project) held at t, some node has g GPUs not taken (J of at most one such
  node's GPUs), or the nodes with none taken have g GPUs together (J bigger: whole nodes);
* *nothing of p ahead*: no other job of p has arrived by t and is neither running nor done at t (such a
  job is ahead of J in p's queue, and a guaranteed head that waits keeps J waiting, as in Slurm).

Then J is placed at t in the guaranteed tier and holds its GPUs within ``grace + release_delay``: its
victims are borrowers (signalled now, or already leaving) and finished runs completing.
"""

from __future__ import annotations

from collections import defaultdict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurm_pool.sim.engine import BORROWED, GUARANTEED, Job
from slurm_pool.sim.nodes import Node, NodePolicy, NodeResult, Placement, simulate_nodes

POLICIES = [
    NodePolicy("pool", grace=60, restart_overhead=0),
    NodePolicy("fifo", grace=60, restart_overhead=0, backfill=False),
    NodePolicy("periodic", grace=60, restart_overhead=0, checkpoint_on_signal=False, checkpoint_interval=30),
    NodePolicy("completing", grace=30, restart_overhead=0, release_delay=3),
    NodePolicy("bf-passes", grace=30, restart_overhead=0, bf_interval=7),
    NodePolicy("limits", grace=30, restart_overhead=0, time_limit=400),
]


@st.composite
def workloads(draw):  # type: ignore[no-untyped-def]
    """1-4 nodes (a owns some), d and e float (guarantees up to twice the nobody's GPUs), bursts of jobs."""
    owners = draw(st.lists(st.sampled_from(["a", None, None]), min_size=1, max_size=4))
    sizes = [draw(st.sampled_from([1, 2, 4])) for _ in owners]
    nodes = [Node(f"n{i}", s, o) for i, (s, o) in enumerate(zip(sizes, owners, strict=True))]
    nobody = sum(s for s, o in zip(sizes, owners, strict=True) if o is None)
    total = sum(sizes)
    guarantees = tuple((p, draw(st.integers(1, max(1, 2 * nobody)))) for p in ("d", "e"))
    limit = {"a": sum(s for s, o in zip(sizes, owners, strict=True) if o == "a"), "d": total, "e": total, None: total}
    projects = [p for p in ("a", "d", "e", None) if limit[p]]
    jobs = []
    for i in range(draw(st.integers(1, 14))):
        p = draw(st.sampled_from(projects))
        g = draw(st.integers(1, limit[p]))
        t = draw(st.sampled_from([0, 0, 10, 50, 100, 200]))  # bursts: several jobs at once
        jobs.append(Job(f"j{i}", p, t, draw(st.integers(1, 300)), g))
    return nodes, guarantees, jobs


def released(p: Placement, policy: NodePolicy) -> float:
    """When ``p``'s GPUs come free: its end, and a finished run's release delay after."""
    return p.end + (policy.release_delay if p.outcome == "done" else 0)


def promised(nodes: list[Node], jobs: list[Job], guarantees: dict[str, int], r: NodeResult, policy: NodePolicy):  # type: ignore[no-untyped-def]
    """The floating jobs the property covers (module docstring), with their first placement."""
    by_id = {job.id: job for job in jobs}
    first: dict[str, Placement] = {}
    for p in sorted(r.schedule, key=lambda p: p.placed):
        first.setdefault(p.job, p)
    size = {nd.name: nd.gpus for nd in nodes if nd.owner is None}
    for job in jobs:
        if job.project not in guarantees:
            continue
        t = job.arrival

        def held(q: Placement) -> bool:
            return q.job != job.id and q.placed <= t < released(q, policy)  # noqa: B023

        guaranteed = [q for q in r.schedule if q.tier == GUARANTEED and held(q)]
        mine = sum(by_id[q.job].gpus for q in guaranteed if by_id[q.job].project == job.project)
        if mine + job.gpus > guarantees[job.project]:
            continue
        taken: dict[str, int] = defaultdict(int)
        for q in guaranteed:
            for name, c in q.nodes:
                taken[name] += c
        if job.gpus <= max(size.values(), default=0):
            room = any(s - taken[name] >= job.gpus for name, s in size.items())
        else:
            room = sum(s for name, s in size.items() if not taken[name]) >= job.gpus
        ahead = any(
            k.project == job.project
            and k.id != job.id
            and k.arrival <= t
            and not any(
                q.placed <= t < q.end or (q.outcome == "done" and q.end <= t) for q in r.schedule if q.job == k.id
            )
            for k in jobs
        )
        if room and not ahead:
            yield job, first[job.id]


@settings(max_examples=400, deadline=None, derandomize=True)
@given(workloads(), st.sampled_from(POLICIES))
def test_a_guarantee_with_room_starts_within_grace(w, policy):
    nodes, guarantees, jobs = w
    policy = NodePolicy(**{**vars(policy), "guarantees": guarantees})
    r = simulate_nodes(nodes, jobs, policy, window=1e9)
    for job, p in promised(nodes, jobs, dict(guarantees), r, policy):
        assert (p.tier, p.placed) == (GUARANTEED, job.arrival), (job, p)
        assert p.start - job.arrival <= policy.grace + policy.release_delay, (job, p)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(workloads(), st.sampled_from(POLICIES))
def test_floating_invariants(w, policy):
    """Guaranteed runs of floating projects only on nobody's nodes and within the guarantee at every
    moment; beyond it (or too big for those nodes) borrowed; nothing over-booked; the work adds up."""
    nodes, guarantees, jobs = w
    policy = NodePolicy(**{**vars(policy), "guarantees": guarantees})
    r = simulate_nodes(nodes, jobs, policy, window=1e9)
    promise = dict(guarantees)
    by_id = {job.id: job for job in jobs}
    owner_of = {nd.name: nd.owner for nd in nodes}
    nobody = sum(nd.gpus for nd in nodes if nd.owner is None)
    size = {nd.name: nd.gpus for nd in nodes}
    deltas: dict[str, list[tuple[float, int]]] = defaultdict(list)
    for p in r.schedule:
        for name, c in p.nodes:
            deltas[name] += [(p.start, c), (p.end, -c)]
    for name, ds in deltas.items():
        level = 0
        for _, d in sorted(ds):
            level += d
            assert 0 <= level <= size[name]
    for p in r.schedule:
        job = by_id[p.job]
        if job.project not in promise:
            continue
        # p's guaranteed GPUs held when p was placed (p included when guaranteed)
        held = sum(
            by_id[q.job].gpus
            for q in r.schedule
            if q.tier == GUARANTEED
            and by_id[q.job].project == job.project
            and q.placed <= p.placed < released(q, policy)
        )
        if p.tier == GUARANTEED:
            assert {owner_of[name] for name, _ in p.nodes} == {None}
            assert held <= promise[job.project]
        else:
            assert p.tier == BORROWED
            assert held + job.gpus > promise[job.project] or job.gpus > nobody
    ran = sum(((p.signalled if p.signalled is not None else p.end) - p.start) * by_id[p.job].gpus for p in r.schedule)
    assert r.useful_gpu_seconds + r.lost_gpu_seconds == pytest.approx(ran)
    assert sum(r.tier_gpu_seconds.values()) == pytest.approx(ran)
    assert r.unfinished_owner_jobs == 0 and len(r.owner_waits) == sum(job.project is not None for job in jobs)
