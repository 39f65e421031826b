"""``doctor``'s check of the pool's node lines (a spec with ``coexist``): what slurmctld holds for each pool node.

* node_attrs -- every attribute the spec renders into a group's ``NodeName=``
                line (CPUs, RealMemory, Sockets, CoresPerSocket,
                ThreadsPerCore, MemSpecLimit, TmpDisk, Weight, Features) is
                what ``scontrol show node`` reports for each of its nodes;
                each difference is named, nodes with the same differences
                together.  An attribute the spec leaves out is not compared.
                A group that names its GPUs' type as the site does
                (``gpus.type``) is also checked for ``Gres=gpu:<type>:<count>``,
                and a difference says which model the name stands for.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from slurm_pool.adapters.gres import gpu_counts
from slurm_pool.adapters.nodeattrs import COMMAND, parse_node_attributes
from slurm_pool.adapters.records import skipped
from slurm_pool.adapters.runner import Runner
from slurm_pool.findings import Finding
from slurm_pool.mig.catalogue import GPU_MODELS
from slurm_pool.spec.hosts import HostlistError, expand, fold
from slurm_pool.spec.model import NodeGroup, PoolSpec
from slurm_pool.spec.nodeattrs import node_attributes
from slurm_pool.text import shown

CHECKS = ("node_attrs",)
FIX = (
    "put the rendered NodeName line (slurm-pool.conf) in the cluster's configuration, or change the node group in "
    "the spec to what the nodes are; then restart slurmctld and the nodes' slurmd (a node's CPUs, sockets and "
    "memory are read at start)"
)


@dataclass
class NodeAttrFacts:
    """The node attributes slurmctld reports, by node name."""

    nodes: dict[str, dict[str, str]] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)
    #: Why the nodes could not be read (None: they were).
    error: str | None = None


def gather(spec: PoolSpec, runner: Runner) -> NodeAttrFacts | None:
    """``scontrol show node -o`` read, for a spec with ``coexist`` (None otherwise: the check is left out)."""
    if spec.coexist is None:
        return None
    res = runner.run(list(COMMAND), check=False)
    if not res.ok:
        return NodeAttrFacts(error=shown((res.stderr or res.stdout).strip()[:200]) or f"exit {res.returncode}")
    nodes, left_out = parse_node_attributes(res.stdout)
    for why in left_out:
        skipped(why)
    return NodeAttrFacts(nodes, left_out)


def differences(want: dict[str, str], have: dict[str, str]) -> list[str]:
    """``Key: slurmctld has X, the render Y`` for each rendered attribute the node reports otherwise."""
    out = []
    for key, value in want.items():
        got = have.get(key)
        same = got is not None and (
            set(got.split(",")) - {""} == set(value.split(",")) - {""} if key == "Features" else got == value
        )
        if not same:
            out.append(f"{key}: slurmctld has {shown(got) if got is not None else 'none'}, the render {value}")
    return out


def gres_difference(group: NodeGroup, have: dict[str, str]) -> list[str]:
    """For a group with its own GPU type name: ``Gres`` named unless the node has ``gpu:<type>:<count>``."""
    gpus = group.gpus
    if gpus is None or gpus.type is None or gpus.model not in GPU_MODELS:
        return []
    want = f"gpu:{gpus.type}:{gpus.count}"
    got = have.get("Gres")
    if gpu_counts(got).get(gpus.type) == gpus.count:
        return []
    model = GPU_MODELS[gpus.model]
    return [
        f"Gres: slurmctld has {shown(got) if got is not None else 'none'}, the render {want} ({gpus.type} is the "
        f"site's name for {model.name}, which NVML's autodetection names {model.slurm_type})"
    ]


def findings(spec: PoolSpec, facts: NodeAttrFacts | None) -> list[Finding]:
    """One finding per group and set of differences, naming its nodes (empty: every node as rendered)."""
    if facts is None:
        return []
    if facts.error is not None:
        return [Finding("node_attrs", f"scontrol show node -o failed: {facts.error}", "check that slurmctld answers")]
    out: list[Finding] = []
    for group in spec.node_groups:
        try:
            names = expand(group.hosts)
        except HostlistError:
            continue
        want = node_attributes(group)
        by_diff: dict[tuple[str, ...], list[str]] = {}
        for node in names:
            have = facts.nodes.get(node)
            diff = (
                ("slurmctld does not know the node",)
                if have is None
                else tuple(differences(want, have) + gres_difference(group, have))
            )
            if diff:
                by_diff.setdefault(diff, []).append(node)
        for diff, nodes in by_diff.items():
            out.append(Finding("node_attrs", f"node group {group.name}, {fold(nodes)}: {'; '.join(diff)}", FIX))
    return out
