"""``doctor``'s ``guarantees`` check: floating guarantees against the GPUs Slurm has now.  Pure.

Run only when the spec has a ``guarantees`` section.  The capacity is what
the nodes of the guarantees' partition (``guarantees.partition``) can run
now, from the node records Slurm printed (:mod:`slurm_pool.adapters.records`:
the same on 22.05 and 26.05): the ``gres/gpu`` units of every node that is not
down, drained, failing, not responding or not yet there (:data:`OUT_STATES`),
in all and per GRES type.  A node lent to Kubernetes by the bridge counts: its
placeholder job is preempted when Slurm wants it back.

Findings:

* the sum of every guarantee (``gres/gpu`` and typed alike) is over
  ``overcommit`` x the usable GPUs, or the sum of the ``gres/gpu:<type>``
  guarantees over ``overcommit`` x the usable GPUs of that GRES type (Slurm
  counts ``GrpTRES=gres/gpu:<type>`` by the exact type name);
* a floating project's QOS (:func:`~slurm_pool.spec.guarantees.guarantee_qos`)
  is not in Slurm, or its ``GrpTRES`` GPUs are not its guarantee.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable, Mapping, TypeVar

from slurm_pool.accounting.plan import guarantee_grp_tres
from slurm_pool.adapters.gres import gpu_counts, parse_tres
from slurm_pool.adapters.records import OUT_OF_SERVICE, NodeRecord
from slurm_pool.findings import Finding
from slurm_pool.spec.guarantees import exceeded, floating_projects, guarantee_qos, guarantee_text
from slurm_pool.spec.model import PoolSpec

CHECK = "guarantees"
_N = TypeVar("_N", int, float)
#: Node base states and flags whose GPUs Slurm cannot give a job now.
OUT_STATES = OUT_OF_SERVICE
#: The word a finding uses for a node out for one of these (the first that applies).
_OUT_WORDS = (
    ("DRAINING", "draining"),
    ("DRAINED", "drained"),
    ("DRAIN", "drained"),
    ("FAIL", "failed"),
    ("FAILING", "failing"),
    ("NOT_RESPONDING", "not responding"),
    ("DOWN", "down"),
    ("FUTURE", "future"),
    ("UNKNOWN", "unknown"),
    ("ERROR", "in error"),
    ("INVALID_REG", "refused at registration"),
    ("INVALID", "invalid"),
)
_TRES_GPU = "gres/gpu"


@dataclass(frozen=True)
class OutNode:
    """A node of the partition whose GPUs do not count now, and why."""

    name: str
    why: str
    reason: str
    gpus: Mapping[str, int]

    def __str__(self) -> str:
        return f"{self.name} {self.why}" + (f": {self.reason}" if self.reason else "")


@dataclass(frozen=True)
class Capacity:
    """GPUs of one partition's nodes: usable now (in all, per GRES type), present, and the nodes out."""

    partition: str
    nodes: int = 0
    usable: Mapping[str, int] = field(default_factory=dict)
    present: Mapping[str, int] = field(default_factory=dict)
    out: tuple[OutNode, ...] = ()

    @property
    def total(self) -> int:
        return sum(self.usable.values())


def out_why(node: NodeRecord) -> str | None:
    """Why ``node``'s GPUs do not count now (``drained``, ``down``, ...), None when they do."""
    if not node.state.any(OUT_STATES):
        return None
    if "DRAIN" in node.state and node.state.base in ("ALLOCATED", "MIXED"):
        return "draining"  # jobs still run there: sinfo's "drng"
    return next((word for state, word in _OUT_WORDS if state in node.state), str(node.state).lower())


def slurm_capacity(nodes: Iterable[NodeRecord], partition: str) -> Capacity:
    """The GPU units of ``partition``'s nodes that Slurm can give a job now."""
    usable: Counter[str] = Counter()
    present: Counter[str] = Counter()
    out: list[OutNode] = []
    count = 0
    for node in sorted(nodes, key=lambda n: n.name):
        if partition not in node.partitions:
            continue
        count += 1
        gpus = gpu_counts(node.gres)
        present.update(gpus)
        why = out_why(node)
        if why is None:
            usable.update(gpus)
        else:
            out.append(OutNode(node.name, why, node.reason, gpus))
    return Capacity(partition, count, dict(usable), dict(present), tuple(out))


def _out_with(cap: Capacity, gtype: str | None) -> list[OutNode]:
    """The nodes out that hold GPUs of ``gtype`` (None: any GPU)."""
    return [n for n in cap.out if (sum(n.gpus.values()) if gtype is None else n.gpus.get(gtype))]


def _why(cap: Capacity, gtype: str | None) -> str:
    """Why the capacity is what it is: the nodes out and their reasons, or that there is no such GPU."""
    if cap.nodes == 0:
        return f"no node in Slurm is in partition '{cap.partition}'"
    if gtype is not None and not cap.present.get(gtype):
        kinds = ", ".join(sorted(t or "untyped" for t in cap.present)) or "none"
        return f"no GPU there has GRES type {gtype}; its types: {kinds}"
    return "; ".join(str(n) for n in _out_with(cap, gtype)) or "every node usable"


def capacity_findings(spec: PoolSpec, nodes: Iterable[NodeRecord]) -> list[Finding]:
    """Guarantee sums (total, per type) over ``overcommit`` x the partition's usable GPUs."""
    g = spec.guarantees
    if g is None:
        return []
    cap = slurm_capacity(nodes, g.partition)
    projects = ", ".join(f"{p.name} {guarantee_text(p.guarantee)}" for p in floating_projects(spec))
    out = []
    have_now: dict[str | None, int] = {None: cap.total}
    have_now.update(cap.usable)
    over = exceeded(spec, have_now)
    for gtype in [*([None] if None in over else []), *sorted(t for t in over if t is not None)]:
        total, have = over[gtype]
        key = _TRES_GPU if gtype is None else f"{_TRES_GPU}:{gtype}"
        back = [n.name for n in _out_with(cap, gtype)]
        resume = (
            f"bring {', '.join(back)} back (scontrol update NodeName={','.join(back)} State=RESUME once fixed); "
            "until then not every guarantee can be met at once; or "
            if back
            else ""
        )
        out.append(
            Finding(
                CHECK,
                f"guarantees of {key} sum to {total} GPUs, over {float(g.overcommit)} x {have} GPUs usable "
                f"in partition '{g.partition}' ({_why(cap, gtype)})",
                f"{resume}lower the guarantees ({projects}) or raise guarantees.overcommit in the spec, "
                "then slurm-pool apply accounting SPEC",
            )
        )
    return out


def _gpu_only(tres: Mapping[str, _N]) -> dict[str, _N]:
    """The GPU TRES of ``tres`` (gres/gpu and gres/gpu:<type>)."""
    return {k: v for k, v in tres.items() if k == _TRES_GPU or k.startswith(_TRES_GPU + ":")}


def _gpu_limits(tres: str) -> dict[str, float]:
    return _gpu_only(parse_tres(tres))


def qos_findings(spec: PoolSpec, qos: Mapping[str, str]) -> list[Finding]:
    """Each floating project's guarantee QOS: in Slurm (``qos``: name -> GrpTRES), with its guarantee as GrpTRES."""
    g = spec.guarantees
    if g is None:
        return []
    out = []
    for project in floating_projects(spec):
        name = guarantee_qos(g.tier, project.name)
        limits = _gpu_only(guarantee_grp_tres(spec, project))
        want = ",".join(f"{k}={n}" for k, n in sorted(limits.items()))
        if name not in qos:
            out.append(
                Finding(
                    CHECK,
                    f"QOS {name} of project {project.name}'s guarantee is not in Slurm, "
                    f"so its jobs cannot run in partition '{g.partition}'",
                    "slurm-pool apply accounting SPEC, then install the rendered slurm.conf and scontrol reconfigure",
                )
            )
        elif _gpu_limits(qos[name]) != {k: float(n) for k, n in limits.items()}:
            out.append(
                Finding(
                    CHECK,
                    f"QOS {name} has GrpTRES {qos[name] or 'unset'}, project {project.name}'s guarantee is {want}",
                    f"slurm-pool apply accounting SPEC (it sets GrpTRES={want})",
                )
            )
    return out


def findings(spec: PoolSpec, nodes: Iterable[NodeRecord], qos: Mapping[str, str] | None) -> list[Finding]:
    """The ``guarantees`` check (QOS not read, ``qos`` None: their part is left out)."""
    return [*capacity_findings(spec, nodes), *([] if qos is None else qos_findings(spec, qos))]
