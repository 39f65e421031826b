"""Python (and npm) environments cached outside the repository, for the local cluster's extra tiers.

An environment is a venv made with Debian's ``/usr/bin/python3`` (so the
pool's users can run it in their jobs; a venv under ``/root`` they could
not), with pinned PyPI packages and, optionally, npm packages beside it.  It
lives in ``<cache>/<name>-<hash>`` (the cache of :mod:`.slurmbuild`; the hash
covers the pins), is readable by everyone, and records ``build.json`` last, so
an interrupted install starts again.  A lock lets concurrent callers share
one install.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from slurm_pool.errors import PoolError
from slurm_pool.localcluster.slurmbuild import cache_root
from slurm_pool.wellknown import BUILD_STAMP

#: Debian's interpreter: world-executable, unlike a venv's python under /root.
SYSTEM_PYTHON = "/usr/bin/python3"


class EnvError(PoolError, RuntimeError):
    """A cached environment could not be built."""


@dataclass(frozen=True)
class CachedEnv:
    """One pinned environment: its PyPI and npm packages, and the files a good install has."""

    name: str
    pypi: tuple[str, ...]
    npm: tuple[str, ...] = ()
    #: Paths under the root a usable install must have.
    programs: tuple[str, ...] = ()
    #: Extra ``pip install`` arguments.
    pip_args: tuple[str, ...] = ()

    @property
    def root(self) -> Path:
        digest = hashlib.sha256("\n".join(self.pypi + self.npm + self.pip_args).encode()).hexdigest()[:10]
        return cache_root() / f"{self.name}-{digest}"

    @property
    def bin(self) -> Path:
        return self.root / "venv" / "bin"

    @property
    def python(self) -> Path:
        return self.bin / "python"

    def npm_bin(self, program: str) -> Path:
        return self.root / "npm" / "node_modules" / ".bin" / program

    def is_built(self) -> bool:
        return (self.root / BUILD_STAMP).is_file()

    def build(self, log: IO[str] = sys.stderr) -> "CachedEnv":
        """Install it unless it is there (one install at a time; waiters reuse it)."""
        self.root.parent.mkdir(parents=True, exist_ok=True)
        with open(self.root.with_name(self.root.name + ".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not self.is_built():
                self._build_locked(log)
        return self

    def _build_locked(self, log: IO[str]) -> None:
        for program in (SYSTEM_PYTHON, *(["npm"] if self.npm else [])):
            if shutil.which(program) is None:
                raise EnvError(f"{program} is missing (run: make deps)")
        shutil.rmtree(self.root, ignore_errors=True)
        self.root.mkdir(parents=True)
        steps = [
            [SYSTEM_PYTHON, "-m", "venv", str(self.root / "venv")],
            [str(self.bin / "pip"), "install", "--quiet", *self.pip_args, *self.pypi],
        ]
        if self.npm:
            steps.append(["npm", "install", "--no-audit", "--no-fund", "--prefix", str(self.root / "npm"), *self.npm])
        for argv in steps:
            print("+ " + " ".join(argv), file=log, flush=True)
            res = subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT)
            if res.returncode != 0:
                raise EnvError(f"{argv[0]} {argv[1]} failed with exit status {res.returncode}")
        for rel in self.programs:
            if not (self.root / rel).exists():
                raise EnvError(f"the install did not make {self.root / rel}")
        _world_readable(self.root)
        stamp = {"pypi": list(self.pypi), "npm": list(self.npm), "pip_args": list(self.pip_args)}
        (self.root / BUILD_STAMP).write_text(json.dumps(stamp, indent=2) + "\n")


def _world_readable(root: Path) -> None:
    """Users' jobs run programs from here: directories and files readable, programs runnable."""
    for dirpath, _dirs, filenames in os.walk(root):
        os.chmod(dirpath, 0o755)
        for name in filenames:
            path = Path(dirpath) / name
            if not path.is_symlink():
                mode = path.stat().st_mode
                path.chmod(mode | 0o444 | (0o111 if mode & 0o100 else 0))
