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
from slurm_pool.errors import InputError
from slurm_pool.jobid import JobIdError, own_id
from slurm_pool.text import matches, strict_float, strict_int


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
    """``USR1``, ``SIGUSR1``, ``10``, ``B:USR1@60`` -> the signal number (one a process can catch)."""
    if isinstance(value, int):
        num = value
    else:
        v = value.strip().upper()
        v = v.split(":", 1)[1] if ":" in v else v
        v = v.split("@", 1)[0]
        if v.isascii() and v.isdigit() and len(v) < 4:
            num = int(v)
        else:
            try:
                num = int(getattr(_signal.Signals, v if v.startswith("SIG") else "SIG" + v))
            except AttributeError:
                raise ValueError(f"unknown signal {value!r}") from None
    if num not in _signal.valid_signals() or num in (_signal.SIGKILL, _signal.SIGSTOP):
        raise ValueError(f"signal {value!r} cannot be caught")
    return num


def signal_name(num: int) -> str:
    try:
        return _signal.Signals(num).name.removeprefix("SIG")
    except ValueError:
        return str(num)


def _user(env: Mapping[str, str]) -> str:
    user = env.get("SLURM_JOB_USER") or env.get("USER")
    if user:
        if not matches("login", user) or user in (".", ".."):  # a directory name: no '/', '..', newline
            var = "SLURM_JOB_USER" if env.get("SLURM_JOB_USER") else "USER"
            raise InputError(f"{var} {user!r} is not a user name")
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
    """Settings for this job, from the arguments, ``env`` and node.conf.

    :class:`InputError` (a ValueError) names the variable when a value cannot be used.
    """
    env = os.environ if env is None else env
    try:
        conf = nodeconf.load(env.get("SLURM_POOL_NODE_CONF") or None, trusted=False, env=dict(env))
    except nodeconf.ConfigError:
        conf = nodeconf.NodeConfig()
    job_id = env.get("SLURM_JOB_ID") or None
    if job_id is not None:  # a path component and scontrol's JobId=
        try:
            own_id(job_id)
        except JobIdError as exc:
            raise InputError(str(exc)) from None
    directory = checkpoint_dir or env.get("SLURM_POOL_CHECKPOINT_DIR") or env.get("SPANK_SLURM_POOL_CHECKPOINT_DIR")
    if not directory:
        if job_id:
            directory = os.path.join(conf.get("checkpoint_base_dir"), _user(env), job_id)
        else:
            directory = os.path.abspath("checkpoints")
    restart = env.get("SLURM_RESTART_COUNT", "0")
    sig = env.get("SLURM_POOL_CHECKPOINT_SIGNAL")
    try:
        warn_signal = parse_signal(sig or conf.get("checkpoint_signal"))
    except ValueError as exc:
        raise InputError(f"SLURM_POOL_CHECKPOINT_SIGNAL: {exc}" if sig else str(exc)) from None
    return JobSettings(
        checkpoint_dir=os.path.abspath(directory),
        warn_signal=warn_signal,
        warn_seconds=_number(env, "SLURM_POOL_WARN_SECONDS", warn_seconds, conf, "warn_seconds"),
        max_self_requeues=int(
            _number(env, "SLURM_POOL_MAX_SELF_REQUEUES", max_self_requeues, conf, "max_self_requeues")
        ),
        kill_wait=_number(env, "SLURM_POOL_KILL_WAIT", None, conf, "kill_wait"),
        scontrol=env.get("SLURM_POOL_SCONTROL") or conf.get("scontrol"),
        job_id=job_id,
        restart_count=int(restart) if (restart.isascii() and restart.isdigit() and len(restart) < 10) else 0,
    )


def _number(env: Mapping[str, str], var: str, given: float | None, conf: nodeconf.NodeConfig, key: str) -> float:
    """The option ``given``, else ``$var``, else node.conf's ``key``: finite, at least 0, ASCII digits."""
    if given is not None:
        return float(given)
    raw = env.get(var)
    if not raw:
        return float(conf.integer(key))
    whole = key == "max_self_requeues"
    try:
        value = float(strict_int(raw, var) if whole else strict_float(raw, var))
    except ValueError as exc:
        raise InputError(str(exc)) from None
    if not 0 <= value <= 10**9:
        raise InputError(f"{var}: {raw!r} is not between 0 and 1000000000")
    return value
