"""JupyterHub beside the local cluster: ``slurm-pool cluster up --with-notebooks``.

The hub runs from a venv cached outside the repository
(``<cache>/notebooks-<hash>``, the cache of :mod:`.slurmbuild`), made with
Debian's ``/usr/bin/python3`` so the pool's users can run its
``jupyterhub-singleuser`` in their jobs (a venv under ``/root`` they could
not).  It holds PyPI's jupyterhub, batchspawner, jupyterlab and
jupyterhub-idle-culler, and npm's configurable-http-proxy.  ``build.json`` is
written last, so an interrupted install starts again; a lock lets concurrent
callers share one.

The hub loads the rendered ``jupyterhub_config.py`` (the pool's part) and
``hub_local.py`` (this machine's part: loopback ports, ``runuser`` instead of
sudo, one shared password), which reads its values from ``hub.json``.

    python3 -m slurm_pool.localcluster.notebooks build
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import secrets
import shutil
import subprocess
import sys
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from slurm_pool.errors import PoolError
from slurm_pool.localcluster.procs import ProcTable, wait_for
from slurm_pool.localcluster.slurmbuild import cache_root

#: Versions measured to work together here (../shared/jupyterhub/README.md).
PYPI: tuple[str, ...] = (
    "jupyterhub==6.1.1",
    "batchspawner==1.3.0",
    "jupyterlab==4.6.6",
    "jupyter_server==2.21.1",
    "jupyterhub-idle-culler==2.0.0",
)
NPM: tuple[str, ...] = ("configurable-http-proxy@5.3.0",)
#: Debian's interpreter: world-executable, unlike a venv's python under /root.
SYSTEM_PYTHON = "/usr/bin/python3"
LOCAL_CONFIG = Path(__file__).with_name("hub_local.py")
_STAMP = "build.json"
HUB = "jupyterhub"


class NotebookError(PoolError, RuntimeError):
    """The notebook environment could not be built, or the hub did not start."""


@dataclass(frozen=True)
class NotebookEnv:
    """A built hub environment: the venv and configurable-http-proxy."""

    root: Path

    @classmethod
    def default(cls) -> "NotebookEnv":
        digest = hashlib.sha256("\n".join(PYPI + NPM).encode()).hexdigest()[:10]
        return cls(cache_root() / f"notebooks-{digest}")

    @property
    def bin(self) -> Path:
        return self.root / "venv" / "bin"

    @property
    def proxy(self) -> Path:
        return self.root / "npm" / "node_modules" / ".bin" / "configurable-http-proxy"

    def is_built(self) -> bool:
        return (self.root / _STAMP).is_file()

    def build(self, log: IO[str] = sys.stderr) -> "NotebookEnv":
        """Install it unless it is there (one install at a time; waiters reuse it)."""
        self.root.parent.mkdir(parents=True, exist_ok=True)
        with open(self.root.with_name(self.root.name + ".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not self.is_built():
                self._build_locked(log)
        return self

    def _build_locked(self, log: IO[str]) -> None:
        for program in (SYSTEM_PYTHON, "npm"):
            if shutil.which(program) is None:
                raise NotebookError(f"{program} is missing (run: make deps)")
        shutil.rmtree(self.root, ignore_errors=True)
        self.root.mkdir(parents=True)
        steps = [
            [SYSTEM_PYTHON, "-m", "venv", str(self.root / "venv")],
            [str(self.bin / "pip"), "install", "--quiet", *PYPI],
            ["npm", "install", "--no-audit", "--no-fund", "--prefix", str(self.root / "npm"), *NPM],
        ]
        for argv in steps:
            print("+ " + " ".join(argv), file=log, flush=True)
            res = subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT)
            if res.returncode != 0:
                raise NotebookError(f"{argv[0]} {argv[1]} failed with exit status {res.returncode}")
        for path in (self.bin / "jupyterhub", self.bin / "jupyterhub-singleuser", self.proxy):
            if not path.exists():
                raise NotebookError(f"the install did not make {path}")
        _world_readable(self.root)
        (self.root / _STAMP).write_text(json.dumps({"pypi": list(PYPI), "npm": list(NPM)}, indent=2) + "\n")


def _world_readable(root: Path) -> None:
    """Users' jobs run jupyterhub-singleuser from here: directories and files readable, programs runnable."""
    for dirpath, _dirs, filenames in os.walk(root):
        os.chmod(dirpath, 0o755)
        for name in filenames:
            path = Path(dirpath) / name
            if not path.is_symlink():
                path.chmod(path.stat().st_mode | 0o444 | (0o111 if path.stat().st_mode & 0o100 else 0))


@dataclass(frozen=True)
class Hub:
    """The hub of one local cluster, under ``<state>/hub``."""

    root: Path
    #: Loopback ports: the public proxy, the hub's API, the proxy's API.
    ports: dict[str, int]
    etc: Path
    env: dict[str, str]
    procs: ProcTable

    def port(self, what: str) -> int:
        return self.ports[what]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port('proxy')}"

    @property
    def password_file(self) -> Path:
        return self.root / "password"

    def password(self) -> str:
        return self.password_file.read_text().strip()

    def running(self) -> bool:
        return self.procs.running(HUB)

    def start(self, nbenv: NotebookEnv, timeout: float = 120.0) -> None:
        """Start the hub unless it runs, and wait until it answers through its proxy."""
        fragment = self.etc / "jupyterhub_config.py"
        if not fragment.is_file():
            raise NotebookError(f"{fragment} is missing: the spec has no notebooks section")
        self.root.mkdir(parents=True, exist_ok=True)
        self.root.chmod(0o700)
        if not self.password_file.is_file():
            self.password_file.write_text(secrets.token_urlsafe(12) + "\n")
            self.password_file.chmod(0o600)
        settings = {
            "fragment": str(fragment),
            "bind_url": self.url,
            "hub_port": self.port("hub"),
            "proxy_api_url": f"http://127.0.0.1:{self.port('proxy_api')}",
            "proxy": str(nbenv.proxy),
            "password": self.password(),
            "state": str(self.root),
        }
        (self.root / "hub.json").write_text(json.dumps(settings, indent=2) + "\n")
        (self.root / "hub.json").chmod(0o600)
        if self.running():
            return
        env = {**self.env, "PATH": f"{nbenv.bin}:{self.env.get('PATH', os.environ.get('PATH', os.defpath))}"}
        env["SLURM_POOL_HUB_SETTINGS"] = str(self.root / "hub.json")
        log = self.root / "jupyterhub.log"
        argv = [str(nbenv.bin / "jupyterhub"), "-f", str(LOCAL_CONFIG)]
        self.procs.start(HUB, argv, log, env=env)
        try:
            wait_for(self._healthy, timeout, f"JupyterHub at {self.url}", interval=0.5)
        except TimeoutError as exc:
            raise NotebookError(f"{exc}; see {log}") from None

    def _healthy(self) -> bool:
        if not self.running():
            raise NotebookError(f"JupyterHub exited; see {self.root / 'jupyterhub.log'}")
        try:
            with urllib.request.urlopen(f"{self.url}/hub/health", timeout=5) as resp:
                return bool(resp.status == 200)
        except OSError:
            return False

    def stop(self) -> bool:
        """Stop the hub (its proxy and culler are its children; servers are Slurm jobs and stay)."""
        return self.procs.stop(HUB)


def main(argv: list[str] | None = None) -> int:
    args = argv if argv is not None else sys.argv[1:]
    if args != ["build"]:
        print("usage: python3 -m slurm_pool.localcluster.notebooks build", file=sys.stderr)
        return 2
    try:
        env = NotebookEnv.default().build()
    except NotebookError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(env.root)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
