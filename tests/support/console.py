"""``slurm-pool serve`` beside the session cluster, in this process, for the console's daemon tests.

The service is the real one (FastAPI under uvicorn on a loopback port) over
the cluster's real Slurm: it reads through the cluster's commands, verifies
tokens with the cluster's own JWT key, checks passwords through the system's
PAM, and runs every action as the user with a token minted for that call.
"""

from __future__ import annotations

import socket
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from slurm_pool.adapters.slurm import SlurmClient
from slurm_pool.localcluster.console import set_passwords
from slurm_pool.web.actions import UserCommands
from slurm_pool.web.app import create_app
from slurm_pool.web.hosts import AllowedHosts
from slurm_pool.web.identity import Authenticator, load_key, pam_checker, user_exists
from slurm_pool.web.server import build_server
from tests.support.patience import wait_for
from tests.support.slurm_cluster import ClusterHandle
from tests.support.web import slurm_decides

#: Where the console tests keep the users' passwords: the users are the machine's, shared by every test
#: cluster (``make test`` runs two side by side), so their passwords are kept in one place, not per cluster.
TEST_USERS_STATE = Path("/var/tmp/slurm-pool-test-users")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Service:
    url: str
    passwords: dict[str, str]
    key: bytes
    handle: ClusterHandle

    def token(self, user: str, lifespan: int = 300) -> str:
        """A token as a user gets it from Slurm: ``scontrol token`` (run as root, for that user)."""
        res = self.handle.run(
            [self.handle.scontrol, "token", f"username={user}", f"lifespan={lifespan}"], check=True, timeout=30
        )
        line = res.stdout.strip()
        assert line.startswith("SLURM_JWT="), line
        return line.removeprefix("SLURM_JWT=")


@contextmanager
def running_console(
    handle: ClusterHandle, *, state_dir: str | None = None, check_access: bool = True
) -> Iterator[Service]:
    """Serve the console for ``handle``'s cluster until the block ends, as ``slurm-pool serve`` runs it."""
    from slurm_pool.spec.console import Console

    spec = handle.spec
    console = spec.console or Console()
    users = sorted({u for p in spec.projects for u in p.users})
    passwords = set_passwords(users, TEST_USERS_STATE)
    key = load_key(str(handle.cluster.jwt_key_path))
    hosts = AllowedHosts.of(console.allowed_hosts, console.public_url, "127.0.0.1")
    auth = Authenticator(
        key, console, check_password=pam_checker(console.pam_service), user_exists=user_exists, hosts=hosts
    )
    app = create_app(
        spec,
        slurm=SlurmClient(handle.cluster.runner),
        auth=auth,
        commands=UserCommands(key, env=handle.env),
        state_dir=state_dir,
        hosts=hosts,
    )
    slurm_decides(app, check_access)
    port = _free_port()
    server = build_server(app, "127.0.0.1", port, console, hosts=hosts, log_level="warning", lifespan="off")
    thread = threading.Thread(target=server.run, name="console", daemon=True)
    thread.start()
    try:
        wait_for(lambda: server.started or not thread.is_alive(), 60, "the console to listen")
        assert thread.is_alive(), "the console's server stopped at once"
        yield Service(f"http://127.0.0.1:{port}", passwords, key, handle)
    finally:
        server.should_exit = True
        thread.join(30)
