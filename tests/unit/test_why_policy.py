"""``why`` never suggests a tier the submit policy refuses (issue 49, the console's first-use list).

The example pool's ``shared`` tier requires a time limit and allows 4 GPUs per job; ``scavenger`` takes only
jobs that checkpoint.  Each case is a pending job of proja's; the partitions ``why`` offers are checked.
"""

from __future__ import annotations

import pytest

from slurm_pool.predict.explain import explain
from slurm_pool.predict.forward import predict
from slurm_pool.predict.pool import TierRule
from tests.unit.test_predict import NOW, OWNER_HISTORY, OWNERS_FULL, history, pool, wait  # noqa: F401 -- fixture

ALL = {"a-owner", "shared", "scavenger"}

CASES = [
    # (case, partition, gpus, limit, partitions offered)
    ("no time limit, no checkpoint: neither shared nor scavenger", "a-owner", 2, None, set()),
    ("a time limit: shared, not scavenger", "a-owner", 2, 3600.0, {"shared"}),
    ("from scavenger (it checkpoints): both others", "scavenger", 2, 3600.0, {"a-owner", "shared"}),
    ("from scavenger without a limit: the owner's only", "scavenger", 2, None, {"a-owner"}),
    ("from shared: the owner's; scavenger wants a checkpoint", "shared", 2, 3600.0, {"a-owner"}),
]


@pytest.mark.parametrize(("part", "gpus", "limit", "offered"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_why_offers_only_partitions_the_policy_takes(pool, part: str, gpus: int, limit, offered: set[str]) -> None:  # noqa: F811
    job = wait("alice", part, 10, gpus, limit=limit, account="proja", qos=part if part != "a-owner" else "guaranteed")
    fc = predict(pool, [*OWNERS_FULL, job], history(*OWNER_HISTORY), NOW)
    got = {a.what.split()[1] for a in explain(fc, 10).alternatives if a.what.startswith("partition ")}
    assert got == offered, got
    assert not got & {part}


@pytest.mark.parametrize(
    ("rule", "gpus", "limit", "declared", "said"),
    [
        (TierRule(max_gpus=4), 5, 60.0, True, "at most 4 GPU(s)"),
        (TierRule(max_gpus=4), 4, 60.0, False, ""),
        (TierRule(require_time=True), 1, None, True, "requires a time limit"),
        (TierRule(require_time=True), 1, 60.0, False, ""),
        (TierRule(checkpoint="reject"), 1, 60.0, False, "only jobs that checkpoint"),
        (TierRule(checkpoint="reject"), 1, 60.0, True, ""),
        (TierRule(checkpoint="add_requeue"), 1, None, False, ""),
    ],
)
def test_tier_rule(rule: TierRule, gpus: int, limit, declared: bool, said: str) -> None:
    got = rule.refuses("t", gpus, limit, declared)
    assert (said in got) if said else got == ""
