"""A real Slurm cluster on this one machine, under one state directory.

munge, MariaDB, slurmdbd, slurmctld and one ``slurmd -N <node>`` per spec
node run as root on loopback ports.  GPUs are emulated with ``mknod``
character devices named in gres.conf with ``AutoDetect=off``, so Slurm
allocates GPU and MIG GRES for real.  ``up`` is idempotent; ``down`` stops
only the processes ``up`` started.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
from pathlib import Path
from typing import IO, TYPE_CHECKING

from slurm_pool.adapters.runner import CommandError, Runner, SubprocessRunner
from slurm_pool.adapters.slurm import SlurmClient
from slurm_pool.errors import PoolError
from slurm_pool.localcluster import nodefiles, ports
from slurm_pool.localcluster.console import ensure_jwt_key
from slurm_pool.localcluster.layout import Layout
from slurm_pool.localcluster.procs import ProcTable, wait_for
from slurm_pool.localcluster.slurmbuild import BuildError, resolve_prefix
from slurm_pool.outfiles import replace_file
from slurm_pool.render import Site, SlurmVersion, render_all
from slurm_pool.render.context import build_context
from slurm_pool.render.templates import default_templates_dir, jinja_environment, render_template
from slurm_pool.spec import PoolSpec, load_spec
from slurm_pool.spec.hosts import expand
from slurm_pool.text import strict_int

if TYPE_CHECKING:
    from slurm_pool.localcluster.notebooks import Hub

DEFAULT_PORT_BASE = 16800


class ClusterError(PoolError, RuntimeError):
    pass


def default_state_dir(cluster: str = "pool") -> Path:
    """World-traversable default, so job users can read slurm.conf."""
    return Path(os.environ.get("SLURM_POOL_STATE_DIR", f"/var/tmp/slurm-pool/{cluster}"))


class LocalCluster:
    """Bring a pool spec up as real daemons, and down again."""

    def __init__(
        self,
        spec_path: str | Path,
        state_dir: str | Path | None = None,
        port_base: int | None = None,
        runner: Runner | None = None,
        slurm: str | None = None,
        patience: float = 1.0,
    ):
        """``slurm``: a Slurm install prefix or a cached build's version (``26.05``);
        default: what ``up`` recorded, else the Slurm on PATH.  ``patience`` stretches every wait for a
        daemon (a machine busy with other clusters starts them more slowly)."""
        self.spec_path = Path(spec_path).resolve()
        self.spec: PoolSpec = load_spec(self.spec_path)
        root = Path(state_dir) if state_dir else default_state_dir(self.spec.cluster.name)
        saved = saved_record(root)
        chosen = port_base or saved.get("port_base") or os.environ.get("SLURM_POOL_PORT_BASE")
        base = _port_base(chosen or DEFAULT_PORT_BASE)
        if slurm is not None:
            try:
                prefix: Path | None = resolve_prefix(slurm)
            except BuildError as exc:
                raise ClusterError(str(exc)) from None
        else:
            prefix = Path(saved["slurm_prefix"]) if saved.get("slurm_prefix") else None
        self.layout = Layout(root.resolve(), int(base), prefix)
        if not chosen:  # a new cluster: the first base no other cluster holds
            others = ports.clusters([self.layout.root, default_state_dir()])
            wanted = [p - base for p in self.service_ports().values()]
            self.layout.port_base = ports.free_base(base, others, wanted)
        # Checkpoints stay inside the state directory: job ids restart at 1 in
        # every new local cluster, so a shared base would hand a new job 1 the
        # checkpoints of an old job 1.
        ckpt = self.spec.checkpoint.model_copy(update={"base_dir": str(self.layout.root / "checkpoints")})
        self.spec = self.spec.model_copy(update={"checkpoint": ckpt})
        self.runner = runner or SubprocessRunner(env=self.layout.env())
        self.slurm = SlurmClient(self.runner)
        self.procs = ProcTable(self.layout.run)
        self.patience = patience

    # -- configuration -------------------------------------------------
    def nodes(self) -> list[str]:
        return [n for g in self.spec.node_groups for n in expand(g.hosts)]

    def service_ports(self) -> dict[str, int]:
        """The process name -> loopback port of each daemon that listens (slurmd: one per node)."""
        L = self.layout
        out = {
            name: L.port(what)
            for name, what in (("mysql", "mysql"), ("slurmdbd", "slurmdbd"), ("slurmctld", "slurmctld"))
        }
        out.update({f"slurmd-{n}": L.port_base + 100 + i for i, n in enumerate(self.nodes())})
        return out

    def check_ports(self) -> None:
        """ClusterError naming the holder when a port a daemon not yet running here needs is taken."""
        others = ports.clusters([self.layout.root, default_state_dir()])
        for name, port in self.service_ports().items():
            if not self.procs.running(name) and ports.busy(port):
                raise ClusterError(
                    f"port {port} ({name}) is in use by {ports.holder(port, others, self.layout.root)}: "
                    f"stop that cluster (slurm-pool cluster down --state-dir DIR), or give this one other ports "
                    f"with --port-base (for example {ports.free_base(self.layout.port_base + ports.SPAN, others, [0])})"
                )

    def site(self) -> Site:
        L = self.layout
        node_ports = {n: L.port_base + 100 + i for i, n in enumerate(self.nodes())}
        return Site(
            conf_dir=str(L.etc),
            control_host=socket.gethostname(),
            control_addr="127.0.0.1",
            state_save_location=str(L.root / "spool" / "ctld"),
            slurmd_spool_dir=str(L.root / "spool" / "d" / "%n"),
            log_dir=str(L.log),
            run_dir=str(L.run),
            slurm_user="root",
            slurmctld_port=L.port("slurmctld"),
            slurmd_port=L.port("slurmd"),
            slurmdbd_host="localhost",
            slurmdbd_port=L.port("slurmdbd"),
            storage_host="127.0.0.1",
            storage_port=L.port("mysql"),
            storage_user="slurm",
            storage_pass=self._db_password(),
            munge_socket=str(L.munge_socket),
            node_ports=node_ports,
            node_addr="127.0.0.1",
            node_hostname=socket.gethostname(),
            dev_dir=str(L.root / "dev"),
            emulated_devices=True,
            proctrack_type="proctrack/linuxproc",
            task_plugin="task/none",
            jobacct_gather_type="jobacct_gather/none",
            bin_dir=str(L.root / "bin"),
            spank_plugin=str(L.root / "lib" / "slurm_pool_spank.so"),
            extra_slurm_conf=("SlurmdParameters=config_overrides",),
            reboot_program="/bin/false",  # never reboot this machine
            jwt_key=str(self.jwt_key_path),
        )

    @property
    def jwt_key_path(self) -> Path:
        """Slurm's auth/jwt HS256 key (``up`` makes it; see ``localcluster.console``)."""
        return self.layout.etc / "jwt_hs256.key"

    def _db_password(self) -> str:
        f = self.layout.root / "mysql" / "slurm.pass"
        if not f.exists():
            f.parent.mkdir(parents=True, exist_ok=True)
            f.write_text(secrets.token_hex(12))
            f.chmod(0o600)
        return f.read_text().strip()

    def slurm_version(self) -> SlurmVersion:
        out = self.runner.run(["slurmctld", "-V"], check=False)
        if not out.ok:
            raise ClusterError(f"slurmctld -V failed: {(out.stderr or out.stdout).strip()[:200]}")
        return SlurmVersion.parse(out.stdout, what="slurmctld -V", output=True)

    def device_layouts(self) -> dict[str, list]:
        """MIG layouts the emulated GPUs hold now, for nodes changed since ``up``."""
        out = {}
        for f in sorted((self.layout.root / "dev").glob("*/mig.json")):
            out[f.parent.name] = json.loads(f.read_text())
        return out

    def set_device_layouts(self, node: str, layouts: list) -> None:
        """Repartition a node's emulated GPUs (what nvidia-smi does on real ones)."""
        d = self.layout.root / "dev" / node
        d.mkdir(parents=True, exist_ok=True)
        replace_file(d / "mig.json", json.dumps([list(lay) if lay is not None else None for lay in layouts]), 0o644)

    def node_gres(self, node: str) -> str:
        """The ``Gres=`` value the current slurm.conf gives ``node``."""
        for line in self.layout.slurm_conf.read_text().splitlines():
            if line.startswith(f"NodeName={node} "):
                for f in line.split():
                    if f.startswith("Gres="):
                        return f[len("Gres=") :]
                return ""
        raise KeyError(node)

    def restart_slurmd(self, node: str, timeout: float = 60.0) -> None:
        """Restart one node's slurmd, and slurmctld, on the current configs.

        Slurm (22.05 at least) takes a node's new GRES *types* only from
        slurm.conf at slurmctld start: neither ``scontrol reconfigure`` nor
        ``scontrol update Gres=`` changes them.  Jobs and queue survive the
        restart (state is saved).
        """
        before = self.slurm.node(node)
        self.procs.stop(f"slurmd-{node}")
        self.procs.stop("slurmctld")
        self._start_slurmctld()
        self._start(f"slurmd-{node}", ["slurmd", "-D", "-N", node, "-f", str(self.layout.slurm_conf)])
        wait_for(lambda: self._node_up(node), timeout * self.patience, f"slurmd on {node} to register")
        # A node whose configuration changed may lose its saved drain once its
        # slurmd registers: keep it drained until the caller resumes it.
        if before.drained:
            wait_for(lambda: self._redrained(node, before.reason), timeout * self.patience, f"{node} to stay drained")

    def _redrained(self, node: str, reason: str) -> bool:
        n = self.slurm.node(node)
        if "NOT_RESPONDING" in n.state or "UNKNOWN" in n.state:
            return False
        if not n.drained:
            self.slurm.drain(node, reason)
            return False
        return True

    def _node_up(self, node: str) -> bool:
        return self._registered().get(node, False)

    def _registered(self) -> dict[str, bool]:
        """Node -> whether its slurmd has registered (any state but down, unknown or refused)."""
        try:
            nodes = self.slurm.nodes()
        except CommandError:
            return {}
        return {
            n.name: n.state.base not in ("DOWN", "UNKNOWN", "FUTURE", "")
            and not n.state.any(("NOT_RESPONDING", "INVALID_REG"))
            for n in nodes
        }

    def write_configs(self) -> None:
        """Render the spec (and the GPUs' current MIG state) for this machine into ``etc/``."""
        L, site = self.layout, self.site()
        version = self.slurm_version()
        layouts = self.device_layouts()
        files = render_all(self.spec, site, version, node_layouts=layouts)
        ctx = build_context(self.spec, site, version, layouts)
        files["slurmdbd.conf"] = render_template(jinja_environment(default_templates_dir()), "slurmdbd.conf.j2", ctx)
        L.etc.mkdir(parents=True, exist_ok=True)
        ensure_jwt_key(self.jwt_key_path, site.slurm_user)
        for name, text in files.items():
            replace_file(L.etc / name, text, 0o600 if name == "slurmdbd.conf" else 0o644)
        self.write_node_files(ctx)

    def write_node_files(self, ctx: dict) -> None:
        """What the nodes need beside the configs: hooks, MIG helpers, nvidia-smi, the SPANK plugin, devices."""
        try:
            nodefiles.write_node_files(self.spec, self.layout.root, self.layout.etc, ctx, self.layout.which("scontrol"))
            nodefiles.install_spank_plugin(self.layout.root, self.slurm_include_dir())
        except nodefiles.NodeFilesError as exc:
            raise ClusterError(str(exc)) from None

    def slurm_include_dir(self) -> Path:
        """Where this cluster's Slurm keeps ``slurm/spank.h``."""
        return (self.layout.slurm_prefix or Path("/usr")) / "include"

    # -- lifecycle -----------------------------------------------------
    def up(self, timeout: float = 120.0) -> None:
        """Start whatever is not running yet; safe to call twice."""
        self.prepare()
        self.write_configs()
        self.start_services()
        from slurm_pool.accounting.apply import apply_accounting, known_tres

        # QOS first: Slurm 25.11+ slurmctld refuses partitions whose AllowQOS
        # slurmdbd lacks.  Limits on GRES TRES wait for the second pass, once
        # slurmctld has registered those TRES (see accounting.apply).
        apply_accounting(self.spec, self.slurm, prune=False, dry_run=False, echo=lambda _m: None)
        self.start_controller()
        wait_for(
            lambda: not self._gres_tres_wanted() or "gres/gpu" in known_tres(self.slurm),
            60 * self.patience,
            "slurmctld to register the gres/gpu TRES with slurmdbd",
        )
        apply_accounting(self.spec, self.slurm, prune=False, dry_run=False, echo=lambda _m: None)
        self.start_nodes(self.nodes(), timeout)

    # The steps of ``up``, public for a cluster whose slurm.conf is not the pool's (a site's, in tests).
    def prepare(self) -> None:
        """Check the programs, make the state directories and record the cluster in ``cluster.json``."""
        L = self.layout
        self._check_programs()
        self.check_ports()
        for d in (L.root, L.etc, L.run, L.log, L.root / "munge", L.root / "spool" / "ctld", L.root / "checkpoints"):
            d.mkdir(parents=True, exist_ok=True)
        (L.root / "checkpoints").chmod(0o755)
        L.root.chmod(0o755)
        for node in self.nodes():
            (L.root / "spool" / "d" / node).mkdir(parents=True, exist_ok=True)
        (L.root / "cluster.json").write_text(
            json.dumps(
                {
                    "spec": str(self.spec_path),
                    "port_base": L.port_base,
                    "cluster": self.spec.cluster.name,
                    "slurm_prefix": str(L.slurm_prefix) if L.slurm_prefix else None,
                },
                indent=2,
            )
        )

    def start_services(self) -> None:
        """munge, MariaDB and slurmdbd, and the spec's users as local accounts."""
        self._start_munge()
        self._start_mysql()
        self._start_slurmdbd()
        self._ensure_users()

    def start_controller(self) -> None:
        """slurmctld on the current slurm.conf (a running one is left as it is)."""
        self._start_slurmctld()

    def restart_controller(self) -> None:
        """Stop and start slurmctld: new nodes and GRES types are read only at its start."""
        self.procs.stop("slurmctld")
        self._start_slurmctld()

    def start_nodes(self, nodes: list[str], timeout: float = 120.0) -> None:
        """One ``slurmd -N`` per node, and wait until every one has registered."""
        for node in nodes:
            self._start("slurmd-" + node, ["slurmd", "-D", "-N", node, "-f", str(self.layout.slurm_conf)])
        wait_for(
            lambda: all(self._registered().get(n, False) for n in nodes),
            timeout * self.patience,
            "every node to register",
        )

    def hub(self) -> "Hub":
        """The JupyterHub of this cluster (``up_notebooks`` starts it)."""
        from slurm_pool.localcluster.notebooks import Hub

        L = self.layout
        hub_ports = {what: L.port(what) for what in ("proxy", "hub", "proxy_api")}
        return Hub(L.root / "hub", hub_ports, L.etc, L.env(), self.procs)

    def up_notebooks(self, timeout: float = 120.0, log: IO[str] = sys.stderr) -> "Hub":
        """Start JupyterHub beside the running cluster (its environment is built once, cached)."""
        from slurm_pool.localcluster.cachedenv import EnvError
        from slurm_pool.localcluster.notebooks import NOTEBOOKS, NotebookError

        if self.spec.notebooks is None:
            raise ClusterError(f"{self.spec_path} has no notebooks section, so no notebook tier to start a hub for")
        try:
            hub = self.hub()
            hub.start(NOTEBOOKS.build(log), timeout)
        except (EnvError, NotebookError) as exc:
            raise ClusterError(str(exc)) from None
        return hub

    def _gres_tres_wanted(self) -> bool:
        return any(g.gpus for g in self.spec.node_groups)

    def down(self) -> list[str]:
        """Stop the processes ``up`` started, newest first."""
        stopped = []
        # The hub first: on the way down it cancels its servers' jobs, which needs slurmctld.
        if self.procs.get("jupyterhub") is not None and self.hub().stop():
            stopped.append("jupyterhub")
        order = ["console"] + [f"slurmd-{n}" for n in self.nodes()] + ["slurmctld", "slurmdbd", "mysql", "munge"]
        known = {p.name for p in self.procs.all()}
        for name in order + sorted(known - set(order)):
            if self.procs.stop(name):
                stopped.append(name)
        return stopped

    def running(self) -> dict[str, bool]:
        names = ["munge", "mysql", "slurmdbd", "slurmctld"] + [f"slurmd-{n}" for n in self.nodes()]
        if self.spec.notebooks is not None:
            names.append("jupyterhub")
        if self.procs.get("console") is not None:  # started by ``up --with-console``
            names.append("console")
        return {n: self.procs.running(n) for n in names}

    # -- daemons -------------------------------------------------------
    def _check_programs(self) -> None:
        missing = [
            p
            for p in (
                "munged",
                "mariadbd",
                "mariadb-install-db",
                "slurmdbd",
                "slurmctld",
                "slurmd",
                "sacctmgr",
                "sinfo",
            )
            if self.layout.which(p) is None
        ]
        if missing:
            raise ClusterError(f"missing programs: {', '.join(missing)} (run: make deps)")
        if os.geteuid() != 0:
            raise ClusterError("the local cluster runs its daemons as root; run as root")

    def _start(self, name: str, argv: list[str]) -> None:
        if not self.procs.running(name):
            self.procs.start(name, argv, self.layout.log / f"{name}.out", env=self.layout.env())

    def _start_munge(self) -> None:
        d = self.layout.root / "munge"
        key = d / "munge.key"
        if not key.exists():
            key.write_bytes(secrets.token_bytes(1024))
            key.chmod(0o400)
        d.chmod(0o755)
        self._start(
            "munge",
            [
                "munged",
                "-F",
                "--force",
                f"--socket={self.layout.munge_socket}",
                f"--key-file={key}",
                f"--pid-file={d / 'munged.pid'}",
                f"--log-file={self.layout.log / 'munged.log'}",
                f"--seed-file={d / 'munged.seed'}",
            ],
        )
        sock = str(self.layout.munge_socket)
        wait_for(lambda: _ok(["sh", "-c", f'munge -n -S "{sock}" | unmunge -S "{sock}"']), 20 * self.patience, "munged")

    def _start_mysql(self) -> None:
        d = self.layout.root / "mysql"
        data = d / "data"
        # A private tmpdir: a server starting up removes the temporary tables it finds in its tmpdir, so
        # two clusters sharing /tmp break each other's mariadb-install-db ("Unknown table
        # 'mysql.tmp_user_sys'", seen with test clusters started side by side).
        tmp = d / "tmp"
        tmp.mkdir(parents=True, exist_ok=True)
        tmp.chmod(0o700)
        if not (data / "mysql").exists():
            data.mkdir(parents=True, exist_ok=True)
            res = subprocess.run(
                [
                    "mariadb-install-db",
                    f"--datadir={data}",
                    f"--tmpdir={tmp}",
                    "--user=root",
                    "--auth-root-authentication-method=socket",
                    "--skip-test-db",
                ],
                capture_output=True,
                text=True,
            )
            if res.returncode:
                raise ClusterError(f"mariadb-install-db failed: {res.stderr.strip()[-500:]}")
        self._start(
            "mysql",
            [
                "mariadbd",
                "--no-defaults",
                f"--datadir={data}",
                f"--tmpdir={tmp}",
                "--user=root",
                f"--socket={self.layout.mysql_socket}",
                f"--port={self.layout.port('mysql')}",
                "--bind-address=127.0.0.1",
                f"--pid-file={d / 'mysqld.pid'}",
                "--innodb-buffer-pool-size=64M",
                "--innodb-lock-wait-timeout=900",
                f"--log-error={self.layout.log / 'mysqld.log'}",
            ],
        )
        sock = str(self.layout.mysql_socket)
        wait_for(lambda: _ok(["mariadb", "-S", sock, "-e", "SELECT 1"]), 60 * self.patience, "MariaDB")
        pw = self._db_password()
        sql = (
            f"CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY '{pw}';"
            f"CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY '{pw}';"
            "GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';"
            "GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';"
        )
        res = subprocess.run(["mariadb", "-S", sock, "-e", sql], capture_output=True, text=True)
        if res.returncode:
            raise ClusterError(f"MariaDB user setup failed: {res.stderr.strip()}")

    def _start_slurmdbd(self) -> None:
        self._start("slurmdbd", ["slurmdbd", "-D"])
        wait_for(
            lambda: self.runner.run(["sacctmgr", "-n", "show", "cluster"], check=False).ok,
            60 * self.patience,
            "slurmdbd",
        )

    def _start_slurmctld(self) -> None:
        self._start("slurmctld", ["slurmctld", "-D", "-i", "-f", str(self.layout.slurm_conf)])
        wait_for(
            lambda: self.runner.run(["scontrol", "ping"], check=False).stdout.find("UP") >= 0,
            60 * self.patience,
            "slurmctld",
        )

    def _ensure_users(self) -> None:
        """Create the spec's users as local accounts (local cluster only)."""
        import pwd

        for proj in self.spec.projects:
            for user in proj.users:
                try:
                    pwd.getpwnam(user)
                except KeyError:
                    res = subprocess.run(
                        ["useradd", "--create-home", "--shell", "/bin/bash", user], capture_output=True, text=True
                    )
                    if res.returncode not in (0, 9):
                        raise ClusterError(f"useradd {user} failed: {res.stderr.strip()}") from None


def _port_base(value: object) -> int:
    """The first port, from the option, cluster.json or $SLURM_POOL_PORT_BASE: it goes into slurm.conf."""
    try:
        base = strict_int(value, "port base")
    except ValueError as exc:
        raise ClusterError(str(exc)) from None
    if not 1024 <= base <= 65000:
        raise ClusterError(f"port base {base} is not between 1024 and 65000")
    return base


def saved_record(root: Path) -> dict:
    """What ``up`` recorded in ``<state>/cluster.json`` (spec path, ports); {} if nothing readable."""
    try:
        saved = json.loads((root / "cluster.json").read_text())
    except (OSError, ValueError):
        return {}
    return saved if isinstance(saved, dict) else {}


def _ok(argv: list[str]) -> bool:
    return subprocess.run(argv, capture_output=True).returncode == 0
