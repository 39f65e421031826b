"""JupyterHub beside the local cluster: ``slurm-pool cluster up --with-notebooks``.

The hub runs from an environment cached outside the repository
(:mod:`.cachedenv`, ``<cache>/notebooks-<hash>``), which the pool's users can
run ``jupyterhub-singleuser`` from in their jobs.  It holds PyPI's jupyterhub,
batchspawner, jupyterlab and jupyterhub-idle-culler, and npm's
configurable-http-proxy.

The hub loads the rendered ``jupyterhub_config.py`` (the pool's part) and
``hub_local.py`` (this machine's part: loopback ports, ``runuser`` instead of
sudo, one shared password), which reads its values from ``hub.json``.

    python3 -m slurm_pool.localcluster.notebooks build
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import sys
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from slurm_pool.errors import PoolError
from slurm_pool.localcluster.cachedenv import CachedEnv, EnvError
from slurm_pool.localcluster.procs import ProcTable, wait_for

#: Versions measured to work together here (../shared/jupyterhub/README.md).
PYPI: tuple[str, ...] = (
    "jupyterhub==6.1.1",
    "batchspawner==1.3.0",
    "jupyterlab==4.6.6",
    "jupyter_server==2.21.1",
    "jupyterhub-idle-culler==2.0.0",
)
NPM: tuple[str, ...] = ("configurable-http-proxy@5.3.0",)
HUB = "jupyterhub"
LOCAL_CONFIG = Path(__file__).with_name("hub_local.py")
NOTEBOOKS = CachedEnv(
    "notebooks",
    PYPI,
    NPM,
    programs=("venv/bin/jupyterhub", "venv/bin/jupyterhub-singleuser", "npm/node_modules/.bin/configurable-http-proxy"),
)


class NotebookError(PoolError, RuntimeError):
    """The hub did not start."""


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

    def start(self, nbenv: CachedEnv = NOTEBOOKS, timeout: float = 120.0) -> None:
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
            "proxy": str(nbenv.npm_bin("configurable-http-proxy")),
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
        self.procs.start(HUB, argv, log, env=env, cwd=self.root)
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

    def stop(self, timeout: float = 60.0) -> bool:
        """Stop the hub, which stops its servers' jobs, its proxy and its culler on the way out; whatever of
        those it left (it was killed after ``timeout``) is stopped here.  True if the hub was running."""
        was = self.procs.stop(HUB, timeout)
        for pid in self.leftovers():
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        return was

    def leftovers(self) -> list[int]:
        """Pids of this hub's proxy and idle culler, which outlive a hub that was killed."""
        api = f"127.0.0.1:{self.port('hub')}".encode()
        proxy_api = f"--api-port\0{self.port('proxy_api')}\0".encode()
        return [
            pid
            for pid, cmdline, environ in _processes()
            if (b"configurable-http-proxy" in cmdline and proxy_api in cmdline)
            or (b"jupyterhub_idle_culler" in cmdline and api in environ)
        ]


def _processes() -> list[tuple[int, bytes, bytes]]:
    """(pid, cmdline, environ) of every process this user may read."""
    out = []
    for proc in Path("/proc").iterdir():
        if not (proc.name.isascii() and proc.name.isdigit()):
            continue
        try:
            out.append((int(proc.name), (proc / "cmdline").read_bytes(), (proc / "environ").read_bytes()))
        except OSError:
            continue
    return out


def main(argv: list[str] | None = None) -> int:
    args = argv if argv is not None else sys.argv[1:]
    if args != ["build"]:
        print("usage: python3 -m slurm_pool.localcluster.notebooks build", file=sys.stderr)
        return 2
    try:
        env = NOTEBOOKS.build()
    except EnvError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(env.root)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
