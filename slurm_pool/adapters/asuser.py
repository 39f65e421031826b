"""``slurm-pool-as``: the console's one step that needs root, a batch submission as a user.

``slurm-pool serve`` runs as its own system user.  Slurm takes the user of a
``SLURM_JWT`` token for scancel and scontrol hold/release/requeue/update, so
those run as the service's uid; a submission is refused unless the submitting
process *is* the user (22.05) and would carry the service's environment and
directory into the job (26.05), so it goes through this helper, run by sudo
with one fixed shape (``docs/security.md`` has the reasons and Slurm's lines)::

    slurm-pool-as USER sbatch --OPTION[=VALUE] ...      (the script on stdin)

It refuses root, SlurmUser and every user below ``UID_MIN`` (``/etc/login.defs``),
every command but sbatch, options that are not ``--NAME[=VALUE]``, root's own
options and control characters: exit 2 naming the field.  Then it runs sbatch
as the user (their uid, groups, home and a fresh environment: PATH from sudo,
``SLURM_CONF`` when it is a root-owned file nobody else may write), passing on
its output and exit status.  :class:`HelperRunner` is the service's side.
"""

from __future__ import annotations

import os
import pwd
import re
import stat
import sys
from dataclasses import dataclass
from typing import IO, Callable, Mapping, Sequence

from slurm_pool import text
from slurm_pool.adapters.runner import CommandError, Result, Runner, SubprocessRunner
from slurm_pool.errors import InputError

PROGRAM = "slurm-pool-as"
#: What the service puts before the helper: sudo, never asking for a password.
SUDO = ("sudo", "-n", "--")
#: The Slurm client commands the helper runs as a user: the console's submission only.
COMMANDS = frozenset({"sbatch"})
#: sbatch options only root may pass (``arg_set_uid``, ``arg_set_gid`` in src/common/slurm_opt.c;
#: ``--get-user-env`` runs ``su`` as root), and their abbreviations.  Run as the user sbatch refuses them too.
ROOT_ONLY = ("--uid", "--gid", "--get-user-env")
MAX_OPTIONS = 256
MAX_OPTION = 4096
#: Largest script read from stdin (the console's request bodies are smaller).
MAX_SCRIPT = 4 * 1024 * 1024
LOGIN_DEFS = "/etc/login.defs"
#: UID_MIN where login.defs does not say (Debian's and EL9's default).
DEFAULT_MIN_UID = 1000
#: Seconds sbatch may take.
TIMEOUT = 60.0
#: ``SlurmUser`` as ``scontrol show config`` prints it: ``slurm(64030)``.
_SLURM_USER = re.compile(r"[^()]*\(([0-9]{1,10})\)")
_OPTION = re.compile(r"--[A-Za-z0-9][A-Za-z0-9-]*(?:=.*)?", re.S)
USAGE = f"usage: {PROGRAM} USER sbatch [--OPTION[=VALUE] ...] < script"


class HelperError(InputError):
    """A request the helper refuses.  Exit status 2."""


@dataclass(frozen=True)
class Request:
    """A checked request: the user, their uid, and the command to run as them."""

    user: str
    uid: int
    argv: tuple[str, ...]


def min_uid(path: str = LOGIN_DEFS) -> int:
    """``UID_MIN`` of ``path`` (the first uid of an ordinary user), or :data:`DEFAULT_MIN_UID`."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                words = line.split()
                if len(words) >= 2 and words[0] == "UID_MIN" and re.fullmatch("[0-9]{1,10}", words[1]):
                    return max(1, int(words[1]))
    except OSError:
        pass
    return DEFAULT_MIN_UID


def slurm_user_id(config: Mapping[str, str]) -> int | None:
    """SlurmUser's uid from ``scontrol show config``'s settings (``SlurmUser = slurm(64030)``); None if absent."""
    m = _SLURM_USER.fullmatch(config.get("SlurmUser", "").strip())
    return int(m.group(1)) if m else None


def _refuse(field: str, value: str, why: str) -> HelperError:
    return HelperError(f"{PROGRAM}: {field}: '{text.shown(value)[:200]}' {why}")


def check_option(option: str) -> str:
    """``option`` when it is one the helper passes to sbatch; HelperError naming it otherwise."""
    if len(option) > MAX_OPTION:
        raise _refuse("option", option, f"is longer than {MAX_OPTION} characters")
    if text.has_control(option):
        raise _refuse("option", option, "has a control character")
    if not _OPTION.fullmatch(option):
        raise _refuse("option", option, "is not --NAME or --NAME=VALUE")
    name = option.split("=", 1)[0]
    if any(full.startswith(name) for full in ROOT_ONLY):  # getopt_long takes an abbreviation (--ui) as well
        raise _refuse("option", option, "is root's own; the job runs as its user")
    return option


def parse(
    args: Sequence[str],
    *,
    lookup: Callable[[str], pwd.struct_passwd] = pwd.getpwnam,
    lowest_uid: int = DEFAULT_MIN_UID,
    slurm_uid: int | None = None,
) -> Request:
    """The request ``args`` (``USER sbatch OPTIONS...``) make; HelperError naming the field it refuses."""
    if len(args) < 2:
        raise HelperError(USAGE)
    user, command, *options = args
    if text.has_control(user) or not text.matches("login", user):
        raise _refuse("user", user, "is not a user name")
    try:
        uid = lookup(user).pw_uid
    except KeyError:
        raise _refuse("user", user, "does not exist") from None
    if uid == 0:
        raise _refuse("user", user, "is root (uid 0)")
    if slurm_uid is not None and uid == slurm_uid:
        raise _refuse("user", user, f"is SlurmUser (uid {uid})")
    if uid < lowest_uid:
        raise _refuse("user", user, f"has uid {uid}, a system user's (UID_MIN is {lowest_uid})")
    if text.has_control(command) or command not in COMMANDS:
        raise _refuse("command", command, f"is not one the console runs as a user ({', '.join(sorted(COMMANDS))})")
    if len(options) > MAX_OPTIONS:
        raise HelperError(f"{PROGRAM}: options: {len(options)} given; at most {MAX_OPTIONS}")
    return Request(user, uid, (command, *(check_option(o) for o in options)))


def conf_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The environment sbatch gets from the helper: PATH (sudo's ``secure_path``) and, when set, a safe
    ``SLURM_CONF``: an absolute path to a regular file owned by root that only root may write."""
    env = {"PATH": environ.get("PATH") or os.defpath}
    conf = environ.get("SLURM_CONF")
    if conf is None:
        return env
    if text.has_control(conf) or not os.path.isabs(conf):
        raise _refuse("SLURM_CONF", conf, "is not an absolute path")
    try:
        st = os.stat(conf)
    except OSError:
        raise _refuse("SLURM_CONF", conf, "cannot be read") from None
    if not stat.S_ISREG(st.st_mode) or st.st_uid != 0 or st.st_mode & 0o022:
        raise _refuse("SLURM_CONF", conf, "is not a regular file owned by root that only root may write")
    env["SLURM_CONF"] = conf
    return env


def _slurm_uid(runner: Runner) -> int | None:
    from slurm_pool.adapters.slurm import SlurmClient

    try:
        return slurm_user_id(SlurmClient(runner).config())
    except CommandError:
        return None


def main(
    argv: Sequence[str] | None = None,
    *,
    stdin: IO[bytes] | None = None,
    stdout: IO[str] | None = None,
    stderr: IO[str] | None = None,
    environ: Mapping[str, str] | None = None,
    euid: Callable[[], int] = os.geteuid,
    runner_for: Callable[[str, Mapping[str, str]], Runner] | None = None,
    lookup: Callable[[str], pwd.struct_passwd] = pwd.getpwnam,
    slurm_uid: Callable[[Runner], int | None] = _slurm_uid,
) -> int:
    """Run ``slurm-pool-as``; its exit status (2 for a refused request, sbatch's own otherwise)."""
    args = sys.argv[1:] if argv is None else list(argv)
    out, err = stdout or sys.stdout, stderr or sys.stderr
    env_in = os.environ if environ is None else environ
    make = runner_for or (lambda user, env: SubprocessRunner(env=env, user=user, default_timeout=TIMEOUT))
    try:
        env = conf_env(env_in)
        request = parse(args, lookup=lookup, lowest_uid=min_uid())
        if euid() != 0:
            err.write(f"{PROGRAM}: must run as root (through sudo)\n")
            return 1
        admin = slurm_uid(SubprocessRunner(env=env, default_timeout=TIMEOUT))
        if admin is not None and request.uid == admin:
            raise _refuse("user", request.user, f"is SlurmUser (uid {admin})")
        data = (stdin or sys.stdin.buffer).read(MAX_SCRIPT + 1)
        if len(data) > MAX_SCRIPT:
            raise HelperError(f"{PROGRAM}: script: longer than {MAX_SCRIPT} bytes")
        try:
            script = data.decode("utf-8")
        except UnicodeDecodeError:
            raise HelperError(f"{PROGRAM}: script: is not UTF-8") from None
    except HelperError as exc:
        err.write(f"{exc}\n")
        return 2
    if environ is None:  # only what conf_env passed reaches sbatch (the runner reads this process's environment)
        for name in [k for k in os.environ if k not in ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ")]:
            del os.environ[name]
    res: Result = make(request.user, env).run(request.argv, check=False, input=script, timeout=TIMEOUT)
    out.write(res.stdout)
    err.write(res.stderr)
    return res.returncode


@dataclass
class HelperRunner:
    """The service's side: each command as ``sudo -n -- HELPER USER ARGV...``; results name ``ARGV``."""

    user: str
    helper: str
    env: Mapping[str, str] | None = None
    default_timeout: float = TIMEOUT

    def run(
        self,
        argv: Sequence[str],
        *,
        check: bool = True,
        input: str | None = None,
        timeout: float | None = None,
    ) -> Result:
        inner = SubprocessRunner(env=self.env, default_timeout=self.default_timeout)
        got = inner.run([*SUDO, self.helper, self.user, *argv], check=False, input=input, timeout=timeout)
        res = Result(tuple(argv), got.returncode, got.stdout, got.stderr)
        if check and not res.ok:
            raise CommandError(res)
        return res


def default_helper() -> str:
    """The helper installed beside the Python that runs the service (``/opt/slurm-pool/bin/slurm-pool-as``)."""
    return os.path.join(os.path.dirname(sys.executable), PROGRAM)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
