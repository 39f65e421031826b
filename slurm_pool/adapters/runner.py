"""The one seam for external commands.

Every call to ``scontrol``, ``sacctmgr``, ``sinfo``, ``nvidia-smi`` and friends
goes through a :class:`Runner`.  Production code uses :class:`SubprocessRunner`;
unit tests use :class:`RecordingRunner`, which records each call, replays
canned results and can inject failures.  Both can also ``stream`` a command's
output (a binary file read as the command prints it) for outputs too large to
hold whole, such as a site's ``sacct --json`` history.

What a command prints is text through one decoder
(:mod:`slurm_pool.adapters.decode`, re-exported here), :func:`decode_output`: UTF-8,
and each byte that is not part of UTF-8 (a job name a user chose, ``sbatch -J
$'\\xff'``) as the four characters ``\\xNN`` -- never a traceback, never a read
that stops.  JSON readers get the same values: :func:`json_text` and
:class:`EscapedJSON` turn those escapes into JSON's (``\\\\xNN``), so a name
reads ``\\xff`` from text, JSON and a stream alike.
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import threading
from dataclasses import dataclass, field
from typing import IO, Any, Callable, Iterator, Mapping, Protocol, Sequence

from slurm_pool.adapters.decode import EscapedJSON as EscapedJSON  # the one decoder, where commands run
from slurm_pool.adapters.decode import decode_output as decode_output
from slurm_pool.adapters.decode import json_text as json_text
from slurm_pool.errors import PoolError


@dataclass(frozen=True)
class Result:
    """What a finished command returned."""

    argv: tuple[str, ...]
    returncode: int
    stdout: str = ""
    stderr: str = ""

    @property
    def ok(self) -> bool:
        return self.returncode == 0


class CommandError(PoolError, RuntimeError):
    """A command exited non-zero where success was required."""

    def __init__(self, result: Result):
        self.result = result
        detail = (result.stderr or result.stdout).strip()
        super().__init__(f"{' '.join(result.argv)} exited {result.returncode}: {detail}")


class Runner(Protocol):
    """Runs one external command; never through a shell."""

    def run(
        self,
        argv: Sequence[str],
        *,
        check: bool = True,
        input: str | None = None,
        timeout: float | None = None,
    ) -> Result: ...


#: What of the service's environment a command run as another user keeps (besides ``SLURM_*``).
USER_ENV_KEEP = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ")


def user_environment(user: str, base: Mapping[str, str]) -> tuple[dict[str, str], int, int, list[int], str]:
    """The environment, uid, gid, groups and home directory for running a command as ``user``.

    Only :data:`USER_ENV_KEEP` and ``SLURM_*`` (Slurm's configuration, such as ``SLURM_CONF``) pass from
    ``base``, so nothing else of the service's environment reaches the user's commands (sbatch
    exports its environment into the job).
    """
    import pwd

    pw = pwd.getpwnam(user)  # KeyError when there is no such user
    env = {k: v for k, v in base.items() if k in USER_ENV_KEEP or (k.startswith("SLURM_") and k != "SLURM_JWT")}
    env.update(HOME=pw.pw_dir, USER=pw.pw_name, LOGNAME=pw.pw_name, SHELL=pw.pw_shell or "/bin/sh")
    return env, pw.pw_uid, pw.pw_gid, os.getgrouplist(pw.pw_name, pw.pw_gid), pw.pw_dir


#: Environment variables Slurm's commands read as filters, formats or job options, cleared before each
#: command (a ``SQUEUE_PARTITION`` in a service's environment would make it see part of the cluster).
#: Source: the ENVIRONMENT sections of 26.05.3's doc/man/man1/{squeue,sinfo,sacct,sacctmgr,scontrol,scancel,
#: sprio,sshare,sreport,sdiag,sbatch,salloc,srun}.1 and the getenv() calls of src/squeue/opts.c,
#: src/sinfo/opts.c, src/sacct/options.c, src/scontrol/scontrol.c, src/scancel/opt.c, src/sprio/opts.c,
#: src/sreport/sreport.c.  SLURM_CONF (which cluster) and SLURM_DEBUG_FLAGS (diagnostics) stay.
SLURM_FILTER_PREFIXES = (
    "SQUEUE_",  # SQUEUE_PARTITION, _STATES, _USERS, _ACCOUNT, _QOS, _NAMES, _FORMAT, _FORMAT2, _SORT, _ALL, ...
    "SINFO_",  # SINFO_PARTITION, _FORMAT, _SORT, _ALL, _FEDERATION, _LOCAL
    "SACCT_",  # SACCT_FEDERATION, _FORMAT, _LOCAL
    "SACCTMGR_",
    "SCONTROL_",  # SCONTROL_ALL, _FEDERATION, _FUTURE, _LOCAL, _SIBLING
    "SCANCEL_",  # SCANCEL_USER, _PARTITION, _STATE, _NAME, _ACCOUNT, _QOS, ... (what scancel cancels)
    "SPRIO_",
    "SSHARE_",
    "SREPORT_",
)
#: Option defaults of the commands that submit jobs (kept by a runner for a user's own submissions).
SLURM_JOB_DEFAULT_PREFIXES = ("SBATCH_", "SALLOC_", "SRUN_")
SLURM_FILTER_NAMES = frozenset(
    {
        "SLURM_TIME_FORMAT",  # how times print (relative, strftime)
        "SLURM_BITSTR_LEN",  # how long an array's task list prints
        "SLURM_TOPO_LEN",
        "SLURM_CLUSTERS",  # --clusters: another cluster than SLURM_CONF's
        "SLURM_JSON",  # --json's layout
        "SLURM_YAML",
    }
)


def slurm_clean(env: Mapping[str, str], keep_job_defaults: bool = False) -> dict[str, str]:
    """``env`` without what Slurm's commands read as filters or formats (:data:`SLURM_FILTER_PREFIXES`,
    :data:`SLURM_FILTER_NAMES`) and, unless ``keep_job_defaults``, their job option defaults."""
    prefixes = SLURM_FILTER_PREFIXES + (() if keep_job_defaults else SLURM_JOB_DEFAULT_PREFIXES)
    return {k: v for k, v in env.items() if k not in SLURM_FILTER_NAMES and not k.startswith(prefixes)}


@dataclass
class SubprocessRunner:
    """Runs commands for real.  ``env`` is merged over the current environment.

    With ``user``, each command runs as that user (its uid, gid and groups, in its home directory) with
    only a small part of the current environment (:func:`user_environment`), ``env`` merged over it.
    What Slurm's commands read as filters and formats is never passed on (:func:`slurm_clean`), nor
    sbatch's, salloc's and srun's option defaults unless ``keep_job_defaults`` (a user's own submission);
    ``env`` is merged last, so what a caller sets itself stays.
    """

    env: Mapping[str, str] | None = None
    default_timeout: float = 120.0
    user: str | None = None
    keep_job_defaults: bool = False

    def _context(self) -> dict[str, Any]:
        """The environment, user and directory a command runs with (``subprocess`` keywords)."""
        env = slurm_clean(os.environ, self.keep_job_defaults)
        uid = gid = None
        groups: list[int] | None = None
        cwd: str | None = None
        if self.user is not None:
            env, uid, gid, groups, home = user_environment(self.user, env)
            cwd = home if os.path.isdir(home) else "/"
        if self.env:
            env.update(self.env)
        return {"env": env, "user": uid, "group": gid, "extra_groups": groups, "cwd": cwd}

    def run(
        self,
        argv: Sequence[str],
        *,
        check: bool = True,
        input: str | None = None,
        timeout: float | None = None,
    ) -> Result:
        try:
            proc = subprocess.run(
                list(argv),
                input=None if input is None else input.encode("utf-8"),
                capture_output=True,
                timeout=timeout or self.default_timeout,
                **self._context(),
            )
            res = Result(tuple(argv), proc.returncode, decode_output(proc.stdout), decode_output(proc.stderr))
        except FileNotFoundError as exc:
            res = Result(tuple(argv), 127, "", str(exc))
        except PermissionError as exc:  # not allowed to switch to ``user``, or not executable
            res = Result(tuple(argv), 126, "", str(exc))
        except subprocess.TimeoutExpired:
            res = Result(tuple(argv), 124, "", f"timed out after {timeout or self.default_timeout}s")
        if check and not res.ok:
            raise CommandError(res)
        return res

    @contextlib.contextmanager
    def stream(self, argv: Sequence[str], *, timeout: float | None = None) -> Iterator[IO[bytes]]:
        """The command's standard output as a binary file, read while it runs (killed past ``timeout``).

        A command that fails (or times out) is a :class:`CommandError` when the block ends, also when
        reading its output failed first (what it printed was cut short by the failure).
        """
        import tempfile  # not at import: the node hooks run commands, never stream them

        limit = timeout or self.default_timeout
        args = tuple(argv)
        with tempfile.TemporaryFile() as err:
            try:
                proc = subprocess.Popen(list(argv), stdout=subprocess.PIPE, stderr=err, **self._context())
            except FileNotFoundError as exc:
                raise CommandError(Result(args, 127, "", str(exc))) from None
            except PermissionError as exc:
                raise CommandError(Result(args, 126, "", str(exc))) from None
            late = threading.Event()

            def expire() -> None:
                late.set()
                proc.kill()

            timer = threading.Timer(limit, expire)
            timer.start()
            assert proc.stdout is not None
            try:
                try:
                    yield proc.stdout
                finally:
                    proc.stdout.close()  # a command still printing stops (SIGPIPE) when the reader gave up
                    rc = proc.wait()
                    timer.cancel()
            except Exception:
                if late.is_set() or rc > 0:
                    raise CommandError(_failed(args, rc, late.is_set(), limit, err)) from None
                raise
            if late.is_set() or rc != 0:
                raise CommandError(_failed(args, rc, late.is_set(), limit, err))


def _failed(args: tuple[str, ...], rc: int, late: bool, limit: float, err: IO[bytes]) -> Result:
    """The result of a streamed command that failed: its exit status and what it wrote to stderr."""
    if late:
        return Result(args, 124, "", f"timed out after {limit}s")
    err.seek(0)
    return Result(args, rc, "", decode_output(err.read(64 * 1024)))


def stream_output(runner: Runner, argv: Sequence[str], timeout: float | None = None) -> Any:
    """A context manager giving the binary output of ``argv``: streamed where ``runner`` can, else read whole."""
    stream = getattr(runner, "stream", None)
    if stream is not None:
        return stream(argv, timeout=timeout)
    return contextlib.nullcontext(io.BytesIO(runner.run(list(argv), timeout=timeout).stdout.encode()))


def _text(out: str | bytes) -> str:
    return decode_output(out) if isinstance(out, bytes) else out


Responder = Callable[[tuple[str, ...], str | None], Result | None]


@dataclass
class RecordingRunner:
    """A fake runner for unit tests: records calls and answers from rules.

    Rules are tried newest first; each maps an argv prefix to a canned
    :class:`Result` or a responder callable.  Unmatched commands succeed with
    empty output, so tests can assert on what *would* have run.
    """

    calls: list[tuple[str, ...]] = field(default_factory=list)
    inputs: list[str | None] = field(default_factory=list)
    rules: list[tuple[tuple[str, ...], Responder]] = field(default_factory=list)

    def on(
        self, prefix: Sequence[str], stdout: str | bytes = "", returncode: int = 0, stderr: str | bytes = ""
    ) -> None:
        """Answer commands starting with ``prefix`` with a fixed result (bytes through :func:`decode_output`)."""
        fixed = (returncode, _text(stdout), _text(stderr))
        self.rules.insert(0, (tuple(prefix), lambda argv, _in: Result(argv, *fixed)))

    def respond(self, prefix: Sequence[str], fn: Responder) -> None:
        """Answer commands starting with ``prefix`` by calling ``fn(argv, input)``."""
        self.rules.insert(0, (tuple(prefix), fn))

    def fail(self, prefix: Sequence[str], returncode: int = 1, stderr: str = "injected failure") -> None:
        """Make commands starting with ``prefix`` fail (fault injection)."""
        self.on(prefix, "", returncode, stderr)

    def run(
        self,
        argv: Sequence[str],
        *,
        check: bool = True,
        input: str | None = None,
        timeout: float | None = None,
    ) -> Result:
        args = tuple(argv)
        self.calls.append(args)
        self.inputs.append(input)
        res: Result | None = None
        for prefix, fn in self.rules:
            if args[: len(prefix)] == prefix:
                res = fn(args, input)
                if res is not None:
                    break
        if res is None:
            res = Result(args, 0, "", "")
        if check and not res.ok:
            raise CommandError(res)
        return res

    @contextlib.contextmanager
    def stream(self, argv: Sequence[str], *, timeout: float | None = None) -> Iterator[IO[bytes]]:
        """:meth:`run`'s canned stdout as a binary file (recorded, and failing, like :meth:`run`)."""
        yield io.BytesIO(self.run(argv, timeout=timeout).stdout.encode())

    def commands(self, program: str) -> list[tuple[str, ...]]:
        """The recorded calls of one program."""
        return [c for c in self.calls if c and os.path.basename(c[0]) == program]
