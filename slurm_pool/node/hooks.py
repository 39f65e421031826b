"""The node hooks slurmd runs as root: prolog, epilog and health check.

* **prolog** -- prepares the job's checkpoint directory, checks the GPUs; on a
  failure drains the node (``slurm-pool: <check>: <detail>``) and exits 1 so
  that Slurm requeues the job.  A healthy node costs no Slurm RPC at all.
* **epilog** -- appends the run's outcome to ``outcomes.jsonl`` (see
  :mod:`slurm_pool.node.outcome`), re-checks the GPUs and drains on failure.
  Always exits 0 (a failing epilog would set the node DOWN).
* **healthcheck** -- the HealthCheckProgram: checks, drains on failure, and
  clears its *own* drain once the node is healthy again.

Inputs are slurmd's variables only (``SLURMD_NODENAME``, ``SLURM_JOB_ID``,
``SLURM_JOB_USER``, ``SLURM_JOB_UID``, ``SLURM_JOB_GID``, ``SLURM_JOB_GPUS`` or
``CUDA_VISIBLE_DEVICES``, ``SPANK_SLURM_POOL_CHECKPOINT_DIR``) and the
root-owned node.conf.  No value from the job ever reaches a shell: scontrol is
run with argv lists through the Runner.

State per node under ``<state_dir>/<node>/``: ``outcomes.jsonl``,
``health.json`` (last verdict, for the exporter), ``xid.json`` (sticky XIDs),
``node.json`` (the GRES gpu count the health check last saw), ``lock``.
"""

from __future__ import annotations

import json
import os
import stat
import sys
import time
from typing import Any, Callable

from slurm_pool.node import health
from slurm_pool.nodeconf import NodeConfig
from slurm_pool.nodeconf.wrappers import BROKEN
from slurm_pool.text import matches, shown


class Log:
    """syslog (facility daemon, ident slurm-pool) and/or stderr."""

    def __init__(self, where: str = "syslog", hook: str = "node"):
        self.where, self.hook = where, hook
        self.lines: list[str] = []

    def __call__(self, msg: str, *, error: bool = False) -> None:
        line = shown(f"{self.hook}: {msg}")  # paths and values from the job: one line, no terminal control
        self.lines.append(line)
        if self.where == "syslog":
            try:
                import syslog

                syslog.openlog("slurm-pool", 0, syslog.LOG_DAEMON)
                syslog.syslog(syslog.LOG_ERR if error else syslog.LOG_INFO, line)
            except OSError:
                pass
        if self.where in ("syslog", "stderr") and (error or self.where == "stderr"):
            print(f"slurm-pool {line}", file=sys.stderr)


def _no_nvml(error: object) -> bool:
    """The NVML library itself is absent (not a broken driver or GPU)."""
    text = str(error or "")
    return "LibraryNotFound" in text or text.startswith("pynvml not importable")


def node_name(env: dict[str, str], override: str | None = None) -> str:
    name = override or env.get("SLURMD_NODENAME") or os.uname().nodename.split(".")[0]
    if not matches("node", name):
        raise ValueError(f"node name {name!r} is not usable")
    return name


class Hooks:
    """The three hooks for one node; everything external is injectable."""

    def __init__(
        self,
        cfg: NodeConfig,
        env: dict[str, str],
        *,
        runner: Any = None,
        source: Any = None,
        clock: Callable[[], float] = time.time,
        log: Log | None = None,
        node: str | None = None,
        users: Callable[[str], int | None] | None = None,
    ):
        self.cfg, self.env, self.clock = cfg, env, clock
        self.users = users  # a user name's uid (None: this node's user database)
        self.node = node_name(env, node)
        self.log = log or Log(cfg.get("log"))
        self._runner, self._source = runner, source
        self.scontrol = cfg.get("scontrol")
        self.dir = os.path.join(cfg.get("state_dir"), self.node)
        self.gpu_kind = ""

    # -- plumbing ----------------------------------------------------------
    @property
    def runner(self) -> Any:
        if self._runner is None:
            from slurm_pool.adapters.runner import SubprocessRunner

            self._runner = SubprocessRunner(default_timeout=15)
        return self._runner

    def source(self, processes: bool = False) -> Any:
        """The GPU source node.conf asks for (None: no GPU checks); ``processes``: list each GPU's processes."""
        if self._source is not None:
            return self._source
        kind, path = self.cfg.gpu_source(self.node)
        self.gpu_kind = kind
        if kind == "none":
            return None
        if kind == "replay":
            from slurm_pool.adapters.nvml import ReplaySource

            return ReplaySource(path or "", trusted=True)
        from slurm_pool.adapters.nvml import NvmlSource

        return NvmlSource(host=self.node, with_processes=processes)

    def _state_dir(self) -> str:
        os.makedirs(self.dir, 0o755, exist_ok=True)
        return self.dir

    def _lock(self) -> int:
        import fcntl

        fd = os.open(os.path.join(self._state_dir(), "lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX)
        return fd

    def _read(self, name: str) -> dict[str, Any] | None:
        try:
            with open(os.path.join(self.dir, name), encoding="utf-8") as fh:
                data = json.load(fh)
            return data if isinstance(data, dict) else None
        except (OSError, ValueError):
            return None

    def _write(self, name: str, data: dict[str, Any]) -> None:
        path = os.path.join(self._state_dir(), name)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(data, fh, sort_keys=True)
            fh.write("\n")
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)

    def _note_run_start(self, job: str) -> None:
        """Remember when this run began here, so the epilog can tell runs apart."""
        runs = os.path.join(self._state_dir(), "runs")
        os.makedirs(runs, 0o755, exist_ok=True)
        with open(os.path.join(runs, job), "w", encoding="utf-8") as fh:
            fh.write(f"{self.clock():.3f}\n")

    def _take_run_start(self, job: str) -> float | None:
        path = os.path.join(self.dir, "runs", job)
        try:
            with open(path, encoding="utf-8") as fh:
                value = float(fh.read().strip())
            os.unlink(path)
            return value
        except (OSError, ValueError):
            return None

    def append_outcome(self, rec: dict[str, Any]) -> None:
        fd = self._lock()
        try:
            line = (json.dumps(rec, sort_keys=True) + "\n").encode()
            out = os.open(
                os.path.join(self.dir, "outcomes.jsonl"), os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644
            )
            try:
                os.write(out, line)
            finally:
                os.close(out)
        finally:
            os.close(fd)

    # -- health --------------------------------------------------------------
    def expected_gpus(self) -> int | None:
        fixed = self.cfg.expected_gpus()
        if fixed is not None:
            return fixed
        cached = self._read("node.json") or {}
        v = cached.get("gres_gpus")
        return v if isinstance(v, int) else None

    def check(
        self,
        *,
        job_gpus: frozenset[int] | set[int] = frozenset(),
        expected: int | None = None,
        ack: bool = False,
        processes: bool = False,
        shares: Callable[[], bool] | None = None,
    ) -> tuple[list[health.Failure], dict[str, Any] | None]:
        """All failures (and the snapshot); a broken snapshot source is logged and counts as healthy.

        ``processes``: also fail for other processes on the job's GPUs, after
        waiting up to ``gpu_busy_wait`` seconds for them to leave, unless
        ``shares()`` says the job shares its GPUs (asked only then).
        """
        src = self.source(processes)
        if src is None:
            return [], None
        try:
            snap = src.snapshot()
        except (OSError, ValueError) as exc:
            self.log(f"GPU snapshot unavailable, checks skipped: {exc}", error=True)
            return [], None
        if self.gpu_kind == "auto" and _no_nvml(snap.get("error")):
            self.log(f"gpus = auto and no NVML here ({snap['error']}): GPU checks skipped")
            return [], None
        failures = health.check_snapshot(snap, expected_gpus=expected, job_gpus=job_gpus)
        if processes:
            failures += self._busy(src, snap, job_gpus, shares)
        fd = self._lock()
        try:
            old = self._read("xid.json")
            new = health.update_xid_state(old, snap, self.cfg.ignored_xids(), ack=ack)
            if new != old:
                self._write("xid.json", new)
        finally:
            os.close(fd)
        return failures + health.xid_failures(new), snap

    def _busy(
        self,
        src: Any,
        snap: dict[str, Any],
        job_gpus: frozenset[int] | set[int],
        shares: Callable[[], bool] | None = None,
    ) -> list[health.Failure]:
        """Other processes on the job's GPUs that do not leave within ``gpu_busy_wait`` seconds."""
        from slurm_pool.node.procinfo import alive

        def busy_now(snap: dict[str, Any]) -> dict[int, list[int]]:  # a process that just ended may still be listed
            found = health.busy_gpus(snap, job_gpus)
            return {m: live for m, pids in found.items() if (live := [p for p in pids if alive(p)])}

        deadline = time.monotonic() + self.cfg.integer("gpu_busy_wait")
        busy = busy_now(snap)
        if busy and shares is not None and shares():
            self.log(f"GPU(s) {','.join(map(str, sorted(busy)))} busy, but the job holds shards of them: allowed")
            return []
        while busy and time.monotonic() < deadline:
            time.sleep(0.5)
            try:
                snap = src.snapshot()
            except (OSError, ValueError):
                break
            busy = busy_now(snap)
        return health.busy_failures(snap, busy)

    def free_lent_gpus(self) -> None:
        """Epilog of a lend job: stop what the Kubernetes tier left on the GPUs (:mod:`.gpufree`)."""
        from slurm_pool.adapters.nvml import gpu_processes
        from slurm_pool.node import gpufree

        src = self.source(processes=True)
        if src is None:
            return

        def read() -> dict[int, list[int]] | None:
            try:
                return gpu_processes(src.snapshot())
            except (OSError, ValueError) as exc:
                self.log(f"GPU processes unreadable: {exc}", error=True)
                return None

        res = gpufree.free_gpus(read, command=self.cfg.get("lend_stop_command"))
        self.log(f"lend ended, GPUs: {res.detail}", error=not res.ok)
        if res.left:
            left = ",".join(map(str, res.left))
            failure = health.Failure("gpu-busy", None, f"pid(s) {left} still on the GPUs after a lend")
            self._drain_if_needed("epilog", [failure], may_undrain=False)

    def _record(self, hook: str, failures: list[health.Failure], action: str) -> None:
        try:
            self._write(
                "health.json",
                {
                    "time": self.clock(),
                    "node": self.node,
                    "hook": hook,
                    "healthy": not failures,
                    "failures": [f._asdict() for f in failures],
                    "action": action,
                    "reason": health.drain_reason(failures) if failures else None,
                },
            )
        except OSError as exc:
            self.log(f"cannot record health: {exc}", error=True)

    def _drain_if_needed(
        self, hook: str, failures: list[health.Failure], *, may_undrain: bool, state: Any = None, known: bool = False
    ) -> str:
        from slurm_pool.node import slurmnode

        reason = health.drain_reason(failures) if failures else None
        if reason is None and not may_undrain:
            self._record(hook, failures, "none")
            return "none"
        if not known:
            state = slurmnode.query_node(self.runner, self.scontrol, self.node)
        action = slurmnode.decide(state, reason, may_undrain=may_undrain)
        failed = slurmnode.apply(self.runner, self.scontrol, self.node, action)
        if action.kind != "none":
            self.log(
                f"{action.kind} {self.node}"
                + (f": {reason}" if reason else "")
                + (f" (scontrol failed: {failed})" if failed else ""),
                error=bool(failed) or action.kind == "drain",
            )
        elif reason:
            self.log(f"unhealthy, drain left as it is ({state.reason if state else 'node state unknown'}): {reason}")
        self._record(hook, failures, action.kind)
        return action.kind

    # -- the hooks -------------------------------------------------------------
    def prolog(self) -> int:
        from slurm_pool.node import jobdir

        env = self.env
        try:
            job, user, uid, gid = jobdir.job_identity(env, self.users or jobdir.uid_of)
            self._note_run_start(job)
            path, chosen = jobdir.checkpoint_dir(self.cfg.get("checkpoint_base_dir"), env)
            what = jobdir.prepare(self.cfg.get("checkpoint_base_dir"), path, user, uid, gid)
            if chosen or what != "created":
                self.log(f"job {job}: checkpoint dir {path}: {what}")
        except (jobdir.JobDirError, OSError) as exc:
            self.log(f"checkpoint dir not prepared: {exc}", error=True)
        job_gpus = health.job_gpu_ids(env.get("SLURM_JOB_GPUS") or env.get("CUDA_VISIBLE_DEVICES"))
        lend = env.get("SLURM_JOB_PARTITION") == self.cfg.get("lend_partition")
        failures, snap = self.check(
            job_gpus=job_gpus,
            expected=self.expected_gpus(),
            processes=not lend,
            shares=lambda: self._holds_shards(env.get("SLURM_JOB_ID", "")),
        )
        if not failures:
            return 0
        self._drain_if_needed("prolog", failures, may_undrain=False)
        if self.cfg.get("prolog_fail") == "job":
            failures = [f for f in failures if health.affects_job(f, job_gpus, snap or {})]
        return 1 if failures else 0

    def _holds_shards(self, job: str) -> bool:
        """The job holds GPU shards, which share their GPU on purpose.

        The prolog cannot tell from its environment: Slurm gives a shard job
        the same CUDA_VISIBLE_DEVICES and SLURM_JOB_GPUS as a whole-GPU job
        (gres_common_prep_set_env in src/plugins/gres/common/gres_common.c),
        and SLURM_SHARDS_ON_NODE only to the job's tasks.  So slurmctld is
        asked, and only when another process is on the job's GPUs.
        """
        from slurm_pool.checkpoint.slurmjob import query_job

        if self.env.get("SLURM_SHARDS_ON_NODE"):
            return True
        info = query_job(self.runner, job, self.scontrol) if matches("job-id", job) else None
        if info is None:
            self.log(f"job {job}: cannot ask Slurm whether it holds GPU shards; its GPUs count as its own", error=True)
            return False
        return info.shards > 0

    def epilog(self) -> int:
        from slurm_pool.node import jobdir, outcome

        env = self.env
        if env.get("SLURM_JOB_PARTITION") == self.cfg.get("lend_partition"):
            self.free_lent_gpus()
        try:
            job, user, uid, _gid = jobdir.job_identity(env, self.users or jobdir.uid_of)
            path, _ = jobdir.checkpoint_dir(self.cfg.get("checkpoint_base_dir"), env)
            info = None
            if self.cfg.flag("epilog_query"):
                from slurm_pool.checkpoint.slurmjob import query_job

                info = query_job(self.runner, job, self.scontrol)
            rec = outcome.build(
                job_id=job,
                user=user,
                node=self.node,
                now=self.clock(),
                info=info,
                wrapper=jobdir.read_outcome(path, uid, self.log),
                newest=jobdir.newest_checkpoint(path, uid, self.log),
                run_start=self._take_run_start(job),
            )
            self.append_outcome(rec)
        except (jobdir.JobDirError, OSError, ValueError) as exc:
            self.log(f"outcome not recorded: {exc}", error=True)
        except Exception as exc:  # noqa: BLE001 -- whatever the job wrote, the health check below runs
            self.log(f"outcome not recorded ({type(exc).__name__}): {exc}", error=True)
        if self.cfg.flag("epilog_health"):
            failures, _ = self.check(expected=self.expected_gpus())
            if failures:
                self._drain_if_needed("epilog", failures, may_undrain=False)
        return 0

    def healthcheck(self, *, ack_xids: bool = False) -> int:
        from slurm_pool.node import slurmnode

        state = slurmnode.query_node(self.runner, self.scontrol, self.node)
        expected = self.cfg.expected_gpus()
        if expected is None and state is not None:
            expected = health.gres_gpu_count(state.gres)
            if (self._read("node.json") or {}).get("gres_gpus") != expected:
                self._write("node.json", {"gres_gpus": expected, "time": self.clock()})
        elif expected is None:
            expected = self.expected_gpus()
        failures, _ = self.check(expected=expected, ack=ack_xids)
        self._drain_if_needed("healthcheck", failures, may_undrain=True, state=state, known=True)
        site = self.site_health_check()
        return 1 if failures or site else 0

    def site_health_check(self) -> int:
        """Run the site's own HealthCheckProgram (node.conf ``site_health_check``) as root; its exit status.

        It runs as root, so it must be a regular root-owned file that group and
        others cannot write, reached through no symbolic link, in a directory
        only root can write.  Anything else is refused (status 1) and logged.
        """
        path = self.cfg.get("site_health_check").strip()
        if not path:
            return 0
        try:
            _trusted_program(path)
        except (OSError, ValueError) as exc:
            self.log(f"site health check {path!r} refused: {exc}", error=True)
            return 1
        import subprocess

        try:
            res = subprocess.run([path], env=self.env, timeout=self.cfg.integer("site_health_timeout"), check=False)
        except subprocess.TimeoutExpired:
            self.log(f"site health check {path!r} timed out", error=True)
            return 1
        except OSError as exc:
            self.log(f"site health check {path!r} could not run: {exc}", error=True)
            return 1
        if res.returncode:
            self.log(f"site health check {path!r} exited {res.returncode}", error=True)
        return res.returncode


def _trusted_program(path: str) -> None:
    """Raise ValueError unless ``path`` is absolute, a regular root-owned file no one else may write, and no
    component on the way is a symbolic link or a directory others may write."""
    if not path.startswith("/"):
        raise ValueError("not an absolute path")
    current = "/"
    for part in [p for p in path.split("/") if p]:
        if part in (".", ".."):
            raise ValueError("'.' or '..' in the path")
        current = os.path.join(current, part)
        st = os.lstat(current)
        if stat.S_ISLNK(st.st_mode):
            raise ValueError(f"{current} is a symbolic link")
        shared_dir = stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_ISVTX  # /tmp: others cannot rename in it
        if st.st_uid != 0 or (st.st_mode & 0o022 and not shared_dir):
            raise ValueError(f"{current} is not root's alone (uid {st.st_uid}, mode {st.st_mode & 0o777:o})")
    if not stat.S_ISREG(st.st_mode) or not st.st_mode & 0o100:
        raise ValueError("not an executable regular file")


def main(
    hook: str,
    config_path: str | None,
    *,
    env: dict[str, str] | None = None,
    node: str | None = None,
    ack_xids: bool = False,
) -> int:
    """Run one hook as slurmd would; errors in node.conf are fatal only to the health check.

    A health check that cannot do its work (node.conf unusable, an internal error) exits :data:`BROKEN`, not 1:
    that is no verdict on the node, and on a shared cluster the wrapper runs the site's own check instead.
    """
    from slurm_pool import nodeconf

    env = dict(os.environ if env is None else env)
    try:
        cfg = nodeconf.load(config_path, trusted=True, env=env)
    except nodeconf.ConfigError as exc:
        print(shown(f"slurm-pool {hook}: {exc}"), file=sys.stderr)
        try:
            import syslog

            syslog.openlog("slurm-pool", 0, syslog.LOG_DAEMON)
            syslog.syslog(syslog.LOG_ERR, shown(f"{hook}: {exc}"))
        except OSError:
            pass
        return BROKEN if hook == "healthcheck" else 0
    try:
        hooks = Hooks(cfg, env, node=node, log=Log(cfg.get("log"), hook))
        if hook == "prolog":
            return hooks.prolog()
        if hook == "epilog":
            return hooks.epilog()
        if hook == "healthcheck":
            return hooks.healthcheck(ack_xids=ack_xids)
    except Exception as exc:  # never let a bug in a hook drain the whole pool
        print(shown(f"slurm-pool {hook}: internal error: {type(exc).__name__}: {exc}"), file=sys.stderr)
        return 0 if hook != "healthcheck" else BROKEN
    raise ValueError(f"unknown hook {hook!r}")
