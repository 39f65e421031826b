"""Issue 27: ``examples/pool-full.yaml`` boots where its header says it does, and is refused where it says not.

On a Slurm that keeps a shard's GPU from being given whole to another job
(23.11.5 and later, so 26.05 here) the full pool boots as real daemons with
its notebook tier, its shards and its console section.  Bob submits a job on
one shard of his server through the console's SDK, and it runs there.  On
22.05 the same spec is refused before anything starts, naming the shards.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_pool.errors import SpecError
from tests.conftest import TEST_SLURM
from tests.support.console import running_console
from tests.support.patience import patience

pytestmark = pytest.mark.slurm

FULL = Path(__file__).resolve().parents[2] / "examples" / "pool-full.yaml"


def test_the_full_example_boots_where_it_says(slurm_cluster):
    from tests.support.slurm_cluster import start_session_cluster, stop_session_cluster

    if not slurm_cluster.version.has("shard_excludes_gpu"):
        with pytest.raises(SpecError) as exc:
            start_session_cluster(FULL, slurm=TEST_SLURM)
        assert "node_groups[1].gpus.shards" in str(exc.value), exc.value
        return
    handle, state = start_session_cluster(FULL, slurm=TEST_SLURM)
    try:
        gres = handle.run(["sinfo", "-h", "-N", "-n", "b-gpu1", "-o", "%G"], check=True).stdout
        assert "shard" in gres, gres
        partitions = handle.run(["sinfo", "-h", "-o", "%R"], check=True).stdout.split()
        assert {"notebook", "dev"} <= set(partitions), partitions
        with running_console(handle) as svc:
            from slurm_pool.client import PoolClient

            bob = PoolClient(svc.url, svc.token("bob"))
            me = bob.me()
            assert "dev" in me.tiers and me.hub_url, me
            sub = bob.submit("#!/bin/bash\nsleep 1\n", "dev", project="projb", gpus=0, shards=1, time_limit="5")
            assert any(o.startswith("--gres=shard:1") for o in sub.explanation.options), sub.explanation
            done = bob.wait(sub.job_id, ["COMPLETED"], timeout=patience(120))
            assert done.nodes == "b-gpu1" and done.shards == 1, done
    finally:
        stop_session_cluster(handle, state)
