"""The training-side API: notice preemption and time limits, save, resume.

::

    from slurm_pool.checkpoint import Checkpointer

    ck = Checkpointer()                       # installs the signal handlers
    info = ck.latest()                        # None on the first run
    state = decode(ck.load(info)) if info else fresh()
    step = info.step if info else 0
    while step < total:
        step = train_one_step(state, step)
        if step % every == 0 or ck.requested:
            ck.save(step, encode(state))      # atomic; acknowledges a request
        if ck.should_stop:                    # preempt, timeout or terminate
            ck.exit()                         # exit code 85: "requeue me"

Handlers are installed for SIGTERM, the warning signal
(``SLURM_POOL_CHECKPOINT_SIGNAL``, default USR1) and SIGCONT; they only
record the signal, so they are safe at any point.  :attr:`reason` is worked
out lazily, outside the handler: from the wrapper's ``request.json`` when
running under ``slurm-pool run``, otherwise from Slurm's job record (see
:func:`slurm_pool.checkpoint.slurmjob.classify`).
"""

from __future__ import annotations

import os
import signal
import sys
import time
from typing import Any, Callable, Mapping

from slurm_pool.checkpoint import control, settings, slurmjob, store

EXIT_REQUEUE = control.EXIT_REQUEUE


class Checkpointer:
    """Checkpoint-on-preempt for one process (use it from the main thread)."""

    def __init__(
        self,
        directory: str | None = None,
        *,
        keep: int = 3,
        install: bool = True,
        env: Mapping[str, str] | None = None,
        runner: Any = None,
        clock: Callable[[], float] = time.time,
        wait_for_wrapper: float = 3.0,
    ):
        self.env = dict(os.environ if env is None else env)
        self.settings = settings.resolve(self.env, checkpoint_dir=directory)
        self.directory = self.settings.checkpoint_dir
        os.makedirs(self.directory, 0o700, exist_ok=True)
        self.keep = keep
        self.job_id = self.settings.job_id
        self.restart_count = self.settings.restart_count
        self.run = control.run_id(self.job_id, self.restart_count)
        self.wrapped = bool(self.env.get("SLURM_POOL_RUN"))
        self.last_cont: float | None = None
        self._runner = runner
        self._clock = clock
        self._wait_for_wrapper = wait_for_wrapper
        self._signals: list[tuple[int, float]] = []
        self._resolved: tuple[str, str, float | None, str | None] | None = None
        self._previous: dict[int, Any] = {}
        if install:
            self.install()

    # -- signals ---------------------------------------------------------
    @property
    def signals(self) -> tuple[int, ...]:
        return (signal.SIGTERM, self.settings.warn_signal)

    def install(self) -> None:
        """Record SIGTERM, the warning signal and SIGCONT (previous Python handlers still run)."""
        for s in set(self.signals):
            self._previous[s] = signal.signal(s, self._on_signal)
        self._previous[signal.SIGCONT] = signal.signal(signal.SIGCONT, self._on_cont)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, set(self.signals) | {signal.SIGCONT})

    def uninstall(self) -> None:
        for s, prev in self._previous.items():
            signal.signal(s, prev if prev is not None else signal.SIG_DFL)
        self._previous.clear()

    def _chain(self, signum: int, frame: Any) -> None:
        prev = self._previous.get(signum)
        if callable(prev) and prev not in (self._on_signal, self._on_cont):
            prev(signum, frame)

    def _on_signal(self, signum: int, frame: Any) -> None:
        self._signals.append((signum, self._clock()))
        self._resolved = None
        self._chain(signum, frame)

    def _on_cont(self, signum: int, frame: Any) -> None:
        self.last_cont = self._clock()
        self._chain(signum, frame)

    def request(self, signum: int = signal.SIGTERM) -> None:
        """Act as if ``signum`` had arrived (for tests and manual triggers)."""
        self._on_signal(signum, None)

    # -- the request -------------------------------------------------------
    @property
    def requested(self) -> bool:
        """A checkpoint has been asked for and not yet served."""
        return bool(self._signals)

    @property
    def signal(self) -> str | None:
        return settings.signal_name(self._signals[-1][0]) if self._signals else None

    def _from_wrapper(self, since: float) -> dict[str, Any] | None:
        end = time.monotonic() + self._wait_for_wrapper
        while True:
            req = control.read(self.directory, control.REQUEST)
            if req and req.get("run") == self.run and float(req.get("time", 0)) >= since - 30:
                return req
            if time.monotonic() >= end:
                return None
            time.sleep(0.05)

    def _resolve(self) -> tuple[str, str, float | None, str | None] | None:
        if not self._signals:
            return None
        if self._resolved is None:
            signum, since = self._signals[-1]
            req = self._from_wrapper(since) if self.wrapped else None
            if req is not None:
                self._resolved = (
                    str(req.get("reason")),
                    str(req.get("evidence", "")),
                    req.get("deadline"),
                    req.get("id"),
                )
            else:
                info = None
                if self.job_id:
                    from slurm_pool.adapters.runner import SubprocessRunner

                    runner = self._runner or SubprocessRunner(default_timeout=10)
                    info = slurmjob.query_job(runner, self.job_id, self.settings.scontrol)
                now = self._clock()
                reason, evidence = slurmjob.classify(
                    info,
                    now,
                    settings.signal_name(signum),
                    warn_seconds=self.settings.warn_seconds,
                    warn_signal=settings.signal_name(self.settings.warn_signal),
                )
                self._resolved = (reason, evidence, slurmjob.deadline(reason, info, now, self.settings.kill_wait), None)
        return self._resolved

    @property
    def reason(self) -> str | None:
        """``preempt``, ``timeout``, ``terminate``, ``checkpoint`` or None (no request)."""
        r = self._resolve()
        return r[0] if r else None

    @property
    def evidence(self) -> str | None:
        r = self._resolve()
        return r[1] if r else None

    @property
    def time_left(self) -> float | None:
        """Seconds until Slurm kills the job for this request (None: no deadline)."""
        r = self._resolve()
        if not r or r[2] is None:
            return None
        return max(0.0, float(r[2]) - self._clock())

    @property
    def should_stop(self) -> bool:
        """Save and exit now: the job is being preempted, timed out or cancelled."""
        return self.requested and self.reason != slurmjob.CHECKPOINT

    def clear(self) -> None:
        """Forget the pending request."""
        self._signals.clear()
        self._resolved = None

    # -- checkpoints -------------------------------------------------------
    def latest(self, *, verify_data: bool = False) -> store.CheckpointInfo | None:
        """The newest complete checkpoint, or None."""
        return store.latest(self.directory, verify_data=verify_data)

    def load(self, info: store.CheckpointInfo | None = None, name: str = store.DEFAULT_FILE) -> bytes | None:
        """Bytes of ``name`` in ``info`` (default: the newest checkpoint that loads)."""
        if info is not None:
            return store.load(info, name)
        for cand in store.list_checkpoints(self.directory):
            try:
                return store.load(cand, name)
            except (store.CorruptCheckpoint, OSError):
                continue
        return None

    def save(
        self, step: int, data: store.Payload | Mapping[str, store.Payload], *, meta: Mapping[str, Any] | None = None
    ) -> store.CheckpointInfo:
        """Commit a checkpoint for ``step``; acknowledges a pending request."""
        files = dict(data) if isinstance(data, Mapping) else {store.DEFAULT_FILE: data}
        info = store.write(self.directory, step, files, meta=meta, keep=self.keep)
        resolved = self._resolve()
        if resolved is not None:
            control.write(
                self.directory,
                control.ACK,
                {
                    "request_id": resolved[3],
                    "run": self.run,
                    "step": info.step,
                    "time": self._clock(),
                    "pid": os.getpid(),
                },
            )
            if resolved[0] == slurmjob.CHECKPOINT:
                self.clear()
        return info

    def exit(self, code: int = EXIT_REQUEUE) -> None:
        """Leave after the last save; 85 tells ``slurm-pool run`` (and RequeueExit) to requeue."""
        sys.stdout.flush()
        sys.stderr.flush()
        sys.exit(code)


_default: Checkpointer | None = None


def checkpointer(**kwargs: Any) -> Checkpointer:
    """The process-wide :class:`Checkpointer` (created on first use)."""
    global _default
    if _default is None:
        _default = Checkpointer(**kwargs)
    return _default


def restart_count(env: Mapping[str, str] | None = None) -> int:
    """``SLURM_RESTART_COUNT``: how many times Slurm has requeued this job."""
    v = (os.environ if env is None else env).get("SLURM_RESTART_COUNT", "0")
    return int(v) if (v.isascii() and v.isdigit()) else 0
