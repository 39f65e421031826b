"""The k8s test bed's state waits say what they saw when they time out (issue 30, the flaky scheduler wait)."""

from __future__ import annotations

import pytest

from tests.support.k8s_wait import wait_state


def _broken() -> str:
    raise RuntimeError("API server away")


@pytest.mark.parametrize(
    ("check", "describe", "said"),
    [
        (lambda: None, lambda: "pod gpu-3: Pending on None ['PodScheduled=False Unschedulable: 0/4 nodes']", "gpu-3"),
        (lambda: 1 / 0, lambda: "node a-gpu1: unschedulable=True", "ZeroDivisionError"),
        (lambda: False, _broken, "cluster state not read: RuntimeError('API server away')"),
    ],
    ids=["the cluster's state", "the last error", "a state that cannot be read"],
)
def test_a_timed_out_wait_reports_what_it_saw(check, describe, said: str) -> None:
    with pytest.raises(AssertionError) as exc:
        wait_state(check, "one GPU pod pending", timeout=0.3, describe=describe)
    assert "timed out after 0.3s waiting for one GPU pod pending" in str(exc.value)
    assert said in str(exc.value)


def test_a_state_reached_is_returned() -> None:
    seen = iter([None, None, "a-gpu2"])
    assert wait_state(lambda: next(seen), "pod bound", timeout=5) == "a-gpu2"
