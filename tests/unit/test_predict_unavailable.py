"""Which nodes a forecast leaves out for its whole horizon (``predict.live.unavailable``)."""

from __future__ import annotations

import pytest

from slurm_pool.adapters.records import NodeRecord, State
from slurm_pool.predict.live import unavailable

CASES = [
    # (state as slurmctld prints it, left out of the forecast)
    ("IDLE", False),
    ("MIXED", False),
    ("ALLOCATED", False),
    ("IDLE+NOT_RESPONDING", False),  # missed one ping: back within seconds, or DOWN by the next forecast
    ("ALLOCATED+NOT_RESPONDING", False),
    ("DOWN+NOT_RESPONDING", True),
    ("DOWN", True),
    ("IDLE+DRAIN", True),
    ("MIXED+DRAIN", True),
    ("IDLE+POWERED_DOWN", True),
    ("FUTURE", True),
    ("IDLE+FAIL", True),
]


@pytest.mark.parametrize(("state", "out"), CASES)
def test_a_node_is_left_out_only_for_what_lasts(state: str, out: bool) -> None:
    node = NodeRecord("n1", State.parse(state, bases=frozenset({"IDLE", "MIXED", "ALLOCATED", "DOWN", "FUTURE"})))
    assert (unavailable([node]) == {"n1"}) is out
