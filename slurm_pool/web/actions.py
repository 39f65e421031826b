"""Slurm commands run AS the user who asked, with a token minted for that user for that one call.

Each action (submit, cancel, hold, release, requeue, change tier) runs Slurm's
own client command as the user (its uid, with ``SLURM_JWT`` set to a token of
about a minute for that user alone; sbatch without it, see
:meth:`UserCommands.run`), so Slurm decides what the user may do:
a bug in the service's own checks cannot let alice cancel bob's job.  Slurm's
refusal becomes the error the client sees (403 for a permission refusal, 409
for a job in the wrong state, 400 otherwise), never a 500.
"""

from __future__ import annotations

import os
import re
from typing import Callable, Mapping, Sequence

from slurm_pool import text
from slurm_pool.adapters.runner import Result, Runner, SubprocessRunner
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
#: What ``sbatch --parsable`` prints: the job id, then ``;cluster`` on a federation.
_PARSABLE = re.compile(r"([0-9]{1,20})(?:;[A-Za-z0-9_.-]+)?")
#: Each action's command, after which comes the job id.
COMMANDS: dict[str, tuple[str, ...]] = {
    "cancel": ("scancel",),
    "hold": ("scontrol", "hold"),
    "release": ("scontrol", "release"),
    "requeue": ("scontrol", "requeue"),
}
#: Actions whose command takes a range of array tasks (``scancel 4_[1-3]``).
RANGES = frozenset({"cancel"})


class ActionError(Exception):
    """Slurm (or the service) refused an action: an HTTP status and a message for the client."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


def default_runner(user: str, env: Mapping[str, str]) -> Runner:
    return SubprocessRunner(env=env, user=user, default_timeout=TIMEOUT)


class UserCommands:
    """Runs a Slurm command as a user, with a token minted for that user for that one call."""

    def __init__(
        self,
        key: bytes,
        env: Mapping[str, str] | None = None,
        runner_for: Callable[[str, Mapping[str, str]], Runner] | None = None,
        lifespan: int = LIFESPAN,
    ):
        self._key = key
        self.env = dict(env or {})
        self.runner_for = runner_for or default_runner
        self.lifespan = lifespan

    def run(self, user: str, argv: Sequence[str], input: str | None = None) -> Result:
        """``argv`` as ``user``; never raises for the command's failure (see :attr:`Result.ok`).

        ``sbatch`` gets no token: it copies its environment into the job, where the token would leak
        and, once expired, make the job's own Slurm commands fail (a checkpointing job's ``scontrol
        requeue``).  It runs as the user's uid, so Slurm's default authentication names the user.
        """
        text.check("login", user, "user")
        env = {k: v for k, v in self.env.items() if k != "SLURM_JWT"}
        if os.path.basename(argv[0]) != "sbatch":
            env["SLURM_JWT"] = identity.mint(self._key, user, lifespan=self.lifespan)
        return self.runner_for(user, env).run(list(argv), check=False, input=input, timeout=TIMEOUT)


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


def _failed(res: Result) -> bool:
    # scancel may print "error:" and still exit 0 on some releases.
    return not res.ok or (res.argv[:1] == ("scancel",) and "error:" in res.stderr)


def job_action(commands: UserCommands, user: str, job: JobId | int, action: str) -> str:
    """Run ``action`` (cancel, hold, release, requeue) on ``job`` as ``user``, in Slurm's notation (``scancel
    4_2`` cancels task 2 of array 4, never job 42); its output, or ActionError."""
    if action not in COMMANDS:
        raise ActionError(400, f"action: {action!r} is not one of {', '.join(COMMANDS)}")
    try:
        job = job if isinstance(job, JobId) else JobId.parse(job, "job_id")
    except JobIdError as exc:
        raise ActionError(400, str(exc)) from None
    if job.tasks and action not in RANGES:
        raise ActionError(400, f"job_id: {job}: a range of array tasks is not taken by {action}")
    res = commands.run(user, [*COMMANDS[action], str(job)])
    if _failed(res):
        raise refusal(res)
    return text.shown(res.stdout.strip())[:MAX_MESSAGE]


def update(commands: UserCommands, user: str, argv: Sequence[str]) -> str:
    """An ``scontrol update`` as ``user`` (a tier change); its output, or ActionError."""
    res = commands.run(user, argv)
    if _failed(res):
        raise refusal(res)
    return text.shown(res.stdout.strip())[:MAX_MESSAGE]


def submit(commands: UserCommands, user: str, options: Sequence[str], script: str) -> int:
    """``sbatch OPTIONS`` as ``user`` with the script on stdin; the new job's id, or ActionError."""
    if "--parsable" not in options:
        options = ["--parsable", *options]
    for o in options:
        if not o.startswith("--") or text.has_control(o):
            raise ActionError(400, f"refusing sbatch option {text.shown(o)!r}")
    res = commands.run(user, ["sbatch", *options], input=script)
    if not res.ok:
        raise refusal(res)
    lines = [ln for ln in res.stdout.strip().splitlines() if ln.strip()]
    m = _PARSABLE.fullmatch(lines[-1].strip()) if lines else None
    if m is None:
        raise ActionError(502, f"sbatch printed no job id: {text.shown(res.stdout.strip())[:200]!r}")
    return int(m.group(1))
