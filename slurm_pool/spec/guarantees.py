"""Floating guarantees: a project is promised GPUs anywhere in the pool, not named servers.

A project may own node groups (``owns``: its jobs run in the guaranteed tier on
its own servers), have a ``guarantee`` (GPUs, in total or per GPU type, on any
node of the pool's guaranteed partition), or both.  Each project with a
guarantee gets a QOS of its own (:func:`guarantee_qos`): the guaranteed tier's
priority, preemption list, mode and grace time, with ``GrpTRES`` set to the
guarantee, so Slurm itself caps what the project runs there, and the QOS
preempts the borrowing tiers on every node of the partition.  job_submit.lua
routes a project's job into its guarantee while it fits, and beyond it into the
``overflow`` tier, with a message saying so.

``overcommit`` bounds the sum of the guarantees over the partition's GPUs, per
GPU type: 1.0 promises no more than there is; 1.5 sells half again as much,
trusting that owners do not all burst at once (``slurm-pool simulate --size
--compare`` finds the ratio a site's own history allows).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Annotated, Iterable, Iterator, Mapping

from pydantic import AfterValidator, Field

from slurm_pool.errors import Issue
from slurm_pool.mig.catalogue import GPU_MODELS, mig_gres_types
from slurm_pool.spec.base import Name, Strict
from slurm_pool.spec.hosts import HostlistError, expand

if TYPE_CHECKING:
    from slurm_pool.spec.model import NodeGroup, PoolSpec, Project

#: A guarantee's key: every GPU (``gres/gpu``) or GPUs of one GRES type (``gres/gpu:h100``).
GUARANTEE_KEY_RE = re.compile(r"gres/gpu(?::([a-z0-9][a-z0-9._-]{0,62}))?")
#: The most GPUs one guarantee may name (Slurm's TRES counts are 64-bit; no pool is this big).
MAX_GUARANTEE_GPUS = 100_000
#: The most overcommit a spec may ask for.
MAX_OVERCOMMIT = 10.0


def _guarantee(v: dict[str, int]) -> dict[str, int]:
    for key, val in v.items():
        if GUARANTEE_KEY_RE.fullmatch(key) is None:
            raise ValueError(f"{key!r} is not gres/gpu or gres/gpu:<type> (a GPU GRES type, lower case)")
        if not 1 <= val <= MAX_GUARANTEE_GPUS:
            raise ValueError(f"{key}={val} is not between 1 and {MAX_GUARANTEE_GPUS}")
    if "gres/gpu" in v and len(v) > 1:
        raise ValueError("name either gres/gpu (any GPU) or GPU types (gres/gpu:<type>), not both")
    return v


#: ``{gres/gpu: 4}`` or ``{gres/gpu:h100: 4, gres/gpu:a100: 2}``.
Guarantee = Annotated[dict[str, int], AfterValidator(_guarantee)]


class Guarantees(Strict):
    """How floating guarantees are rendered: the tier they take, where they run, what overflows."""

    #: The tier each guarantee's QOS copies (priority, preempt list, preempt mode, grace time, usage factor).
    tier: Name
    #: A partition of that tier over node groups nobody owns: where guaranteed jobs run.
    partition: Name
    #: The tier a project's job beyond its guarantee is routed to (preemptible, pool-wide).
    overflow: Name
    #: Bound on (sum of guarantees) / (GPUs of the partition), per GPU type.
    overcommit: float = Field(default=1.0, gt=0, le=MAX_OVERCOMMIT)


def guarantee_qos(tier: str, project: str) -> str:
    """The QOS of ``project``'s guarantee: ``<tier>-<project>``."""
    return f"{tier}-{project}"


def floating_projects(spec: PoolSpec) -> list[Project]:
    """The projects with a guarantee, in spec order."""
    return [p for p in spec.projects if p.guarantee]


def guarantee_type(key: str) -> str | None:
    """The GPU type a guarantee key names (None: any GPU)."""
    m = GUARANTEE_KEY_RE.fullmatch(key)
    return m.group(1) if m else None


# -- capacity: what the partition's nodes count as gres/gpu, per GRES type ---------------------------------


def _node_groups(spec: PoolSpec) -> dict[str, NodeGroup]:
    """Node name -> its group (a group whose hostlist does not expand is left out: the rules report it)."""
    out: dict[str, NodeGroup] = {}
    for group in spec.node_groups:
        try:
            for node in expand(group.hosts):
                out.setdefault(node, group)
        except HostlistError:
            continue
    return out


def partition_nodes(spec: PoolSpec, partition: str) -> list[str]:
    """The nodes of ``partition`` (its ``ALL``, node group names or hostlists), in node group order."""
    part = next((p for p in spec.partitions if p.name == partition), None)
    if part is None:
        return []
    by_node = _node_groups(spec)
    wanted: set[str] = set()
    for entry in part.nodes:
        if entry == "ALL":
            wanted.update(by_node)
        elif any(g.name == entry for g in spec.node_groups):
            wanted.update(n for n, g in by_node.items() if g.name == entry)
        else:
            try:
                wanted.update(n for n in expand(entry) if n in by_node)
            except HostlistError:
                continue  # reported with the partition
    return [n for n in by_node if n in wanted]


def _mig_types(model: str, profile: str) -> frozenset[str]:
    """The GRES type names of a MIG instance in every release (none for a profile the rules refuse)."""
    try:
        return mig_gres_types(model, profile)
    except (KeyError, ValueError):
        return frozenset()


def _unit_names(group: NodeGroup) -> list[frozenset[str]]:
    """Each gres/gpu unit of one node of ``group`` (a whole GPU, or a MIG instance of its ``mig`` layout)
    by its GRES type names: a MIG instance under the name of every release (they differ before 23.02.6)."""
    gpus = group.gpus
    if gpus is None or gpus.model not in GPU_MODELS:
        return []
    layouts = gpus.mig if gpus.mig is not None else [None] * gpus.count
    out: list[frozenset[str]] = []
    for idx in range(gpus.count):
        layout = layouts[idx] if idx < len(layouts) else None
        if layout is None:
            out.append(frozenset({gpus.gres_type()}))
        else:
            out.extend(names for prof in layout if (names := _mig_types(gpus.model, prof)))
    return out


def capacity_of(spec: PoolSpec, nodes: Iterable[str]) -> dict[str | None, int]:
    """gres/gpu of ``nodes`` as Slurm counts it (whole GPUs plus MIG instances): ``None`` in all, and per
    GRES type (a MIG instance under each name a release gives it).  Unknown nodes count nothing."""
    by_node = _node_groups(spec)
    out: dict[str | None, int] = {None: 0}
    for node in nodes:
        group = by_node.get(node)
        for names in _unit_names(group) if group is not None else []:
            out[None] += 1
            for name in names:
                out[name] = out.get(name, 0) + 1
    return out


def partition_capacity(spec: PoolSpec) -> dict[str | None, int]:
    """:func:`capacity_of` the guarantees' partition (empty without a guarantees section)."""
    if spec.guarantees is None:
        return {}
    return capacity_of(spec, partition_nodes(spec, spec.guarantees.partition))


def guarantee_sums(spec: PoolSpec) -> dict[str | None, int]:
    """The guarantees summed: ``None`` every guarantee, typed or not, and each GPU type its typed ones."""
    out: dict[str | None, int] = {None: 0}
    for proj in floating_projects(spec):
        for key, count in proj.guarantee.items():
            out[None] += count
            gtype = guarantee_type(key)
            if gtype is not None:
                out[gtype] = out.get(gtype, 0) + count
    return out


def exceeded(spec: PoolSpec, capacity: Mapping[str | None, int]) -> dict[str | None, tuple[int, int]]:
    """The GPU types (None: all GPUs) whose guarantees sum to more than ``overcommit`` x ``capacity``:
    type -> (the sum, the capacity)."""
    if spec.guarantees is None:
        return {}
    ratio = spec.guarantees.overcommit
    out = {}
    for gtype, total in guarantee_sums(spec).items():
        cap = capacity.get(gtype, 0)
        if total - ratio * cap > 1e-9:
            out[gtype] = (total, cap)
    return out


def overcommit_issues(spec: PoolSpec, capacity: Mapping[str | None, int]) -> list[str]:
    """Where the guarantees sum to more than ``overcommit`` x ``capacity``: per GPU type, then in all."""
    over = exceeded(spec, capacity)
    if not over:
        return []
    assert spec.guarantees is not None
    ratio, part = spec.guarantees.overcommit, spec.guarantees.partition
    out = []
    for gtype in [*sorted(t for t in over if t is not None), *([None] if None in over else [])]:
        total, cap = over[gtype]
        what = f"guarantees of gres/gpu:{gtype}" if gtype else "guarantees"
        of_type = f" of type {gtype}" if gtype else ""
        out.append(
            f"{what} sum to {total} GPUs, {total - ratio * cap:g} more than {ratio} x {cap} GPUs{of_type} "
            f"in partition {part!r}"
        )
    return out


def guarantee_text(counts: Mapping[str, int]) -> str:
    """Guarantee-keyed GPU counts as short as the spec means them: ``2`` for ``{gres/gpu: 2}``, ``h100:2`` for
    ``{gres/gpu:h100: 2}``, comma-joined."""
    return ",".join(
        str(n) if guarantee_type(k) is None else f"{guarantee_type(k)}:{n}" for k, n in sorted(counts.items())
    )


def partition_types(spec: PoolSpec, nodes: Iterable[str]) -> set[str]:
    """Every GRES type the GPUs of ``nodes`` may have: whole GPUs, and MIG instances of their groups' ``mig``
    and ``layouts`` under the name of any release."""
    by_node = _node_groups(spec)
    groups = {g.name: g for n in nodes if (g := by_node.get(n)) is not None}
    out: set[str] = set()
    for group in groups.values():
        gpus = group.gpus
        if gpus is None or gpus.model not in GPU_MODELS or gpus.count == 0:
            continue
        per_gpu: list[list[list[str] | None]] = [gpus.mig or [None] * gpus.count, *(gpus.layouts or {}).values()]
        if any(layout is None for layouts in per_gpu for layout in layouts):
            out.add(gpus.gres_type())
        out.update(
            t for layouts in per_gpu for layout in layouts for p in layout or [] for t in _mig_types(gpus.model, p)
        )
    return out


# -- rules ----------------------------------------------------------------------------------------------------


def check_guarantees(spec: PoolSpec) -> Iterator[Issue]:
    """The guarantees section and the projects' guarantees: names that exist, a partition of the guarantees'
    tier over servers nobody owns, floating projects allowed there, GPU types its nodes have, no overcommit."""
    floating = [(i, p) for i, p in enumerate(spec.projects) if p.guarantee]
    g = spec.guarantees
    if g is None:
        for i, _ in floating:
            yield Issue(
                f"projects[{i}].guarantee",
                "a guarantee needs the spec's guarantees section (its tier, partition and overflow tier)",
            )
        return
    tiers = [t.name for t in spec.tiers]
    known = ", ".join(sorted(tiers))
    sound = True
    for field, name in (("tier", g.tier), ("overflow", g.overflow)):
        if name not in tiers:
            sound = False
            yield Issue(f"guarantees.{field}", f"unknown tier {name!r} (known: {known})")
    if g.overflow == g.tier:
        yield Issue(
            "guarantees.overflow",
            f"{g.overflow!r} is the guarantees' own tier: a job beyond its guarantee overflows into another tier",
        )
    elif g.overflow in tiers and not any(p.tier == g.overflow for p in spec.partitions):
        yield Issue("guarantees.overflow", f"tier {g.overflow!r} has no partition for jobs beyond a guarantee")
    parts = [p.name for p in spec.partitions]
    if g.partition not in parts:
        sound = False
        yield Issue("guarantees.partition", f"unknown partition {g.partition!r} (known: {', '.join(parts)})")
    else:
        pi = parts.index(g.partition)
        part = spec.partitions[pi]
        if part.tier != g.tier and g.tier in tiers:
            yield Issue(
                "guarantees.partition",
                f"partition {part.name!r} is of tier {part.tier!r}, not of the guarantees' tier {g.tier!r}",
            )
        owners = {gname: proj.name for proj in spec.projects for gname in proj.owns}
        nodes = partition_nodes(spec, part.name)
        by_node = _node_groups(spec)
        for gname in dict.fromkeys(by_node[n].name for n in nodes):
            if gname in owners:
                yield Issue(
                    "guarantees.partition",
                    f"partition {part.name!r} includes node group {gname!r}, which project {owners[gname]!r} owns: "
                    "guarantees float over servers nobody owns",
                )
        missing = [p.name for _, p in floating if part.allow_accounts is not None and p.name not in part.allow_accounts]
        if missing:
            yield Issue(
                f"partitions[{pi}].allow_accounts",
                f"lacks {', '.join(missing)}: every project with a guarantee may use partition {part.name!r}",
            )
        types = partition_types(spec, nodes)
        for i, proj in floating:
            for key in proj.guarantee:
                gtype = guarantee_type(key)
                if gtype is not None and gtype not in types:
                    sound = False
                    have = ", ".join(sorted(types)) or "none"
                    yield Issue(
                        f"projects[{i}].guarantee.{key}",
                        f"{gtype!r} is not a GPU GRES type of the nodes of partition {part.name!r}, which Slurm "
                        f"matches exactly (they have: {have})",
                    )
    for i, proj in floating:
        for field, name in (("tier", g.tier), ("overflow", g.overflow)):
            if name in tiers and name not in proj.tiers:
                yield Issue(
                    f"projects[{i}].tiers",
                    f"lacks {name!r} (guarantees.{field}): a project with a guarantee runs in both "
                    f"{g.tier!r} and {g.overflow!r}",
                )
        qos = guarantee_qos(g.tier, proj.name)
        if qos in tiers:
            yield Issue(
                f"projects[{i}].guarantee",
                f"its QOS {qos!r} (<tier>-<project>) is also a tier's name; rename the tier or the project",
            )
    if sound:
        for message in overcommit_issues(spec, partition_capacity(spec)):
            yield Issue("guarantees.overcommit", message)
