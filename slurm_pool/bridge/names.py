"""Which Kubernetes Node is which Slurm node (pure): ``bridge.node_names``.

``by: name``: the same name.  ``by: rule``: fixed text around a common part
(``slurm: "gpu{node}"``, ``kubernetes: "k8s-{node}"``), so each name gives the
other.  ``by: label``: the Kubernetes Node carries the label, its value the
Slurm node's name; only the listed Nodes tell.

Names and labels from Kubernetes are untrusted.  A label value that is no
Slurm node's name, or a Slurm node two Kubernetes Nodes claim, is reported
and those Nodes are left alone: never lent, never fenced by a guess.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Collection, Iterable, Mapping

from slurm_pool.spec.bridge import NodeNames
from slurm_pool.text import matches, shown


@dataclass(frozen=True)
class NameMap:
    """The names of one listing of Kubernetes Nodes, matched with Slurm's."""

    #: Kubernetes Node -> Slurm node, and back.
    to_slurm: Mapping[str, str] = field(default_factory=dict)
    to_k8s: Mapping[str, str] = field(default_factory=dict)
    #: Why Kubernetes Nodes were left alone, one line each.
    problems: tuple[str, ...] = ()
    #: Slurm nodes a left-alone Kubernetes Node claims: which Node is theirs is in doubt.
    doubtful: frozenset[str] = frozenset()


class NodeNaming:
    """``bridge.node_names`` applied."""

    def __init__(self, rule: NodeNames | None = None):
        self.rule = rule or NodeNames()

    @property
    def by_label(self) -> bool:
        return self.rule.by == "label"

    def k8s_name(self, slurm: str) -> str | None:
        """The Kubernetes Node name of Slurm node ``slurm`` where the rule alone tells (not ``by: label``)."""
        return self.rule.k8s_name(slurm)

    def slurm_name(self, k8s: str) -> str | None:
        """The Slurm node name of Kubernetes Node ``k8s`` where the rule alone tells (not ``by: label``)."""
        return self.rule.slurm_name(k8s)

    def match(self, nodes: Iterable[tuple[str, Mapping[str, str]]], slurm_nodes: Collection[str]) -> NameMap:
        """Match listed Kubernetes Nodes, as (name, labels), with Slurm's nodes ``slurm_nodes``.

        ``by: name`` and ``by: rule`` match each Node its rule gives (a Slurm node or not, as
        before).  ``by: label`` matches a Node that carries the label to the Slurm node its value
        names; a value naming none, or a Slurm node claimed twice, leaves the Nodes alone.
        """
        if not self.by_label:
            pairs = ((k, self.slurm_name(k)) for k, _ in nodes)
            ruled = {k: s for k, s in pairs if s is not None}
            return NameMap(ruled, {s: k for k, s in ruled.items()})
        key = self.rule.label
        claims: dict[str, list[str]] = {}
        problems: list[str] = []
        for name, labels in nodes:
            value = labels.get(key)
            if value is None:
                continue  # Kubernetes' own node
            where = f"Kubernetes Node {shown(name)}: label {key}={shown(repr(value))}"
            if not matches("node", value):
                problems.append(f"{where} is not a Slurm node name: the Node is left alone")
            elif value not in slurm_nodes:
                problems.append(f"{where} names no Slurm node: the Node is left alone")
            else:
                claims.setdefault(value, []).append(name)
        to_slurm: dict[str, str] = {}
        doubtful = set()
        for slurm, names in claims.items():
            if len(names) == 1:
                to_slurm[names[0]] = slurm
                continue
            doubtful.add(slurm)
            which = ", ".join(shown(n) for n in sorted(names))
            problems.append(f"Slurm node {slurm}: Kubernetes Nodes {which} all carry {key}={slurm}: all left alone")
        return NameMap(to_slurm, {s: k for k, s in to_slurm.items()}, tuple(problems), frozenset(doubtful))
