"""The ``/bin/sh`` wrappers slurmd runs as the pool's Prolog, Epilog and HealthCheckProgram on a shared cluster.

On a cluster the pool shares with a site (``coexist``), the pool's hooks fail
no worse than Slurm alone.  Whose job it is, is decided here, by ``case``
before any Python runs, so that a broken or missing Python environment (a
half-done upgrade) cannot fail the site's jobs:

* a job in a pool partition (``SLURM_JOB_PARTITION``), or of a pool account
  (``SLURM_JOB_ACCOUNT``), or one whose partition or account slurmd did not
  give, is the pool's: its hook is ``exec``'d as on a cluster the pool owns,
  and fails closed as ever;
* any other job's prolog and epilog run the pool's hook too, but always exit 0:
  a failure is logged (stderr, syslog, ``<state_dir>/<node>/hooks.log``).

slurmd sets both variables for Prolog and Epilog in 22.05 and 26.05
(``_build_env`` in src/plugins/prep/script/prep_script_slurmd.c: the
partition from the job or its credential, the account from the credential).
22.05 sets no ``SLURM_JOB_QOS``, so the pool's QOS do not count here.

The health check runs per node, not per job: its verdict (healthy, or the GPUs
or the site's chained check failed) stands; when the pool's program cannot give
one (no interpreter, an ImportError, a crash), the site's own health check
(``coexist.health_check``) runs instead and its status is the wrapper's.

Every value put into a wrapper is validated or quoted here (stdlib and :mod:`slurm_pool.text` only: the
hooks import :data:`BROKEN` from here): names must be pool
names (no shell or glob characters), paths are single-quoted.
"""

from __future__ import annotations

from typing import Sequence

from slurm_pool.text import check, check_path

#: The hooks' exit status when they could not do their work (an unsafe node.conf, an internal error, or, from
#: the wrapper's own code, the package cannot be imported): not a verdict on the node.  sysexits.h's EX_SOFTWARE.
BROKEN = 70
#: What the wrapped health check exits with for "unhealthy" (its own 1), so that an interpreter that fails to
#: start (status 1) is not read as a verdict.
UNHEALTHY = 3
#: slurmd gives its hooks a minimal environment (the health check none at all): the few programs the
#: wrapper runs on its failure path are looked up here.
SAFE_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
LOG_FILE = "hooks.log"


def _say(log: str, state_dir: str) -> str:
    """``say MESSAGE``: one line to stderr and syslog (as node.conf's ``log`` says), and to the pool's own log,
    ``<state_dir>/<node>/hooks.log``, if that node directory is there and writable."""
    if log not in ("syslog", "stderr", "none"):
        raise ValueError(f"log: {log!r} is not syslog, stderr or none")
    state = q(check_path(state_dir, "state_dir"))
    lines = ["say() {"]
    if log != "none":
        lines.append("  printf 'slurm-pool %s\\n' \"$1\" >&2")
    if log == "syslog":
        lines.append(f'  PATH={SAFE_PATH} logger -t slurm-pool -p daemon.err -- "$1" 2>/dev/null')
    lines += [
        "  node=${SLURMD_NODENAME-}",
        "  case $node in ''|[!A-Za-z0-9]*|*[!A-Za-z0-9._-]*) return 0 ;; esac",
        f'  [ -d {state}/"$node" ] && [ -w {state}/"$node" ] || return 0',
        f'  {{ printf \'%s %s\\n\' "$(PATH={SAFE_PATH} date -u +%Y-%m-%dT%H:%M:%SZ)" "$1" '
        f'>>{state}/"$node"/{LOG_FILE}; }} 2>/dev/null',
        "  return 0",
        "}",
    ]
    return "\n".join(lines) + "\n"


def python_code(paths: Sequence[str] | None, kind: str) -> tuple[str, str]:
    """``(interpreter flags, -c code)``: the hooks' entry point; an import failure exits :data:`BROKEN`, the health
    check's "unhealthy" exits :data:`UNHEALTHY`."""
    lines = ["import sys"]
    if paths:
        lines.append(f"sys.path[:0] = {list(paths)!r}")
    lines += [
        "try:",
        "    from slurm_pool.node.__main__ import main",
        "except BaseException as exc:",
        '    sys.stderr.write(f"slurm-pool: the node hooks cannot be loaded: {exc!r}\\n")',
        f"    sys.exit({BROKEN})",
        "rc = main()",
        f"sys.exit({UNHEALTHY} if rc == 1 else rc)" if kind == "healthcheck" else "sys.exit(rc)",
    ]
    return ("-I -S" if paths else "-I"), "\n".join(lines)


def q(value: str) -> str:
    """``value`` single-quoted for ``/bin/sh`` (shlex is imported here: the hooks themselves never need it)."""
    import shlex

    return shlex.quote(value)


def _names(values: Sequence[str], what: str) -> str:
    """A ``case`` pattern list: the empty string (slurmd did not say) and every name."""
    return "|".join(["''", *(check("name", v, what) for v in values)])


def _header(
    kind: str, python: str, config_path: str, paths: Sequence[str] | None, log: str, state_dir: str
) -> tuple[str, str]:
    """The wrapper's first lines (its settings and ``say``), and the command that runs the pool's hook."""
    flags, code = python_code(paths, kind)
    return (
        "#!/bin/sh\n"
        f"# slurm-pool {kind} on a cluster shared with the site (generated from node.conf; do not edit).\n"
        f"py={q(check_path(python, 'python'))}\n"
        f"conf={q(check_path(config_path, 'config'))}\n"
        f"code={q(code)}\n" + _say(log, state_dir)
    ), f'"$py" {flags} -c "$code" {kind} --config "$conf"'


def job_hook(
    kind: str,
    python: str,
    config_path: str,
    paths: Sequence[str] | None,
    *,
    partitions: Sequence[str],
    accounts: Sequence[str],
    state_dir: str,
    log: str = "syslog",
) -> str:
    """The prolog or epilog wrapper: the pool's jobs fail closed, every other job's hook exits 0."""
    if kind not in ("prolog", "epilog"):
        raise ValueError(f"unknown job hook {kind!r}")
    head, run = _header(kind, python, config_path, paths, log, state_dir)
    parts, accts = _names(partitions, "pool_partitions"), _names(accounts, "pool_accounts")
    return head + (
        "# The pool's jobs, and jobs slurmd names no partition or account for: as on a cluster the pool owns.\n"
        f"case ${{SLURM_JOB_PARTITION-}} in {parts}) exec {run} ;; esac\n"
        f"case ${{SLURM_JOB_ACCOUNT-}} in {accts}) exec {run} ;; esac\n"
        "# A site job: the pool's hook must not fail it (Slurm alone would run it).\n"
        f"{run}\n"
        "rc=$?\n"
        '[ "$rc" = 0 ] && exit 0\n'
        "job=${SLURM_JOB_ID-}; case $job in ''|*[!0-9]*) job='?' ;; esac\n"
        "part=${SLURM_JOB_PARTITION-}; case $part in *[!A-Za-z0-9._-]*) part='?' ;; esac\n"
        "acct=${SLURM_JOB_ACCOUNT-}; case $acct in *[!A-Za-z0-9._-]*) acct='?' ;; esac\n"
        f"say \"{kind}: the pool's {kind} exited $rc under job $job of the site (partition $part, account $acct); "
        'the job is not failed for it"\n'
        "exit 0\n"
    )


def health_hook(
    python: str,
    config_path: str,
    paths: Sequence[str] | None,
    *,
    site_check: str,
    trusted_dirs: Sequence[str],
    state_dir: str,
    log: str = "syslog",
) -> str:
    """The health check wrapper: the pool's verdict stands; without one, the site's own check decides.

    ``trusted_dirs``: the directories on the way to ``site_check``; each, and the program, must be root's alone
    (as :func:`slurm_pool.node.hooks` checks before it runs the program), which one ``find`` verifies.
    """
    head, run = _header("healthcheck", python, config_path, paths, log, state_dir)
    site = q(check_path(site_check, "site_health_check")) if site_check else "''"
    out = head + (
        f"site={site}\n"
        f"{run}\n"
        "rc=$?\n"
        "# The pool's check ran: healthy, or the GPUs or the site's check (which it runs) failed.\n"
        f"case $rc in 0) exit 0 ;; {UNHEALTHY}) exit 1 ;; esac\n"
    )
    if not site_check:
        return out + (
            "say \"healthcheck: the pool's health check could not run (exit $rc) and there is no site health check "
            "(coexist.health_check): the node is left as it is; repair the pool's Python environment\"\n"
            "exit 0\n"
        )
    where = " ".join(q(check_path(d, "site_health_check")) for d in [*trusted_dirs, site_check])
    return out + (
        "say \"healthcheck: the pool's health check could not run (exit $rc); the site's $site decides; "
        "repair the pool's Python environment\"\n"
        "# Root's alone all the way: no link, no other owner, no group or other write (a sticky directory may).\n"
        f"bad=$(PATH={SAFE_PATH} find {where} -maxdepth 0 \\( -type l -o ! -user 0 -o "
        "\\( -perm -0020 ! -perm -1000 \\) -o \\( -perm -0002 ! -perm -1000 \\) \\) -print 2>&1)\n"
        'if [ -n "$bad" ] || [ ! -f "$site" ] || [ ! -x "$site" ]; then\n'
        '  say "healthcheck: site health check $site refused: not a root-owned executable only root may change"\n'
        "  exit 1\n"
        "fi\n"
        'exec "$site"\n'
    )


def ancestors(path: str) -> list[str]:
    """``/a/b/c`` -> ``["/", "/a", "/a/b"]``."""
    parts = [p for p in path.split("/") if p][:-1]
    return ["/"] + ["/" + "/".join(parts[: i + 1]) for i in range(len(parts))]
