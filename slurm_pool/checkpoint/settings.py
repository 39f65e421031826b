"""Job-side settings: command-line options, then environment, then node.conf.

Environment variables read (all optional):

``SLURM_POOL_CHECKPOINT_DIR``   checkpoint directory (``slurm-pool run`` sets
                                it for its child); else
``SPANK_SLURM_POOL_CHECKPOINT_DIR`` (the SPANK plugin's option); else
                                ``<checkpoint_base_dir>/<user>/<job id>``
``SLURM_POOL_CHECKPOINT_SIGNAL`` time-limit warning signal (``USR1``; ``B:``
                                prefixes and ``@seconds`` suffixes are ignored)
``SLURM_POOL_WARN_SECONDS``     how long before the time limit to act
``SLURM_POOL_MAX_SELF_REQUEUES`` timeout self-requeue budget
``SLURM_POOL_KILL_WAIT``        grace assumed when Slurm does not say (KillWait)
``SLURM_POOL_SCONTROL``         scontrol to use
``SLURM_POOL_NODE_CONF``        node.conf to read defaults from (default:
                                ``slurm-pool-node.conf`` beside ``$SLURM_CONF``,
                                else ``/etc/slurm-pool/node.conf``)
plus Slurm's ``SLURM_JOB_ID``, ``SLURM_JOB_USER``, ``SLURM_RESTART_COUNT``,
``SLURM_PROCID``.
"""

from __future__ import annotations

import os
import pwd
import signal as _signal
from typing import Mapping, NamedTuple

from slurm_pool import nodeconf


class JobSettings(NamedTuple):
    checkpoint_dir: str
    warn_signal: int
    warn_seconds: float
    max_self_requeues: int
    kill_wait: float
    scontrol: str
    job_id: str | None
    restart_count: int


def parse_signal(value: str | int) -> int:
    """``USR1``, ``SIGUSR1``, ``10``, ``B:USR1@60`` -> the signal number."""
    if isinstance(value, int):
        return value
    v = value.strip().upper()
    v = v.split(":", 1)[1] if ":" in v else v
    v = v.split("@", 1)[0]
    if v.isascii() and v.isdigit():
        return int(v)
    name = v if v.startswith("SIG") else "SIG" + v
    try:
        return int(getattr(_signal.Signals, name))
    except AttributeError:
        raise ValueError(f"unknown signal {value!r}") from None


def signal_name(num: int) -> str:
    try:
        return _signal.Signals(num).name.removeprefix("SIG")
    except ValueError:
        return str(num)


def _user(env: Mapping[str, str]) -> str:
    user = env.get("SLURM_JOB_USER") or env.get("USER")
    if user:
        return user
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return str(os.getuid())


def resolve(
    env: Mapping[str, str] | None = None,
    *,
    checkpoint_dir: str | None = None,
    warn_seconds: float | None = None,
    max_self_requeues: int | None = None,
) -> JobSettings:
    """Settings for this job, from the arguments, ``env`` and node.conf."""
    env = os.environ if env is None else env
    try:
        conf = nodeconf.load(env.get("SLURM_POOL_NODE_CONF") or None, trusted=False, env=dict(env))
    except nodeconf.ConfigError:
        conf = nodeconf.NodeConfig()
    job_id = env.get("SLURM_JOB_ID") or None
    directory = checkpoint_dir or env.get("SLURM_POOL_CHECKPOINT_DIR") or env.get("SPANK_SLURM_POOL_CHECKPOINT_DIR")
    if not directory:
        if job_id:
            directory = os.path.join(conf.get("checkpoint_base_dir"), _user(env), job_id)
        else:
            directory = os.path.abspath("checkpoints")
    restart = env.get("SLURM_RESTART_COUNT", "0")
    return JobSettings(
        checkpoint_dir=os.path.abspath(directory),
        warn_signal=parse_signal(env.get("SLURM_POOL_CHECKPOINT_SIGNAL") or conf.get("checkpoint_signal")),
        warn_seconds=float(
            warn_seconds
            if warn_seconds is not None
            else env.get("SLURM_POOL_WARN_SECONDS") or conf.integer("warn_seconds")
        ),
        max_self_requeues=int(
            max_self_requeues
            if max_self_requeues is not None
            else env.get("SLURM_POOL_MAX_SELF_REQUEUES") or conf.integer("max_self_requeues")
        ),
        kill_wait=float(env.get("SLURM_POOL_KILL_WAIT") or conf.integer("kill_wait")),
        scontrol=env.get("SLURM_POOL_SCONTROL") or conf.get("scontrol"),
        job_id=job_id,
        restart_count=int(restart) if (restart.isascii() and restart.isdigit()) else 0,
    )
