"""Build a Slurm release from a source tarball into a cache, for the local cluster.

Debian 12 ships Slurm 22.05; sites run up to 26.05.  ``slurm-pool cluster up
--slurm 26.05`` runs the local cluster on a Slurm built here from SchedMD's
source: the tarball's sha256 is checked first (against ``<tarball>.sha256``
or ``--sha256``), then ``configure && make && make install`` into
``$SLURM_POOL_SLURM_CACHE/slurm-<version>-<hash>/``, where the hash covers the
tarball's sha256 and the configure flags.  The default cache is
``/var/cache/slurm-pool`` for root and ``~/.cache/slurm-pool`` otherwise: jobs
run Slurm's commands (``scontrol requeue``, ``srun``) as their users, who must
be able to execute the build, and root's home is private.  A build records ``build.json`` last, so an interrupted
one is started again from scratch; a lock lets concurrent callers share one
build.  Slurm bakes its prefix into its binaries (plugin and config paths), so
the build is made in place rather than moved there.

    python3 -m slurm_pool.localcluster.slurmbuild build [--source TARBALL]
    python3 -m slurm_pool.localcluster.slurmbuild prefix 26.05

A *variant* adds configure flags and is cached beside the plain build (its
own hash); ``--slurm 26.05`` never picks one, ``--slurm 26.05-nolua`` does:

* ``nolua`` -- Slurm as SchedMD's ``slurm.spec`` builds it by default on a
  host without Lua's headers: no ``job_submit/lua`` (``--without-lua``, see
  ``auxdir/x_ac_lua.m4``) and no slurmrestd (``%bcond_with slurmrestd``
  passes ``--disable-slurmrestd``).  ``doctor``'s test runs on it.

    python3 -m slurm_pool.localcluster.slurmbuild build --variant nolua
    python3 -m slurm_pool.localcluster.slurmbuild prefix 26.05-nolua
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from slurm_pool.errors import PoolError
from slurm_pool.wellknown import BUILD_STAMP

#: ``--enable-multiple-slurmd`` lets one host run several ``slurmd -N NODE``.
CONFIGURE_FLAGS: tuple[str, ...] = ("--enable-multiple-slurmd", "--disable-debug")
#: Extra configure flags of each variant (see the module docstring).
VARIANTS: dict[str, tuple[str, ...]] = {"nolua": ("--without-lua", "--disable-slurmrestd")}
#: Debian packages the build needs (configure then finds MySQL, json-c for
#: ``--json``, yaml, Lua for job_submit/lua, http-parser and jwt).
BUILD_PACKAGES: tuple[str, ...] = (
    "build-essential",
    "pkg-config",
    "libmunge-dev",
    "libmariadb-dev",
    "libjson-c-dev",
    "libyaml-dev",
    "liblua5.1-0-dev",
    "libhttp-parser-dev",
    "libjwt-dev",
)
#: The programs a usable build must have.
PROGRAMS: tuple[str, ...] = (
    "sbin/slurmctld",
    "sbin/slurmd",
    "sbin/slurmdbd",
    "sbin/slurmstepd",
    "bin/sbatch",
    "bin/squeue",
    "bin/sinfo",
    "bin/scontrol",
    "bin/sacct",
    "bin/sacctmgr",
    "bin/srun",
)
_TARBALL_RE = re.compile(r"slurm-([0-9]+\.[0-9]+\.[0-9]+(?:-[0-9]+)?)\.tar\.(?:gz|bz2|xz)")
_SHA_RE = re.compile(r"[0-9a-f]{64}")
_WANTED_RE = re.compile(r"([0-9]+\.[0-9]+(?:\.[0-9]+)?)(?:-([a-z]+))?")


class BuildError(PoolError, RuntimeError):
    """The Slurm source could not be checked, built or found."""


def cache_root() -> Path:
    """``$SLURM_POOL_SLURM_CACHE``, else ``/var/cache/slurm-pool`` (root) or ``~/.cache/slurm-pool``."""
    env = os.environ.get("SLURM_POOL_SLURM_CACHE")
    if env:
        return Path(env).expanduser()
    return Path("/var/cache/slurm-pool") if os.geteuid() == 0 else Path.home() / ".cache" / "slurm-pool"


def default_source() -> Path | None:
    """The newest ``slurm-*.tar.*`` in ``$SLURM_POOL_SLURM_SOURCE`` or the checkout's ``../shared/slurm``."""
    env = os.environ.get("SLURM_POOL_SLURM_SOURCE")
    if env:
        return Path(env)
    shared = Path(__file__).resolve().parents[3] / "shared" / "slurm"
    found = sorted(
        (p for p in shared.glob("slurm-*.tar.*") if _TARBALL_RE.fullmatch(p.name)),
        key=lambda p: version_key(tarball_version(p)),
    )
    return found[-1] if found else None


def variant_flags(variant: str = "") -> tuple[str, ...]:
    """The configure flags of a variant (``""``: the plain build)."""
    if variant and variant not in VARIANTS:
        raise BuildError(f"--variant: {variant!r} is not one of {', '.join(sorted(VARIANTS))}")
    return CONFIGURE_FLAGS + VARIANTS.get(variant, ())


def tarball_version(path: Path) -> str:
    """``26.05.3`` from ``slurm-26.05.3.tar.gz``."""
    m = _TARBALL_RE.fullmatch(path.name)
    if not m:
        raise BuildError(f"--source: {path.name!r} is not named like slurm-26.05.3.tar.gz")
    return m.group(1)


def version_key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.split(r"[.-]", version) if (p.isascii() and p.isdigit()))


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def expected_sha256(tarball: Path, given: str | None = None) -> str:
    """The sha256 to check: ``given``, else the first field of ``<tarball>.sha256``."""
    if given is None:
        side = tarball.with_name(tarball.name + ".sha256")
        try:
            given = side.read_text().split()[0]
        except (OSError, IndexError):
            raise BuildError(f"no checksum for {tarball.name}: give --sha256 or put it in {side.name}") from None
    if not _SHA_RE.fullmatch(given.lower()):
        raise BuildError(f"--sha256: {given!r} is not a sha256 (64 hex digits)")
    return given.lower()


@dataclass(frozen=True)
class SlurmBuild:
    """One cached Slurm build: its source, flags and install prefix."""

    tarball: Path
    sha256: str
    version: str
    flags: tuple[str, ...]
    prefix: Path

    @classmethod
    def for_source(
        cls, tarball: Path, sha256: str | None = None, flags: tuple[str, ...] = CONFIGURE_FLAGS
    ) -> "SlurmBuild":
        version = tarball_version(tarball)
        sha = expected_sha256(tarball, sha256)
        key = hashlib.sha256((sha + "\0" + "\0".join(flags)).encode()).hexdigest()[:10]
        return cls(tarball, sha, version, tuple(flags), cache_root() / f"slurm-{version}-{key}")

    def is_built(self) -> bool:
        return (self.prefix / BUILD_STAMP).is_file() and all(os.access(self.prefix / p, os.X_OK) for p in PROGRAMS)

    def build_info(self) -> dict:
        return read_stamp(self.prefix)

    def build(self, force: bool = False, log: IO[str] = sys.stderr, jobs: int | None = None) -> dict:
        """Build and install unless cached; returns the build record."""
        self.prefix.parent.mkdir(parents=True, exist_ok=True)
        self.prefix.parent.chmod(0o755)  # job users run the installed commands
        with open(self.prefix.with_name(self.prefix.name + ".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # one build at a time; waiters reuse it
            if self.is_built() and not force:
                return self.build_info()
            return self._build_locked(log, jobs or os.cpu_count() or 2)

    def _build_locked(self, log: IO[str], jobs: int) -> dict:
        actual = sha256_of(self.tarball)
        if actual != self.sha256:
            raise BuildError(f"{self.tarball}: sha256 is {actual}, expected {self.sha256}; not building it")
        shutil.rmtree(self.prefix, ignore_errors=True)
        started = time.monotonic()
        print(f"building Slurm {self.version} into {self.prefix}", file=log, flush=True)
        with tempfile.TemporaryDirectory(prefix="slurm-build-", dir=self.prefix.parent) as work:
            untar = subprocess.run(["tar", "-xf", str(self.tarball), "-C", work], capture_output=True, text=True)
            if untar.returncode != 0:
                raise BuildError(f"{self.tarball}: tar failed: {untar.stderr.strip()[-300:]}")
            tops = [p for p in Path(work).iterdir() if p.is_dir()]
            if len(tops) != 1 or not (tops[0] / "configure").is_file():
                raise BuildError(f"{self.tarball}: expected one top directory with a configure script")
            src = tops[0]
            steps = [
                ["./configure", f"--prefix={self.prefix}", f"--sysconfdir={self.prefix}/etc", *self.flags],
                ["make", f"-j{jobs}"],
                ["make", "install"],
            ]
            for argv in steps:
                print(f"  {' '.join(argv)}", file=log, flush=True)
                done = subprocess.run(["nice", "-n", "10", *argv], cwd=src, stdout=log, stderr=subprocess.STDOUT)
                if done.returncode != 0:
                    shutil.rmtree(self.prefix, ignore_errors=True)
                    raise BuildError(
                        f"{argv[0]} failed with exit status {done.returncode} building Slurm "
                        f"{self.version} (packages it needs: {' '.join(BUILD_PACKAGES)})"
                    )
        missing = [p for p in PROGRAMS if not os.access(self.prefix / p, os.X_OK)]
        if missing:
            raise BuildError(f"the Slurm {self.version} build installed no {', '.join(missing)}")
        record = {
            "version": self.version,
            "sha256": self.sha256,
            "configure_flags": list(self.flags),
            "build_seconds": round(time.monotonic() - started, 1),
            "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        (self.prefix / BUILD_STAMP).write_text(json.dumps(record, indent=2) + "\n")
        print(f"built in {record['build_seconds']}s", file=log, flush=True)
        return record


def read_stamp(prefix: Path) -> dict:
    """The ``build.json`` of a cached build ({} if none)."""
    try:
        data = json.loads((prefix / BUILD_STAMP).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def cached_builds(variant: str = "") -> list[tuple[str, Path]]:
    """``(version, prefix)`` of every finished build of ``variant`` in the cache, oldest version first."""
    flags = list(variant_flags(variant))
    out = []
    for d in cache_root().glob("slurm-*"):
        stamp = read_stamp(d)
        if stamp.get("configure_flags", list(CONFIGURE_FLAGS)) != flags:
            continue
        if d.is_dir() and stamp.get("version") and all(os.access(d / p, os.X_OK) for p in PROGRAMS):
            out.append((str(stamp["version"]), d))
    return sorted(out, key=lambda vp: version_key(vp[0]))


def resolve_prefix(wanted: str) -> Path:
    """The install prefix for ``--slurm``: a directory holding ``sbin/slurmctld``, or a
    version (``26.05``, ``26.05.3``, ``26.05-nolua``) found among the cached builds (newest match)."""
    path = Path(wanted).expanduser()
    if os.sep in wanted or path.is_dir():
        if not os.access(path / "sbin" / "slurmctld", os.X_OK):
            raise BuildError(f"--slurm: {wanted} holds no sbin/slurmctld")
        return path.resolve()
    m = _WANTED_RE.fullmatch(wanted)
    if not m:
        raise BuildError(f"--slurm: {wanted!r} is neither a Slurm version (like 26.05) nor an install prefix")
    version, variant = m.group(1), m.group(2) or ""
    if variant and variant not in VARIANTS:
        raise BuildError(f"--slurm: {wanted!r} names no known variant ({', '.join(sorted(VARIANTS))})")
    matches = [p for v, p in cached_builds(variant) if v == version or v.startswith(version + ".")]
    if not matches:
        how = f" --variant {variant}" if variant else ""
        raise BuildError(
            f"--slurm: no Slurm {wanted} built in {cache_root()}; build it with "
            f"`python3 -m slurm_pool.localcluster.slurmbuild build{how} --source slurm-X.tar.gz`"
        )
    return matches[-1]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python3 -m slurm_pool.localcluster.slurmbuild",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="build (or reuse) a cached Slurm; prints its prefix")
    b.add_argument("--source", type=Path, help="Slurm source tarball (default: ../shared/slurm/slurm-*.tar.gz)")
    b.add_argument("--sha256", help="expected sha256 (default: from <tarball>.sha256)")
    b.add_argument("--force", action="store_true", help="rebuild even if cached")
    b.add_argument("--variant", default="", help=f"a variant: {', '.join(sorted(VARIANTS))} (default: the plain build)")
    p = sub.add_parser("prefix", help="print the prefix of a cached build")
    p.add_argument("version", help="e.g. 26.05 or 26.05.3")
    args = ap.parse_args(argv)
    try:
        if args.cmd == "prefix":
            print(resolve_prefix(args.version))
            return 0
        source = args.source or default_source()
        if source is None:
            raise BuildError("--source: no slurm-*.tar.gz given or found in ../shared/slurm")
        if not source.is_file():
            raise BuildError(f"--source: {source} is not a file")
        build = SlurmBuild.for_source(source, args.sha256, variant_flags(args.variant))
        build.build(force=args.force)
        print(build.prefix)
        return 0
    except BuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
