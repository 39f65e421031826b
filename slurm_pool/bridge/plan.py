"""The bridge's planner: desired state of every managed node and the steps to it.

Pure: a :class:`~slurm_pool.bridge.model.Snapshot`, the ``bridge`` config and
the time go in; a :class:`Plan` comes out.  Level-triggered: the plan depends
only on what is observed now, so running it again after it was carried out
yields no steps.

Rules, per node of the lend partition that Kubernetes also knows:

* lend only if Slurm has it idle (or holds it with our running placeholder),
  nobody drained it, no pending job could run there, the off-peak window is
  open (or ``lend_outside_off_peak``), Kubernetes has it uncordoned by anybody
  else, and inference demand is not met by what is already lent (cap:
  ``max_lent_nodes``);
* reclaim a lent node as soon as any of that stops being true, or its
  placeholder was preempted, requeued or ended;
* fence (cordon + ``slurm-pool/reclaimed:NoSchedule``) every other node, so
  Kubernetes schedules only on lent nodes.  Slurm drains are never touched.

With ``bridge.gangs`` the nodes lent for Volcano gangs (labelled
``slurm-pool/gang``) are no inference supply: :mod:`slurm_pool.bridge.gangplan`
keeps, reclaims and lends them group by group, and ``bridge.gangs.first``
says whether inference or the gangs take the free nodes first.

While a Kubernetes object cannot be read (``Snapshot.unreadable``) the demand
and the capacity are not known whole, so the plan lends nothing new and gives
nothing back for demand; Slurm's needs still take nodes back, a node that
cannot be read is never lent, and a pod that cannot be named keeps its node
with Kubernetes.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Any, Mapping

from slurm_pool.bridge.claims import claims
from slurm_pool.bridge.cost import Groups, ahead_returns, gpus_of, resources_of, shortfall
from slurm_pool.bridge.forecast import Forecast
from slurm_pool.bridge.gangplan import GangNode, GangPlan, lent_groups
from slurm_pool.bridge.gangs import GANG_JOB, GANG_LABEL
from slurm_pool.bridge.lending import Supply, give_back, lend_more
from slurm_pool.bridge.model import LENT_LABEL, RECLAIM_TAINT, K8sNodeView, PodView, Snapshot
from slurm_pool.bridge.windows import off_peak, parse_time
from slurm_pool.spec.bridge import Bridge
from slurm_pool.text import matches, shown

#: Step kinds and the phase they run in (all nodes finish a phase before the next).
PHASES: dict[str, int] = {
    "fence": 1,
    "submit": 1,
    "evict": 2,
    "abort": 2,
    "wait-running": 3,
    "wait-empty": 3,
    "cancel": 4,
    "open": 4,
    "release": 5,
}


@dataclass(frozen=True)
class Step:
    """One change to one node; see :data:`PHASES` for the kinds."""

    kind: str
    node: str
    detail: str = ""
    job_ids: tuple[int, ...] = ()
    pods: tuple[str, ...] = ()
    force: bool = False
    since: str | None = None
    #: A gang's group (:func:`slurm_pool.bridge.gangs.group_id`): ``open`` marks the node as the
    #: group's, ``abort`` stops the group's vcjob ``job`` (``namespace/name``) as one unit.
    group: str = ""
    job: str = ""

    @property
    def phase(self) -> int:
        return PHASES[self.kind]


@dataclass(frozen=True)
class NodePlan:
    """What happens to one node, and why.

    ``intent``: ``lend`` (steps lend it), ``lent`` (lent, nothing to do),
    ``reclaim`` (steps give it back), ``fence`` (steps close it to Kubernetes)
    or ``slurm`` (Slurm's, nothing to do).
    """

    node: str
    intent: str
    reasons: tuple[str, ...] = ()
    steps: tuple[Step, ...] = ()


@dataclass(frozen=True)
class Plan:
    now: datetime
    window_open: bool
    demand_gpus: int
    base_gpus: int
    lent_gpus: int
    nodes: tuple[NodePlan, ...] = ()
    notes: tuple[str, ...] = field(default=())
    #: The forecast behind the plan (:meth:`Forecast.summary`); None without one.
    forecast: dict[str, Any] | None = None
    #: Demand and what stays lent per GPU-like resource (``gpu_resource`` and MIG slices).
    demand_by_resource: dict[str, int] = field(default_factory=dict)
    lent_by_resource: dict[str, int] = field(default_factory=dict)
    #: Kubernetes objects that could not be read (``Snapshot.unreadable``): the run held still.
    unreadable: tuple[str, ...] = ()
    #: Each managed node's Kubernetes Node name (``bridge.node_names``); None: the same names.
    k8s_names: Mapping[str, str] | None = None
    #: With ``bridge.gangs``: each gang group (id, gang, job, nodes, intent, why) and each gang not lent for.
    gangs: tuple[dict[str, Any], ...] | None = None

    def k8s_name(self, node: str) -> str | None:
        """The Kubernetes Node of Slurm node ``node`` (None: none is known, so nothing is done to one)."""
        return node if self.k8s_names is None else self.k8s_names.get(node)

    @property
    def steps(self) -> list[Step]:
        return [s for n in self.nodes for s in n.steps]

    def node(self, name: str) -> NodePlan:
        return next(n for n in self.nodes if n.node == name)

    def to_dict(self) -> dict[str, Any]:
        return {
            "now": self.now.isoformat(),
            "window_open": self.window_open,
            "demand_gpus": self.demand_gpus,
            "base_gpus": self.base_gpus,
            "lent_gpus": self.lent_gpus,
            "demand_by_resource": dict(self.demand_by_resource),
            "lent_by_resource": dict(self.lent_by_resource),
            "notes": list(self.notes),
            "unreadable": list(self.unreadable),
            "forecast": self.forecast,
            **({"gangs": [dict(g) for g in self.gangs]} if self.gangs is not None else {}),
            "nodes": [
                {
                    "node": n.node,
                    **({"k8s_node": k} if (k := self.k8s_name(n.node)) not in (None, n.node) else {}),
                    "intent": n.intent,
                    "reasons": list(n.reasons),
                    "steps": [
                        {k: v for k, v in asdict(s).items() if v not in ((), None, "", False)} | {"phase": s.phase}
                        for s in n.steps
                    ],
                }
                for n in self.nodes
            ],
        }


# -- planning --------------------------------------------------------------------

__all__ = ["PHASES", "NodePlan", "Plan", "Step", "claims", "plan"]


def _blockers(
    snap: Snapshot, config: Bridge, name: str, lend_allowed: bool, claimed: dict[str, list[int]]
) -> list[str]:
    """Why ``name`` may not be lent right now (empty: it may)."""
    out = []
    if not config.enabled:
        out.append("the bridge is disabled (bridge.enabled: false)")
    s = snap.slurm_nodes.get(name)
    k = snap.k8s_nodes.get(name)
    ph = snap.placeholders_on(name)
    running = any(p.running for p in ph)
    if not matches("node", name):
        out.append("not a valid Slurm node name")
    if s is None or snap.lend_partition not in s.partitions:
        out.append(f"not a node of Slurm partition {snap.lend_partition}")
    else:
        if s.unavailable:
            flags = "+".join(s.unavailable)
            who = " by a person" if s.human_drain else ""
            out.append(f"slurm: {flags}{who} ({s.reason})" if s.reason else f"slurm: {flags}")
        others = snap.busy.get(name, ())
        if others:
            out.append("slurm: job(s) " + ",".join(map(str, others)) + " on the node")
        elif not s.idle and not running and not s.unavailable:
            out.append(f"slurm: node is {'+'.join(s.state) or 'in an unknown state'}")
        waiting = claimed.get(name, [])
        if waiting:
            out.append("slurm: pending job(s) " + ",".join(map(str, waiting)) + " could run here")
    if k is None:
        out.append("not a Kubernetes node")
    elif k.problem:
        out.append(f"kubernetes: cannot read the Node: {k.problem}")
    else:
        if k.cordoned_by_someone_else:
            out.append("kubernetes: cordoned by someone else")
        if k.gpus <= 0 and not any(k.gpu_resources.values()):
            out.append("kubernetes: no allocatable GPUs")
    requeued = [p.job_id for p in ph if p.requeued]
    if requeued:
        out.append("placeholder " + ",".join(map(str, requeued)) + " was preempted and requeued")
    elif k is not None and k.lent and not running:
        out.append("placeholder not running (preempted, cancelled or ended)")
    if not lend_allowed:
        out.append("outside the off-peak windows")
    return out


def plan(
    snap: Snapshot, config: Bridge, now: datetime, force_after: int | None = None, forecast: Forecast | None = None
) -> Plan:
    """Desired state and steps for every managed node (``forecast``: look ahead, and the node groups)."""
    force_after = config.force_after if force_after is None else force_after
    now = now if now.tzinfo else now.astimezone()
    t = now.timestamp()
    window = off_peak(config, now)
    lend_allowed = window or config.lend_outside_off_peak
    managed = snap.managed
    gres = config.gpu_resource
    base = snap.base_resources(gres)
    # Demand per GPU-like resource beyond what Kubernetes has outside Slurm's nodes: whole GPUs
    # (``gpu_resource``) and each MIG slice (``nvidia.com/mig-*``) are met only by themselves.
    wanted = dict(snap.demand_by_resource or {gres: snap.demand_gpus})
    wanted[gres] = snap.demand_gpus
    need_by = {r: max(0, v - base.get(r, 0)) for r, v in wanted.items()}
    need = need_by[gres]
    fc = forecast
    warmup = config.forecast.warmup_seconds if config.forecast else 0
    horizon = config.min_lease_seconds + config.return_ahead_seconds
    if fc is not None and fc.inference is not None:
        need = max(need, math.ceil(fc.inference.peak(t, warmup) - 1e-9) - snap.base_gpus)
        need_by[gres] = need

    # Demand or capacity not known whole: lend nothing new, give nothing back for demand.
    frozen = bool(snap.unreadable)
    claimed, spot_waiting = claims(snap, config)
    blockers = {n: _blockers(snap, config, n, lend_allowed, claimed) for n in managed}

    def in_use(n: str) -> bool:
        k = snap.k8s_nodes.get(n)
        return bool(snap.placeholders_on(n) or snap.workload_pods(n) or (k is not None and (k.lent or k.reclaim_since)))

    cap = config.max_lent_nodes if config.max_lent_nodes is not None else len(managed)
    # Gang groups first kept or reclaimed as wholes: they are no inference supply.
    gangs = lent_groups(snap, config, managed, blockers, cap, t) if config.gangs else None
    ganged = set(gangs.nodes) if gangs else set()
    used = [n for n in managed if in_use(n) and n not in ganged]
    supply = Supply(snap, gres)
    # Give back what demand no longer needs (with the hysteresis, once the minimum lease ran).
    keep = [n for n in used if not blockers[n]]
    held_by_gangs = gangs.kept() if gangs else []
    room = max(0, cap - len(held_by_gangs))
    keep, dropped, held = give_back(snap, config, keep, need_by, base, room, frozen=frozen, t=t, supply=supply)
    ahead = ahead_returns(snap, config, now, keep + held_by_gangs, fc)
    for n, why in ahead.items():
        if gangs and n in gangs.nodes:
            gid = gangs.nodes[n].group
            gangs.reclaim(gid, f"{gangs.what[gid]}: {why}")
    dropped.update(ahead)
    keep = [n for n in keep if n not in ahead]
    # Lend more while demand is not met, cheapest reclaim first (nodes holding pods are in ``keep``).
    in_used = set(used)
    free = [n for n in managed if n not in in_used and n not in ganged and not blockers[n]]
    lent_now = len(keep) + (len(gangs.kept()) if gangs else 0)
    closing = not config.lend_outside_off_peak and not off_peak(
        config, now + timedelta(seconds=config.stagger_seconds * lent_now)
    )
    notes = []
    if (free or gangs) and not frozen:
        groups = Groups(snap, fc, t, horizon, keep + (gangs.kept() if gangs else []))
        if gangs is None:
            keep, vetoed = lend_more(snap, keep, free, need_by, cap, groups, closing=closing, supply=supply)
        else:
            keep, vetoed, order = _lend_both(snap, config, gangs, keep, free, need_by, cap, groups, closing, supply)
            notes += order
        for n, why in vetoed.items():
            blockers[n].append(why)

    stamp = now.isoformat()
    plans = []
    lent = set(keep)
    for n in managed:
        if gangs and n in gangs.nodes:
            g = gangs.nodes[n]
            if g.reclaim:
                plans.append(_reclaim(snap, n, (g.reason,), now, stamp, force_after, g))
            else:
                plans.append(_lend(snap, n, g.reason, frozen, g))
        elif n in lent:
            plans.append(_lend(snap, n, held.get(n), frozen))
        elif n in in_used:
            plans.append(
                _reclaim(snap, n, tuple(blockers[n]) or (dropped.get(n, "not needed"),), now, stamp, force_after)
            )
        else:
            idle = f"lending nothing new: {_UNREADABLE}" if frozen else "inference demand is met"
            plans.append(_fence(snap, n, tuple(blockers[n]) or (idle,)))
    plans += _orphans(snap, config, set(managed))
    if spot_waiting:
        notes.append(
            "pending job(s) " + ",".join(map(str, spot_waiting)) + " of tiers that do not preempt "
            f"{config.qos} wait: the lent nodes they fit serve inference"
        )
    for r, unmet in shortfall(need_by, resources_of(snap, keep, gres)).items():
        what = "GPU(s)" if r == gres else f"{r} slice(s)"
        notes.append(f"{unmet} {what} of inference demand cannot be met by lending")
    if frozen:
        notes.append(
            f"{len(snap.unreadable)} Kubernetes object(s) cannot be read, so the demand and the capacity are not "
            "known whole: this run lends no node it has not lent and gives none back for demand"
        )
        notes += [f"cannot read {u}" for u in snap.unreadable]
    notes += snap.name_problems
    if gangs:
        notes += gangs.notes
    return Plan(
        now=now,
        window_open=window,
        demand_gpus=snap.demand_gpus,
        base_gpus=snap.base_gpus,
        lent_gpus=gpus_of(snap, keep),
        demand_by_resource={r: v for r, v in sorted(wanted.items()) if v},
        lent_by_resource=resources_of(snap, keep, gres),
        nodes=tuple(plans),
        notes=tuple(notes),
        unreadable=snap.unreadable,
        k8s_names={n: snap.k8s_names[n] for n in managed if n in snap.k8s_names},
        forecast=fc.summary(t, warmup, horizon) if fc is not None and fc.enabled else None,
        gangs=gangs.summary() if gangs else None,
    )


def _lend_both(
    snap: Snapshot,
    config: Bridge,
    gangs: GangPlan,
    keep: list[str],
    free: list[str],
    need_by: dict[str, int],
    cap: int,
    groups: Groups,
    closing: bool,
    supply: Supply,
) -> tuple[list[str], dict[str, str], list[str]]:
    """Lend for inference and for the waiting gangs, who first as ``bridge.gangs.first`` says.

    Returns what stays lent for inference, the free nodes vetoed (and why), and the note on the order.
    """
    first = config.gangs.first if config.gangs else "inference"
    wanted = bool(shortfall(need_by, supply.total(keep)))
    if first == "gangs":
        gangs.place(free, cap - len(keep) - len(gangs.kept()), groups, closing=closing)
        rest = [n for n in free if n not in gangs.nodes and n not in gangs.vetoed]
        keep, vetoed = lend_more(
            snap, keep, rest, need_by, cap - len(gangs.kept()), groups, closing=closing, supply=supply
        )
    else:
        keep, vetoed = lend_more(
            snap, keep, free, need_by, cap - len(gangs.kept()), groups, closing=closing, supply=supply
        )
        taken = set(keep) | set(vetoed)
        gangs.place([n for n in free if n not in taken], cap - len(keep) - len(gangs.kept()), groups, closing=closing)
    vetoed.update(gangs.vetoed)
    order = "gangs first, then inference" if first == "gangs" else "inference first, then gangs"
    return keep, vetoed, [f"free nodes go to {order} (bridge.gangs.first)"] if wanted and gangs.waiting else []


def _orphans(snap: Snapshot, config: Bridge, managed: set[str]) -> list[NodePlan]:
    """Placeholders on nodes the bridge no longer manages: cancelled, so Slurm has its node back.

    One on a node that Kubernetes still has but no longer selects is cancelled only with the
    placeholder's fence (``bridge.fence_kubeconfig``), which takes the node's pods away first:
    the bridge itself no longer sees that node, and without the fence its pods would stay.
    """
    out = []
    for n in sorted({p.node for p in snap.placeholders if p.active} - managed):
        ids = tuple(p.job_id for p in snap.placeholders_on(n) if p.active)
        which = f"orphaned placeholder {','.join(map(str, ids))}"
        doubt = n in snap.in_doubt
        if (n in snap.unselected or doubt) and not config.fence_kubeconfig:
            lost = _DOUBT if doubt else "Kubernetes still has the node but bridge.node_selector no longer selects it"
            why = f"{which} kept: {lost}, and "
            why += "without bridge.fence_kubeconfig its pods would stay; move them, then cancel it"
            out.append(NodePlan(n, "lent", (why,)))
            continue
        if doubt:
            why = f"{_DOUBT} (its placeholder fences its Node as it ends)"
        elif n in snap.unselected:
            why = "bridge.node_selector no longer selects the node (its placeholder fences it as it ends)"
        elif n not in snap.k8s_nodes:
            why = "the node is not in Kubernetes"
        else:
            why = f"the node is not in Slurm partition {snap.lend_partition}"
        step = Step("cancel", n, "orphaned placeholder: give the node back to Slurm", job_ids=ids)
        out.append(NodePlan(n, "reclaim", (f"{which}: {why}",), (step,)))
    return out


#: Why a placeholder's node is in doubt (``Snapshot.in_doubt``).
_DOUBT = "no listed Kubernetes Node can be told to be this node's by bridge.node_names"
#: Why a run holds still (see the module docstring).
_UNREADABLE = "Kubernetes objects cannot be read (see the notes)"


def _lend(
    snap: Snapshot, n: str, kept: str | None = None, frozen: bool = False, gang: GangNode | None = None
) -> NodePlan:
    """Steps that lend ``n`` (``gang``: as its group's); ``frozen``: only what keeps it as it is."""
    k = snap.k8s_nodes[n]
    ph = snap.placeholders_on(n)
    running = [p for p in ph if p.running]
    steps: list[Step] = []
    keep_id = running[0].job_id if running else (ph[0].job_id if ph else None)
    extra = tuple(p.job_id for p in ph if p.job_id != keep_id)
    if extra:
        steps.append(Step("cancel", n, "duplicate placeholder(s)", job_ids=extra))
    if keep_id is None:
        group = gang.group if gang is not None else ""
        steps.append(Step("submit", n, "placeholder job holding the node in Slurm", group=group))
        steps.append(Step("wait-running", n, "placeholder starts"))
    elif not running:
        steps.append(Step("wait-running", n, f"placeholder {keep_id} starts", job_ids=(keep_id,)))
    held = (keep_id,) if keep_id is not None else ()  # else the placeholder this run submits
    if gang is not None and (not k.open or not _marked(k, gang)):
        what = (
            f"uncordon, untaint, label {LENT_LABEL}=true, mark {GANG_LABEL}={gang.group} for gang job {shown(gang.job)}"
        )
        steps.append(Step("open", n, what, job_ids=held, group=gang.group, job=gang.job))
    elif gang is None and not k.open:
        steps.append(Step("open", n, f"uncordon, untaint, label {LENT_LABEL}=true", job_ids=held))
    reason = f"inference demand {snap.demand_gpus} GPU(s), {snap.base_gpus} outside Slurm's nodes"
    if frozen and any(s.kind != "cancel" for s in steps):
        steps = [s for s in steps if s.kind == "cancel"]
        kept = f"kept as it is, not opened: {_UNREADABLE}"
    intent = "lent" if not steps else "lend"
    return NodePlan(n, intent, (kept,) if kept else (reason,), tuple(steps))


def _marked(k: K8sNodeView, gang: GangNode) -> bool:
    """``k`` carries ``gang``'s group marks: label, taint and job annotation."""
    tainted = any(t.key == GANG_LABEL and t.value == gang.group and t.effect == "NoSchedule" for t in k.taints)
    return k.gang == gang.group and tainted and k.annotations.get(GANG_JOB) == gang.job


def _reclaim(
    snap: Snapshot,
    n: str,
    reasons: tuple[str, ...],
    now: datetime,
    stamp: str,
    force_after: int | None,
    gang: GangNode | None = None,
) -> NodePlan:
    """Steps that give ``n`` back; ``gang``: one of a group's, whose vcjob one ``abort`` stops."""
    k: K8sNodeView = snap.k8s_nodes[n]
    steps: list[Step] = []
    since = k.reclaim_since
    human = k.cordoned_by_someone_else
    if not human and (not k.fenced or since is None):
        steps.append(Step("fence", n, f"cordon, taint {RECLAIM_TAINT}:NoSchedule", since=None if since else stamp))
        since = since or stamp
    if gang is not None and gang.abort:
        steps.append(Step("abort", n, f"stop gang job {gang.job} as one unit", group=gang.group, job=gang.job))
    all_pods = snap.workload_pods(n)
    spare = gang.spare if gang is not None else ""
    live = tuple(p.ref for p in all_pods if not p.terminating and p.named and not _stopped_by(spare, p))
    nameless = [p.problem for p in all_pods if not p.named]
    if live:
        started = parse_time(since)
        force = force_after is not None and started is not None and now - started >= timedelta(seconds=force_after)
        verb = "delete (force: reclaim began " + str(since) + ")" if force else "evict"
        steps.append(Step("evict", n, f"{verb} {len(live)} pod(s)", pods=live, force=force))
    if nameless:  # it cannot be evicted, nor seen to leave: the node stays with Kubernetes
        why = f"{len(nameless)} pod(s) on the node cannot be named, so the node stays with Kubernetes: {nameless[0]}"
        return NodePlan(n, "reclaim", (*reasons, why), tuple(steps))
    if all_pods:
        steps.append(Step("wait-empty", n, f"{len(all_pods)} pod(s) leave the node"))
    ph = snap.placeholders_on(n)
    if ph:
        steps.append(Step("cancel", n, "give the node back to Slurm", job_ids=tuple(p.job_id for p in ph)))
    if k.lent or k.reclaim_since or (gang is not None and k.gang) or any(s.kind == "fence" and s.since for s in steps):
        steps.append(Step("release", n, f"remove {LENT_LABEL} and the reclaim mark"))
    return NodePlan(n, "reclaim", reasons, tuple(steps))


def _stopped_by(spare: str, pod: PodView) -> bool:
    """``pod`` is one the group's abort stops (:attr:`GangNode.spare`), so it is not evicted."""
    if not spare:
        return False
    if spare.endswith("/"):
        return pod.namespace == spare[:-1]
    return f"{pod.namespace}/{pod.group}" == spare


def _fence(snap: Snapshot, n: str, reasons: tuple[str, ...]) -> NodePlan:
    k = snap.k8s_nodes[n]
    if k.fenced or k.cordoned_by_someone_else:
        return NodePlan(n, "slurm", reasons)
    return NodePlan(n, "fence", reasons, (Step("fence", n, f"cordon, taint {RECLAIM_TAINT}:NoSchedule"),))
