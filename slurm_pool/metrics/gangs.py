"""Volcano gang jobs on lent nodes, as ``status`` and the exporter show them (``bridge.gangs``).  Pure.

Built from one observation of the bridge (:func:`slurm_pool.bridge.reconcile.observe`): the lent
groups and their reclaims from the Nodes' marks (the ``slurm-pool/gang`` label, which every node
lent for a gang carries whatever the planner thinks, and the ``slurm-pool/reclaim-since``
annotation), the pending gangs from ``Snapshot.gangs``, and, where a plan was made, what it says
of them (``Plan.to_dict()["gangs"]``: why a gang is not lent for, what happens to a group)::

    {"pending": [{"gang": "train/pg-a", "pods": 4, "gpus": 8, "lent": false, "why": "..."}],
     "pending_gpus": 8,
     "groups": [{"group": "g0123...", "job": "train/job-b", "nodes": ["a-gpu1", "a-gpu2"],
                 "reclaiming": ["a-gpu2"], "intent": "reclaim"}],
     "nodes_lent": 2, "nodes_reclaiming": 1}

Metrics (gauges)::

    slurm_pool_bridge_gangs_pending                 gangs waiting for nodes
    slurm_pool_bridge_gang_pending_gpus             their min_member pods' GPUs (the bridge's gpu_resource)
    slurm_pool_bridge_gang_groups_lent              groups of nodes lent for a gang
    slurm_pool_bridge_gang_nodes_lent               nodes lent for a gang
    slurm_pool_bridge_gang_nodes_reclaiming         of them, those being reclaimed (reclaim mark set)
    slurm_pool_bridge_gang_group_nodes{group,job}   nodes of each group

Every text from Kubernetes goes through :func:`slurm_pool.text.shown` (labels, cells); no cell is markup.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from prometheus_client.core import GaugeMetricFamily, Metric

from slurm_pool.bridge.gangs import GANG_JOB, Gang
from slurm_pool.bridge.k8sview import K8sNodeView
from slurm_pool.text import shown

__all__ = ["gang_metrics", "gang_status", "gangs_table"]


def gang_status(
    nodes: Mapping[str, K8sNodeView],
    gangs: Iterable[Gang],
    gpu_resource: str,
    plan: Iterable[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """The gangs' part of the status (the module docstring): ``nodes`` by Slurm name, ``plan`` a plan's gangs."""
    groups: dict[str, dict[str, Any]] = {}
    for name in sorted(nodes):
        view = nodes[name]
        if not view.gang:
            continue
        g = groups.setdefault(view.gang, {"group": view.gang, "job": "", "nodes": [], "reclaiming": [], "intent": ""})
        g["nodes"].append(name)
        g["job"] = g["job"] or view.annotations.get(GANG_JOB, "")
        if view.reclaim_since is not None:
            g["reclaiming"].append(name)
    pending: dict[str, dict[str, Any]] = {}
    for gang in gangs:
        if gang.waiting:
            why = f"cannot be read whole: {gang.problem}" if gang.problem else ""
            pending[gang.ref] = {
                "gang": gang.ref,
                "pods": gang.min_member,
                "gpus": gang.gpus(gpu_resource),
                "lent": gang.group in groups,
                "why": why,
            }
    for entry in plan:
        if entry.get("kind") == "pending":
            ref = str(entry.get("gang", ""))
            row = pending.setdefault(ref, {"gang": ref, "pods": 0, "gpus": 0, "lent": False, "why": ""})
            for key in ("pods", "gpus", "lent", "why"):
                if key in entry:
                    row[key] = entry[key]
        elif entry.get("kind") == "lent" and entry.get("group") in groups:
            groups[str(entry["group"])]["intent"] = str(entry.get("intent", ""))
    rows = [pending[k] for k in sorted(pending)]
    return {
        "pending": rows,
        "pending_gpus": sum(int(r["gpus"]) for r in rows),
        "groups": [groups[k] for k in sorted(groups)],
        "nodes_lent": sum(len(g["nodes"]) for g in groups.values()),
        "nodes_reclaiming": sum(len(g["reclaiming"]) for g in groups.values()),
    }


#: The exporter's families of :func:`gang_status`: key -> (name, help).
GAUGES = {
    "pending": ("slurm_pool_bridge_gangs_pending", "Volcano gangs waiting for nodes."),
    "pending_gpus": (
        "slurm_pool_bridge_gang_pending_gpus",
        "GPUs the min_member pods of the waiting gangs ask for (the bridge's gpu_resource).",
    ),
    "groups": ("slurm_pool_bridge_gang_groups_lent", "Groups of nodes lent for a gang."),
    "nodes_lent": ("slurm_pool_bridge_gang_nodes_lent", "Nodes lent for a gang (slurm-pool/gang label)."),
    "nodes_reclaiming": (
        "slurm_pool_bridge_gang_nodes_reclaiming",
        "Nodes lent for a gang that are being reclaimed (reclaim mark set).",
    ),
}


def gang_metrics(status: Mapping[str, Any]) -> list[Metric]:
    """The gauges of one :func:`gang_status` (the module docstring)."""
    out: list[Metric] = []
    for key, (name, text) in GAUGES.items():
        value = status[key]
        fam = GaugeMetricFamily(name, text)
        fam.add_metric([], float(len(value) if isinstance(value, list) else value))
        out.append(fam)
    each = GaugeMetricFamily(
        "slurm_pool_bridge_gang_group_nodes", "Nodes of each group lent for a gang.", labels=["group", "job"]
    )
    for g in status["groups"]:
        each.add_metric([shown(g["group"]), shown(g["job"])], float(len(g["nodes"])))
    return [*out, each]


def gangs_table(status: Mapping[str, Any]) -> Any:
    """The gangs as a rich table: lent groups (nodes, reclaims), then the pending gangs."""
    from rich.table import Table
    from rich.text import Text

    if "error" in status:
        return Text(shown(f"Gang jobs: {status['error']}"), style="bold")
    title = (
        f"Gang jobs (lent groups: {len(status['groups'])}, nodes: {status['nodes_lent']}, "
        f"reclaiming: {status['nodes_reclaiming']}; pending: {len(status['pending'])}, "
        f"{status['pending_gpus']} GPUs)"
    )
    table = Table(title=Text(title), title_justify="left")
    for col in ("gang / group", "vcjob", "state", "nodes or pods", "GPUs", "why"):
        table.add_column(col, justify="right" if col == "GPUs" else "left")
    for g in status["groups"]:
        state = "reclaiming" if g["reclaiming"] else (g["intent"] or "lent")
        nodes = ", ".join(g["nodes"]) + (f" (reclaiming: {', '.join(g['reclaiming'])})" if g["reclaiming"] else "")
        table.add_row(Text(shown(g["group"])), Text(shown(g["job"] or "?")), Text(shown(state)),
                      Text(shown(nodes)), "", Text(""))  # fmt: skip
    for p in status["pending"]:
        state = "pending, nodes lent" if p["lent"] else "pending"
        table.add_row(Text(shown(p["gang"])), Text(""), Text(state), Text(f"{int(p['pods'])} pods"),
                      str(int(p["gpus"])), Text(shown(p["why"] or "-")))  # fmt: skip
    if not status["groups"] and not status["pending"]:
        table.add_row("-", "", "", "", "0", "")
    return table
