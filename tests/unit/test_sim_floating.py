"""Floating guarantees in the node engine: hand-worked schedules, bad input, the spec's guarantees.

Every case is worked by hand: grace 60 s, no restart overhead, checkpoint on the signal (a victim keeps
its work up to the signal), best fit (fewest free GPUs, lowest index on ties).
"""

from __future__ import annotations

from collections import defaultdict
from types import SimpleNamespace

import pytest

from slurm_pool.sim.engine import BORROWED, GUARANTEED, Job
from slurm_pool.sim.nodes import (
    Node,
    NodePolicy,
    NodeResult,
    Placement,
    Seed,
    forward_nodes,
    guarantees_from_spec,
    nodes_from_spec,
    simulate_nodes,
)

G, B = GUARANTEED, BORROWED


def pol(*guarantees: tuple[str, int], **kw: object) -> NodePolicy:
    return NodePolicy("float", grace=60, restart_overhead=0, guarantees=guarantees, **kw)  # type: ignore[arg-type]


def j(i: str, project: str | None, t: float, work: float, gpus: int, profile: str | None = None) -> Job:
    return Job(i, project, t, work, gpus, profile)


def done(job: str, tier: str, placed: float, start: float, end: float, *nodes: tuple[str, int]) -> Placement:
    return Placement(job, tier, placed, start, end, nodes, "done")


def gone(job: str, start: float, signalled: float, *nodes: tuple[str, int]) -> Placement:
    """A borrowed run signalled at ``signalled``, gone a GraceTime (60 s) later."""
    return Placement(job, B, start, start, signalled + 60, nodes, "preempted", signalled)


def order(schedule: list[Placement]) -> list[Placement]:
    return sorted(schedule, key=lambda p: (p.placed, p.start, p.job))


# (id, nodes, jobs, guarantees, expected placements)
CASES = [
    (
        # (a) d floats (2 GPUs) and owns nothing: its job signals the borrower x on the nobody's f0 at 100,
        # starts at 160 (signal + grace); x, back at the front of its queue, resumes when f0 is free
        "a-preempts-a-borrower-on-a-node-nobody-owns",
        [Node("f0", 2)],
        [j("x", None, 0, 1000, 2), j("o", "d", 100, 50, 2)],
        (("d", 2),),
        [
            gone("x", 0, 100, ("f0", 2)),
            done("o", G, 100, 160, 210, ("f0", 2)),
            done("x", B, 210, 210, 1110, ("f0", 2)),
        ],
    ),
    (
        # (b) across the nodes, the victim with least work at risk: z (50 s x 2 GPUs) on f1, not x (100 s)
        "b-least-work-at-risk-across-nodes",
        [Node("f0", 2), Node("f1", 2)],
        [j("x", None, 0, 1000, 2), j("z", None, 50, 1000, 2), j("o", "d", 100, 10, 2)],
        (("d", 2),),
        [
            done("x", B, 0, 0, 1000, ("f0", 2)),
            gone("z", 50, 100, ("f1", 2)),
            done("o", G, 100, 160, 170, ("f1", 2)),
            done("z", B, 170, 170, 1120, ("f1", 2)),
        ],
    ),
    (
        # (b) f1's free GPU plus one victim (y, 100 s at risk) beats f0's two (x1 and x2, 200 s)
        "b-free-gpus-and-one-victim-beat-two-victims",
        [Node("f0", 2), Node("f1", 2)],
        [j("x1", None, 0, 1000, 1), j("x2", None, 0, 1000, 1), j("y", None, 0, 1000, 1), j("o", "d", 100, 10, 2)],
        (("d", 2),),
        [
            done("x1", B, 0, 0, 1000, ("f0", 1)),
            done("x2", B, 0, 0, 1000, ("f0", 1)),
            gone("y", 0, 100, ("f1", 1)),
            done("o", G, 100, 160, 170, ("f1", 2)),
            done("y", B, 170, 170, 1070, ("f1", 1)),
        ],
    ),
    (
        # (b) ... unless the two hold less work: x1 and x2 (10 s each) go, not y (100 s) beside F's GPU
        # (free since 95).  Slurm would take the fewer victims; work at risk is what the replay weighs.
        # Requeued at 160 in signal order to the front of the queue, x2 ends up ahead of x1 and takes f0's GPU.
        "b-less-work-at-risk-beats-fewer-victims",
        [Node("f0", 2), Node("f1", 2)],
        [
            j("y", None, 0, 1000, 1),
            j("F", None, 0, 95, 1),
            j("x1", None, 90, 1000, 1),
            j("x2", None, 90, 1000, 1),
            j("o", "d", 100, 10, 2),
        ],
        (("d", 2),),
        [
            done("F", B, 0, 0, 95, ("f0", 1)),
            done("y", B, 0, 0, 1000, ("f0", 1)),
            gone("x1", 90, 100, ("f1", 1)),
            gone("x2", 90, 100, ("f1", 1)),
            done("o", G, 100, 160, 170, ("f1", 2)),
            done("x2", B, 160, 160, 1150, ("f0", 1)),
            done("x1", B, 170, 170, 1160, ("f1", 1)),
        ],
    ),
    (
        # (b) a victim already signalled counts first and at no risk: o1 signals x on f0 (80 s x 2 GPUs at
        # risk, less than y's 100 s on f1) and takes one of its GPUs; o2 takes x's other one rather than
        # signal y, and both start when x is gone
        "b-a-signalled-victim-counts-first",
        [Node("f0", 2), Node("f1", 1)],
        [j("y", None, 0, 1000, 1), j("x", None, 60, 1000, 2), j("o1", "d", 100, 10, 1), j("o2", "d", 100, 10, 1)],
        (("d", 2),),
        [
            done("y", B, 0, 0, 1000, ("f1", 1)),
            gone("x", 60, 100, ("f0", 2)),
            done("o1", G, 100, 160, 170, ("f0", 1)),
            done("o2", G, 100, 160, 170, ("f0", 1)),
            done("x", B, 170, 170, 1130, ("f0", 2)),
        ],
    ),
    (
        # (c) a guarantee of 4 spread over two 2-GPU nodes: both 2-GPU jobs are guaranteed, o1 on f0
        # (equal risk: the lower index), o2 on f1; the requeued y (front of the queue) then x swap nodes
        "c-a-guarantee-spread-over-nodes",
        [Node("f0", 2), Node("f1", 2)],
        [j("x", None, 0, 1000, 2), j("y", None, 0, 1000, 2), j("o1", "d", 100, 50, 2), j("o2", "d", 100, 50, 2)],
        (("d", 4),),
        [
            gone("x", 0, 100, ("f0", 2)),
            gone("y", 0, 100, ("f1", 2)),
            done("o1", G, 100, 160, 210, ("f0", 2)),
            done("o2", G, 100, 160, 210, ("f1", 2)),
            done("x", B, 210, 210, 1110, ("f1", 2)),
            done("y", B, 210, 210, 1110, ("f0", 2)),
        ],
    ),
    (
        # (c) a guaranteed job of two whole nodes takes both back from one multi-node borrower
        "c-whole-nodes-back",
        [Node("f0", 2), Node("f1", 2)],
        [j("x", None, 0, 1000, 4), j("o", "d", 100, 50, 4)],
        (("d", 4),),
        [
            gone("x", 0, 100, ("f0", 2), ("f1", 2)),
            done("o", G, 100, 160, 210, ("f0", 2), ("f1", 2)),
            done("x", B, 210, 210, 1110, ("f0", 2), ("f1", 2)),
        ],
    ),
    (
        # (d) beyond d's guarantee o2 borrows f1, and e's guaranteed job preempts it there
        "d-beyond-the-guarantee-borrows-and-is-preempted",
        [Node("f0", 2), Node("f1", 2)],
        [j("o1", "d", 0, 1000, 2), j("o2", "d", 10, 500, 2), j("e1", "e", 100, 50, 2)],
        (("d", 2), ("e", 2)),
        [
            done("o1", G, 0, 0, 1000, ("f0", 2)),
            gone("o2", 10, 100, ("f1", 2)),
            done("e1", G, 100, 160, 210, ("f1", 2)),
            done("o2", B, 210, 210, 620, ("f1", 2)),
        ],
    ),
    (
        # (e) overcommit: d and e are promised 2 GPUs each on one 2-GPU node and burst at 10.  d1 (d's queue
        # comes first) preempts the borrower; e1, within its guarantee, waits for d1 (a guaranteed job
        # preempts no guaranteed one), and x for both
        "e-overcommitted-burst-waits",
        [Node("f0", 2)],
        [j("x", None, 0, 1000, 2), j("d1", "d", 10, 100, 2), j("e1", "e", 10, 100, 2)],
        (("d", 2), ("e", 2)),
        [
            gone("x", 0, 10, ("f0", 2)),
            done("d1", G, 10, 70, 170, ("f0", 2)),
            done("e1", G, 170, 170, 270, ("f0", 2)),
            done("x", B, 270, 270, 1260, ("f0", 2)),
        ],
    ),
    (
        # (f) mixed: a owns a0, d floats.  d1 runs guaranteed on the nobody's f0 (not on a0, first and as
        # free); d2, beyond the guarantee, borrows a0, and a's own job takes a0 back from it
        "f-mixed-owner-and-floating",
        [Node("a0", 2, "a"), Node("f0", 2)],
        [j("d1", "d", 0, 1000, 2), j("d2", "d", 10, 500, 2), j("a1", "a", 20, 50, 2)],
        (("d", 2),),
        [
            done("d1", G, 0, 0, 1000, ("f0", 2)),
            gone("d2", 10, 20, ("a0", 2)),
            done("a1", G, 20, 80, 130, ("a0", 2)),
            done("d2", B, 130, 130, 620, ("a0", 2)),
        ],
    ),
    (
        # (f) a floating job preempts only on the floating partition: y on f0, though x on the owned a0
        # (lower index, as much at risk) would do as well
        "f-floating-preempts-off-owned-nodes",
        [Node("a0", 2, "a"), Node("f0", 2)],
        [j("x", None, 0, 1000, 2), j("y", None, 0, 1000, 2), j("d1", "d", 100, 50, 2)],
        (("d", 2),),
        [
            done("x", B, 0, 0, 1000, ("a0", 2)),
            gone("y", 0, 100, ("f0", 2)),
            done("d1", G, 100, 160, 210, ("f0", 2)),
            done("y", B, 210, 210, 1110, ("f0", 2)),
        ],
    ),
    (
        # a MIG job of a floating project borrows (a guarantee covers whole GPUs only); d's whole-GPU job
        # is guaranteed and preempts the borrower y on m0's one whole GPU
        "mig-jobs-of-a-floating-project-borrow",
        [Node("m0", 2, None, (("3g.40gb", "3g.40gb"),))],
        [j("y", None, 0, 1000, 1), j("s", "d", 0, 100, 1, "3g.40gb"), j("o", "d", 50, 10, 1)],
        (("d", 2),),
        [
            gone("y", 0, 50, ("m0", 1)),
            Placement("s", B, 0, 0, 100, (("m0", 1),), "done", None, "3g.40gb"),
            done("o", G, 50, 110, 120, ("m0", 1)),
            done("y", B, 120, 120, 1070, ("m0", 1)),
        ],
    ),
]


@pytest.mark.parametrize("nodes,jobs,guarantees,expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_hand_worked_floating_schedules(nodes, jobs, guarantees, expected):
    r = simulate_nodes(nodes, jobs, pol(*guarantees), window=10_000)
    assert order(r.schedule) == order(expected)
    check_consistent(nodes, jobs, r)


def check_consistent(nodes: list[Node], jobs: list[Job], r: NodeResult) -> None:
    """No node over-booked; GPU time held per tier, useful and lost add up run by run (no restart overhead)."""
    size = {nd.name: nd.gpus for nd in nodes}
    deltas: dict[str, list[tuple[float, int]]] = defaultdict(list)
    by_id = {job.id: job for job in jobs}
    held: dict[str, float] = defaultdict(float)
    for p in r.schedule:
        assert p.placed <= p.start <= p.end
        for name, c in p.nodes:
            deltas[name] += [(p.start, c), (p.end, -c)]
        w = by_id[p.job].gpus if p.profile is None else by_id[p.job].gpus * 3 / 7  # 3g.40gb: 3 of 7 slices
        held[p.tier] += ((p.signalled if p.signalled is not None else p.end) - p.start) * w
    for name, ds in deltas.items():
        level = 0
        for _, d in sorted(ds):  # ends before starts at one instant
            level += d
            assert 0 <= level <= size[name], f"{name} holds {level} GPUs"
    assert r.tier_gpu_seconds == pytest.approx(dict(held))
    assert r.useful_gpu_seconds + r.lost_gpu_seconds == pytest.approx(sum(held.values()))
    assert len(r.owner_waits) == sum(job.project is not None for job in jobs) and r.unfinished_owner_jobs == 0


def test_a_job_larger_than_the_floating_nodes_borrows():
    """d is promised 8 GPUs but the nobody's nodes have 2: its 4-GPU job cannot run there and borrows
    a's nodes, while its 2-GPU job is guaranteed on f0."""
    nodes = [Node("a0", 2, "a"), Node("a1", 2, "a"), Node("f0", 2)]
    jobs = [j("big", "d", 0, 100, 4), j("small", "d", 0, 100, 2)]
    r = simulate_nodes(nodes, jobs, pol(("d", 8)), window=1000)
    assert order(r.schedule) == [
        done("big", B, 0, 0, 100, ("a0", 2), ("a1", 2)),
        done("small", G, 0, 0, 100, ("f0", 2)),
    ]


def test_without_owners_borrow_a_job_beyond_the_guarantee_waits_for_it():
    r = simulate_nodes(
        [Node("f0", 2), Node("f1", 2)],
        [j("o1", "d", 0, 100, 2), j("o2", "d", 0, 100, 2)],
        pol(("d", 2), owners_borrow=False),
        window=1000,
    )
    assert order(r.schedule) == [done("o1", G, 0, 0, 100, ("f0", 2)), done("o2", G, 100, 100, 200, ("f0", 2))]


BAD = [
    ([Node("a0", 2, "d")], (("d", 2),), "guarantees: project 'd' has a guarantee and owns node 'a0'"),
    ([Node("f0", 2)], (("d", 0),), "guarantees: project 'd' has guarantee 0"),
    ([Node("f0", 2)], (("d", 1), ("d", 2)), "guarantees: project 'd' given twice"),
]


@pytest.mark.parametrize("nodes,guarantees,message", BAD)
def test_bad_guarantees_are_named(nodes, guarantees, message):
    with pytest.raises(ValueError, match=message):
        simulate_nodes(nodes, [], pol(*guarantees), window=100)


def test_a_floating_jobs_gpus_are_checked_against_the_pool():
    with pytest.raises(ValueError, match="job o: gpus 5 outside 1..4"):
        simulate_nodes([Node("a0", 2, "a"), Node("f0", 2)], [j("o", "d", 0, 1, 5)], pol(("d", 2)), window=100)


def test_guarantees_and_nodes_from_a_spec():
    """Per-type guarantees sum to whole GPUs; a floating project's node groups are nobody's."""
    gpus = SimpleNamespace(count=2, model="H100-80GB", mig=None)
    spec = SimpleNamespace(
        node_groups=[
            SimpleNamespace(name="a", hosts="a1", gpus=gpus),
            SimpleNamespace(name="f", hosts="f[1-2]", gpus=gpus),
        ],
        projects=[
            SimpleNamespace(name="pa", owns=["a"], guarantee={}),
            SimpleNamespace(name="pd", owns=["f"], guarantee={"gres/gpu:h100": 2, "gres/gpu:a100": 1}),
            SimpleNamespace(name="pe", owns=[], guarantee={"gres/gpu": 4}),
        ],
    )
    assert guarantees_from_spec(spec) == (("pd", 3), ("pe", 4))
    assert [(nd.name, nd.owner) for nd in nodes_from_spec(spec)] == [("a1", "pa"), ("f1", None), ("f2", None)]


def test_forward_from_a_live_state_counts_running_guaranteed_jobs():
    """Running: d's guaranteed s1 on f0 (its whole guarantee) and the borrower s2 on f1.  e's p2 preempts s2
    and starts a grace later; d's p1, beyond the guarantee while s1 runs and with no GPU to borrow, waits,
    and at 100 (s1 done) is within it again: guaranteed on f0 (the tier is decided when a job is tried)."""
    seeds = [
        Seed(j("s1", "d", 0, 100, 2), G, (("f0", 2),)),
        Seed(j("s2", None, 0, 500, 2), B, (("f1", 2),)),
    ]
    pending = [j("p1", "d", 0, 50, 2), j("p2", "e", 0, 50, 2)]
    r = forward_nodes([Node("f0", 2), Node("f1", 2)], seeds, pending, pol(("d", 2), ("e", 2)), horizon=10_000)
    starts = {p.job: (p.tier, p.placed, p.start, p.nodes) for p in r.schedule if p.job.startswith("p")}
    assert starts == {"p1": (G, 100, 100, (("f0", 2),)), "p2": (G, 0, 60, (("f1", 2),))}


# signal_end: x (2 GPUs, 120 s of work) borrows f0; d's job o arrives at 100 and signals it (grace 60 s).
# "hold": x holds f0 to 160, resumes after o; "requeue": x's work ends at 120, f0 frees there and x runs
# again (it checkpointed at the signal: 20 s left); "complete": x is done at 120.  x with 1000 s of work
# does not end within its grace: every mode holds f0 to 160.
SIGNAL_END = [
    (
        "hold",
        120,
        [gone("x", 0, 100, ("f0", 2)), done("o", G, 100, 160, 210, ("f0", 2)), done("x", B, 210, 210, 230, ("f0", 2))],
        1,
    ),
    (
        "requeue",
        120,
        [
            Placement("x", B, 0, 0, 120, (("f0", 2),), "preempted", 100),
            done("o", G, 100, 120, 170, ("f0", 2)),
            done("x", B, 170, 170, 190, ("f0", 2)),
        ],
        1,
    ),
    ("complete", 120, [done("x", B, 0, 0, 120, ("f0", 2)), done("o", G, 100, 120, 170, ("f0", 2))], 0),
    (
        "requeue",
        1000,
        [gone("x", 0, 100, ("f0", 2)), done("o", G, 100, 160, 210, ("f0", 2)), done("x", B, 210, 210, 1110, ("f0", 2))],
        1,
    ),
    (
        "complete",
        1000,
        [gone("x", 0, 100, ("f0", 2)), done("o", G, 100, 160, 210, ("f0", 2)), done("x", B, 210, 210, 1110, ("f0", 2))],
        1,
    ),
]


@pytest.mark.parametrize("mode,work,expected,preemptions", SIGNAL_END)
def test_a_victim_ending_within_its_grace_frees_its_gpus_there(mode, work, expected, preemptions):
    jobs = [j("x", None, 0, work, 2), j("o", "d", 100, 50, 2)]
    r = simulate_nodes([Node("f0", 2)], jobs, pol(("d", 2), signal_end=mode), window=2000)
    assert order(r.schedule) == expected
    assert (r.preemptions, r.borrower_jobs_done, r.unfinished_owner_jobs) == (preemptions, 1, 0)


# borrow_tiers: r holds f0 to 100; s (scavenger) arrives at 10, h (the overflow partition) at 20.
BORROW_TIERS = [
    ((), ["r", "s", "h"]),  # one FIFO queue
    ((("h", 50), ("s", 10)), ["r", "h", "s"]),  # the higher tier starts first
    ((("h", 10), ("s", 10)), ["r", "s", "h"]),  # same tier: FIFO
]


@pytest.mark.parametrize("tiers,starts", BORROW_TIERS)
def test_the_borrowers_queue_is_ordered_by_priority_tier(tiers, starts):
    jobs = [j("r", None, 0, 100, 2), j("s", None, 10, 10, 2), j("h", None, 20, 10, 2)]
    r = simulate_nodes([Node("f0", 2)], jobs, pol(("d", 2), borrow_tiers=tiers), window=1000)
    assert [p.job for p in order(r.schedule)] == starts
    assert [p.start for p in order(r.schedule)] == [0, 100, 110]


def test_a_bad_signal_end_is_named():
    with pytest.raises(ValueError, match="signal_end: 'later' is not 'hold', 'requeue' or 'complete'"):
        simulate_nodes([Node("f0", 2)], [], pol(("d", 2), signal_end="later"), window=100)


@pytest.mark.parametrize("tiers,after_o", [((), ["x", "h"]), ((("h", 50), ("x", 10)), ["h", "x"])])
def test_a_requeued_borrower_goes_to_the_front_of_its_tier(tiers, after_o):
    """x (scavenger) is signalled at 100 for d's o and requeued at 160; h (overflow) waits from 110."""
    jobs = [j("x", None, 0, 1000, 2), j("o", "d", 100, 50, 2), j("h", None, 110, 10, 2)]
    r = simulate_nodes([Node("f0", 2)], jobs, pol(("d", 2), borrow_tiers=tiers), window=3000)
    assert [p.job for p in order(r.schedule) if p.start >= 210] == after_o
