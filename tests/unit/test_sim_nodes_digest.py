"""The node engine's whole replay, pinned by digest: every run and every figure of the result.

The bench's seeded workload (``bench/scale_replay.py``: 1,000 nodes, owners
and borrowers, jobs of 1-32 GPUs at 150 % of the GPUs) and the golden cases
of :mod:`tests.unit.test_sim_nodes_golden` replay to the digests the engine
gave before it was made faster: the schedule (job, tier, times, nodes,
outcome) and every field of the result (waits, timelines, GPU-seconds,
lending), floats exactly.  A speed-up must change none of them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from slurm_pool.sim.nodes import NodePolicy, NodeResult, simulate_nodes
from tests.unit.test_sim_nodes_golden import CASES, workload

ROOT = Path(__file__).resolve().parents[2]


def _bench() -> Any:
    if "scale_replay" in sys.modules:
        return sys.modules["scale_replay"]
    spec = importlib.util.spec_from_file_location("scale_replay", ROOT / "bench" / "scale_replay.py")
    assert spec is not None and spec.loader is not None
    mod = sys.modules["scale_replay"] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def digest(r: NodeResult) -> str:
    """sha256 of every field of ``r`` (the schedule run by run, the counts, timelines and lending), as JSON."""
    doc = dataclasses.asdict(r)
    return hashlib.sha256(json.dumps(doc, sort_keys=True, default=repr).encode()).hexdigest()


def bench_replay(jobs: int) -> NodeResult:
    """``scale_replay``'s 1,000 nodes and its first ``jobs`` seeded jobs (seed 12), as its replay runs them."""
    b = _bench()
    nodes = b.cluster()
    case = dataclasses.replace(b.CASES["replay-1000n-10000j"], jobs=jobs)
    js = b.workload(case, nodes, 12)
    return simulate_nodes(nodes, js, NodePolicy("pool-nodes", grace=60.0, restart_overhead=60.0), js[-1].arrival)


#: Recorded from the engine before its event queue, free-node index and backfill were reworked.
BENCH = {
    6000: "b9437398ea87da2da706104cef8fea820e47294851ff0bf38f08c0e9d3413737",
}
GOLDEN = {
    "pool-small": "12a2ca10adaa997fed2d7b563992247e5ef5bd2f849ec52f13257cf491d32e91",
    "pool-mid": "ed8614c2a313b847d6530389ac6a9edb5e6068107e04ab474c51f2272b64389a",
    "pool-overload": "01850550a7e7313c28a93341a39858aeff7dfa478940dae3ac6b390a7a8a3e3c",
    "pool-large": "3bfad0a04ac5433459ce40ada62a01fa63fd56a45470678878bcfc7d7aaa1c53",
    "periodic-ckpt": "da89142b71bd84f7b70e8947b0f0c0fe9d641b994a052eda4757d7b284605879",
    "no-preempt": "107bf4f306cb846134877b62b738d252a4189b25caf993b632345541f351b943",
    "dedicated": "c60c8cda8c7f6b51fe12244fc8663751a0e4daf8e623e1fa0f2aab8a0c0c7cdd",
    "time-limit": "801ef886a7085c504ffb0c0cc7e96bbaaf3e0ca318c48cb3566b788fa691dca5",
    "time-limit-tight": "e5a9dcc55b52a60a5adc53ae541af1cf64c18a9ccb3a55fc6c2d641335ec9e9f",
    "bf-depth-3": "9762caacac9a5490cc545efe802e2fe9940dbb5721be11ed937a4928e5657e51",
    "no-backfill": "deb25eeee23a9cf49cc9cf0a1e56845439beea3f978c0d72fbe8d4240dba1214",
    "bf-interval": "c31224d562498ab0ae0aee7da7be0cbff4767965fc595a3f750f557ba61ae71d",
    "requeue-delay": "56d6fa14caa389500db926337e818a90f0797170a831f96ca411be89dc63c373",
    "release-delay": "961ce6a6aeafaf2e9a628bbe7119677767db75cd11c2836f72d73d6cd0ae168a",
    "owners-stay": "642ac46249ab14675417164c2e1e84665e70fb4d7d8364b3663d3ff74718222f",
    "mig": "e693aa17b2fe085322eaaafde10ae24ed60611aa52a8f23409956569bdf96f88",
    "mig-limit": "326afe96c3333f8d9d13779416cb1d27ee0fd1a7d1c110e0d524778eda08d1a6",
    "lend": "9e43df91b4618e78ad6d4e37777249502caef15097fcfb0dabc5065f6764a108",
    "lend-demand": "a19e10c13e454dae62c40308b1286a357e2aefced1505aab267c9750f08f45b7",
    "lend-owners-only": "16cb3ef68f6efda58415a73b96cd6f6df80788f0f47ab52ab7fbfa8417dfbdc0",
    "one-project": "2cc91f175a4a851f9ae2237d946d7ff91fcaedd81276781e104a88b60f57d627",
}


@pytest.mark.parametrize("jobs", sorted(BENCH))
def test_the_bench_workload_replays_to_the_recorded_digest(jobs):
    r = bench_replay(jobs)
    assert r.backfilled > 100 and r.preemptions > 10  # the replay exercises backfill and preemption
    assert digest(r) == BENCH[jobs]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_the_golden_cases_replay_to_the_recorded_digest(case):
    nodes, jobs, window = workload(case)
    assert digest(simulate_nodes(nodes, jobs, case.policy, window)) == GOLDEN[case.name]


def test_the_digest_sees_every_field():
    r = NodeResult("p", 10.0, 8)
    before = digest(r)
    r.tier_timeline.append((1.0, 2.0, 3.0))
    assert digest(r) != before
