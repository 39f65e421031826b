"""Slurm commands run AS the user who asked, with a token minted for that user for that one call.

Each action (submit, cancel, hold, release, requeue, change tier) runs Slurm's
own client command (through :class:`~slurm_pool.adapters.slurm.SlurmClient`) as the
user (its uid, with ``SLURM_JWT`` set to a token of about a minute for that user
alone; a submission without it, see :meth:`UserCommands.slurm`), so Slurm decides what the user may do:
as root the command runs as the user's uid; a service that is not root runs it as its own uid with the
user's token (slurmctld takes the token's user), and a submission through the root helper ``slurm-pool-as``
(:mod:`slurm_pool.adapters.asuser`, see docs/security.md);
a bug in the service's own checks cannot let alice cancel bob's job.  Slurm's
refusal becomes the error the client sees (403 for a permission refusal, 409
for a job in the wrong state, 400 otherwise), never a 500.
"""

from __future__ import annotations

import os
import re
from typing import Callable, Mapping, Sequence

from slurm_pool import text
from slurm_pool.adapters.asuser import HelperRunner, default_helper
from slurm_pool.adapters.runner import Result, Runner, SubprocessRunner
from slurm_pool.adapters.slurm import SlurmClient
from slurm_pool.errors import ServiceError
from slurm_pool.jobid import JobId, JobIdError
from slurm_pool.web import identity

#: Seconds a token minted for one action lives.
LIFESPAN = 60
#: Seconds one action's command may take.
TIMEOUT = 60.0
#: Longest refusal text passed on.
MAX_MESSAGE = 1000
#: Slurm words for "this user may not do that".
_DENIED = re.compile(r"(?i).*(permission denied|access denied|access/permission denied|not authorized|"
                     r"user not found|invalid user id|only .* can ).*", re.S)  # fmt: skip
#: Slurm words for "not in this state".
_CONFLICT = re.compile(r"(?i).*(already|no longer pending|not pending|job is pending|has finished|completing|"
                       r"invalid job state|presently disabled|job not eligible|is not running).*", re.S)  # fmt: skip
#: The console's actions, and those that take a range of array tasks (Slurm's to say: the adapter's).
ACTIONS = tuple(SlurmClient.CONSOLE_ACTIONS)
RANGES = SlurmClient.RANGED_ACTIONS


class ActionError(ServiceError):
    """Slurm (or the service) refused an action: an HTTP status and a message for the client."""

    def __init__(self, status: int, message: str):
        super().__init__(status, message)


def default_runner(user: str, env: Mapping[str, str]) -> Runner:
    """As root: the command runs as ``user`` (their uid, groups and home)."""
    return SubprocessRunner(env=env, user=user, default_timeout=TIMEOUT)


def token_runner(user: str, env: Mapping[str, str]) -> Runner:
    """Not root, with a token: the command runs as the service's own uid; slurmctld takes the token's user."""
    return SubprocessRunner(env=env, default_timeout=TIMEOUT)


#: Which runner a command takes: ``root`` (the service's uid is 0) and ``token`` (the call carries one).
#: ``as-user``: :func:`default_runner`; ``token``: :func:`token_runner`; ``helper``: the root helper
#: (:class:`~slurm_pool.adapters.asuser.HelperRunner`, through sudo), for what Slurm takes from no token.
PATHS = {(True, True): "as-user", (True, False): "as-user", (False, True): "token", (False, False): "helper"}


class UserCommands:
    """Slurm's client commands as a user, with a token minted for that user for that one call."""

    def __init__(
        self,
        key: bytes,
        env: Mapping[str, str] | None = None,
        runner_for: Callable[[str, Mapping[str, str]], Runner] | None = None,
        lifespan: int = LIFESPAN,
        *,
        root: bool | None = None,
        helper: str | None = None,
    ):
        self._key = key
        self.env = dict(env or {})
        self.runner_for = runner_for
        self.lifespan = lifespan
        self.root = os.geteuid() == 0 if root is None else root
        self.helper = helper or default_helper()

    def path(self, token: bool) -> str:
        """The runner a command takes (one of :data:`PATHS`'s values): as root every command runs as the
        user; otherwise a command with a token runs as the service, one without through the helper."""
        return PATHS[(self.root, token)]

    def _runner(self, user: str, env: Mapping[str, str], token: bool) -> Runner:
        if self.runner_for is not None:
            return self.runner_for(user, env)
        path = self.path(token)
        if path == "as-user":
            return default_runner(user, env)
        if path == "token":
            return token_runner(user, env)
        return HelperRunner(user, self.helper, env, TIMEOUT)

    def slurm(self, user: str, *, token: bool = True) -> SlurmClient:
        """Slurm as ``user``: their uid and, with ``token``, ``SLURM_JWT`` minted for them for this one call.

        A submission gets no token: sbatch copies its environment into the job, where the token would leak
        and, once expired, make the job's own Slurm commands fail (a checkpointing job's requeue).  It runs
        as the user's uid, so Slurm's default authentication names the user.
        """
        text.check("login", user, "user")
        env = {k: v for k, v in self.env.items() if k != "SLURM_JWT"}
        if token:
            env["SLURM_JWT"] = identity.mint(self._key, user, lifespan=self.lifespan)
        return SlurmClient(self._runner(user, env, token))


def refusal(res: Result) -> ActionError:
    """The error a failed command becomes: Slurm's words (control characters shown), and a status."""
    said = (res.stderr or res.stdout or "").strip() or f"{res.argv[0]} exited {res.returncode}"
    message = text.shown_lines(said)[:MAX_MESSAGE]  # Slurm's lines stay lines (the page keeps them)
    if res.returncode in (126, 127):  # could not be run as the user at all
        return ActionError(503, f"{res.argv[0]} could not be run: {message}")
    if res.returncode == 124:
        return ActionError(504, message)
    if _DENIED.fullmatch(said):
        return ActionError(403, message)
    if _CONFLICT.fullmatch(said):
        return ActionError(409, message)
    return ActionError(400, message)


def _output(res: Result) -> str:
    if not res.ok:
        raise refusal(res)
    return text.shown(res.stdout.strip())[:MAX_MESSAGE]


def job_action(commands: UserCommands, user: str, job: JobId | int, action: str) -> str:
    """Run ``action`` (cancel, hold, release, requeue) on ``job`` as ``user``, in Slurm's notation (cancel
    ``4_2`` cancels task 2 of array 4, never job 42); its output, or ActionError."""
    if action not in ACTIONS:
        raise ActionError(400, f"action: {action!r} is not one of {', '.join(ACTIONS)}")
    try:
        job = job if isinstance(job, JobId) else JobId.parse(job, "job_id")
    except JobIdError as exc:
        raise ActionError(400, str(exc)) from None
    if job.tasks and action not in RANGES:
        raise ActionError(400, f"job_id: {job}: a range of array tasks is not taken by {action}")
    return _output(commands.slurm(user).console_action(action, str(job), timeout=TIMEOUT))


def move(commands: UserCommands, user: str, job: JobId, qos: str, partition: str | None) -> str:
    """Move ``job`` to QOS ``qos`` (and ``partition``) as ``user`` (a tier change); its output, or ActionError."""
    return _output(
        commands.slurm(user).update_job(str(job), qos=qos, partition=partition, check=False, timeout=TIMEOUT)
    )


def submit(commands: UserCommands, user: str, options: Sequence[str], script: str) -> int:
    """Submit ``script`` with sbatch ``options`` as ``user``; the new job's id, or ActionError."""
    for o in options:
        if not o.startswith("--") or text.has_control(o):
            raise ActionError(400, f"refusing sbatch option {text.shown(o)!r}")
    res = commands.slurm(user, token=False).submit_batch(options, script, timeout=TIMEOUT)
    if not res.ok:
        raise refusal(res)
    job_id = SlurmClient.submitted_id(res.stdout)
    if job_id is None:
        raise ActionError(502, f"sbatch printed no job id: {text.shown(res.stdout.strip())[:200]!r}")
    return job_id
