"""The node's drain state in Slurm: read it, decide, drain or undrain.

All commands go through a :class:`~slurm_pool.adapters.runner.Runner` as argv
lists.  The decision (:func:`decide`) is pure: a drain set by a human (reason
not starting with ``slurm-pool:``) is never touched, and only our own drain is
cleared once the checks pass.
"""

from __future__ import annotations

import json
import re
from typing import Any, NamedTuple

from slurm_pool.adapters.slurmjson import is_drained, states
from slurm_pool.node.health import is_ours

_REASON_SUFFIX = re.compile(r"\s*\[[^\]@]*@[^\]]*\]\s*$")


class NodeState(NamedTuple):
    """What the hooks need to know about one node."""

    name: str
    flags: frozenset[str]
    reason: str
    gres: str

    @property
    def drained(self) -> bool:
        return is_drained(self.flags)


class Action(NamedTuple):
    """``kind`` is ``drain``, ``undrain`` or ``none``."""

    kind: str
    reason: str = ""


def parse_node_json(text: str, name: str) -> NodeState | None:
    """``scontrol --json show node NAME`` (22.05 and later layouts)."""
    try:
        data = json.loads(text)
    except ValueError:
        return None
    for n in data.get("nodes") or []:
        if (n.get("name") or n.get("hostname")) != name:
            continue
        flags = set(states(n.get("state"))) | set(states(n.get("state_flags")))
        return NodeState(name, frozenset(flags), str(n.get("reason") or ""), str(n.get("gres") or ""))
    return None


def parse_node_text(text: str, name: str) -> NodeState | None:
    """``scontrol show node NAME`` (plain text), as a fallback."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("Reason="):  # the rest of the line, spaces included
            fields["Reason"] = _REASON_SUFFIX.sub("", line[len("Reason="):])
            continue
        for tok in line.split():
            k, sep, v = tok.partition("=")
            if sep and k not in fields:
                fields[k] = v
    if fields.get("NodeName") != name:
        return None
    reason = fields.get("Reason", "")
    return NodeState(name, frozenset(states(fields.get("State", ""))), "" if reason == "(null)" else reason,
                     "" if fields.get("Gres") == "(null)" else fields.get("Gres", ""))


def query_node(runner: Any, scontrol: str, name: str) -> NodeState | None:
    """The node's state, trying JSON first; None if Slurm cannot be asked."""
    res = runner.run([scontrol, "--json", "show", "node", name], check=False, timeout=15)
    if res.ok:
        st = parse_node_json(res.stdout, name)
        if st is not None:
            return st
    res = runner.run([scontrol, "show", "node", name], check=False, timeout=15)
    return parse_node_text(res.stdout, name) if res.ok else None


def decide(node: NodeState | None, reason: str | None, *, may_undrain: bool = True) -> Action:
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


def apply(runner: Any, scontrol: str, name: str, action: Action) -> bool:
    """Carry out ``action``; True when scontrol succeeded (or nothing to do)."""
    if action.kind == "drain":
        argv = [scontrol, "update", f"NodeName={name}", "State=DRAIN", f"Reason={action.reason}"]
    elif action.kind == "undrain":
        argv = [scontrol, "update", f"NodeName={name}", "State=UNDRAIN"]
    else:
        return True
    return runner.run(argv, check=False, timeout=15).ok
