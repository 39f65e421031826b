"""A real sshd on a loopback port, with key authentication, for the nodes of a local cluster.

Debian's openssh-server, started here with its own host key and config; the
client config maps every node name to it, so ``ssh c-gpu1 ...`` (and
ClusterShell) reach this machine as root, as they would reach a real node.
"""

from __future__ import annotations

import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

SSHD = "/usr/sbin/sshd"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Sshd:
    root: Path
    port: int
    proc: subprocess.Popen

    @property
    def client_config(self) -> Path:
        return self.root / "ssh_config"

    @property
    def ssh_options(self) -> str:
        return f"-F {self.client_config}"

    def ssh(self, node: str, *argv: str, timeout: float = 30) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["ssh", "-F", str(self.client_config), node, *argv], capture_output=True, text=True, timeout=timeout
        )

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def start_sshd(root: Path, nodes: Iterable[str], timeout: float = 60) -> Sshd:
    """Start sshd for ``nodes`` under ``root``; waits until a key login works."""
    root.mkdir(parents=True, exist_ok=True)
    root.chmod(0o700)
    for name in ("host_key", "id"):
        if not (root / name).exists():
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(root / name)], check=True)
    (root / "authorized_keys").write_text((root / "id.pub").read_text())
    (root / "authorized_keys").chmod(0o600)
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege separation directory
    port = _free_port()
    (root / "sshd_config").write_text(
        "\n".join(
            [
                f"Port {port}",
                "ListenAddress 127.0.0.1",
                f"HostKey {root / 'host_key'}",
                f"AuthorizedKeysFile {root / 'authorized_keys'}",
                f"PidFile {root / 'sshd.pid'}",
                "PermitRootLogin prohibit-password",
                "PubkeyAuthentication yes",
                "PasswordAuthentication no",
                "KbdInteractiveAuthentication no",
                "UsePAM no",
                "StrictModes no",
                "MaxStartups 50:30:100",
                "MaxSessions 50",
                "LogLevel VERBOSE",
                "",
            ]
        )
    )
    blocks = []
    for node in nodes:
        blocks += [
            f"Host {node}",
            "  HostName 127.0.0.1",
            f"  Port {port}",
            "  User root",
            f"  IdentityFile {root / 'id'}",
            "  IdentitiesOnly yes",
            "  StrictHostKeyChecking no",
            "  UserKnownHostsFile /dev/null",
            "  BatchMode yes",
            "  LogLevel ERROR",
        ]
    (root / "ssh_config").write_text("\n".join(blocks) + "\n")
    log = open(root / "sshd.log", "ab")  # noqa: SIM115 - kept open for the daemon's life
    proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(root / "sshd_config")], stdout=log, stderr=log)
    log.close()
    server = Sshd(root, port, proc)
    first = next(iter(nodes), None)
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"sshd exited {proc.returncode}: {(root / 'sshd.log').read_text()[-2000:]}")
        if first is None:
            return server
        res = server.ssh(first, "true", timeout=15)
        if res.returncode == 0:
            return server
        last = res.stderr
        time.sleep(0.2)
    server.stop()
    raise RuntimeError(f"no ssh login to sshd on port {port} after {timeout:g}s: {last}")
