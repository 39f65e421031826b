"""The node's drain state in Slurm: read it, decide, drain or undrain.

All commands go through a :class:`~slurm_pool.adapters.runner.Runner` as argv
lists.  The decision (:func:`decide`) is pure: a drain set by a human (reason
not starting with ``slurm-pool:``) is never touched, and only our own drain is
cleared once the checks pass.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from slurm_pool.adapters.records import NodeRecord, RecordError, parse_node_text, parse_nodes
from slurm_pool.node.health import is_ours


class Action(NamedTuple):
    """``kind`` is ``drain``, ``undrain`` or ``none``."""

    kind: str
    reason: str = ""


def parse_node_json(text: str, name: str) -> NodeRecord | None:
    """The record of ``name`` in ``scontrol --json show node`` output (23.02+), else None."""
    try:
        return next((n for n in parse_nodes(text) if n.name == name), None)
    except RecordError:
        return None


def query_node(runner: Any, scontrol: str, name: str) -> NodeRecord | None:
    """The node's record, from JSON (23.02+) else plain text (22.05's scontrol has no JSON);
    None if Slurm cannot be asked."""
    res = runner.run([scontrol, "--json", "show", "node", name], check=False, timeout=15)
    if res.ok:
        st = parse_node_json(res.stdout, name)
        if st is not None:
            return st
    res = runner.run([scontrol, "show", "node", name], check=False, timeout=15)
    return parse_node_text(res.stdout, name) if res.ok else None


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
    if action.kind == "drain":
        argv = [scontrol, "update", f"NodeName={name}", "State=DRAIN", f"Reason={action.reason}"]
    elif action.kind == "undrain":
        argv = [scontrol, "update", f"NodeName={name}", "State=UNDRAIN"]
    else:
        return None
    res = runner.run(argv, check=False, timeout=15)
    if res.ok:
        return None
    return " ".join((res.stderr or res.stdout or f"exit status {res.returncode}").split())[:300]
