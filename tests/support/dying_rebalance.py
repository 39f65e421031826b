"""One rebalance run that kills itself with SIGKILL after its k-th step (crash-safety tests only).

    python -m tests.support.dying_rebalance CONFIG.json KUBECONFIG NOW K

``CONFIG.json`` is a ``Bridge`` as JSON; the Slurm commands come from the
environment.  K = 0 never kills (a plain run).  A run that finds another
run's Lease prints ``skipped`` and exits 0, as ``slurm-pool rebalance`` does.
"""

from __future__ import annotations

import os
import signal
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

from slurm_pool.adapters.runner import SubprocessRunner
from slurm_pool.adapters.slurm import SlurmClient
from slurm_pool.bridge.execute import Executor, StepResult
from slurm_pool.bridge.k8s import KubernetesAPI
from slurm_pool.bridge.lease import LeaseHeld
from slurm_pool.bridge.plan import Step
from slurm_pool.bridge.reconcile import reconcile
from slurm_pool.bridge.slurm_side import SlurmSide
from slurm_pool.spec.bridge import Bridge


class DyingExecutor(Executor):
    """An executor that SIGKILLs its own process once ``kill_after`` steps have finished."""

    def __init__(self, *args: Any, kill_after: int, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.kill_after = kill_after
        self.done = 0

    def _finished(self, n: int) -> None:
        self.done += n
        if self.kill_after and self.done >= self.kill_after:
            sys.stdout.flush()
            os.kill(os.getpid(), signal.SIGKILL)

    def _one(self, step: Step, jobs: dict[str, int]) -> StepResult:
        res = super()._one(step, jobs)
        print(f"step {self.done + 1}: {step.kind} {step.node} ok={res.ok}", flush=True)
        self._finished(1)
        return res

    def _waits(self, waits: list[Step], jobs: dict[str, int]) -> list[StepResult]:
        out = super()._waits(waits, jobs)
        for r in out:
            print(f"step {self.done + 1}: {r.kind} {r.node} ok={r.ok}", flush=True)
            self._finished(1)
        return out


def main(argv: list[str]) -> int:
    config_path, kubeconfig, now, kill_after = argv
    config = Bridge.model_validate_json(Path(config_path).read_text())
    slurm = SlurmSide(SlurmClient(SubprocessRunner()), config)
    k8s = KubernetesAPI.connect(config, kubeconfig)
    executor = DyingExecutor(slurm, k8s, config, kill_after=int(kill_after))
    try:
        report = reconcile(slurm, k8s, config, now=datetime.fromisoformat(now), executor=executor)
    except LeaseHeld as exc:
        print(f"skipped: {exc}", flush=True)
        return 0
    finally:
        k8s.close()
    print(report.text(), flush=True)
    return report.exit_code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
