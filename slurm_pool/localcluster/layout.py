"""Paths and ports of one local cluster, under its state directory."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Layout:
    """Paths and ports of one local cluster."""

    root: Path
    port_base: int
    #: Install prefix of the Slurm to run (None: the one on PATH, Debian's).
    slurm_prefix: Path | None = None

    @property
    def etc(self) -> Path:
        return self.root / "etc"

    @property
    def slurm_conf(self) -> Path:
        return self.etc / "slurm.conf"

    @property
    def run(self) -> Path:
        return self.root / "run"

    @property
    def log(self) -> Path:
        return self.root / "log"

    @property
    def munge_socket(self) -> Path:
        return self.root / "munge" / "munge.socket"

    @property
    def mysql_socket(self) -> Path:
        return self.root / "mysql" / "mysqld.sock"

    def port(self, what: str) -> int:
        offsets = dict(mysql=6, slurmctld=17, slurmd=18, slurmdbd=19, proxy=30, hub=31, proxy_api=32, console=33)
        return self.port_base + offsets[what]

    def env(self) -> dict[str, str]:
        """What Slurm's commands and daemons need: this cluster's config and, for a
        built Slurm, its programs first on PATH."""
        env = {"SLURM_CONF": str(self.slurm_conf)}
        if self.slurm_prefix is not None:
            p = self.slurm_prefix
            env["PATH"] = f"{p / 'bin'}:{p / 'sbin'}:{os.environ.get('PATH', os.defpath)}"
        return env

    def which(self, program: str) -> str | None:
        return shutil.which(program, path=self.env().get("PATH"))
