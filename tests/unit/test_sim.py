"""The pool simulator: hand-worked cases, invariants over random workloads, trace parsing."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurm_pool.sim import workload
from slurm_pool.sim.engine import Job, Policy, quantile, simulate
from slurm_pool.sim.lending import replay_lending

DEDICATED = Policy("dedicated", pooled=False)
POOL = Policy("pool", grace=60, restart_overhead=60)
POOL_PERIODIC = Policy("periodic", grace=60, restart_overhead=60, checkpoint_on_signal=False, checkpoint_interval=30)
NO_PREEMPT = Policy("no-preempt", preempt=False)


def owner(i: str, project: str, t: float, work: float, gpus: int) -> Job:
    return Job(i, project, t, work, gpus)


def borrower(i: str, t: float, work: float, gpus: int) -> Job:
    return Job(i, None, t, work, gpus)


def test_dedicated_servers_queue_fifo():
    r = simulate({"a": 2}, [owner("a1", "a", 0, 100, 2), owner("a2", "a", 10, 50, 1)], DEDICATED, window=200)
    assert r.owner_waits == [0, 90]
    assert r.utilization == pytest.approx((100 * 2 + 50) / (2 * 200))
    assert r.preemptions == 0


def test_dedicated_servers_never_run_borrowers():
    r = simulate({"a": 2}, [borrower("x", 0, 100, 1)], DEDICATED, window=200)
    assert r.borrower_jobs_done == 0 and r.useful_gpu_seconds == 0


# (policy, owner wait, lost GPU-s, borrower restart GPU-s)
CASES = [
    # the owner signals the borrower on its GPUs and starts one grace window later; the
    # borrower checkpointed at the signal, moves to b's idle GPUs and pays a restart
    (POOL, 60, 0, 120),
    # periodic checkpoints every 30 s: 100 s of work keeps 90
    (POOL_PERIODIC, 60, 20, 120),
]


@pytest.mark.parametrize("policy,wait,lost,restart", CASES, ids=[c[0].name for c in CASES])
def test_owner_takes_its_gpus_back(policy, wait, lost, restart):
    jobs = [borrower("x", 0, 1000, 2), owner("a1", "a", 100, 50, 2)]
    r = simulate({"a": 2, "b": 2}, jobs, policy, window=5000)
    assert r.owner_waits == [wait]
    assert r.preemptions == 1 and r.owner_jobs_preempted == 0
    assert r.lost_gpu_seconds == pytest.approx(lost)
    assert r.restart_gpu_seconds == pytest.approx(restart)
    assert r.grace_gpu_seconds == pytest.approx(60 * 2)
    assert r.borrower_waits == [0]
    assert r.useful_gpu_seconds == pytest.approx(1000 * 2 + 50 * 2)
    assert r.borrower_jobs_done == 1


def test_without_preemption_the_owner_waits_for_the_borrower():
    jobs = [borrower("x", 0, 1000, 2), owner("a1", "a", 100, 50, 2)]
    r = simulate({"a": 2}, jobs, NO_PREEMPT, window=5000)
    assert r.owner_waits == [900] and r.preemptions == 0


def test_without_preemption_an_owner_borrows_elsewhere():
    jobs = [borrower("x", 0, 1000, 2), owner("a1", "a", 100, 50, 2)]
    r = simulate({"a": 2, "b": 2}, jobs, NO_PREEMPT, window=5000)
    assert r.owner_waits == [0]


def test_a_borrower_spanning_two_owners_is_preempted_by_either():
    jobs = [borrower("x", 0, 1000, 2), owner("a1", "a", 100, 500, 1)]
    r = simulate({"a": 1, "b": 1}, jobs, POOL, window=5000)
    assert r.owner_waits == [60] and r.preemptions == 1
    # x needs both GPUs again: it waits for a1 (runs 160..660), then restarts
    assert r.borrower_jobs_done == 1 and r.useful_gpu_seconds == pytest.approx(1000 * 2 + 500)


def test_only_the_needed_borrowers_are_signalled():
    jobs = [
        borrower("x1", 0, 1000, 1),
        borrower("x2", 0, 1000, 1),
        borrower("x3", 0, 1000, 1),
        owner("a1", "a", 100, 50, 2),
    ]
    r = simulate({"a": 3}, jobs, POOL, window=5000)
    assert r.preemptions == 2 and r.owner_waits == [60]


def test_surplus_freed_gpus_return_to_idle():
    # two 2-GPU borrowers hold all four GPUs; the owner needs 3: both are signalled, 1 GPU is left over
    jobs = [
        borrower("x1", 0, 1000, 2),
        borrower("x2", 0, 1000, 2),
        owner("a1", "a", 100, 500, 3),
        owner("a2", "a", 100, 500, 1),
    ]
    r = simulate({"a": 4}, jobs, POOL, window=5000)
    assert r.preemptions == 2
    assert sorted(r.owner_waits) == [60, 60]  # a2 takes the surplus GPU once the victims are gone


def test_gpus_of_a_borrower_already_leaving_count_for_the_next_owner():
    # x2 spans a and b; a's owner signals it, and b's owner, arriving at the same time,
    # uses x2's GPU on b (free at the end of that grace window) plus x1's: one grace, not two
    jobs = [
        borrower("x1", 0, 1000, 1),
        borrower("x2", 0, 1000, 2),
        owner("a0", "a", 2, 10, 1),
        owner("b0", "b", 2, 10, 2),
    ]
    r = simulate({"a": 1, "b": 2}, jobs, POOL, window=5000)
    assert r.preemptions == 2 and r.owner_waits == [60, 60]


def test_owners_beyond_their_share_borrow_and_can_be_preempted():
    # a's second job exceeds a's 1 GPU and borrows b's; b's owner takes it back
    jobs = [owner("a1", "a", 0, 1000, 1), owner("a2", "a", 0, 1000, 1), owner("b1", "b", 100, 100, 1)]
    r = simulate({"a": 1, "b": 1}, jobs, POOL, window=5000)
    assert r.owner_jobs_preempted == 1
    assert sorted(r.owner_waits) == [0, 0, 60]


@pytest.mark.parametrize(
    "capacity,jobs,window,message",
    [
        ({"a": 1}, [owner("z1", "z", 0, 1, 1)], 10, "project 'z' owns no servers"),
        ({"a": 1}, [owner("a1", "a", 0, 1, 2)], 10, "gpus 2 outside 1..1"),
        ({"a": 1}, [owner("a1", "a", 0, 0, 1)], 10, "work 0"),
        ({"a": -1}, [], 10, "negative GPU counts"),
        ({"a": 1}, [], 0, "window: 0 is not positive"),
        ({"a": 2}, [owner("a1", "a", 0, 1, 1), owner("a1", "a", 5, 1, 1)], 10, "job a1: duplicate job id"),
    ],
)
def test_bad_input_is_named(capacity, jobs, window, message):
    with pytest.raises(ValueError, match=message):
        simulate(capacity, jobs, POOL, window=window)


def test_backlog_job_reusing_an_id_is_refused():
    backlog = iter([borrower("b1", 0, 100, 1), borrower("a1", 0, 100, 1)])
    with pytest.raises(ValueError, match="job a1: duplicate job id"):
        simulate({"a": 4}, [owner("a1", "a", 0, 50, 1)], POOL, window=1000, backlog=backlog)


def test_backlog_fills_idle_gpus_only_while_the_window_lasts():
    backlog = (borrower(f"b{i}", 0, 100, 1) for i in range(10_000))
    r = simulate({"a": 4}, [owner("a1", "a", 0, 50, 1)], POOL, window=1000, backlog=backlog)
    assert r.utilization == pytest.approx(1.0)
    assert r.borrower_jobs_done < 60


def _borrowers(draw, caps: dict[str, int], most: int) -> list:
    """Up to ``most`` borrower jobs, each of at most the pool's GPUs."""
    return [
        borrower(
            f"x{i}", draw(st.integers(0, 500)), draw(st.integers(1, 400)), draw(st.integers(1, sum(caps.values())))
        )
        for i in range(draw(st.integers(0, most)))
    ]


@st.composite
def workloads(draw):
    caps = {p: draw(st.integers(1, 4)) for p in ("a", "b", "c")[: draw(st.integers(1, 3))]}
    jobs = []
    for p, cap in caps.items():  # one owner job per project: it always fits its share
        jobs.append(owner(f"{p}0", p, draw(st.integers(0, 500)), draw(st.integers(1, 300)), draw(st.integers(1, cap))))
    return caps, jobs + _borrowers(draw, caps, 8)


@settings(max_examples=150, deadline=None)
@given(workloads(), st.sampled_from([POOL, POOL_PERIODIC, NO_PREEMPT, DEDICATED]))
def test_invariants(w, policy):
    caps, jobs = w
    r = simulate(caps, jobs, policy, window=100_000)
    n_owner = sum(j.project is not None for j in jobs)
    assert r.unfinished_owner_jobs == 0 and len(r.owner_waits) == n_owner
    assert all(x >= 0 for x in r.owner_waits + r.borrower_waits)
    assert r.useful_gpu_seconds <= r.capacity * r.window + 1e-6
    done = r.borrower_jobs_done
    if policy.pooled:
        # every job finishes, and the work kept adds up to exactly the work asked for
        assert done == len(jobs) - n_owner
        assert r.useful_gpu_seconds == pytest.approx(sum(j.work * j.gpus for j in jobs))
    if policy.pooled and policy.preempt:
        # an owner inside its share waits at most one grace window, whatever borrowers do
        assert max(r.owner_waits) <= policy.grace
    if not policy.pooled:
        assert done == 0 and r.owner_waits == [0] * n_owner


@st.composite
def competing_workloads(draw):
    """Owners compete: several jobs per project, in bursts that go beyond the project's share."""
    caps = {p: draw(st.integers(1, 4)) for p in ("a", "b", "c")[: draw(st.integers(1, 3))]}
    jobs = []
    for p, cap in caps.items():
        burst = draw(st.integers(0, 300))
        for i in range(draw(st.integers(2, 6))):
            at = burst + draw(st.integers(0, 50)) if draw(st.booleans()) else draw(st.integers(0, 600))
            jobs.append(owner(f"{p}{i}", p, at, draw(st.integers(1, 300)), draw(st.integers(1, cap))))
    return caps, jobs + _borrowers(draw, caps, 6)


@settings(max_examples=150, deadline=None)
@given(competing_workloads(), st.sampled_from([POOL, POOL_PERIODIC, NO_PREEMPT, DEDICATED]))
def test_invariants_with_competing_owners(w, policy):
    """Every owner job finishes, no GPU is booked twice, and in a pool the kept work adds up.

    With competing owners a job can wait behind its own project's jobs, so
    the one-grace-window bound of :func:`test_invariants` is not claimed here.
    """
    caps, jobs = w
    r = simulate(caps, jobs, policy, window=100_000)
    n_owner = sum(j.project is not None for j in jobs)
    assert r.unfinished_owner_jobs == 0 and len(r.owner_waits) == n_owner
    assert all(x >= 0 for x in r.owner_waits + r.borrower_waits)
    assert all(0 <= idle <= r.capacity for _, idle in r.idle_timeline), r.idle_timeline
    assert r.useful_gpu_seconds <= r.capacity * r.window + 1e-6
    if policy.pooled:
        assert r.borrower_jobs_done == len(jobs) - n_owner
        assert r.useful_gpu_seconds == pytest.approx(sum(j.work * j.gpus for j in jobs))


def test_quantile_is_nearest_rank():
    assert quantile([], 0.5) == 0.0
    assert quantile([3, 1, 2, 4], 0.5) == 2 and quantile([3, 1, 2, 4], 0.95) == 4


# -- traces ------------------------------------------------------------------

GAVEL = "Transformer\tcd x\t-step\t1\t95121\t0.000000\t1\nRecommendation\tcd y\t-n\t1\t10000\t6.5\t4\n"


def test_vc_trace_rows():
    assert workload.parse_vc_trace(GAVEL) == [workload.Arrival(0.0, 1), workload.Arrival(6.5, 4)]


@pytest.mark.parametrize(
    "text,message",
    [
        ("a\tb\tc\n", "vc:1: expected 7 tab-separated columns, got 3"),
        ("a\tb\tc\td\te\tsoon\t1\n", "vc:1: arrival 'soon'"),
        ("a\tb\tc\td\te\t1\t0\n", "vc:1: arrival 1.0 must be >= 0 and gpus 0 >= 1"),
    ],
)
def test_vc_trace_errors_name_the_line(text, message):
    with pytest.raises(workload.TraceError, match=message):
        workload.parse_vc_trace(text, "vc")


def test_arrivals_csv_round_trip():
    rows = {"vc1": [workload.Arrival(0.0, 1), workload.Arrival(7.0, 8)], "vc2": [workload.Arrival(3.0, 2)]}
    assert workload.parse_arrivals_csv(workload.arrivals_csv(rows)) == rows


@pytest.mark.parametrize(
    "text,message",
    [
        ("vc,arrival\nx,1\n", "columns"),
        ("vc,arrival_seconds,num_gpus\nx,1,many\n", "arrivals:2: "),
    ],
)
def test_arrivals_csv_errors(text, message):
    with pytest.raises(workload.TraceError, match=message):
        workload.parse_arrivals_csv(text)


def test_runtimes_and_deterministic_draws():
    sampler = workload.RuntimeSampler(workload.parse_runtimes("runtime\n0\n100\n5000\n9999999\n"), lo=60, hi=86400)
    draws = [sampler.draw(f"j{i}") for i in range(200)]
    assert draws == [sampler.draw(f"j{i}") for i in range(200)]
    assert set(draws) == {60, 100, 5000, 86400}  # clamped at both ends
    with pytest.raises(workload.TraceError, match="no 'runtime' column"):
        workload.parse_runtimes("seconds\n1\n")
    with pytest.raises(workload.TraceError, match="runtimes:3: runtime 'x'"):
        workload.parse_runtimes("runtime\n1\nx\n")


def test_jobs_and_server_sizing():
    sampler = workload.RuntimeSampler([1000.0])
    arrivals = [workload.Arrival(0, 2), workload.Arrival(50, 16), workload.Arrival(500, 1)]
    jobs = workload.trace_jobs("vc", "a", arrivals, sampler, window=100, max_gpus=8)
    assert [(j.id, j.project, j.gpus, j.work) for j in jobs] == [("vc-0", "a", 2, 1000.0), ("vc-1", "a", 8, 1000.0)]
    # 10,000 GPU-s over a 100 s window at 50 % -> 200 GPUs -> 25 servers of 8
    assert workload.size_servers(jobs, 100, 0.5) == 200
    assert workload.size_servers(jobs[:1], 1e9, 0.5) == 8  # never below the biggest job
    with pytest.raises(ValueError, match="utilization: 0 is not"):
        workload.size_servers(jobs, 100, 0)
    backlog = workload.borrower_backlog([workload.Arrival(0, 32)], sampler, max_gpus=8)
    first = [next(backlog) for _ in range(3)]
    assert [(j.id, j.project, j.gpus) for j in first] == [("b0", None, 8), ("b1", None, 8), ("b2", None, 8)]


# -- lending to the inference tier -------------------------------------------


def _always(_t: float) -> bool:
    return True


# (idle timeline, allowed, max_nodes, lent GPU-s, lends, reclaims)
LEND_CASES = [
    ("two idle nodes lent all hour", [(0, 16)], _always, None, 16 * 3600, 2, 0),
    ("Slurm takes one back at 1000 s", [(0, 16), (1000, 8)], _always, None, 16 * 1000 + 8 * 2600, 2, 1),
    (
        "a node freed at 1000 s waits for the next cron tick",
        [(0, 8), (1000, 16)],
        _always,
        None,
        8 * 1200 + 16 * 2400,
        2,
        0,
    ),
    ("the window closes at 1800 s: given back, not reclaimed", [(0, 16)], lambda t: t < 1800, None, 16 * 1800, 2, 0),
    ("max_lent_nodes 1", [(0, 16)], _always, 1, 8 * 3600, 1, 0),
    ("7 idle GPUs are not a node", [(0, 7)], _always, None, 0, 0, 0),
]


@pytest.mark.parametrize(
    "timeline,allowed,max_nodes,lent,lends,reclaims", [c[1:] for c in LEND_CASES], ids=[c[0] for c in LEND_CASES]
)
def test_lending(timeline, allowed, max_nodes, lent, lends, reclaims):
    rep = replay_lending(timeline, window=3600, node_gpus=8, period=600, allowed=allowed, max_nodes=max_nodes)
    assert (rep.lent_gpu_seconds, rep.lends, rep.reclaims) == (lent, lends, reclaims)


def test_lending_never_exceeds_idle_on_a_replayed_pool():
    backlog = (borrower(f"b{i}", 0, 500 + 37 * (i % 11), 1 + i % 3) for i in range(200))
    jobs = [owner(f"a{i}", "a", 700 * i, 900, 1 + i % 4) for i in range(20)]
    r = simulate({"a": 8, "b": 16}, jobs, Policy("dedicated", pooled=False), window=20_000)
    assert r.idle_timeline and r.idle_timeline[0][0] == 0
    rep = replay_lending(r.idle_timeline, r.window, node_gpus=8, period=300, allowed=_always)
    assert 0 < rep.lent_gpu_seconds <= rep.idle_gpu_seconds
    pooled = simulate({"a": 8, "b": 16}, jobs, POOL, window=20_000, backlog=backlog)
    assert replay_lending(pooled.idle_timeline, pooled.window, 8, 300, _always).lent_gpu_seconds < rep.lent_gpu_seconds


@pytest.mark.parametrize("node_gpus,period,window", [(0, 600, 3600), (8, 0, 3600), (8, 600, 0)])
def test_lending_bad_arguments(node_gpus, period, window):
    with pytest.raises(ValueError, match="must be positive"):
        replay_lending([(0, 8)], window, node_gpus, period, _always)


# -- issue 30: numbers from traces are plain numbers, or the row is refused ---------------------------


@pytest.mark.parametrize(
    "arrival, gpus",
    [
        ("NaN", "1"),
        ("nan", "1"),
        ("inf", "1"),
        ("1e400", "1"),
        ("١٢", "1"),
        ("1_0", "1"),
        ("0", "1_0"),
        ("0", "٢"),
        ("0", "1.5"),
        ("0", "True"),
        ("0x10", "1"),
    ],
)
def test_trace_rows_with_odd_numbers_are_refused_not_dropped(arrival, gpus):
    # Issue 30, defect 5: NaN arrivals passed the ">= 0" check; "١٢" and "1_0" were read as 12 and 10.
    text = f"a\tb\tc\td\te\t0\t1\na\tb\tc\td\te\t{arrival}\t{gpus}\n"
    with pytest.raises(workload.TraceError, match=r"vc:2: arrival .* are not numbers"):
        workload.parse_vc_trace(text, "vc")
    with pytest.raises(workload.TraceError, match="arrivals:3: "):
        workload.parse_arrivals_csv(f"vc,arrival_seconds,num_gpus\nx,0,1\nx,{arrival},{gpus}\n")


@pytest.mark.parametrize("value", ["nan", "NaN", "inf", "-inf", "1e400", "١٢", "1_0", "True", "-5", " "])
def test_runtime_rows_with_odd_numbers_are_refused_not_dropped(value):
    with pytest.raises(workload.TraceError, match="runtimes:3: runtime"):
        workload.parse_runtimes(f"runtime\n1\n{value}\n7\n")


@pytest.mark.parametrize(
    "parse, text, want",
    [
        (workload.parse_runtimes, "\ufeffruntime\n5\n1\n", [1.0, 5.0]),
        (workload.parse_arrivals_csv, "\ufeffvc,arrival_seconds,num_gpus\nx,1,2\n", {"x": [workload.Arrival(1, 2)]}),
        (workload.parse_vc_trace, "\ufeffa\tb\tc\td\te\t3\t2\n", [workload.Arrival(3, 2)]),
    ],
)
def test_a_byte_order_mark_hides_no_column(parse, text, want):
    # Issue 30, defect 5: a spreadsheet's UTF-8 BOM turned the header into "\ufeffruntime".
    assert parse(text) == want
