"""The policy tables that the generated job_submit.lua carries, built from a spec.

Everything the Lua policy decides is driven by these tables; the Lua code
itself is generic.  Pure: a function of the spec alone, deterministic (every
list follows spec order or a documented sort).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from slurm_pool.mig import catalogue
from slurm_pool.mig.profiles import GEOMETRIES
from slurm_pool.spec.guarantees import guarantee_qos, guarantee_type
from slurm_pool.spec.model import PoolSpec, Project
from slurm_pool.spec.rules import partition_groups
from slurm_pool.versions import SlurmVersion

_GB_RE = re.compile(r"\.(\d+)gb")


def mig_memory_mb(model: str, profile: str) -> int:
    """Memory of a MIG profile in MiB, from the profile tables or its name (``2g.10gb``)."""
    geom = GEOMETRIES.get(model)
    prof = geom.profile(profile) if geom is not None else None
    if prof is not None:
        return int(prof.memory_gb) * 1024
    match = _GB_RE.search(profile)
    return int(match.group(1)) * 1024 if match else 0


@dataclass(frozen=True)
class GpuType:
    """One GRES type of GPU in the pool: a whole GPU or a MIG instance."""

    name: str
    mem_mb: int
    mig: bool
    parents: tuple[str, ...]  # the whole-GPU types this is a slice of (itself when whole)


@dataclass(frozen=True)
class TierRule:
    name: str
    max_gpus: int | None
    require_time: bool
    checkpoint: str
    gpu_shards: int | None = None  # a one-GPU job of no type gets this many shards instead


@dataclass(frozen=True)
class PartitionRule:
    name: str
    tier: str
    accounts: tuple[str, ...] | None  # None: every account
    max_time: str
    gpu_types: tuple[str, ...]


@dataclass(frozen=True)
class GuaranteeRule:
    """A floating project's guarantee: where its jobs run while they fit it, and where beyond."""

    qos: str  # the project's own QOS, <tier>-<project>
    tier: str  # the tier whose jobs the guarantee takes
    partition: str  # the floating partition
    overflow_tier: str
    overflow_partition: str | None  # the project's route for the overflow tier (None: it may not use it)
    gpus: tuple[tuple[str, int], ...]  # (GPU type, count); type "" for any GPU


@dataclass(frozen=True)
class ProjectRule:
    name: str
    tiers: tuple[str, ...]  # usable tiers, in the project's order
    default_tier: str | None
    routes: tuple[tuple[str, str], ...]  # (tier, partition) for each usable tier
    guarantee: GuaranteeRule | None = None


@dataclass(frozen=True)
class PolicyTables:
    """All the data job_submit.lua needs."""

    cluster: str
    on_error: str
    admin_contact: str
    default_tier: str | None
    right_size_mig: bool
    checkpoint_signal: str
    warn_seconds: int
    tiers: tuple[TierRule, ...]
    partitions: tuple[PartitionRule, ...]
    projects: tuple[ProjectRule, ...]
    users: tuple[tuple[str, str], ...]  # (user, project): first project listing the user
    gpu_types: tuple[GpuType, ...]  # whole GPUs in spec order, then MIG by (memory, name)
    mig_by_size: tuple[str, ...] = field(default=())
    multiple_qos: bool = False  # the Slurm takes --qos=a,b (24.11+)
    #: The cluster also runs the site's own work (the spec's ``coexist``): jobs outside the pool pass.
    shared: bool = False
    #: The site's own job_submit.lua, chained ``before`` or ``after`` the pool's rules.
    site_script: str | None = None
    site_order: str = "before"
    #: (user, every project listing the user, in spec order), for the way out of a refusal (shared clusters).
    user_projects: tuple[tuple[str, tuple[str, ...]], ...] = ()
    #: Accounts the spec adopted from the site: their jobs on the site's partitions stay the site's.
    adopted_accounts: tuple[str, ...] = ()
    #: The floating partition (the spec's ``guarantees.partition``); None without guarantees.
    guarantee_partition: str | None = None


def _allowed(spec: PoolSpec, part_name: str, allow: list[str] | None) -> list[str] | None:
    """The accounts a partition admits: the floating partition, left open in the spec, admits the floating projects."""
    if allow is None and spec.guarantees is not None and part_name == spec.guarantees.partition:
        return [p.name for p in spec.projects if p.guarantee]
    return allow


def _group_gpu_types(spec: PoolSpec, version: SlurmVersion) -> dict[str, list[GpuType]]:
    """Node group name -> the GPU types its nodes offer."""
    out: dict[str, list[GpuType]] = {}
    for group in spec.node_groups:
        types: list[GpuType] = []
        gpus = group.gpus
        model = catalogue.GPU_MODELS.get(gpus.model) if gpus else None
        if gpus is not None and model is not None and gpus.count > 0:
            name = gpus.gres_type()
            whole = GpuType(name, model.memory_gib * 1024, False, (name,))
            layouts = gpus.mig or [None] * gpus.count
            for idx in range(gpus.count):
                layout = layouts[idx] if idx < len(layouts) else None
                if layout is None:
                    if whole not in types:
                        types.append(whole)
                    continue
                for prof in layout:
                    t = GpuType(
                        catalogue.mig_gres_type(model.name, prof, version),
                        mig_memory_mb(model.name, prof),
                        True,
                        (name,),
                    )
                    if t not in types:
                        types.append(t)
        out[group.name] = types
    return out


def _partition_groups(spec: PoolSpec, entries: list[str]) -> list[str]:
    """Names of the node groups a partition's ``nodes`` entries touch, in spec order."""
    hit = partition_groups(spec, entries)
    return [g.name for g in spec.node_groups if g.name in hit]


def _route(spec: PoolSpec, account: str, tier: str) -> str | None:
    """The partition a job of ``account`` asking for ``tier`` is routed to.

    Among the partitions of that tier open to the account, one reserved for
    the account (it is named in ``allow_accounts``) wins over an open one; then
    the higher ``priority_tier``; then spec order.
    """
    best: tuple[int, int, int] | None = None
    choice: str | None = None
    for idx, part in enumerate(spec.partitions):
        if part.tier != tier:
            continue
        allow = _allowed(spec, part.name, part.allow_accounts)
        if allow is not None and account not in allow:
            continue
        key = (0 if allow is not None else 1, -part.priority_tier, idx)
        if best is None or key < best:
            best, choice = key, part.name
    return choice


def _guarantee_rule(spec: PoolSpec, proj: Project, routes: list[tuple[str, str]]) -> GuaranteeRule | None:
    """The guarantee of a floating project (None: it has none, or the spec has no ``guarantees``)."""
    g = spec.guarantees
    if g is None or not proj.guarantee:
        return None
    overflow = dict(routes).get(g.overflow)
    gpus = tuple((guarantee_type(key) or "", n) for key, n in proj.guarantee.items())
    return GuaranteeRule(guarantee_qos(g.tier, proj.name), g.tier, g.partition, g.overflow, overflow, gpus)


def build_tables(spec: PoolSpec, version: SlurmVersion) -> PolicyTables:
    """Compile the spec into the policy tables."""
    group_types = _group_gpu_types(spec, version)
    merged: dict[str, GpuType] = {}
    for types in group_types.values():
        for t in types:
            seen = merged.get(t.name)
            if seen is None:
                merged[t.name] = t
            elif t.parents[0] not in seen.parents:
                # Two models can share a MIG type name (A100 40/80GB "1g.10gb").
                merged[t.name] = GpuType(t.name, min(t.mem_mb, seen.mem_mb), seen.mig, seen.parents + t.parents)
    whole = [t for t in merged.values() if not t.mig]
    mig = [t for t in merged.values() if t.mig]
    mig.sort(key=lambda t: (t.mem_mb, t.name))
    order = [t.name for t in whole + mig]

    partitions = []
    for part in spec.partitions:
        present = {t.name for g in _partition_groups(spec, part.nodes) for t in group_types.get(g, [])}
        allow = _allowed(spec, part.name, part.allow_accounts)
        partitions.append(
            PartitionRule(
                name=part.name,
                tier=part.tier,
                accounts=tuple(allow) if allow is not None else None,
                max_time=part.max_time,
                gpu_types=tuple(n for n in order if n in present),
            )
        )

    projects = []
    for proj in spec.projects:
        routes = []
        g = spec.guarantees
        for tier in proj.tiers:
            target = _route(spec, proj.name, tier)
            if g is not None and proj.guarantee and tier == g.tier:
                target = g.partition  # its guarantee, not another partition of the tier
            if target is not None:
                routes.append((tier, target))
        usable = tuple(t for t, _ in routes)
        default = proj.default_tier if proj.default_tier in usable else None
        rule = _guarantee_rule(spec, proj, routes)
        projects.append(ProjectRule(proj.name, usable, default, tuple(routes), rule))

    users: dict[str, str] = {}
    memberships: dict[str, list[str]] = {}
    for proj in spec.projects:
        for user in proj.users:
            users.setdefault(user, proj.name)
            memberships.setdefault(user, []).append(proj.name)

    tiers = tuple(
        TierRule(
            t.name, t.policy.max_gpus_per_job, t.policy.require_time_limit, t.policy.checkpoint, t.policy.gpu_shards
        )
        for t in spec.tiers
    )
    signal = spec.checkpoint.signal
    site = spec.coexist.job_submit if spec.coexist is not None else None
    return PolicyTables(
        cluster=spec.cluster.name,
        on_error=spec.policy.on_error,
        admin_contact=spec.policy.admin_contact,
        default_tier=spec.policy.default_tier,
        right_size_mig=spec.policy.right_size_mig,
        checkpoint_signal=signal[3:] if signal.startswith("SIG") else signal,
        warn_seconds=spec.checkpoint.warn_seconds,
        tiers=tiers,
        partitions=tuple(partitions),
        projects=tuple(projects),
        users=tuple(users.items()),
        gpu_types=tuple(whole + mig),
        mig_by_size=tuple(t.name for t in mig),
        multiple_qos=version.has("multiple_qos_per_job"),
        shared=spec.coexist is not None,
        site_script=site.script if site else None,
        site_order=site.order if site else "before",
        user_projects=tuple((u, tuple(ps)) for u, ps in memberships.items()),
        adopted_accounts=tuple(a.name for a in spec.adopt.accounts),
        guarantee_partition=spec.guarantees.partition if spec.guarantees is not None else None,
    )
