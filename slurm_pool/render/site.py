"""Site parameters: where daemons keep state, ports, paths to our programs.

The spec says *what* the pool is; a :class:`Site` says *where* it runs.  The
defaults suit a production install; ``slurm-pool cluster up`` builds one for
the embedded local cluster (one state directory, loopback ports, emulated
devices).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Site:
    conf_dir: str = "/etc/slurm"
    #: Overrides the spec's control host (the local cluster uses this host's
    #: name, which slurmctld insists on), with an optional address.
    control_host: str | None = None
    control_addr: str | None = None
    state_save_location: str = "/var/spool/slurmctld"
    slurmd_spool_dir: str = "/var/spool/slurmd"
    log_dir: str = "/var/log/slurm"
    run_dir: str = "/run/slurm"
    slurm_user: str = "slurm"
    slurmctld_port: int = 6817
    slurmd_port: int = 6818
    slurmdbd_host: str | None = None  # defaults to the control host
    slurmdbd_port: int = 6819
    storage_host: str = "localhost"
    storage_port: int = 3306
    storage_user: str = "slurm"
    storage_pass: str = ""
    storage_loc: str = "slurm_acct_db"
    munge_socket: str | None = None
    #: Per-node slurmd ports and addresses (several slurmd on one host).
    node_ports: dict[str, int] = field(default_factory=dict)
    node_addr: str | None = None
    node_hostname: str | None = None
    #: Where GPU device files live; MIG devices are emulated as files there.
    dev_dir: str = "/dev"
    #: True on the local cluster: every GPU and MIG instance is one char
    #: device under ``dev_dir``; False: whole GPUs by File=, MIG by NVML.
    emulated_devices: bool = False
    proctrack_type: str = "proctrack/cgroup"
    task_plugin: str = "task/cgroup,task/affinity"
    jobacct_gather_type: str = "jobacct_gather/cgroup"
    bin_dir: str = "/usr/local/bin"
    spank_plugin: str = "/usr/local/lib/slurm-pool/slurm_pool_spank.so"
    #: RebootProgram, rendered only with MIG layout features: slurmctld sends no feature change without
    #: one, even a rebootless one, which never runs it (see slurm_pool.mig.features).
    reboot_program: str = "/sbin/reboot"
    extra_slurm_conf: tuple[str, ...] = ()
    #: HS256 key of Slurm's ``auth/jwt`` (AuthAltTypes); wins over the spec's ``console.jwt_key``.
    jwt_key: str | None = None

    def node_dev_dir(self, node: str) -> str:
        """Device directory of one node (per node when emulated)."""
        return f"{self.dev_dir}/{node}" if self.emulated_devices else self.dev_dir
