"""``slurm-pool run -- CMD``: run CMD as a child, turn Slurm's signals into
checkpoints, and leave so that Slurm requeues the job.

Use it as the batch script's last command, with ``exec`` so that the wrapper
*is* the batch shell::

    #SBATCH --requeue --signal=B:USR1@120
    exec slurm-pool run -- python train.py

What it does:

* Forwards SIGTERM, the warning signal, SIGCONT, SIGHUP, SIGQUIT, SIGUSR2
  (and SIGINT when not on a terminal) to the child.  It never leaves the
  child's process group, so Slurm's own signalling still reaches it.
* On SIGTERM or the warning signal it asks Slurm why (``classify``), writes
  ``request.json`` for the child, forwards the signal and waits -- until the
  child acknowledges a save (``ack.json``), commits a newer checkpoint, or
  exits, but no longer than the grace window allows.
* It keeps its own timer at ``EndTime - warn_seconds`` so time limits are
  caught even without ``--signal`` (and ``--poll N`` re-reads the job every N
  seconds to catch preemptions that send the batch shell no signal).
* preempt: on Slurm 24.05 and later, exit 85: slurmctld itself records the
  run PREEMPTED and requeues a requeueable job that exits after its grace
  signal (a self-requeue there would be recorded REQUEUED instead, and kill
  the wrapper at once).  Before 24.05 such a job would end COMPLETED, so the
  wrapper runs ``scontrol requeue`` and exits 85; if that fails it waits for
  Slurm's own (PreemptMode=REQUEUE) requeue at the end of GraceTime.  timeout: count the
  self-requeue in the job's comment (``slurm-pool:self-requeues=N``), requeue,
  exit 85; once ``max_self_requeues`` is spent, exit 86 without requeueing.
  terminate (scancel): wait for the child, exit 143.  checkpoint (a USR1 with
  no deadline): the child saves and both keep running.
* Otherwise it exits with the child's status (128+N for a signal).

Under ``srun`` every task runs its own wrapper; only ``SLURM_PROCID`` 0 asks
Slurm, writes ``request.json`` and requeues.
"""

from __future__ import annotations

import os
import select
import signal
import stat
import subprocess
import sys
import time
from typing import Any, Callable, Mapping, Sequence

from slurm_pool.adapters.records import JobRecord
from slurm_pool.adapters.slurmcalls import SlurmCalls
from slurm_pool.checkpoint import control, slurmjob, store
from slurm_pool.checkpoint.settings import JobSettings, signal_name
from slurm_pool.text import shown

QUERY_TTL = 2.0
#: A checkpoint-only request (USR1 with no deadline) nobody answers expires.
CHECKPOINT_TTL = 300.0


class Request:
    """One checkpoint request in progress."""

    def __init__(
        self,
        reason: str,
        evidence: str,
        sig: str,
        now: float,
        deadline: float | None,
        baseline: int | None,
        info: JobRecord | None,
    ):
        self.id = f"{os.getpid()}-{int(now * 1000)}"
        self.reason, self.evidence, self.signal = reason, evidence, sig
        self.time, self.deadline, self.baseline, self.info = now, deadline, baseline, info
        margin = 0.0 if deadline is None else max(1.0, min(5.0, 0.1 * (deadline - now)))
        self.wait_until = None if deadline is None else deadline - margin
        self.done_at: float | None = None

    @property
    def terminal(self) -> bool:
        return self.reason in (slurmjob.PREEMPT, slurmjob.TIMEOUT)


class Supervisor:
    """The wrapper's state machine; :meth:`run` returns the exit status."""

    def __init__(
        self,
        argv: Sequence[str],
        st: JobSettings,
        *,
        env: Mapping[str, str] | None = None,
        runner: Any = None,
        poll_seconds: float = 0.0,
        clock: Callable[[], float] = time.time,
        log: Callable[[str], None] | None = None,
    ):
        if not argv:
            raise ValueError("no command to run")
        self.argv = list(argv)
        self.st = st
        self.env = dict(os.environ if env is None else env)
        if runner is None:
            from slurm_pool.adapters.runner import SubprocessRunner

            runner = SubprocessRunner(default_timeout=15)
        self.runner = runner
        self.poll_seconds = poll_seconds
        self.clock = clock
        self._log = log or (lambda m: print(m, file=sys.stderr, flush=True))
        self.start = clock()
        self.job_id = st.job_id
        self.run_id = control.run_id(self.job_id, st.restart_count)
        procid = self.env.get("SLURM_PROCID", "0")
        nested = self.env.get("SLURM_POOL_RUN") == self.run_id
        self.leader = procid in ("", "0") and not nested
        self.warn = signal_name(st.warn_signal)
        self.request: Request | None = None
        self.child: subprocess.Popen[bytes] | None = None
        self.pending: list[int] = []
        self._info: tuple[float, JobRecord | None] | None = None
        self.timer_due: float | None = None
        self.poll_due: float | None = None
        self.requeued = False
        self.checkpointing = True  # the directory can be used (:meth:`usable_dir`)
        self.self_requeues: int | None = None
        self.last_request: Request | None = None
        self._wake_r = self._wake_w = -1
        self._old: dict[int, Any] = {}

    def log(self, msg: str) -> None:
        # Slurm's state, reason and errors, and the paths, are quoted here: one line, no terminal control
        self._log(shown(f"slurm-pool run [{self.clock() - self.start:7.1f}s]: {msg}"))

    # -- Slurm ---------------------------------------------------------
    def job_info(self, fresh: bool = False) -> JobRecord | None:
        now = time.monotonic()
        if not fresh and self._info is not None and now - self._info[0] < QUERY_TTL:
            return self._info[1]
        info = slurmjob.query_job(self.runner, self.job_id, self.st.scontrol) if self.job_id else None
        self._info = (now, info)
        return info

    def _schedule_timer(self, info: JobRecord | None) -> None:
        """Arm the time-limit timer at EndTime - warn_seconds.

        Not when the whole time limit is within the warning window: every run
        would requeue itself at once.
        """
        end = None if info is None else (info.end_time or info.natural_end)
        short = (
            info is not None
            and info.time_limit is not None
            and info.time_limit <= self.st.warn_seconds + slurmjob.SLACK
        )
        self.timer_due = None if end is None or short or self.st.warn_seconds <= 0 else end - self.st.warn_seconds

    # -- signals ---------------------------------------------------------
    def _handled(self) -> set[int]:
        sigs = {
            signal.SIGTERM,
            signal.SIGINT,
            signal.SIGHUP,
            signal.SIGQUIT,
            signal.SIGUSR1,
            signal.SIGUSR2,
            signal.SIGCONT,
            signal.SIGCHLD,
            self.st.warn_signal,
        }
        return {s for s in sigs if s not in (signal.SIGKILL, signal.SIGSTOP)}

    def _install(self) -> None:
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        signal.set_wakeup_fd(self._wake_w, warn_on_full_buffer=False)
        for s in self._handled():
            self._old[s] = signal.signal(s, lambda n, _f: self.pending.append(n))
        signal.pthread_sigmask(signal.SIG_UNBLOCK, self._handled())

    def _uninstall(self) -> None:
        for s, old in self._old.items():
            signal.signal(s, old if old is not None else signal.SIG_DFL)
        signal.set_wakeup_fd(-1)
        for fd in (self._wake_r, self._wake_w):
            if fd >= 0:
                os.close(fd)

    def forward(self, sig: int) -> None:
        if self.child is not None and self.child.poll() is None:
            try:
                os.kill(self.child.pid, sig)
            except ProcessLookupError:
                pass

    def on_signal(self, sig: int) -> None:
        if sig == signal.SIGCHLD:
            return
        if sig in (signal.SIGTERM, self.st.warn_signal):
            self.trigger(signal_name(sig), sig)
            return
        if sig == signal.SIGINT and sys.stdin is not None and sys.stdin.isatty():
            return  # the terminal already sent it to the child's process group
        self.forward(sig)

    def trigger(self, name: str | None, forward: int | None) -> None:
        """A checkpoint trigger: a signal (``name``) or the timer/poll (``None``)."""
        now = self.clock()
        active = self.request
        if active is not None and active.terminal and active.reason == slurmjob.PREEMPT:
            if forward is not None:
                self.forward(forward)
            return
        if not self.leader:
            if forward is not None:
                self.forward(forward)
            if name == "TERM" and active is None:
                steps = store.steps(self.st.checkpoint_dir)
                self.request = Request(
                    slurmjob.TERMINATE,
                    "follower: SIGTERM",
                    name,
                    now,
                    now + self.st.kill_wait,
                    steps[-1] if steps else None,
                    None,
                )
            return
        info = self.job_info(fresh=True)
        reason, evidence = slurmjob.classify(info, now, name, warn_seconds=self.st.warn_seconds, warn_signal=self.warn)
        if name is None and reason == slurmjob.CHECKPOINT:  # timer/poll: nothing due yet
            self._schedule_timer(info)
            if self.timer_due is not None:
                self.timer_due = max(self.timer_due, now + 5.0)  # never spin on a stale end time
            return
        if active is not None and active.terminal and reason != slurmjob.PREEMPT:
            if forward is not None:
                self.forward(forward)
            return
        if name is None:
            forward = signal.SIGTERM if reason == slurmjob.PREEMPT else self.st.warn_signal
        deadline = slurmjob.deadline(reason, info, now, self.st.kill_wait)
        steps = store.steps(self.st.checkpoint_dir)
        req = Request(reason, evidence, name or "timer", now, deadline, steps[-1] if steps else None, info)
        self.request = req
        self.timer_due = None
        left = "no deadline" if deadline is None else f"{deadline - now:.0f}s until Slurm kills the job"
        self.log(f"{'SIG' + name if name else 'timer'}: {reason} ({evidence}); {left}")
        try:
            control.write(
                self.st.checkpoint_dir,
                control.REQUEST,
                {
                    "id": req.id,
                    "run": self.run_id,
                    "reason": reason,
                    "evidence": evidence,
                    "signal": req.signal,
                    "time": now,
                    "deadline": deadline,
                    "baseline_step": req.baseline,
                },
            )
        except OSError as exc:  # the directory went away or was never usable: the signal still goes on
            self.log(f"cannot write the request for the command: {exc.strerror or exc}")
        if forward is not None:
            self.forward(forward)

    # -- waiting for the checkpoint --------------------------------------
    def checkpoint_done(self, req: Request) -> bool:
        ack = control.read(self.st.checkpoint_dir, control.ACK)
        if ack and ack.get("request_id") == req.id:
            return True
        steps = store.steps(self.st.checkpoint_dir)
        return bool(steps) and (req.baseline is None or steps[-1] > req.baseline)

    def _wait_child(self, until: float) -> int | None:
        while self.child is not None:
            rc = self.child.poll()
            if rc is not None or self.clock() >= until:
                return rc
            time.sleep(0.05)
        return None

    def _requeue(self, req: Request) -> int:
        if not self.leader:
            return control.EXIT_REQUEUE
        if not self.job_id:
            self.log(f"{req.reason}: not inside a Slurm job, nothing to requeue")
            return control.EXIT_REQUEUE
        if req.reason == slurmjob.TIMEOUT:
            info = req.info or self.job_info()
            count = slurmjob.self_requeues(info.comment if info else None)
            if count is None:  # comment unknown: fall back to Slurm's restart count
                count = self.st.restart_count
            self.self_requeues = count
            if count >= self.st.max_self_requeues:
                self.log(f"time limit: self-requeue budget spent ({count}/{self.st.max_self_requeues}); not requeueing")
                self._wait_child(req.deadline or self.clock())
                return control.EXIT_REQUEUE_LIMIT
            if info is not None and info.comment is not None:  # never clobber a comment we could not read
                comment = slurmjob.with_self_requeues(info.comment, count + 1)
                self._slurm().update_job(self.job_id, comment=comment, check=False, timeout=15)
            self.self_requeues = count + 1
        elif self._slurm_requeues_preempted():
            self.requeued = True
            self.log(f"preempted: Slurm requeues job {self.job_id} itself once it exits")
            self._write_outcome(control.EXIT_REQUEUE)
            return control.EXIT_REQUEUE
        # the requeue signals this very process; leave the epilog a record first
        self.requeued = True
        self._write_outcome(control.EXIT_REQUEUE)
        res = self._slurm().requeue(self.job_id, check=False, timeout=15)
        self.requeued = res.ok
        if res.ok:
            self.log(f"requeued job {self.job_id} ({req.reason})")
            return control.EXIT_REQUEUE
        self.log(f"scontrol requeue failed: {(res.stderr or res.stdout).strip()[:200]}")
        if req.reason == slurmjob.PREEMPT:  # PreemptMode=REQUEUE will requeue us at the deadline
            until = (req.deadline or self.clock()) + self.st.kill_wait + 5
            self.log("waiting for Slurm to requeue the preempted job")
            self._wait_child(until)
            while self.clock() < until:
                time.sleep(0.5)
        return control.EXIT_REQUEUE

    def _slurm_requeues_preempted(self) -> bool:
        """Whether this Slurm requeues a preempted job that exits (24.05+); unknown: no,
        and the wrapper requeues itself, which every release accepts."""
        version = self._slurm().command_version(timeout=15)
        return version is not None and version.has("preempt_requeues_exited_job")

    def _slurm(self) -> SlurmCalls:
        """Slurm through this wrapper's runner, with the scontrol it is told to use."""
        return SlurmCalls(self.runner, self.st.scontrol)

    def finish(self, req: Request) -> int:
        """The checkpoint is in (or time is up): let the child go, then requeue."""
        if self.child is not None and self.child.poll() is None:
            cap = self.clock() + 5.0
            until = min(cap, req.wait_until) if req.wait_until is not None else cap
            self._wait_child(max(until, self.clock() + 0.5))
        return self._requeue(req)

    def _checked(self, req: Request) -> None:
        if req.done_at is None and self.checkpoint_done(req):
            req.done_at = self.clock()
            latest = store.steps(self.st.checkpoint_dir)
            self.log(
                f"checkpoint done after {req.done_at - req.time:.1f}s" + (f" (step {latest[-1]})" if latest else "")
            )

    # -- main loop ---------------------------------------------------------
    def _child_env(self) -> dict[str, str]:
        env = dict(self.env)
        env.update(
            {
                "SLURM_POOL_CHECKPOINT_DIR": self.st.checkpoint_dir,
                "SLURM_POOL_RUN": self.run_id,
                "SLURM_POOL_CHECKPOINT_SIGNAL": self.warn,
                "SLURM_POOL_WARN_SECONDS": str(int(self.st.warn_seconds)),
                "SLURM_POOL_MAX_SELF_REQUEUES": str(self.st.max_self_requeues),
                "SLURM_POOL_KILL_WAIT": str(int(self.st.kill_wait)),
                "SLURM_POOL_SCONTROL": self.st.scontrol,
            }
        )
        return env

    def _sleep(self, timeout: float) -> None:
        try:
            select.select([self._wake_r], [], [], max(0.0, timeout))
        except InterruptedError:
            pass
        try:
            while os.read(self._wake_r, 512):
                pass
        except (BlockingIOError, OSError):
            pass

    def usable_dir(self) -> bool:
        """Create the checkpoint directory if needed; False (and one warning) when it cannot be used.

        A directory that is a file, a symlink loop, or not writable never stops the job:
        its command runs without checkpoints (it starts from scratch after a requeue).
        """
        d = self.st.checkpoint_dir
        try:
            os.makedirs(d, 0o700, exist_ok=True)
            if not os.access(d, os.W_OK | os.X_OK):
                raise PermissionError(13, "not writable by this user")
        except OSError as exc:
            self.log(
                f"warning: checkpoint directory {d} cannot be used ({_unusable(d, exc)}); "
                f"running the command without checkpoints: it will not resume after a preemption or a requeue"
            )
            return False
        return True

    def run(self) -> int:
        self.checkpointing = self.usable_dir()
        self._install()
        code = 1
        try:
            if self.leader:
                info = self.job_info(fresh=True)
                self._schedule_timer(info)
                if self.poll_seconds > 0:
                    self.poll_due = self.clock() + self.poll_seconds
            steps = store.steps(self.st.checkpoint_dir)
            self.log(
                f"job {self.job_id or '-'} restart {self.st.restart_count}, "
                + (
                    f"checkpoints in {self.st.checkpoint_dir} (latest step {steps[-1] if steps else 'none'})"
                    if self.checkpointing
                    else "no checkpoints"
                )
            )
            try:
                self.child = subprocess.Popen(self.argv, env=self._child_env())
            except OSError as exc:
                self.log(f"cannot start {self.argv[0]}: {exc.strerror}")
                code = 127
                return code
            code = self._loop()
            return code
        finally:
            # record the outcome while our handlers still catch SIGTERM: a requeue
            # makes slurmd signal the whole job right away
            if self.leader:
                self._write_outcome(code)
            self._uninstall()

    def _loop(self) -> int:
        assert self.child is not None
        while True:
            while self.pending:
                self.on_signal(self.pending.pop(0))
            now = self.clock()
            req = self.request
            rc = self.child.poll()
            if req is not None:
                self._checked(req)
                if req.reason == slurmjob.CHECKPOINT and (req.done_at is not None or now - req.time > CHECKPOINT_TTL):
                    self.last_request, self.request = req, None
                    self._schedule_timer(self.job_info())
                    continue
                if req.terminal and (
                    rc is not None or req.done_at is not None or (req.wait_until is not None and now >= req.wait_until)
                ):
                    if req.done_at is None:
                        self.log(
                            "no new checkpoint "
                            + ("before the child exited" if rc is not None else "within the grace window")
                        )
                    self.last_request = req
                    return self.finish(req)
            if rc is not None:
                if req is not None:
                    self.last_request = req
                    if req.reason == slurmjob.TERMINATE and self.leader:
                        return 128 + signal.SIGTERM
                return rc if rc >= 0 else 128 - rc
            if self.timer_due is not None and now >= self.timer_due:
                self.timer_due = None
                self.trigger(None, None)
                continue
            if self.poll_due is not None and now >= self.poll_due:
                self.poll_due = now + self.poll_seconds
                if self.request is None:
                    self.trigger(None, None)
                continue
            wake = [now + 5.0]
            if req is not None:
                wake.append(now + 0.2)
            for due in (self.timer_due, self.poll_due):
                if due is not None:
                    wake.append(due)
            self._sleep(min(wake) - now)

    def _write_outcome(self, code: int) -> None:
        if not self.checkpointing:  # no directory to write it into (said once, at the start)
            return
        req = self.request or self.last_request
        latest = store.latest(self.st.checkpoint_dir)
        try:
            control.write(
                self.st.checkpoint_dir,
                control.OUTCOME,
                {
                    "job_id": self.job_id,
                    "restart_count": self.st.restart_count,
                    "run": self.run_id,
                    "reason": req.reason if req else None,
                    "evidence": req.evidence if req else None,
                    "signal_time": req.time if req else None,
                    "checkpointed": bool(req and req.done_at is not None),
                    "checkpoint_step": latest.step if latest else None,
                    "checkpoint_time": latest.time if latest else None,
                    "requeued": self.requeued,
                    "self_requeues": self.self_requeues,
                    "exit_code": code,
                    "time": self.clock(),
                },
            )
        except OSError as exc:
            self.log(f"cannot write the outcome: {exc}")


def _unusable(path: str, exc: OSError) -> str:
    """Why ``path`` is no directory to write into, in words."""
    try:
        st = os.stat(path)
    except OSError as err:
        if os.path.islink(path):
            return f"a symbolic link that cannot be followed: {err.strerror or err}"
        return exc.strerror or str(exc)
    if not stat.S_ISDIR(st.st_mode):
        return "a file, not a directory"
    return exc.strerror or str(exc)
