"""Volcano gangs in the bridge's plan: which groups stay lent, which go back, which gang is lent for (pure).

:func:`lent_groups` looks at the groups already lent (nodes labelled
``slurm-pool/gang``): a group stays while its gang lives and no node of it is
blocked; otherwise every node of it goes back, its vcjob stopped by one
``abort`` (see :mod:`slurm_pool.bridge.plan`).  :meth:`GangPlan.place` lends
for the waiting gangs, in ``Snapshot.gangs`` order, all or nothing: a set of
free nodes that fits every one of a gang's ``min_member`` pods, first-fit
decreasing over the nodes in cost order (:meth:`Groups.cost`), packing a pod
onto a node already chosen before taking another.

Limits: a pod's cpu and memory are taken to fit (the bridge reads no Node's
allocatable cpu or memory); of its placement only ``nodeSelector`` and the
tolerations are read (no affinity); the bridge's own taints and the cordon's
are left out, since opening the node drops them.  The pods of a group's gang on
its nodes are told by their PodGroup (``PodView.group``).
A group whose gang ended or is gone has its leftover pods evicted: nothing
restarts them.  Within ``bridge.max_lent_nodes`` the groups already lent come
first; inference keeps what they leave, and a new group must fit beside both.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from slurm_pool.bridge.cost import Groups, lease_left
from slurm_pool.bridge.gangs import GANG_JOB, GANG_LABEL, Gang, PodShape, job_ok
from slurm_pool.bridge.k8sview import LENT_LABEL, RECLAIM_TAINT
from slurm_pool.bridge.lending import CLOSING, Supply
from slurm_pool.bridge.model import Snapshot
from slurm_pool.spec.bridge import Bridge
from slurm_pool.text import shown

__all__ = ["GangNode", "GangPlan", "lent_groups"]

#: Taints a lend takes off the node (the bridge's and the cordon's): a gang's pods need not tolerate them.
DROPPED_TAINTS = frozenset({RECLAIM_TAINT, GANG_LABEL, "node.kubernetes.io/unschedulable"})


@dataclass(frozen=True)
class GangNode:
    """What the plan does with one node of a gang's group."""

    group: str
    #: The vcjob (``namespace/name``) the group is lent for: the node's mark, the job an abort stops.
    job: str
    reason: str
    reclaim: bool = False
    #: Reclaim: this node carries the group's one ``abort`` step.
    abort: bool = False
    #: Reclaim: the gang's pods, which the abort stops: ``namespace/podgroup``, or ``namespace/`` for
    #: every pod of the namespace when the gang is not seen ("": every pod is evicted).
    spare: str = ""


def shape(gang: Gang, gres: str) -> str:
    """``2 pods x 2 GPU(s)``, or ``3 pods, 5 GPU(s)`` when the pods differ."""
    each = {p.resources.get(gres, 0) for p in gang.pods}
    n = len(gang.pods)
    return f"{n} pods x {each.pop()} GPU(s)" if len(each) == 1 else f"{n} pods, {gang.gpus(gres)} GPU(s)"


class GangPlan:
    """The gang groups of one plan: each node's :class:`GangNode`, the notes, and the report."""

    def __init__(self, snap: Snapshot, config: Bridge, supply: Supply, t: float):
        self.snap, self.config, self.supply, self.t = snap, config, supply, t
        self.gres = config.gpu_resource
        self.nodes: dict[str, GangNode] = {}
        self.members: dict[str, list[str]] = {}
        #: Each group as the reasons name it: ``gang group <id> of <namespace>/<vcjob>``.
        self.what: dict[str, str] = {}
        self.gang_of: dict[str, Gang] = {g.group: g for g in snap.gangs}
        self.notes: list[str] = []
        self.vetoed: dict[str, str] = {}
        self.pending: list[dict[str, Any]] = []
        #: Whether a waiting gang could be lent for (for the note on who goes first).
        self.waiting = False
        #: The groups this plan lends anew.
        self.fresh: set[str] = set()

    def kept(self) -> list[str]:
        """The nodes that stay (or become) a group's."""
        return [n for n, g in self.nodes.items() if not g.reclaim]

    def set(self, group: str, nodes: Sequence[str], job: str, reason: str) -> None:
        """``nodes`` stay lent as ``group``'s, for vcjob ``job``."""
        self.members[group] = list(nodes)
        for n in nodes:
            self.nodes[n] = GangNode(group, job, reason)

    def reclaim(self, group: str, reason: str, stop: bool = True) -> None:
        """Every node of ``group`` goes back; the vcjob is stopped by one abort while its gang lives.

        ``stop`` False: the gang never ran on the group (its lend was cut short), so it is left to wait.
        """
        nodes = self.members[group]
        job = self.nodes[nodes[0]].job
        gang = self.gang_of.get(group)
        frozen = bool(self.snap.unreadable)
        alive = stop and ((gang is not None and not gang.ended) or (gang is None and frozen))
        abort = alive and job_ok(job)
        if alive and not abort:
            reason += f"; no valid {GANG_JOB} annotation ({shown(job) or 'none'}), so its pods are evicted one by one"
        # The abort stops the gang's own pods: those of its PodGroup, or (gang not seen) of the job's namespace.
        spare = (gang.ref if gang is not None else job.partition("/")[0] + "/") if abort else ""
        for i, n in enumerate(nodes):
            self.nodes[n] = GangNode(group, job, reason, reclaim=True, abort=abort and i == 0, spare=spare)

    def summary(self) -> tuple[dict[str, Any], ...]:
        """Each group (id, gang, job, nodes, intent, why) and each gang not lent for (size, why)."""
        out = []
        for group, nodes in self.members.items():
            first = self.nodes[nodes[0]]
            gang = self.gang_of.get(group)
            out.append(
                {
                    "group": group,
                    "gang": gang.ref if gang else "",
                    "job": first.job,
                    "nodes": list(nodes),
                    "intent": "reclaim" if first.reclaim else "lend" if group in self.fresh else "lent",
                    "why": first.reason,
                }
            )
        return (*out, *self.pending)

    # -- lending for waiting gangs ------------------------------------------------------------

    def place(self, free: Sequence[str], room: int, groups: Groups, *, closing: bool) -> list[str]:
        """Lend for the waiting gangs from ``free`` (at most ``room`` nodes in all); the nodes lent."""
        left = sorted(free, key=lambda n: groups.cost(groups.group(n), n))
        lent: list[str] = []
        for gang in self.snap.gangs:
            why = self.unfit(gang)
            if why is None:
                continue
            if not why:
                self.waiting = True
                got = self.fit(gang, [n for n in left if n not in self.vetoed], room - len(lent), groups, closing)
                if isinstance(got, list):
                    reason = f"lent for gang {gang.ref} ({shape(gang, self.gres)})"
                    self.set(gang.group, got, gang.job_ref, reason)
                    self.fresh.add(gang.group)
                    lent += got
                    left = [n for n in left if n not in got]
                    continue
                why = got
            what = f"gang {gang.ref} ({len(gang.pods)} pods, {gang.gpus(self.gres)} GPU(s))"
            self.notes.append(f"{what}: {why}")
            self.pending.append(
                {
                    "gang": gang.ref,
                    "job": gang.job_ref,
                    "pods": len(gang.pods),
                    "gpus": gang.gpus(self.gres),
                    "intent": "pending",
                    "why": why,
                }
            )
        return lent

    def unfit(self, gang: Gang) -> str | None:
        """Why nothing is lent for ``gang`` whatever is free ("": it may be; None: it needs nothing)."""
        if gang.group in self.members or not gang.waiting:
            return None
        limit = self.config.gangs.grace_seconds if self.config.gangs else 0
        if gang.problem:
            return f"cannot be read whole ({gang.problem}): lending nothing for it"
        if not gang.job_ref:
            return "no vcjob owns it, so it could not be stopped as one unit: lending nothing for it"
        if gang.running:
            return (
                f"runs {gang.running} of its {gang.min_member} pods already: lending nothing for it "
                "(only a gang with no pod running is lent for)"
            )
        if not gang.pods or len(gang.pods) < gang.min_member:
            return (
                f"the shapes of only {len(gang.pods)} of its {gang.min_member} pods are known: lending nothing for it"
            )
        if gang.grace_seconds > limit:
            return (
                f"its pods' termination grace ({gang.grace_seconds}s) is longer than bridge.gangs.grace_seconds "
                f"({limit}s): lending nothing for it"
            )
        return ""

    def fit(self, gang: Gang, free: list[str], room: int, groups: Groups, closing: bool) -> list[str] | str:
        """The nodes lent for ``gang`` (added to ``groups``), or why none are."""
        while True:
            got = pack(gang, free, len(free), self.supply, self.snap)
            if got is None:
                return "no set of lendable nodes fits all its pods: " + self.short(gang, free)
            if len(got) > room:
                return (
                    f"no set of lendable nodes fits all its pods within bridge.max_lent_nodes: it needs "
                    f"{len(got)} node(s), {max(room, 0)} more may be lent"
                )
            if closing:
                self.vetoed.update(dict.fromkeys(got, CLOSING))
                return f"{CLOSING}: lending nothing for it"
            added = []
            for n in got:
                veto = groups.veto(n)
                if veto:
                    self.vetoed[n] = veto
                    break
                groups.add(n)
                added.append(n)
            else:
                return got
            for n in added:
                groups.remove(n)
            free = [n for n in free if n not in self.vetoed]

    def short(self, gang: Gang, free: Sequence[str]) -> str:
        """Per pod shape, how many of the free nodes fit one pod of it."""
        parts: dict[str, tuple[int, int]] = {}
        for pod in gang.pods:
            text = need(pod)
            count, fits = parts.get(text, (0, -1))
            if fits < 0:
                fits = sum(1 for n in free if fits_on(pod, self.snap, n, self.supply.of(n), gang.group))
            parts[text] = (count + 1, fits)
        return "; ".join(
            f"{count} pod(s) of {text}, {fits} of {len(free)} free node(s) fit one"
            for text, (count, fits) in parts.items()
        )


def need(pod: PodShape) -> str:
    """What one pod asks of a node's GPU-like resources, as text."""
    return " + ".join(f"{c} {r}" for r, c in sorted(pod.resources.items()) if c) or "no GPU"


def fits_on(pod: PodShape, snap: Snapshot, n: str, left: dict[str, int], group: str) -> bool:
    """``pod`` fits on ``n`` with ``left`` of its resources, once the node is opened for ``group``."""
    if any(left.get(r, 0) < c for r, c in pod.resources.items()):
        return False
    k = snap.k8s_nodes[n]
    opened = {LENT_LABEL: "true", GANG_LABEL: group}  # the labels the lend puts on
    if any(opened.get(key, k.labels.get(key)) != value for key, value in pod.node_selector.items()):
        return False
    return all(
        pod.tolerates(t.key, t.value, t.effect)
        for t in k.taints
        if t.key not in DROPPED_TAINTS and t.effect in ("NoSchedule", "NoExecute")
    )


def pack(gang: Gang, free: Sequence[str], room: int, supply: Supply, snap: Snapshot) -> list[str] | None:
    """First-fit decreasing: the largest pod first, onto a node already chosen, else the next free one that fits."""
    order = sorted(gang.pods, key=lambda p: (-sum(p.resources.values()), -p.cpu_milli, -p.memory))
    chosen: list[str] = []
    left: dict[str, dict[str, int]] = {}
    for pod in order:
        spot = next((n for n in chosen if fits_on(pod, snap, n, left[n], gang.group)), None)
        if spot is None:
            if len(chosen) >= room:
                return None
            spot = next(
                (n for n in free if n not in left and fits_on(pod, snap, n, supply.of(n), gang.group)),
                None,
            )
            if spot is None:
                return None
            chosen.append(spot)
            left[spot] = dict(supply.of(spot))
        for r, c in pod.resources.items():
            left[spot][r] -= c
    return chosen


def bound(gang: Gang, nodes: Sequence[str], snap: Snapshot) -> int:
    """How many of ``gang``'s pods are bound to ``nodes`` and not on their way out.

    The pods are what runs; the PodGroup's ``status`` is Volcano's summary of them and lags behind (and a
    node Kubernetes briefly marks unreachable takes a taint no pod tolerates): a gang whose pods all sit on
    its group's nodes was not cut short, whatever its status says for now.
    """
    on = set(nodes)
    return sum(
        p.node in on
        and p.namespace == gang.namespace
        and p.group == gang.name
        and not p.terminating
        and p.phase not in ("Succeeded", "Failed")
        for p in snap.pods
    )


def lent_groups(
    snap: Snapshot, config: Bridge, managed: Sequence[str], blockers: dict[str, list[str]], cap: int, t: float
) -> GangPlan:
    """The groups already lent: kept, or every node of one reclaimed (see the module docstring)."""
    out = GangPlan(snap, config, Supply(snap, config.gpu_resource), t)
    by_group: dict[str, list[str]] = {}
    for n in managed:
        # The node's mark, else its placeholder's comment: a lend cut short before the node was marked.
        gid = snap.k8s_nodes[n].gang or next((p.group for p in snap.placeholders_on(n) if p.group), "")
        if gid:
            by_group.setdefault(gid, []).append(n)
    rank = {g.group: i for i, g in enumerate(snap.gangs)}
    count = 0
    for gid in sorted(by_group, key=lambda g: (rank.get(g, len(rank)), g)):
        nodes = by_group[gid]
        gang = out.gang_of.get(gid)
        noted = snap.k8s_nodes[nodes[0]].annotations.get(GANG_JOB, "")
        job = noted if job_ok(noted) or not gang else gang.job_ref
        what = out.what[gid] = f"gang group {shown(gid)} of {job if job_ok(job) else 'an unknown job'}"
        blocked = next((n for n in nodes if blockers[n]), None)
        why, short = "", False
        if blocked is not None:
            why = f"{what}: node {blocked} is needed by Slurm ({'; '.join(blockers[blocked])})"
        elif gang is None and not snap.unreadable:
            why = f"{what}: its gang is gone"
        elif gang is not None and gang.ended:
            why = f"{what}: its gang {gang.ref} ended ({gang.job_phase or gang.phase})"
        elif (
            gang is not None
            and gang.waiting
            and bound(gang, nodes, snap) < gang.min_member
            and pack(gang, nodes, len(nodes), out.supply, snap) is None
        ):
            short = True
            why = f"{what}: its {len(nodes)} node(s) cannot hold all of gang {gang.ref}'s pods (a lend cut short)"
        elif count + len(nodes) > cap:
            why = f"{what}: more than bridge.max_lent_nodes ({cap}) lent: the whole group goes back"
        kept = f"{what}: its gang cannot be told while Kubernetes objects cannot be read: kept as it is"
        out.set(
            gid, nodes, job, f"{what}: lent for gang {gang.ref} ({shape(gang, config.gpu_resource)})" if gang else kept
        )
        if why and blocked is None and (gang is None or gang.ended):
            left = max(lease_left(snap, n, t, config) for n in nodes)
            if left > 0:
                out.set(gid, nodes, job, f"{why}: kept for its minimum lease ({left:.0f}s left)")
                why = ""
        if why:
            out.reclaim(gid, why, stop=not short)
        else:
            count += len(nodes)
    return out
