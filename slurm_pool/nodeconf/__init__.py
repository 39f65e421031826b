"""Node settings (node.conf): read by the node hooks and by jobs, rendered from the spec.

A package of its own, below every reader: the node hooks
(:mod:`slurm_pool.node`), the job side (:mod:`slurm_pool.checkpoint`), the
exporter and the local cluster all read or write this file, and none of them
should import another's package to do so (in ``node/`` it would close a circle:
the hooks read the job side's records, and jobs read this file).  With it, the
``/bin/sh`` wrappers rendered into it (:mod:`slurm_pool.nodeconf.wrappers`).
Standard library only: the hooks import it on their fast path.

Where: ``--config PATH``; else ``slurm-pool-node.conf`` in the directory of
``$SLURM_CONF`` (slurmd sets it for Prolog and Epilog, Slurm for jobs); else
``/etc/slurm-pool/node.conf``; else the defaults below.

A small ``key = value`` file (``#`` comments).  The hooks run as root and take
every setting that can change their behaviour -- above all an injected
(replayed) GPU snapshot -- from this file only, never from the job's
environment, and refuse it unless it is owned by root (or the running user)
and not writable by group or others.  Jobs read the same file (it is
world-readable) for the checkpoint defaults.

Keys (defaults in brackets)::

    checkpoint_base_dir  [/var/lib/slurm-pool/checkpoints]  default checkpoint
                         dirs are <base>/<user>/<job id>
    checkpoint_signal    [USR1]   the time-limit warning signal
    warn_seconds         [120]    warn this long before the time limit
    max_self_requeues    [5]      timeout self-requeues per job
    kill_wait            [30]     Slurm's KillWait (grace when none is known)
    state_dir            [/var/lib/slurm-pool/state]  root-owned; per node
                         <state_dir>/<node>/{outcomes.jsonl,health.json,...}
    gpus                 [auto]   nvml | auto | none | replay:<path>; auto is
                         nvml, but a machine without the NVML library at all
                         is skipped instead of failing; {node} in a replay
                         path is replaced by the node name
    expected_gpus        [auto]   GRES gpu count of the node, or auto (from
                         scontrol show node, cached by the health check)
    ignore_xids          [13,31,43,45,68,109]  application XIDs (NVIDIA k8s
                         device plugin list)
    extra_ignore_xids    []       more XIDs to ignore
    prolog_fail          [any]    any: a failing check fails the prolog;
                         job: only failures on the job's GPUs (or node-wide)
    epilog_health        [yes]    run the GPU checks in the epilog too
    epilog_query         [yes]    ask slurmctld about the job in the epilog
    lend_partition       [k8s-lend]  its jobs' epilog frees the GPUs of processes
                         left by the Kubernetes tier (slurm_pool.node.gpufree)
    lend_stop_command    []       run (as root) before those processes are killed
    gpu_busy_wait        [10]     seconds the prolog waits for other processes to
                         leave the job's GPUs before it fails
    scontrol             [scontrol]  path of scontrol
    site_health_check    []       the site's own HealthCheckProgram (a cluster
                         the pool shares): the health check runs it after its
                         GPU checks; root-owned, not a link, not writable by
                         group or others; its exit status counts
    site_health_timeout  [60]     seconds it may run
    log                  [syslog]  syslog | stderr | none
    coexist              [no]     yes: the pool shares the cluster with a site; the
                         hook wrappers (:mod:`slurm_pool.nodeconf.wrappers`) never fail a
                         job outside the pool's partitions and accounts
    pool_partitions      []       the pool's partitions (coexist; comma-separated)
    pool_accounts        []       the pool's accounts (coexist; comma-separated)
"""

from __future__ import annotations

import os
import stat
from typing import TYPE_CHECKING

from slurm_pool.errors import InputError
from slurm_pool.wellknown import LEND_PARTITION

if TYPE_CHECKING:  # the hooks never import the spec's models
    from slurm_pool.spec.model import PoolSpec

DEFAULT_PATH = "/etc/slurm-pool/node.conf"
#: Next to slurm.conf (slurmd puts SLURM_CONF in the Prolog/Epilog environment).
BESIDE_SLURM_CONF = "slurm-pool-node.conf"

#: Application XIDs that do not indicate a bad GPU: the list NVIDIA's k8s
#: device plugin ignores (NVIDIA/k8s-device-plugin, internal/rm/health.go,
#: ``getDisabledHealthCheckXids``): 13 graphics engine exception, 31 GPU memory
#: page fault, 43 GPU stopped processing, 45 preemptive cleanup, 68 video
#: processor exception, 109 context switch timeout.
APP_XIDS = (13, 31, 43, 45, 68, 109)

DEFAULTS: dict[str, str] = {
    "checkpoint_base_dir": "/var/lib/slurm-pool/checkpoints",
    "checkpoint_signal": "USR1",
    "warn_seconds": "120",
    "max_self_requeues": "5",
    "kill_wait": "30",
    "state_dir": "/var/lib/slurm-pool/state",
    "gpus": "auto",
    "expected_gpus": "auto",
    "ignore_xids": ",".join(map(str, APP_XIDS)),
    "extra_ignore_xids": "",
    "prolog_fail": "any",
    "epilog_health": "yes",
    "epilog_query": "yes",
    "lend_partition": LEND_PARTITION,
    "lend_stop_command": "",
    "gpu_busy_wait": "10",
    "scontrol": "scontrol",
    "log": "syslog",
    "site_health_check": "",
    "site_health_timeout": "60",
    "coexist": "no",
    "pool_partitions": "",
    "pool_accounts": "",
}


class ConfigError(InputError):
    """node.conf is unsafe or malformed."""


class NodeConfig:
    """Parsed node.conf with typed accessors."""

    def __init__(self, values: dict[str, str] | None = None, path: str | None = None):
        self.values = dict(DEFAULTS)
        self.values.update(values or {})
        self.path = path

    def get(self, key: str) -> str:
        return self.values[key]

    def integer(self, key: str) -> int:
        try:
            return int(self.values[key])
        except ValueError:
            raise ConfigError(f"{self.path or 'node.conf'}: {key} = {self.values[key]!r} is not an integer") from None

    def flag(self, key: str) -> bool:
        return self.values[key].strip().lower() in ("1", "yes", "true", "on")

    def ints(self, key: str) -> tuple[int, ...]:
        raw = self.values[key].replace(" ", "")
        try:
            return tuple(int(x) for x in raw.split(",") if x)
        except ValueError:
            raise ConfigError(f"{self.path or 'node.conf'}: {key} = {raw!r} is not a list of integers") from None

    def names(self, key: str) -> tuple[str, ...]:
        """A comma-separated list of pool names (partitions, accounts), each checked."""
        from slurm_pool.text import SHAPES, matches

        out = tuple(x.strip() for x in self.values[key].split(",") if x.strip())
        for name in out:
            if not matches("name", name):
                raise ConfigError(f"{self.path or 'node.conf'}: {key}: {name!r} is not {SHAPES['name']}")
        return out

    def ignored_xids(self) -> frozenset[int]:
        return frozenset(self.ints("ignore_xids") + self.ints("extra_ignore_xids"))

    def expected_gpus(self) -> int | None:
        raw = self.values["expected_gpus"].strip().lower()
        return None if raw in ("", "auto") else self.integer("expected_gpus")

    def gpu_source(self, node: str) -> tuple[str, str | None]:
        """``("nvml"|"auto"|"none"|"replay", path or None)``."""
        raw = self.values["gpus"].strip()
        if raw.startswith("replay:"):
            return "replay", raw[len("replay:") :].replace("{node}", node)
        if raw in ("nvml", "auto", "none"):
            return raw, None
        raise ConfigError(f"{self.path or 'node.conf'}: gpus = {raw!r} (want nvml, auto, none or replay:<path>)")


def parse(text: str, path: str = "node.conf") -> dict[str, str]:
    """``key = value`` lines; unknown keys are errors (typos must not pass silently)."""
    out: dict[str, str] = {}
    for n, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(f"{path}:{n}: expected key = value")
        if key not in DEFAULTS:
            raise ConfigError(f"{path}:{n}: unknown key {key!r}")
        out[key] = value.strip()
    return out


def check_owner(st: os.stat_result, path: str) -> None:
    """Root (or our own user) owns it and nobody else may write it."""
    if not stat.S_ISREG(st.st_mode):
        raise ConfigError(f"{path}: not a regular file")
    if st.st_uid not in (0, os.geteuid()):
        raise ConfigError(f"{path}: owned by uid {st.st_uid}; must be owned by root")
    if st.st_mode & 0o022:
        raise ConfigError(f"{path}: mode {st.st_mode & 0o777:o} lets group or others write it")


def default_path(env: dict[str, str] | None = None) -> str:
    """``slurm-pool-node.conf`` beside ``$SLURM_CONF`` if there is one, else /etc/slurm-pool/node.conf."""
    conf = (env or {}).get("SLURM_CONF", "")
    if conf.startswith("/"):
        beside = os.path.join(os.path.dirname(conf), BESIDE_SLURM_CONF)
        if os.path.lexists(beside):
            return beside
    return DEFAULT_PATH


def load(path: str | None = None, *, trusted: bool = True, env: dict[str, str] | None = None) -> NodeConfig:
    """Read node.conf.  ``trusted`` (the hooks) checks owner and mode.  Without
    ``path`` the file is looked up with :func:`default_path`; none there means
    all defaults."""
    explicit = path is not None
    path = path or default_path(env)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        if explicit:
            raise ConfigError(f"{path}: no such file") from None
        return NodeConfig(path=None)
    except OSError as exc:
        raise ConfigError(f"{path}: {exc.strerror}") from None
    try:
        st = os.fstat(fd)
        if trusted:
            check_owner(st, path)
        elif not stat.S_ISREG(st.st_mode):
            raise ConfigError(f"{path}: not a regular file")
        text = os.read(fd, 65536).decode("utf-8", errors="replace")
    finally:
        os.close(fd)
    return NodeConfig(parse(text, path), path)


def render(
    spec: PoolSpec,
    *,
    state_dir: str | None = None,
    gpus: str | None = None,
    scontrol: str | None = None,
    extra: dict[str, str] | None = None,
) -> str:
    """node.conf text for a pool spec (its ``checkpoint`` and ``scheduler`` sections)."""
    ck = spec.checkpoint
    signal = str(ck.signal).upper().removeprefix("SIG")
    values = {
        "checkpoint_base_dir": ck.base_dir,
        "checkpoint_signal": signal,
        "warn_seconds": str(ck.warn_seconds),
        "max_self_requeues": str(ck.max_self_requeues),
        "kill_wait": str(spec.scheduler.kill_wait),
    }
    if state_dir:
        values["state_dir"] = state_dir
    if gpus:
        values["gpus"] = gpus
    if scontrol:
        values["scontrol"] = scontrol
    if spec.coexist is not None:
        if spec.coexist.health_check:
            values["site_health_check"] = spec.coexist.health_check
        values["coexist"] = "yes"
        values["pool_partitions"] = ",".join(p.name for p in spec.partitions)
        values["pool_accounts"] = ",".join(p.name for p in spec.projects)
    values.update(extra or {})
    lines = ["# slurm-pool node settings -- generated from the pool spec; keep root-owned, mode 0644."]
    lines += [f"{k} = {v}" for k, v in values.items()]
    cfg = NodeConfig(parse("\n".join(lines)))  # never render something the hooks would refuse
    cfg.names("pool_partitions"), cfg.names("pool_accounts")
    return "\n".join(lines) + "\n"


def hook_paths() -> list[str]:
    """Where this interpreter finds slurm_pool and its dependencies (for :func:`render_hook`)."""
    import sysconfig

    import slurm_pool

    paths = [os.path.dirname(os.path.dirname(os.path.abspath(slurm_pool.__file__)))]
    for key in ("purelib", "platlib"):
        p = sysconfig.get_paths()[key]
        if p not in paths:
            paths.append(p)
    return paths


def render_hook(
    kind: str,
    python: str,
    config_path: str = DEFAULT_PATH,
    paths: list[str] | None = None,
    cfg: NodeConfig | None = None,
) -> str:
    """The tiny executable that slurm.conf's Prolog=/Epilog=/HealthCheckProgram= names.

    slurm.conf cannot pass arguments, so the script does.  ``-I`` keeps the
    job's and root's Python environment variables out; ``slurm_pool.node``
    skips the click CLI.  With ``paths`` (see :func:`hook_paths`) the script
    also runs Python with ``-S`` and puts exactly those directories on
    ``sys.path``: no site-packages ``.pth`` processing, which is most of the
    interpreter's start-up time.  With ``cfg`` (the node.conf the hook reads)
    saying ``coexist = yes``, the script is :mod:`slurm_pool.nodeconf.wrappers`'s: it
    decides whose job it is before Python runs, and fails only the pool's.
    """
    import shlex

    if kind not in ("prolog", "epilog", "healthcheck"):
        raise ValueError(f"unknown hook {kind!r}")
    if cfg is not None and cfg.flag("coexist"):
        return _coexist_hook(kind, python, config_path, paths, cfg)
    conf = shlex.quote(config_path)
    if not paths:
        return f"#!/bin/sh\nexec {shlex.quote(python)} -I -m slurm_pool.node {kind} --config {conf}\n"
    code = f"import sys; sys.path[:0] = {list(paths)!r}; from slurm_pool.node.__main__ import main; sys.exit(main())"
    return f"#!/bin/sh\nexec {shlex.quote(python)} -I -S -c {shlex.quote(code)} {kind} --config {conf}\n"


def _coexist_hook(kind: str, python: str, config_path: str, paths: list[str] | None, cfg: NodeConfig) -> str:
    from slurm_pool.nodeconf import wrappers as hookwrap

    where = {"state_dir": cfg.get("state_dir"), "log": cfg.get("log")}
    try:
        if kind == "healthcheck":
            site = cfg.get("site_health_check").strip()
            dirs = hookwrap.ancestors(site) if site else []
            return hookwrap.health_hook(python, config_path, paths, site_check=site, trusted_dirs=dirs, **where)
        parts, accounts = cfg.names("pool_partitions"), cfg.names("pool_accounts")
        return hookwrap.job_hook(kind, python, config_path, paths, partitions=parts, accounts=accounts, **where)
    except ConfigError:
        raise
    except ValueError as exc:
        raise ConfigError(f"{cfg.path or 'node.conf'}: {exc}") from None
