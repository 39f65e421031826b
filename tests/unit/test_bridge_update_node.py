"""``update_node``: a Node patch that loses a race (409) is read again and retried, within bounds."""

from __future__ import annotations

from typing import Any

import pytest

from slurm_pool.bridge.k8s import UPDATE_BACKOFF, K8sError, update_node


class Racing:
    """A Node API whose first ``losses`` patches find the Node changed since it was read."""

    def __init__(self, losses: int, status: int = 409):
        self.losses, self.status = losses, status
        self.reads = 0
        self.patches: list[dict[str, Any]] = []

    def read_node(self, name: str) -> dict[str, Any]:
        self.reads += 1
        return {"metadata": {"name": name, "resourceVersion": str(self.reads)}}

    def patch_node(self, name: str, body: dict[str, Any]) -> None:
        if len(self.patches) < self.losses:
            self.patches.append(body)
            raise K8sError(self.status, "the object has been modified")
        self.patches.append(body)


@pytest.mark.parametrize(
    ("losses", "status", "applied"),
    [
        (0, 409, True),
        (1, 409, True),
        (len(UPDATE_BACKOFF) - 1, 409, True),  # the last try wins
        (len(UPDATE_BACKOFF), 409, False),  # every try lost: the 409 is raised
        (1, 500, False),  # not a race: raised at once
    ],
)
def test_a_lost_race_is_retried_on_the_fresh_node(losses, status, applied):
    api = Racing(losses, status)
    slept: list[float] = []
    make = lambda n: {"metadata": {"resourceVersion": n["metadata"]["resourceVersion"]}}  # noqa: E731
    if applied:
        update_node(api, "n1", make, sleep=slept.append)
        assert api.patches[-1] == {"metadata": {"resourceVersion": str(api.reads)}}  # built from the last read
    else:
        with pytest.raises(K8sError) as err:
            update_node(api, "n1", make, sleep=slept.append)
        assert err.value.status == status
    assert api.reads == len(api.patches)  # every try reads the Node again
    assert slept == [p for p in UPDATE_BACKOFF[: api.reads] if p]
    assert sum(UPDATE_BACKOFF) < 5  # bounded: a rebalance run is not held up for long
