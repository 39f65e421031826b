"""One reconcile: observe both systems, plan, carry the plan out, report.

Everything is read and checked before anything changes: an answer from
Kubernetes that makes a safe plan impossible (a list that is not a list, a
node or pod that cannot be named) raises
:class:`~slurm_pool.bridge.objects.Unreadable` before the first step.  The
report shows every text from Slurm and Kubernetes terminal-safe.
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any, Callable, Sequence

from slurm_pool.bridge import lease
from slurm_pool.bridge.demand import MIG_PREFIX
from slurm_pool.bridge.execute import Executor, StepResult
from slurm_pool.bridge.forecast import Forecast
from slurm_pool.bridge.k8s import K8sAPI, K8sError, NotFound
from slurm_pool.bridge.model import Snapshot, build_snapshot
from slurm_pool.bridge.names import NodeNaming
from slurm_pool.bridge.objects import Unreadable, listed
from slurm_pool.bridge.plan import Plan, plan
from slurm_pool.bridge.slurm_side import SlurmSide
from slurm_pool.spec.bridge import Bridge
from slurm_pool.text import shown


@dataclass
class Report:
    """A reconcile's plan and, unless it was a dry run, what each step did."""

    plan: Plan
    dry_run: bool = False
    results: list[StepResult] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def failed(self) -> list[StepResult]:
        return [r for r in self.results if not r.ok]

    @property
    def ok(self) -> bool:
        return not self.failed

    @property
    def exit_code(self) -> int:
        """0, or 1 when a step failed or a Kubernetes object could not be read (the run held still)."""
        return 0 if self.ok and not self.plan.unreadable else 1

    def failure(self) -> str:
        """Why :attr:`exit_code` is 1, in one line ("" when it is 0)."""
        why = []
        if self.failed:
            first = self.failed[0]
            detail = "; ".join(first.errors) or first.detail
            why.append(
                f"{len(self.failed)} of {len(self.results)} step(s) failed, first {first.kind} on {first.node}: {detail}"
            )
        if self.plan.unreadable:
            why.append(
                f"held still: {len(self.plan.unreadable)} Kubernetes object(s) cannot be read, "
                f"first {self.plan.unreadable[0]}"
            )
        return shown("; ".join(why))

    def to_dict(self) -> dict[str, Any]:
        data = self.plan.to_dict()
        data.update(
            dry_run=self.dry_run,
            ok=self.ok,
            seconds=self.seconds,
            duration_seconds=self.seconds,
            results=[r.to_dict() for r in self.results],
            errors=[e for r in self.failed for e in r.errors],
        )
        return data

    def text(self) -> str:
        p = self.plan
        lines = [
            f"rebalance at {p.now.isoformat(timespec='seconds')}: off-peak window "
            f"{'open' if p.window_open else 'closed'}, inference demand {p.demand_gpus} GPU(s) "
            f"({p.base_gpus} outside Slurm), {p.lent_gpus} GPU(s) lent after this run"
            + (" [dry run]" if self.dry_run else "")
        ]
        slices = {r: v for r, v in p.demand_by_resource.items() if r.startswith(MIG_PREFIX)}
        if slices or any(r.startswith(MIG_PREFIX) for r in p.lent_by_resource):
            lines.append(
                "MIG slices: "
                + ", ".join(
                    f"{r} {slices.get(r, 0)} wanted, {p.lent_by_resource.get(r, 0)} lent"
                    for r in sorted(set(slices) | {r for r in p.lent_by_resource if r.startswith(MIG_PREFIX)})
                )
            )
        lines += [f"note: {n}" for n in p.notes]
        lines += [
            f"gang group {g['group']} of {g['gang'] or g['job']} on {', '.join(g['nodes'])}: {g['intent']}"
            for g in p.gangs or ()
            if "group" in g
        ]
        if p.forecast is not None:
            f = p.forecast
            inf = "no history" if f["inference_gpus"] is None else f"{f['inference_gpus']:g} GPU(s)"
            groups = ", ".join(f"{g} {v['forecast']:g}/{v['capacity']}" for g, v in sorted(f["slurm_gpus"].items()))
            lines.append(
                f"forecast: inference {inf} within {f['inference_ahead_seconds']}s; Slurm GPUs wanted of each "
                f"group's within {f['slurm_ahead_seconds']}s: {groups}"
            )
        for n in p.nodes:
            k = p.k8s_name(n.node)
            shown_as = n.node if k in (None, n.node) else f"{n.node} (Kubernetes Node {k})"
            lines.append(f"{shown_as:12s} {n.intent:8s} {'; '.join(n.reasons)}")
            if self.dry_run:
                lines += [f"    plan    {s.kind:12s} {s.detail}" for s in n.steps]
            for r in (r for r in self.results if r.node == n.node):
                mark = "ok" if r.ok else "BLOCKED" if r.blocked else "FAILED"
                lines.append(f"    {mark:7s} {r.kind:12s} {r.detail}")
                lines += [f"        {e}" for e in r.errors]
        if self.dry_run:
            lines.append(f"{len(p.steps)} step(s) planned, none carried out")
        else:
            lines.append(f"{len(self.results)} step(s), {len(self.failed)} failed, in {self.seconds:.1f}s")
        return "\n".join(shown(line) for line in lines)


def observe(slurm: SlurmSide, k8s: K8sAPI, config: Bridge, preemptors: frozenset[str] | None = None) -> Snapshot:
    """Read both systems once (and, for a placeholder on a node not listed, whether Kubernetes has it).

    ``preemptors``: the QOS that preempt placeholders (``spec.bridge.lend_preemptors``; None: all).
    """

    def read(kind: str, call: Callable[[], Any]) -> list[Any]:
        return listed(call(), kind)

    podgroups: list[Any] = []
    vcjobs: list[Any] = []
    priority_classes: list[Any] = []
    if config.gangs is not None:  # else nothing of Volcano is read
        ns = list(config.gangs.namespaces)
        podgroups = read("PodGroups", lambda: k8s.list_podgroups(ns))
        vcjobs = read("vcjobs", lambda: k8s.list_vcjobs(ns))
        priority_classes = read("PriorityClasses", k8s.list_priority_classes)
    snap = build_snapshot(
        config,
        slurm.nodes(),
        slurm.jobs(),
        read("Nodes", k8s.list_nodes),
        read("Pods", k8s.list_pods),  # bound and pending: pending predictor pods are demand
        read("InferenceServices", k8s.list_inference_services),
        deployments=read("Deployments", k8s.list_deployments),
        hpas=read("HorizontalPodAutoscalers", k8s.list_hpas),
        serving_runtimes=read("ServingRuntimes", k8s.list_serving_runtimes),
        cluster_serving_runtimes=read("ClusterServingRuntimes", k8s.list_cluster_serving_runtimes),
        preemptors=preemptors,
        podgroups=podgroups,
        vcjobs=vcjobs,
        priority_classes=priority_classes,
    )
    unlisted = sorted({p.node for p in snap.placeholders if p.active} - set(snap.k8s_nodes) - snap.in_doubt)
    naming = NodeNaming(config.node_names)
    unselected, in_doubt = set(), set()
    for name in unlisted:
        k8s_name = naming.k8s_name(name)
        if k8s_name is None:  # by: label, and no listed Node carries it: which one is its cannot be told
            in_doubt.add(name)
            continue
        try:
            k8s.read_node(k8s_name)
        except NotFound:
            continue
        unselected.add(name)
    if not unselected and not in_doubt:
        return snap
    return replace(snap, unselected=frozenset(unselected), in_doubt=snap.in_doubt | in_doubt)


def default_holder() -> str:
    """This run's Lease holder identity: host, process and a random part."""
    return f"{socket.gethostname()}/{os.getpid()}/{uuid.uuid4().hex[:8]}"


def take_lease(k8s: K8sAPI, config: Bridge, holder: str, wall: datetime) -> None:
    """Hold the bridge's Lease for ``config.lease_seconds``; :class:`LeaseHeld` when another run has it."""
    ns, name = config.lease_namespace, config.lease_name
    body = lease.claim(k8s.read_lease(ns, name), name, holder, wall, config.lease_seconds)
    try:
        k8s.write_lease(ns, body)
    except K8sError as exc:
        if exc.status == 409:  # created or renewed by another run since our read
            raise lease.LeaseHeld(f"another rebalance run took Lease {name} first; not running") from None
        raise


def give_back_lease(k8s: K8sAPI, config: Bridge, holder: str, record: dict[str, str] | None = None) -> None:
    """Free the Lease if this run still holds it, leaving ``record`` on it; a failure only lets it expire later."""
    try:
        current = k8s.read_lease(config.lease_namespace, config.lease_name)
        body = lease.released(current, holder, record) if current else None
        if body:
            k8s.write_lease(config.lease_namespace, body)
    except (K8sError, Unreadable):
        pass


def reconcile(
    slurm: SlurmSide,
    k8s: K8sAPI,
    config: Bridge,
    *,
    now: datetime | None = None,
    dry_run: bool = False,
    force_after: int | None = None,
    executor: Executor | None = None,
    holder: str | None = None,
    forecast: Forecast | None = None,
    notes: Sequence[str] = (),
    preemptors: frozenset[str] | None = None,
) -> Report:
    """Observe, plan and (unless ``dry_run``) carry out; errors of steps land in the report.

    A run that changes anything first takes the bridge's Lease, so runs never
    overlap (:class:`~slurm_pool.bridge.lease.LeaseHeld` otherwise); a dry run
    only reads.  ``now`` is the time the plan is made for; the Lease always
    uses the clock.  ``forecast`` (:func:`slurm_pool.bridge.history.build_forecast`)
    lets the plan look ahead; ``notes`` go into the report; ``preemptors``: see :func:`observe`.
    """
    began = time.monotonic()
    now = now or datetime.now(timezone.utc)
    holder = holder or default_holder()
    if not dry_run:
        take_lease(k8s, config, holder, datetime.now(timezone.utc))
    report: Report | None = None
    try:
        the_plan = plan(
            observe(slurm, k8s, config, preemptors), config, now, force_after=force_after, forecast=forecast
        )
        if notes:
            the_plan = replace(the_plan, notes=(*the_plan.notes, *notes))
        report = Report(the_plan, dry_run=dry_run)
        if not dry_run and the_plan.steps:
            report.results = (executor or Executor(slurm, k8s, config)).run(the_plan)
    finally:
        if not dry_run:
            steps = None if report is None else len(report.results)
            record = lease.run_annotations(time.monotonic() - began, datetime.now(timezone.utc), steps)
            give_back_lease(k8s, config, holder, record)
    assert report is not None  # set unless the try raised
    report.seconds = round(time.monotonic() - began, 2)
    return report
