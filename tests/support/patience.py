"""How long the daemon tests wait for a state on a loaded machine.

A test names the bound it expects on a quiet machine; the waits stretch it by
``SLURM_POOL_TEST_PATIENCE`` (default 3).  A state wait returns as soon as the
state is reached, so the factor costs nothing when the test passes: it only
keeps a busy 2-core machine (a CI runner with another job beside it) from
failing a test that would have passed a little later.  No test waits for
something *not* to happen with these helpers.
"""

from __future__ import annotations

import os
from typing import Any, Callable

FACTOR = float(os.environ.get("SLURM_POOL_TEST_PATIENCE", "3"))


def patience(seconds: float) -> float:
    """``seconds`` stretched for a loaded machine."""
    return seconds * FACTOR


def wait_for(
    check: Callable[[], Any],
    timeout: float,
    what: str,
    interval: float = 0.25,
    ignore: tuple[type[BaseException], ...] = (),
) -> Any:
    """:func:`slurm_pool.localcluster.procs.wait_for` with ``timeout`` stretched by :func:`patience`."""
    from slurm_pool.localcluster import procs

    return procs.wait_for(check, patience(timeout), what, interval, ignore)
