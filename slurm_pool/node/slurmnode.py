"""The node's drain state in Slurm: read it, decide, drain or undrain.

All commands go through a :class:`~slurm_pool.adapters.runner.Runner` as argv
lists.  The decision (:func:`decide`) is pure: a drain set by a human (reason
not starting with ``slurm-pool:``) is never touched, and only our own drain is
cleared once the checks pass.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from slurm_pool.adapters.records import NodeRecord
from slurm_pool.adapters.slurmcalls import SlurmCalls
from slurm_pool.adapters.slurmcalls import node_in_json as parse_node_json  # noqa: F401 -- its name here
from slurm_pool.node.health import is_ours


class Action(NamedTuple):
    """``kind`` is ``drain``, ``undrain`` or ``none``."""

    kind: str
    reason: str = ""


def query_node(runner: Any, scontrol: str, name: str) -> NodeRecord | None:
    """The node's record (:meth:`~slurm_pool.adapters.slurmcalls.SlurmCalls.node_record`);
    None if Slurm cannot be asked."""
    return SlurmCalls(runner, scontrol).node_record(name, timeout=15)


def decide(node: NodeRecord | None, reason: str | None, *, may_undrain: bool = True) -> Action:
    """What to do given the node's state and the new drain reason (None: healthy).

    * unhealthy, not drained                 -> drain
    * unhealthy, drained by us, new reason   -> drain (updates the reason)
    * unhealthy, drained by a human          -> nothing
    * healthy, drained by us                 -> undrain (if allowed)
    * anything else                          -> nothing
    With no node state (Slurm unreachable) an unhealthy node is drained
    anyway; a healthy one is left alone.
    """
    if reason is not None:
        if node is None or not node.drained:
            return Action("drain", reason)
        if is_ours(node.reason) and node.reason.strip() != reason.strip():
            return Action("drain", reason)
        return Action("none")
    if node is not None and node.drained and is_ours(node.reason) and may_undrain:
        return Action("undrain")
    return Action("none")


def apply(runner: Any, scontrol: str, name: str, action: Action) -> str | None:
    """Carry out ``action``; None when scontrol succeeded (or there was nothing to do), else why not."""
    slurm = SlurmCalls(runner, scontrol)
    if action.kind == "drain":
        res = slurm.update_node(name, "DRAIN", action.reason, check=False, timeout=15)
    elif action.kind == "undrain":
        res = slurm.update_node(name, "UNDRAIN", check=False, timeout=15)
    else:
        return None
    if res.ok:
        return None
    return " ".join((res.stderr or res.stdout or f"exit status {res.returncode}").split())[:300]
