"""The one polling helper the local cluster, the k8s harness and the e2e tests share."""

from __future__ import annotations

import itertools

import pytest

from slurm_pool.localcluster.procs import wait_for


def test_returns_the_first_truthy_answer():
    answers = iter([None, 0, "", {"up": 1}])
    assert wait_for(lambda: next(answers), 5, "x", interval=0) == {"up": 1}


def test_ignored_errors_mean_not_yet():
    calls = itertools.count()

    def check():
        if next(calls) < 2:
            raise ConnectionRefusedError("starting")
        return True

    assert wait_for(check, 5, "x", interval=0, ignore=(OSError,)) is True


def test_other_errors_propagate():
    with pytest.raises(KeyError):
        wait_for(lambda: {}["k"], 5, "x", interval=0, ignore=(OSError,))


@pytest.mark.parametrize(
    "answer,message",
    [
        (False, "timed out after 0.05s waiting for the thing$"),
        ([], r"timed out after 0.05s waiting for the thing \(last: \[\]\)$"),
    ],
)
def test_timeout_names_what_and_the_last_answer(answer, message):
    with pytest.raises(TimeoutError, match=message):
        wait_for(lambda: answer, 0.05, "the thing", interval=0.01)
