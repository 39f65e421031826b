"""Cross-field rules of the pool spec, checked after the schema passes."""

from __future__ import annotations

from typing import Iterator, Protocol, Sequence

from slurm_pool.errors import Issue
from slurm_pool.mig.catalogue import GPU_MODELS, known_models
from slurm_pool.spec.adopt import check_adopt
from slurm_pool.spec.coexist import check_coexist
from slurm_pool.spec.gputypes import check_gpu_types
from slurm_pool.spec.guarantees import check_guarantees
from slurm_pool.spec.hosts import HostlistError, expand
from slurm_pool.spec.model import NodeGroup, PoolSpec
from slurm_pool.spec.nodeattrs import check_node_attrs


def _dupes(names: list[str]) -> set[str]:
    seen: set[str] = set()
    return {n for n in names if n in seen or seen.add(n)}  # type: ignore[func-returns-value]


def check(spec: PoolSpec) -> list[Issue]:
    """Every cross-field problem in ``spec``; empty when it is valid."""
    return list(_check(spec))


class _Named(Protocol):
    @property
    def name(self) -> str: ...


def _check(spec: PoolSpec) -> Iterator[Issue]:
    named: tuple[tuple[str, Sequence[_Named]], ...] = (
        ("node_groups", spec.node_groups),
        ("tiers", spec.tiers),
        ("partitions", spec.partitions),
        ("projects", spec.projects),
    )
    for label, items in named:
        names = [i.name for i in items]
        for i, item in enumerate(items):
            if item.name in _dupes(names) and names.index(item.name) != i:
                yield Issue(f"{label}[{i}].name", f"{item.name!r} is defined twice")

    yield from _reserved(spec)
    node_owner: dict[str, str] = {}
    group_nodes: dict[str, list[str]] = {}
    for gi, group in enumerate(spec.node_groups):
        try:
            nodes = expand(group.hosts)
        except HostlistError as exc:
            yield Issue(f"node_groups[{gi}].hosts", str(exc))
            continue
        group_nodes[group.name] = nodes
        for node in nodes:
            if node.upper() in RESERVED_NODE_NAMES:
                yield Issue(
                    f"node_groups[{gi}].hosts", f"{node!r} is a word Slurm reads as {RESERVED_NODE_NAMES[node.upper()]}"
                )
            if node in node_owner:
                yield Issue(f"node_groups[{gi}].hosts", f"node {node!r} is already in group {node_owner[node]!r}")
            node_owner.setdefault(node, group.name)
        if group.gpus is not None:
            yield from _check_gpus(spec, gi)
        yield from check_node_attrs(group, gi)
    yield from check_gpu_types(spec)

    tiers = {t.name for t in spec.tiers}
    for ti, tier in enumerate(spec.tiers):
        for pi, target in enumerate(tier.preempt):
            if target not in tiers:
                yield Issue(
                    f"tiers[{ti}].preempt[{pi}]", f"unknown tier {target!r} (known: {', '.join(sorted(tiers))})"
                )
            elif target == tier.name:
                yield Issue(f"tiers[{ti}].preempt[{pi}]", f"tier {target!r} cannot preempt itself")
    cycle = _preempt_cycle(spec)
    if cycle:
        ti = [t.name for t in spec.tiers].index(cycle[0])
        yield Issue(f"tiers[{ti}].preempt", "preemption cycle: " + " -> ".join(cycle))
    preemptible = {target for t in spec.tiers for target in t.preempt}
    for ti, tier in enumerate(spec.tiers):
        if tier.name in preemptible and tier.preempt_mode == "off":
            yield Issue(
                f"tiers[{ti}].preempt_mode",
                f"tier {tier.name!r} is preempted by another tier, so preempt_mode must not be 'off'",
            )

    projects = {p.name for p in spec.projects}
    defaults = [i for i, p in enumerate(spec.partitions) if p.default]
    if len(defaults) > 1:
        yield Issue(f"partitions[{defaults[1]}].default", "only one partition may be the default")
    for pi, part in enumerate(spec.partitions):
        if part.tier not in tiers:
            yield Issue(f"partitions[{pi}].tier", f"unknown tier {part.tier!r} (known: {', '.join(sorted(tiers))})")
        for ni, entry in enumerate(part.nodes):
            if entry == "ALL" or entry in group_nodes:
                continue
            try:
                unknown = [n for n in expand(entry) if n not in node_owner]
            except HostlistError as exc:
                yield Issue(f"partitions[{pi}].nodes[{ni}]", str(exc))
                continue
            if unknown:
                yield Issue(f"partitions[{pi}].nodes[{ni}]", f"unknown node {unknown[0]!r} (not in any node group)")
        for ai, acct in enumerate(part.allow_accounts or []):
            if acct not in projects:
                yield Issue(f"partitions[{pi}].allow_accounts[{ai}]", f"unknown project {acct!r}")

    yield from _check_tier_shards(spec, node_owner)
    if spec.notebooks is not None:
        yield from _check_notebooks(spec, node_owner)

    users_seen: dict[str, str] = {}
    for pi, proj in enumerate(spec.projects):
        for ti, tname in enumerate(proj.tiers):
            if tname not in tiers:
                yield Issue(
                    f"projects[{pi}].tiers[{ti}]", f"unknown tier {tname!r} (known: {', '.join(sorted(tiers))})"
                )
        if proj.default_tier is not None and proj.default_tier not in proj.tiers:
            yield Issue(
                f"projects[{pi}].default_tier", f"{proj.default_tier!r} is not one of the project's tiers {proj.tiers}"
            )
        for oi, gname in enumerate(proj.owns):
            if gname not in group_nodes and gname not in {g.name for g in spec.node_groups}:
                yield Issue(f"projects[{pi}].owns[{oi}]", f"unknown node group {gname!r}")
        for ui, user in enumerate(proj.users):
            if user in users_seen and users_seen[user] == proj.name:
                yield Issue(f"projects[{pi}].users[{ui}]", f"user {user!r} is listed twice")
            users_seen.setdefault(user, proj.name)
    owned: dict[str, str] = {}
    for pi, proj in enumerate(spec.projects):
        for oi, gname in enumerate(proj.owns):
            if gname in owned:
                yield Issue(f"projects[{pi}].owns[{oi}]", f"node group {gname!r} is already owned by {owned[gname]!r}")
            owned.setdefault(gname, proj.name)

    if spec.coexist is not None and defaults:
        yield Issue(
            f"partitions[{defaults[0]}].default",
            "a pool that shares its cluster (coexist) leaves the cluster's default partition to the site "
            "(job_submit.lua routes a pool project's job that names no partition into the pool)",
        )

    if spec.policy.default_tier is not None and spec.policy.default_tier not in tiers:
        yield Issue("policy.default_tier", f"unknown tier {spec.policy.default_tier!r}")

    yield from check_adopt(spec)
    yield from check_guarantees(spec)
    yield from check_coexist(spec)

    if spec.bridge is not None and spec.bridge.enabled:
        from slurm_pool.spec.bridge import check_bridge

        for problem in check_bridge(spec):
            path, _, msg = problem.partition(": ")
            yield Issue(path, msg)


def _check_gpus(spec: PoolSpec, gi: int) -> Iterator[Issue]:
    gpus = spec.node_groups[gi].gpus
    assert gpus is not None
    base = f"node_groups[{gi}].gpus"
    model = GPU_MODELS.get(gpus.model)
    if model is None:
        yield Issue(f"{base}.model", f"unknown GPU model {gpus.model!r} (known: {known_models()})")
        return
    if not model.mig_capable:
        for key, value in (("mig", gpus.mig), ("layouts", gpus.layouts)):
            if value is not None:
                yield Issue(f"{base}.{key}", _no_mig(gpus.model))
        if gpus.mig is not None or gpus.layouts is not None:
            return
    if gpus.shards is not None:
        if gpus.layouts is not None or any(lay is not None for lay in gpus.mig or []):
            yield Issue(
                f"{base}.shards",
                "a node group shares its GPUs by MIG or by shards, not both (mig plan and apply may repartition "
                "any GPU of a MIG group): put the shared GPUs in a node group without mig and layouts",
            )
        elif gpus.count == 0:
            yield Issue(f"{base}.shards", "the group has no GPUs to share (count is 0)")
    if gpus.layouts is not None:
        yield from _check_layouts(spec, gi)
    if gpus.mig is None:
        return
    if len(gpus.mig) != gpus.count:
        yield Issue(
            f"{base}.mig",
            f"has {len(gpus.mig)} entries but count is {gpus.count} (one layout per GPU, null for MIG off)",
        )
    yield from _placement_issues(f"{base}.mig", gpus.model, gpus.mig)


def _no_mig(model: str) -> str:
    """Why a model without MIG takes no ``mig`` or ``layouts`` (the catalogue's MIG models named)."""
    mig_models = ", ".join(m.name for m in GPU_MODELS.values() if m.mig_capable)
    return (
        f"{model} has no MIG; remove it (its GPUs are whole GPUs of Type {GPU_MODELS[model].slurm_type} or the group's type; "
        f"shards can share them). MIG models: {mig_models}"
    )


def _placement_issues(path: str, model: str, per_gpu: list[list[str] | None]) -> Iterator[Issue]:
    """A per-GPU list of MIG layouts (null: MIG off): each must be placeable on ``model``."""
    from slurm_pool.mig.placement import layout_problem

    for i, layout in enumerate(per_gpu):
        problem = None if layout is None else layout_problem(model, layout)
        if problem:
            yield Issue(f"{path}[{i}]", f"{','.join(layout or [])} is not a valid {model} layout: {problem}")


def _check_layouts(spec: PoolSpec, gi: int) -> Iterator[Issue]:
    """``gpus.layouts``: a MIG-capable model, one entry per GPU, placeable, names unlike the group's features."""
    group = spec.node_groups[gi]
    gpus = group.gpus
    assert gpus is not None and gpus.layouts is not None
    base = f"node_groups[{gi}].gpus.layouts"
    for name, per_gpu in gpus.layouts.items():
        if name in group.features:
            yield Issue(f"{base}.{name}", f"{name!r} is also one of the group's features")
        if len(per_gpu) != gpus.count:
            yield Issue(
                f"{base}.{name}",
                f"has {len(per_gpu)} entries but count is {gpus.count} (one layout per GPU, null for MIG off)",
            )
            continue
        yield from _placement_issues(f"{base}.{name}", gpus.model, per_gpu)


#: Words Slurm reads as keywords in any case, not as names (src/common/read_config.c: ``NodeName=DEFAULT`` and
#: ``PartitionName=DEFAULT`` set defaults; src/slurmctld/read_config.c: a partition's ``Nodes=ALL``).
RESERVED_NODE_NAMES = {"DEFAULT": "the defaults of every node (NodeName=DEFAULT)", "ALL": "every node (Nodes=ALL)"}
RESERVED_PARTITION_NAMES = {"DEFAULT": "the defaults of every partition (PartitionName=DEFAULT)"}
#: sacctmgr's root of the association tree: a project of that name would be the whole cluster's account.
RESERVED_ACCOUNTS = {"root": "Slurm's root account"}


def _reserved(spec: PoolSpec) -> Iterator[Issue]:
    for pi, part in enumerate(spec.partitions):
        if part.name.upper() in RESERVED_PARTITION_NAMES:
            yield Issue(
                f"partitions[{pi}].name",
                f"{part.name!r} is a word Slurm reads as {RESERVED_PARTITION_NAMES[part.name.upper()]}",
            )
    for pi, proj in enumerate(spec.projects):
        if proj.name in RESERVED_ACCOUNTS:
            yield Issue(
                f"projects[{pi}].name", f"{proj.name!r} is {RESERVED_ACCOUNTS[proj.name]}; name the project otherwise"
            )


def partition_groups(spec: PoolSpec, entries: list[str], node_owner: dict[str, str] | None = None) -> set[str]:
    """Names of the node groups whose nodes a partition's ``nodes`` entries name (``node_owner``: node -> group)."""
    if node_owner is None:
        node_owner = {}
        for g in spec.node_groups:
            try:
                for n in expand(g.hosts):
                    node_owner.setdefault(n, g.name)
            except HostlistError:
                continue  # reported with the group
    if "ALL" in entries:
        return {g.name for g in spec.node_groups}
    names = {g.name for g in spec.node_groups}
    out: set[str] = set()
    for entry in entries:
        if entry in names:
            out.add(entry)
            continue
        try:
            out.update(node_owner[n] for n in expand(entry) if n in node_owner)
        except HostlistError:
            continue  # reported with the partition
    return out


def _check_tier_shards(spec: PoolSpec, node_owner: dict[str, str]) -> Iterator[Issue]:
    """``policy.gpu_shards``: every partition of the tier reaches shared GPUs with that many shards each."""
    for ti, tier in enumerate(spec.tiers):
        want = tier.policy.gpu_shards
        if want is None:
            continue
        path = f"tiers[{ti}].policy.gpu_shards"
        parts = [p for p in spec.partitions if p.tier == tier.name]
        if not parts:
            yield Issue(path, f"tier {tier.name!r} has no partition, so no shared GPUs to give its jobs")
        for part in parts:
            groups = [spec.group(n) for n in sorted(partition_groups(spec, part.nodes, node_owner))]
            per_gpu = [g.gpus.shards for g in groups if g.gpus is not None and g.gpus.shards]
            if not per_gpu:
                yield Issue(path, f"partition {part.name!r} of tier {tier.name!r} has no node group with gpus.shards")
            elif want > max(per_gpu):
                yield Issue(
                    path,
                    f"{want} shards do not fit one GPU of partition {part.name!r} (at most {max(per_gpu)} per GPU)",
                )


def _check_notebooks(spec: PoolSpec, node_owner: dict[str, str]) -> Iterator[Issue]:
    """``notebooks``: a partition users may start servers in, its preemption as stated, a GPU its nodes have."""
    from slurm_pool.spec.notebooks import limit_seconds, notebook_users

    nb = spec.notebooks
    assert nb is not None
    part = next((p for p in spec.partitions if p.name == nb.partition), None)
    if part is None:
        known = ", ".join(p.name for p in spec.partitions)
        yield Issue("notebooks.partition", f"unknown partition {nb.partition!r} (known: {known})")
        return
    tier = next((t for t in spec.tiers if t.name == part.tier), None)
    if tier is None:
        return  # reported with the partition
    preemptors = sorted(t.name for t in spec.tiers if tier.name in t.preempt)
    if preemptors and not nb.preemptible:
        yield Issue(
            "notebooks.preemptible",
            f"false, but tier {tier.name!r} of partition {part.name!r} is preempted by {', '.join(preemptors)}: "
            "set preemptible: true, or use a partition of a tier no other tier preempts",
        )
    if nb.preemptible and not preemptors:
        yield Issue("notebooks.preemptible", f"true, but no tier preempts tier {tier.name!r}")
    mode = part.preempt_mode or tier.preempt_mode
    if preemptors and mode not in ("cancel", "off"):
        yield Issue(
            "notebooks.partition",
            f"preempted notebook servers would be {'requeued' if mode == 'requeue' else 'suspended'} (preempt_mode "
            f"{mode!r} of {part.name!r}), which the hub cannot follow: use a partition whose preempt_mode is cancel",
        )
    if tier.policy.checkpoint != "none":
        yield Issue(
            "notebooks.partition",
            f"tier {tier.name!r} demands checkpointing (policy.checkpoint: {tier.policy.checkpoint}), "
            "which a notebook server cannot do",
        )
    if not notebook_users(spec, tier.name):
        yield Issue("notebooks.partition", f"no project with users may use tier {tier.name!r}")
    limit, most = limit_seconds(nb.time_limit), limit_seconds(part.max_time)
    if limit is not None and most is not None and limit > most:
        yield Issue(
            "notebooks.time_limit", f"{nb.time_limit} is over partition {part.name!r}'s max_time {part.max_time}"
        )
    if nb.gpu is None:
        return
    groups = [spec.group(n) for n in sorted(partition_groups(spec, part.nodes, node_owner))]
    if nb.gpu.shards is not None:
        per_gpu = [g.gpus.shards for g in groups if g.gpus is not None and g.gpus.shards]
        if not per_gpu:
            yield Issue("notebooks.gpu.shards", f"partition {part.name!r} has no node group with gpus.shards")
        elif nb.gpu.shards > max(per_gpu):
            yield Issue("notebooks.gpu.shards", f"{nb.gpu.shards} shards do not fit one GPU (at most {max(per_gpu)})")
        return
    profile = nb.gpu.mig
    models = sorted({g.gpus.model for g in groups if g.gpus is not None and profile in group_profiles(g)})
    if not models:
        yield Issue(
            "notebooks.gpu.mig",
            f"no node group of partition {part.name!r} has {profile} instances in its mig layout or layouts",
        )
    elif len(models) > 1:
        yield Issue(
            "notebooks.gpu.mig",
            f"{profile} is on several GPU models in partition {part.name!r} ({', '.join(models)}), whose Slurm GRES "
            "types differ: a server asks for one type, so use a partition of one model",
        )


def group_profiles(group: NodeGroup) -> set[str]:
    """Every MIG profile a group's GPUs have in its layout or may take in its layouts."""
    gpus = group.gpus
    if gpus is None:
        return set()
    layouts = [gpus.mig or []] + list((gpus.layouts or {}).values())
    return {prof for per_gpu in layouts for layout in per_gpu for prof in (layout or [])}


def _preempt_cycle(spec: PoolSpec) -> list[str] | None:
    graph = {t.name: [p for p in t.preempt if p != t.name] for t in spec.tiers}
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in graph.get(node, []):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt) :] + [nxt]
            if nxt in graph and not state.get(nxt):
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for name in graph:
        if not state.get(name):
            found = visit(name)
            if found:
                return found
    return None
