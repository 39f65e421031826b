"""Carry out a :class:`~slurm_pool.bridge.plan.Plan`.

Steps run phase by phase across all nodes (see ``PHASES``), so one node's wait
does not hold up another node's eviction.  A failed step ends its node's
work for this run; every other node goes on.  Errors are collected into the
report, never raised; the run fails (exit 1) if any step failed.  A Node read
again for a patch, or a pod list, that cannot be read fails its step
(:class:`~slurm_pool.bridge.objects.Unreadable`); a pod that cannot be read
still counts as on its node.

A gang's group is opened with its marks (``open`` with ``step.group``/``step.job``)
and stopped as one unit by ``abort``: a Volcano ``AbortJob`` Command for its
vcjob (:func:`~slurm_pool.bridge.k8s.abort_job`), never evictions of its pods.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable

from slurm_pool.adapters.runner import CommandError
from slurm_pool.bridge.gangs import GANG_LABEL
from slurm_pool.bridge.k8s import (
    EVENT_NAMESPACE,
    EvictionBlocked,
    K8sAPI,
    K8sError,
    abort_job,
    fence_patch,
    gang_problem,
    node_event,
    open_patch,
    release_patch,
    update_node,
)
from slurm_pool.bridge.model import PLACEHOLDER_RUNNING, pod_view
from slurm_pool.bridge.objects import listed
from slurm_pool.bridge.plan import Plan, Step
from slurm_pool.bridge.slurm_side import SlurmSide
from slurm_pool.errors import InputError
from slurm_pool.spec.bridge import Bridge

#: What a step may meet: a failed command or API call, or an answer it cannot read.
_STEP_ERRORS = (CommandError, K8sError, InputError, OSError)

#: Placeholder states after which it will never run.
_ENDED = {
    "",
    "COMPLETED",
    "CANCELLED",
    "FAILED",
    "TIMEOUT",
    "PREEMPTED",
    "NODE_FAIL",
    "BOOT_FAIL",
    "DEADLINE",
    "OUT_OF_MEMORY",
    "SPECIAL_EXIT",
}


@dataclass
class StepResult:
    """What one step did."""

    node: str
    kind: str
    ok: bool
    detail: str = ""
    errors: list[str] = field(default_factory=list)
    #: refused by a PodDisruptionBudget (429); retried next run, never forced
    blocked: bool = False
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class StepFailed(Exception):
    """A step did not reach its goal; ``errors`` says why."""

    def __init__(self, detail: str, errors: list[str] | None = None, blocked: bool = False):
        super().__init__(detail)
        self.detail = detail
        self.errors = errors or [detail]
        self.blocked = blocked


class Executor:
    """Runs plan steps against Slurm and Kubernetes."""

    def __init__(
        self,
        slurm: SlurmSide,
        k8s: K8sAPI,
        config: Bridge,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        poll: float = 0.5,
    ):
        self.slurm = slurm
        self.k8s = k8s
        self.config = config
        self.clock = clock
        self.sleep = sleep
        self.poll = poll
        self.plan: Plan | None = None

    def k8s_node(self, node: str) -> str:
        """The Kubernetes Node of Slurm node ``node`` in the plan being run; none known fails the step."""
        name = node if self.plan is None else self.plan.k8s_name(node)
        if name is None:
            raise StepFailed(f"no Kubernetes Node is known for {node} (bridge.node_names): nothing done to one")
        return name

    def run(self, plan: Plan) -> list[StepResult]:
        self.plan = plan
        results: list[StepResult] = []
        failed: set[str] = set()
        jobs: dict[str, int] = {}  # node -> placeholder submitted in this run
        for phase in sorted({s.phase for s in plan.steps}):
            steps = [s for s in plan.steps if s.phase == phase and s.node not in failed]
            waits = [s for s in steps if s.kind.startswith("wait-")]
            for step in steps:
                if step not in waits:
                    results.append(self._one(step, jobs))
            results.extend(self._waits(waits, jobs))
            failed |= {r.node for r in results if not r.ok}
        return results

    # -- single steps ------------------------------------------------------------

    def _one(self, step: Step, jobs: dict[str, int]) -> StepResult:
        began = self.clock()
        try:
            detail = getattr(self, "_" + step.kind.replace("-", "_"))(step, jobs)
            res = StepResult(step.node, step.kind, True, detail)
        except StepFailed as exc:
            res = StepResult(step.node, step.kind, False, exc.detail, exc.errors, exc.blocked)
        except _STEP_ERRORS as exc:
            res = StepResult(step.node, step.kind, False, "failed", [str(exc)])
        res.seconds = round(self.clock() - began, 2)
        return res

    def _fence(self, step: Step, jobs: dict[str, int]) -> str:
        update_node(self.k8s, self.k8s_node(step.node), lambda n: fence_patch(n, step.since))
        return "cordoned, tainted slurm-pool/reclaimed:NoSchedule" + (
            f", reclaim since {step.since}" if step.since else ""
        )

    def _open(self, step: Step, jobs: dict[str, int]) -> str:
        # Re-checked here, after the waits: a placeholder preempted since then means a Slurm
        # job may hold the node now, and opening it would give its GPUs to both sides.
        job = step.job_ids[0] if step.job_ids else jobs.get(step.node)
        if job is None:
            raise StepFailed("no placeholder holds the node: not opening it")
        problem = gang_problem(step.group, step.job) if step.group or step.job else ""
        if problem:
            raise StepFailed(f"{problem}: not opening the node")
        seen: list[str] = []

        def checked_open(node: dict[str, Any]) -> dict[str, Any]:
            # On every try: a 409 may mean the preempted placeholder's fence closed the node since.
            state, reason = self.slurm.job_state(job)
            if state not in PLACEHOLDER_RUNNING:
                raise StepFailed(f"placeholder {job} is {state or 'gone'} ({reason}): not opening the node")
            seen.append(state)
            return open_patch(node, step.group, step.job)

        update_node(self.k8s, self.k8s_node(step.node), checked_open)
        state = seen[-1]
        detail = f"placeholder {job} {state}; uncordoned, untainted, labelled slurm-pool/lent=true"
        message = f"lent to Kubernetes; Slurm holds it with job {job}"
        if step.group:
            detail += f", marked {GANG_LABEL}={step.group}:NoSchedule for gang job {step.job}"
            message += f", for gang job {step.job} (group {step.group})"
        return detail + self._event(step.node, "SlurmPoolLent", message)

    def _abort(self, step: Step, jobs: dict[str, int]) -> str:
        problem = gang_problem(step.group, step.job)
        if problem:
            raise StepFailed(f"{problem}: nothing stopped")
        created, detail = abort_job(self.k8s, step.group, step.job)
        if not created:
            return detail
        message = f"gang job {step.job} (group {step.group}) stopped as one unit: Slurm takes its nodes back"
        return detail + self._event(step.node, "SlurmPoolGangStopped", message)

    def _release(self, step: Step, jobs: dict[str, int]) -> str:
        update_node(self.k8s, self.k8s_node(step.node), release_patch)
        return "label slurm-pool/lent, reclaim mark and any gang marks removed" + self._event(
            step.node, "SlurmPoolReclaimed", "given back to Slurm"
        )

    def _event(self, node: str, reason: str, message: str) -> str:
        """Record a Node event; a failure is noted, never a step failure."""
        when = datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")
        try:
            self.k8s.create_event(EVENT_NAMESPACE, node_event(self.k8s_node(node), reason, message, when))
        except (K8sError, StepFailed) as exc:
            return f" (event {reason} not recorded: {exc})"
        return ""

    def _submit(self, step: Step, jobs: dict[str, int]) -> str:
        jobs[step.node] = self.slurm.submit_placeholder(step.node, self.k8s_node(step.node), step.group)
        return f"placeholder job {jobs[step.node]} submitted"

    def _cancel(self, step: Step, jobs: dict[str, int]) -> str:
        self.slurm.cancel(step.job_ids)
        return "cancelled job(s) " + ",".join(map(str, step.job_ids))

    def _evict(self, step: Step, jobs: dict[str, int]) -> str:
        done, blocked, errors = [], [], []
        for ref in step.pods:
            namespace, _, name = ref.partition("/")
            try:
                if step.force:
                    self.k8s.delete_pod(namespace, name)
                else:
                    self.k8s.evict(namespace, name)
                done.append(ref)
            except EvictionBlocked as exc:
                blocked.append(ref)
                errors.append(f"{ref}: eviction refused ({exc}); retried next run")
            except K8sError as exc:
                errors.append(f"{ref}: {exc}")
        verb = "deleted" if step.force else "evicted"
        detail = f"{verb} {len(done)} of {len(step.pods)} pod(s)"
        if blocked:
            detail += f", {len(blocked)} blocked by a PodDisruptionBudget"
        if errors:
            raise StepFailed(detail, errors, blocked=bool(blocked))
        return detail

    # -- waits, polled together ----------------------------------------------------

    def _waits(self, waits: list[Step], jobs: dict[str, int]) -> list[StepResult]:
        began = self.clock()
        open_: dict[Step, float] = {}
        for s in waits:
            limit = self.config.placeholder_start_timeout if s.kind == "wait-running" else self.config.reclaim_wait
            open_[s] = began + limit
        results: list[StepResult] = []
        while open_:
            for s in list(open_):
                try:
                    done, note = self._check(s, jobs)
                except StepFailed as exc:
                    results.append(
                        StepResult(
                            s.node, s.kind, False, exc.detail, exc.errors, seconds=round(self.clock() - began, 2)
                        )
                    )
                    del open_[s]
                    continue
                except _STEP_ERRORS as exc:
                    done, note = False, str(exc)
                if done:
                    results.append(StepResult(s.node, s.kind, True, note, seconds=round(self.clock() - began, 2)))
                    del open_[s]
                elif self.clock() >= open_[s]:
                    took = round(self.clock() - began, 2)
                    results.append(
                        StepResult(
                            s.node,
                            s.kind,
                            False,
                            f"timed out: {note}",
                            [f"{s.node}: {note} after {took}s"],
                            seconds=took,
                        )
                    )
                    del open_[s]
            if open_:
                self.sleep(self.poll)
        return results

    def _check(self, step: Step, jobs: dict[str, int]) -> tuple[bool, str]:
        if step.kind == "wait-running":
            job = step.job_ids[0] if step.job_ids else jobs.get(step.node)
            if job is None:
                raise StepFailed("no placeholder to wait for")
            state, reason = self.slurm.job_state(job)
            if state in PLACEHOLDER_RUNNING:
                return True, f"placeholder {job} {state}"
            if state in _ENDED:
                raise StepFailed(f"placeholder {job} ended before it ran ({state or 'gone'})")
            return False, f"placeholder {job} {state} ({reason})"
        node = self.k8s_node(step.node)
        pods = listed(self.k8s.list_pods(node), "Pods")
        left = [p for p in (pod_view(o, node) for o in pods) if p is not None and p.node == node and p.workload]
        if not left:
            return True, "no pods left"
        return False, f"{len(left)} pod(s) still there: " + ", ".join(p.ref for p in left[:5])
