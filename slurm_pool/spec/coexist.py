"""The ``coexist`` section: the pool is part of a cluster the site already runs.

Without it, slurm-pool owns the cluster: it renders the whole slurm.conf, and
its job_submit.lua polices every job.  With it, slurm-pool owns only its own
node groups, partitions and projects:

* ``slurm-pool.conf`` holds the pool's nodes and partitions and nothing
  cluster-wide (a partition over ``ALL`` means all of the pool's nodes); the
  cluster-wide lines the pool needs go to ``site-settings.conf``, for the
  site's own slurm.conf (see :mod:`slurm_pool.render.required`);
* gres.conf comes as one fragment per node group (``gres-GROUP.conf``), for
  ``Include`` lines in the site's gres.conf; plugstack.conf as
  ``plugstack-slurm-pool.conf`` for an ``include`` line in the site's;
* job_submit.lua passes every job outside the pool untouched, and runs the
  site's own script (``job_submit.site_script``) before or after the pool's
  rules: Slurm loads one job_submit.lua, so the pool's chains the site's;
* prolog and epilog run from a glob (``Prolog=.../prolog.d/*``), Slurm's own
  form for several scripts since before 22.05 (slurm.conf(5), "Prolog");
  ``HealthCheckProgram`` names one program, so the pool's runs the site's
  (``health_check``) after its own checks;
* the site's partitions that hold pool nodes (``site_partitions``) get a
  ``DenyQos=`` line in ``site-settings.conf``; ``doctor`` checks every
  partition of the running cluster that holds a pool node.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Annotated, Iterator, Literal, Optional

from slurm_pool.errors import Issue
from slurm_pool.spec.base import PlainPath, Strict, word

if TYPE_CHECKING:
    from slurm_pool.spec.model import PoolSpec


#: A site partition's name as Slurm takes it (wider than the pool's own names: upper case, '.').
SitePartition = Annotated[str, word("partition")]


class SiteJobSubmit(Strict):
    """The site's own job_submit.lua, moved aside so the pool's can take its name."""

    #: Absolute path of the site's script; it defines ``slurm_job_submit`` and ``slurm_job_modify``.
    script: PlainPath
    #: ``before``: the site's rules see the job first (a rejection stands); ``after``: they see the routed job.
    order: Literal["before", "after"] = "before"


class Coexist(Strict):
    """The pool shares its cluster with the site's own partitions, nodes, accounts and job policy."""

    job_submit: Optional[SiteJobSubmit] = None
    #: Where the site keeps its prolog and epilog scripts (``Prolog=<prolog_dir>/*``); the pool's hook is one of them.
    prolog_dir: PlainPath = "/etc/slurm/prolog.d"
    epilog_dir: PlainPath = "/etc/slurm/epilog.d"
    #: The site's own HealthCheckProgram (LBNL NHC, say).  Slurm runs one: the pool's health check runs this
    #: one after its GPU checks (node.conf ``site_health_check``), and either failing fails the check.
    health_check: Optional[PlainPath] = None
    #: The site's own partitions that hold pool nodes: each gets a ``DenyQos=`` of every pool QOS in
    #: ``site-settings.conf`` (a pool QOS there would skip the pool's rules and preempt its jobs).
    site_partitions: list[SitePartition] = []


#: The file Slurm's job_submit/lua loads from slurm.conf's directory: the pool's script takes that name, so the
#: site's script moved aside must have another (src/plugins/job_submit/lua/job_submit_lua.c, "job_submit.lua").
POOL_JOB_SUBMIT = "job_submit.lua"
#: The pool's own node programs: a site program of one of these names would run the pool's (itself, for the
#: health check, which runs the site's).
POOL_PROGRAMS = ("slurm-pool", "slurm-pool-prolog", "slurm-pool-epilog", "slurm-pool-healthcheck")
#: Directories that hold more than a site's prolog or epilog scripts: ``Prolog=<dir>/*`` would run all of it
#: (slurm.conf and its keys from Slurm's configuration directories, every program of a bin directory, anyone's
#: files in a world-writable one).
SHARED_DIRS = (
    "/", "/bin", "/sbin", "/usr", "/usr/bin", "/usr/sbin", "/usr/local", "/usr/local/bin", "/usr/local/sbin",
    "/usr/lib", "/usr/libexec", "/usr/local/lib", "/lib", "/lib64", "/opt", "/etc", "/etc/slurm", "/etc/slurm-llnl",
    "/usr/local/etc", "/usr/local/etc/slurm", "/var", "/var/lib", "/var/spool", "/var/spool/slurmd",
    "/var/spool/slurmctld", "/var/spool/slurm", "/var/lib/slurm", "/var/lib/slurm-pool", "/var/lib/slurm-pool/state", "/etc/slurm-pool",
    "/usr/local/lib/slurm-pool", "/root", "/home", "/run",
    "/dev", "/proc", "/sys", "/tmp", "/var/tmp", "/dev/shm",
)  # fmt: skip


def normal_path(path: str) -> str:
    """``path`` as the kernel resolves it without links: repeated and trailing slashes dropped."""
    return re.sub("/+", "/", path).rstrip("/") or "/"


def within(path: str, directory: str) -> bool:
    """``path`` is ``directory`` or lies below it (both normalised)."""
    return path == directory or path.startswith(directory.rstrip("/") + "/")


def _basename(path: str) -> str:
    return path.rsplit("/", 1)[-1]


def _named(given: str, path: str) -> str:
    """A path as the spec gives it, and normalised where that differs."""
    return repr(given) if given == path else f"{given!r} ({path})"


def check_site_partitions(spec: PoolSpec) -> Iterator[Issue]:
    """``coexist.site_partitions``: each a site partition, listed once, never one of the pool's own."""
    c = spec.coexist
    if c is None:
        return
    pool = {p.name for p in spec.partitions}
    seen: set[str] = set()
    for i, name in enumerate(c.site_partitions):
        field = f"coexist.site_partitions[{i}]"
        if name in pool:
            yield Issue(field, f"{name!r} is one of the pool's partitions; list only the site's own partitions here")
        elif name in seen:
            yield Issue(field, f"{name!r} is listed twice")
        seen.add(name)


def check_coexist(spec: PoolSpec) -> Iterator[Issue]:
    """The coexist paths, normalised: the glob directories hold scripts only, apart from each other and from the
    site's script and health check; no site path is one of the pool's own files."""
    c = spec.coexist
    if c is None:
        return
    yield from check_site_partitions(spec)
    given: dict[str, str] = {}
    if spec.health.prolog:
        given["coexist.prolog_dir"] = c.prolog_dir
    if spec.health.epilog:
        given["coexist.epilog_dir"] = c.epilog_dir
    dirs = [(field, normal_path(v)) for field, v in given.items()]  # the glob directories slurm.conf names
    if c.job_submit is not None:
        given["coexist.job_submit.script"] = c.job_submit.script
    if c.health_check is not None:
        given["coexist.health_check"] = c.health_check
    files = [(field, normal_path(v)) for field, v in given.items() if not field.endswith("_dir")]
    for field, d in dirs:
        glob = f"{'Prolog' if 'prolog' in field else 'Epilog'}={d.rstrip('/')}/*"
        if d in SHARED_DIRS:
            yield Issue(
                field, f"{_named(given[field], d)} holds more than hook scripts: {glob} would run every file in it"
            )
    # The pool's own paths: jobs write checkpoints (a glob there runs users' files as root), and keys.
    own = [("checkpoint.base_dir", spec.checkpoint.base_dir)]
    if spec.console is not None:
        own.append(("console.jwt_key", spec.console.jwt_key))
    if spec.bridge is not None and spec.bridge.fence_kubeconfig:
        own.append(("bridge.fence_kubeconfig", spec.bridge.fence_kubeconfig))
    for field, d in dirs:
        for ofield, opath in own:
            o = normal_path(opath)
            if within(o, d) or within(d, o):
                yield Issue(
                    field,
                    f"{_named(given[field], d)} and {ofield} {opath!r} overlap: the hooks' glob would run the "
                    "pool's own files, or files jobs write, as root",
                )
    if len(dirs) == 2 and dirs[0][1] == dirs[1][1]:
        yield Issue(
            "coexist.epilog_dir",
            f"{_named(c.epilog_dir, dirs[1][1])} is also the prolog_dir: every script would run as both",
        )
    elif len(dirs) == 2:
        for (field, d), (other, od) in ((dirs[0], dirs[1]), (dirs[1], dirs[0])):
            if within(od, d):
                yield Issue(
                    other,
                    f"{_named(given[other], od)} lies inside {field.split('.')[-1]} {d!r}, whose glob would run it",
                )
    for field, path in files:
        name = _basename(path)
        for dfield, d in dirs:
            if within(path, d):
                yield Issue(
                    field,
                    f"{_named(given[field], path)} lies inside {dfield.split('.')[-1]} {d!r}: Slurm would run it as a hook",
                )
        if field.endswith("script") and name == POOL_JOB_SUBMIT:
            yield Issue(
                field,
                f"{_named(given[field], path)} is named {POOL_JOB_SUBMIT}, the name the pool's script takes in slurm.conf's directory: "
                "the pool's would chain itself; move the site's script to another name",
            )
        if name in POOL_PROGRAMS:
            yield Issue(
                field, f"{_named(given[field], path)} is the pool's own {name}: the pool's program would run itself"
            )
    if len(files) == 2 and files[0][1] == files[1][1]:
        yield Issue(files[1][0], f"{_named(given[files[1][0]], files[1][1])} is also the site's job_submit script")
