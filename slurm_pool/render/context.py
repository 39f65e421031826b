"""Turn a validated spec into the plain data the templates render.

Templates stay dumb: every decision (hostlist folding, GRES types and counts,
version-specific spellings) is made here, in Python, where it is tested.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence

from slurm_pool.errors import Issue, SpecError
from slurm_pool.mig import catalogue, features
from slurm_pool.render.site import Site
from slurm_pool.spec.guarantees import floating_projects, guarantee_qos, guarantee_type
from slurm_pool.spec.hosts import expand, fold
from slurm_pool.spec.model import NodeGroup, PoolSpec
from slurm_pool.spec.nodeattrs import MEMORY_KEYS, TOPOLOGY_KEYS, attribute_words, gpu_cores
from slurm_pool.text import check_path
from slurm_pool.versions import SlurmVersion


@dataclass(frozen=True)
class GresDevice:
    """One schedulable GPU or MIG instance on a node."""

    type: str
    file: str
    #: gres.conf ``Cores=`` of the device's GPU ("" when the spec gives none).
    cores: str = ""


Layouts = Sequence[Optional[Sequence[str]]]


def gpu_units(group: NodeGroup, layouts: Layouts | None = None) -> list[tuple[int, str | None]]:
    """(GPU index, MIG profile or None) for every schedulable unit of a node.

    ``layouts`` overrides the spec's MIG layouts with what a node has now.
    """
    if group.gpus is None:
        return []
    units: list[tuple[int, str | None]] = []
    layouts = layouts if layouts is not None else (group.gpus.mig or [None] * group.gpus.count)
    for idx in range(group.gpus.count):
        layout = layouts[idx] if idx < len(layouts) else None
        if layout is None:
            units.append((idx, None))
        else:
            units.extend((idx, prof) for prof in layout)
    return units


def unit_type(group: NodeGroup, profile: str | None, version: SlurmVersion) -> str:
    """GRES Type of a whole GPU (``profile`` None) or a MIG instance of ``group``'s model."""
    assert group.gpus is not None
    if profile is None:
        return group.gpus.gres_type()
    return catalogue.mig_gres_type(group.gpus.model, profile, version)


def type_note(group: NodeGroup) -> str:
    """What a group's own GPU type name stands for, for a gres.conf comment ("" without one)."""
    if group.gpus is None or group.gpus.type is None:
        return ""
    model = catalogue.GPU_MODELS[group.gpus.model]
    return (
        f"{group.name}: Type {group.gpus.type} is the site's name for {model.name} "
        f"({model.nvml_name or model.name}; NVML's autodetection names it {model.slurm_type})"
    )


def shard_gpus(group: NodeGroup, layouts: Layouts | None = None) -> list[int]:
    """Indexes of the GPUs that carry ``gres/shard`` (every whole GPU of a group with ``shards``)."""
    if group.gpus is None or not group.gpus.shards:
        return []
    return [idx for idx, prof in gpu_units(group, layouts) if prof is None]


def gres_string(group: NodeGroup, version: SlurmVersion, layouts: Layouts | None = None) -> str:
    """The slurm.conf ``Gres=`` value of a node of ``group``: its GPUs, then its shards in all."""
    counts: Counter[str] = Counter(unit_type(group, prof, version) for _, prof in gpu_units(group, layouts))
    items = [f"gpu:{t}:{n}" for t, n in counts.items()]
    shared = shard_gpus(group, layouts)
    if shared:
        assert group.gpus is not None and group.gpus.shards is not None
        items.append(f"shard:{group.gpus.shards * len(shared)}")
    return ",".join(items)


def _cores_word(group: NodeGroup, idx: int) -> str:
    """`` Cores=...`` of GPU ``idx`` in gres.conf (empty when the spec gives no affinity)."""
    cores = gpu_cores(group)
    return f" Cores={cores[idx]}" if cores else ""


def shard_lines(group: NodeGroup, hostlist: str, dev_dir: str, layouts: Layouts | None = None) -> list[str]:
    """gres.conf lines of a group's shards: one per GPU, naming its device, so a count is per GPU.

    Slurm's gres.shtml: with ``Name=shard File=... Count=N`` lines, each GPU
    gets its own count; without File the count is spread evenly.
    """
    if group.gpus is None:
        return []
    return [
        f"NodeName={hostlist} Name=shard Count={group.gpus.shards} File={dev_dir}/nvidia{idx}" + _cores_word(group, idx)
        for idx in shard_gpus(group, layouts)
    ]


def gpu_lines(group: NodeGroup, hostlist: str, dev_dir: str, version: SlurmVersion) -> list[str]:
    """gres.conf lines of a group's whole GPUs, one per GPU with its ``Cores=``; [] when the spec gives no cores."""
    cores = gpu_cores(group)
    if not cores:
        return []
    gtype = unit_type(group, None, version)
    return [
        f"NodeName={hostlist} AutoDetect=off Name=gpu Type={gtype} File={dev_dir}/nvidia{idx} Cores={c}"
        for idx, c in enumerate(cores)
    ]


def emulated_devices(
    group: NodeGroup, node: str, site: Site, version: SlurmVersion, layouts: Layouts | None = None
) -> list[GresDevice]:
    """Device files of one node on the emulated cluster, in GRES order."""
    dev = site.node_dev_dir(node)
    out: list[GresDevice] = []
    seen: Counter[int] = Counter()
    for idx, prof in gpu_units(group, layouts):
        if prof is None:
            cores = gpu_cores(group)
            out.append(GresDevice(unit_type(group, None, version), f"{dev}/nvidia{idx}", cores[idx] if cores else ""))
        else:
            out.append(GresDevice(unit_type(group, prof, version), f"{dev}/nvidia{idx}-mig{seen[idx]}"))
            seen[idx] += 1
    return out


def _nodes_of(spec: PoolSpec, entries: list[str]) -> str:
    """A partition's Nodes=: ``ALL`` is every node of the cluster, so in a shared cluster every pool node."""
    if "ALL" in entries:
        if spec.coexist is None:
            return "ALL"
        entries = [g.name for g in spec.node_groups]
    names: set[str] = set()
    for entry in entries:
        try:
            group = spec.group(entry)
            names.update(expand(group.hosts))
        except StopIteration:
            names.update(expand(entry))
    return fold(names)


def build_context(
    spec: PoolSpec, site: Site, version: SlurmVersion, node_layouts: Mapping[str, Layouts] | None = None
) -> dict[str, Any]:
    """Everything the Jinja2 templates need, as plain data.

    ``node_layouts`` gives nodes whose GPUs hold MIG layouts other than the
    spec's (what ``mig apply`` made); those nodes get their own lines.
    """
    node_layouts = node_layouts or {}
    groups = []
    gres_types: list[str] = []
    any_shards = False
    for group in spec.node_groups:
        nodes = expand(group.hosts)
        gres = gres_string(group, version)
        node_gres = {n: gres_string(group, version, node_layouts.get(n)) for n in nodes}
        for g in [gres, *node_gres.values()]:
            for item in g.split(","):
                if item.startswith("gpu:") and (t := item.split(":")[1]) not in gres_types:
                    gres_types.append(t)
        shards = any(shard_gpus(group, node_layouts.get(n)) for n in nodes)
        has_mig = bool(group.gpus and group.gpus.mig and any(lay is not None for lay in group.gpus.mig))
        has_mig = has_mig or any(any(lay is not None for lay in node_layouts.get(n) or []) for n in nodes)
        groups.append(
            {
                "name": group.name,
                "hostlist": fold(nodes),
                "per_node": bool(site.node_ports) or any(node_gres[n] != gres for n in nodes),
                "nodes": [
                    {
                        "name": n,
                        "port": site.node_ports.get(n),
                        "gres": node_gres[n],
                        "devices": emulated_devices(group, n, site, version, node_layouts.get(n))
                        if site.emulated_devices
                        else [],
                        "shard_lines": shard_lines(group, n, site.node_dev_dir(n), node_layouts.get(n))
                        if site.emulated_devices
                        else [],
                    }
                    for n in nodes
                ],
                "cpus": group.cpus,
                "memory_mb": group.memory_mb,
                "topology": attribute_words(group, TOPOLOGY_KEYS),
                "memory_attrs": attribute_words(group, MEMORY_KEYS),
                "gpu_lines": gpu_lines(group, fold(nodes), site.dev_dir, version),
                "gres": gres,
                "features": ",".join([*group.features, *(group.gpus.layouts or {} if group.gpus else {})]),
                "gpu_count": group.gpus.count if group.gpus else 0,
                "gpu_type": unit_type(group, None, version) if group.gpus else None,
                "type_note": type_note(group),
                "has_mig": has_mig,
                "shard_lines": shard_lines(group, fold(nodes), site.dev_dir) if shards else [],
            }
        )
        any_shards = any_shards or shards
    partitions = []
    for part in spec.partitions:
        tier = spec.tier(part.tier)
        allow_qos, allow_accounts = partition_access(spec, part.name)
        partitions.append(
            {
                "name": part.name,
                "nodes": _nodes_of(spec, part.nodes),
                "default": part.default,
                "priority_tier": part.priority_tier,
                "preempt_mode": (part.preempt_mode or tier.preempt_mode).upper(),
                "grace_time": part.grace_time if part.grace_time is not None else tier.grace_time,
                "max_time": part.max_time,
                "default_time": part.default_time,
                "allow_qos": allow_qos,
                "allow_accounts": allow_accounts,
            }
        )
    shard_issues = [
        Issue(
            f"node_groups[{gi}].gpus.shards",
            f"GPU shards need Slurm 23.11.5 or later: before it Slurm may give a whole GPU to a job while shard jobs "
            f"still run on it (CHANGELOG 23.11.5); this is {version}",
        )
        for gi, g in enumerate(spec.node_groups)
        if g.gpus is not None and g.gpus.shards and not version.has("shard_excludes_gpu")
    ]
    if shard_issues:
        raise SpecError(shard_issues)
    _check_guarantee_types(spec, version, gres_types)
    if spec.cluster.openmetrics and not version.has("openmetrics_endpoint"):
        raise SpecError(
            [
                Issue(
                    "cluster.openmetrics",
                    f"slurmctld's OpenMetrics endpoint needs Slurm 25.11 or later; this is {version}",
                )
            ]
        )
    helper_lines, layout_table = _mig_features(spec, site, version)
    ctld_params = []
    if not version.has("preempt_params_line"):
        ctld_params.append("preempt_send_user_signal")
    return {
        "spec": spec,
        "site": site,
        "version": str(version),
        "features": version.features(),
        "groups": groups,
        "partitions": partitions,
        "gres_types": gres_types,
        "gres_names": "gpu,shard" if any_shards else "gpu",
        "accounting_tres": ",".join(accounting_tres(spec, gres_types, any_shards)),
        "slurmctld_parameters": ",".join(ctld_params),
        "scheduler_parameters": ",".join(scheduler_parameters(spec, version)),
        "preempt_parameters": ",".join(preempt_parameters(version)),
        "dbd_host": site.slurmdbd_host or spec.cluster.control_host,
        "mig_helper_lines": helper_lines,
        "mig_layout_table": layout_table,
        "mig_exec_time": features.EXEC_TIME,
        "jwt_key": jwt_key(spec, site),
        "coexist": spec.coexist is not None,
        "openmetrics": spec.cluster.openmetrics,
        "fragment": False,
    }


def partition_access(spec: PoolSpec, partition: str) -> tuple[str, str | None]:
    """A partition's ``AllowQos`` and ``AllowAccounts`` (None: every account).

    Its tier's QOS; for the guarantees' partition the guarantees' QOS instead
    (spec order) and, unless the spec lists ``allow_accounts``, the projects
    with a guarantee.
    """
    part = next(p for p in spec.partitions if p.name == partition)
    allow_qos, accounts = part.tier, part.allow_accounts
    g = spec.guarantees
    floating = floating_projects(spec)
    if g is not None and g.partition == part.name and floating:
        allow_qos = ",".join(guarantee_qos(g.tier, p.name) for p in floating)
        if accounts is None:
            accounts = [p.name for p in floating]
    return allow_qos, ",".join(accounts) if accounts else None


def accounting_tres(spec: PoolSpec, gres_types: Sequence[str], shards: bool) -> list[str]:
    """``AccountingStorageTRES``: gres/gpu, each GPU type of the nodes and of the guarantees, gres/shard."""
    types = list(gres_types)
    for p in floating_projects(spec):
        types.extend(t for key in p.guarantee if (t := guarantee_type(key)) is not None and t not in types)
    return ["gres/gpu", *(f"gres/gpu:{t}" for t in types), *(["gres/shard"] if shards else [])]


def scheduler_parameters(spec: PoolSpec, version: SlurmVersion) -> list[str]:
    """slurm.conf's ``SchedulerParameters``: timing, the prolog's requeue, and before 23.02 the preemption order."""
    sched = spec.scheduler
    out = [
        f"sched_interval={sched.sched_interval}",
        f"sched_min_interval={sched.sched_min_interval_us}",
        f"bf_interval={sched.bf_interval}",
    ]
    if spec.health.prolog:
        out.append("nohold_on_prolog_fail")
    key, items = version.preempt_order()
    return out + (items if key == "SchedulerParameters" else [])


def preempt_parameters(version: SlurmVersion) -> list[str]:
    """slurm.conf's ``PreemptParameters`` (none before 23.02): the checkpoint signal and the preemption order."""
    if not version.has("preempt_params_line"):
        return []
    key, items = version.preempt_order()
    return ["send_user_signal", *(items if key == "PreemptParameters" else [])]


def _check_guarantee_types(spec: PoolSpec, version: SlurmVersion, gres_types: Sequence[str]) -> None:
    """A typed guarantee must name a GRES type this release gives the nodes (MIG names changed in 23.02.6)."""
    issues = [
        Issue(
            f"projects[{pi}].guarantee.{key}",
            f"Slurm {version} names no GPU of the pool {gtype!r} (its types: {', '.join(gres_types) or 'none'})",
        )
        for pi, p in enumerate(spec.projects)
        for key in p.guarantee
        if (gtype := guarantee_type(key)) is not None and gtype not in gres_types
    ]
    if issues:
        raise SpecError(issues)


def jwt_key(spec: PoolSpec, site: Site) -> str | None:
    """The HS256 key file of Slurm's ``auth/jwt`` (the site's, else the console section's), or None: no JWTs.

    It goes into ``AuthAltParameters=jwt_key=...``, a comma-separated list: a plain path only.
    """
    if site.jwt_key is not None:
        try:
            return check_path(site.jwt_key, "site jwt_key")
        except ValueError as exc:
            raise SpecError([Issue("site.jwt_key", str(exc))]) from None
    return spec.console.jwt_key if spec.console is not None else None


def _mig_features(spec: PoolSpec, site: Site, version: SlurmVersion) -> tuple[list[str], dict[str, Any] | None]:
    """helpers.conf Feature lines and the Helper's layout table; ([], None) when no group names layouts."""
    with_layouts = [(gi, g) for gi, g in enumerate(spec.node_groups) if g.gpus and g.gpus.layouts]
    if not with_layouts:
        return [], None
    if not version.has("rebootless_node_features"):
        raise SpecError(
            [
                Issue(
                    f"node_groups[{gi}].gpus.layouts",
                    f"MIG layouts as node features need Slurm 24.05 or later (Flags=rebootless); this is {version}",
                )
                for gi, _ in with_layouts
            ]
        )
    entries: list[tuple[str, list[str], str]] = []
    table = []
    for _, g in with_layouts:
        assert g.gpus is not None and g.gpus.layouts is not None
        nodes = expand(g.hosts)
        names = list(g.gpus.layouts)
        # Several slurmd on one host cannot tell their node from the environment: one Helper per node.
        if site.node_ports:
            entries.extend((n, names, features.helper_path(site.bin_dir, n)) for n in nodes)
        else:
            entries.append((fold(nodes), names, features.helper_path(site.bin_dir, None)))
        table.append((nodes, g.gpus.model, g.gpus.count, g.gpus.layouts))
    return features.helpers_conf_lines(entries), features.node_table(table)
