"""A site that already runs Slurm, and slurm-pool installed into it the way docs/adoption.md says.

The site comes first, with nothing of slurm-pool: its own slurm.conf (a CPU
partition ``batch`` on CPU-only nodes, the cluster's default), its own
job_submit.lua (every job without a comment gets ``site-policy``; a comment
``forbidden`` is refused), its own prolog (it leaves a mark per job), and its
own QOS, accounts and users in slurmdbd -- among them a pool user whose
default account is the site's.  :meth:`SiteCluster.adopt` then installs the
pool as an admin would: the site's job_submit.lua moved aside, the rendered
fragments included, the cluster-wide settings merged into the site's
slurm.conf, the prolog turned into a glob directory, accounting applied with
``--prune``, slurmctld restarted for the new nodes.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from slurm_pool.adapters.records import parse_config_text
from slurm_pool.localcluster.cluster import LocalCluster
from slurm_pool.localcluster.console import ensure_jwt_key
from slurm_pool.render.context import build_context
from slurm_pool.render.render import render_all
from slurm_pool.render.required import cluster_settings, missing, pool_qos
from slurm_pool.render.templates import default_templates_dir, jinja_environment, render_template
from slurm_pool.spec.model import PoolSpec
from slurm_pool.versions import SlurmVersion
from tests.support.patience import patience, wait_for
from tests.support.slurm_cluster import ClusterHandle, daemon_logs, free_port_base

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "pool-coexist.yaml"
SITE_NODES = ("cpu1", "cpu2")
#: The site's own accounting objects: (sacctmgr arguments), created before the pool exists.
SITE_ACCOUNTING = (
    ("add", "qos", "site-normal", "Description=the site's own QOS", "Priority=5"),
    # Slurm's own default QOS, and the site's scavenger, each with its own preemption: a pool tier of either
    # name would be bound to the site's object (issue: names are owned).
    ("modify", "qos", "where", "name=normal", "set", "Priority=10", "GraceTime=120"),
    ("add", "qos", "scavenger", "Description=the site's own scavenger", "Priority=0", "PreemptMode=cancel"),
    ("add", "account", "physics", "Description=Physics department", "Organization=science", "Fairshare=3"),
    ("modify", "account", "where", "name=physics", "set", "QOS=normal,site-normal,scavenger"),
    ("add", "user", "dave", "Account=physics", "DefaultAccount=physics"),
    # A pool user who already had an account here: the pool must not take her default away.
    ("add", "user", "alice", "Account=physics", "DefaultAccount=physics"),
)
#: What `sacctmgr show` prints of the site's objects, compared byte for byte before and after adoption.
SNAPSHOT = (
    (
        "qos",
        "where",
        "name=site-normal,normal,scavenger",
        "format=Name,Description,Priority,Preempt,PreemptMode,GraceTime,UsageFactor,GrpTRES,MaxTRESPU",
    ),
    ("account", "where", "name=physics,root", "format=Account,Descr,Org"),
    ("assoc", "where", "account=physics,root", "format=Cluster,Account,User,Fairshare,QOS,DefaultQOS,GrpTRES,MaxTRES"),
    ("user", "where", "name=dave,alice,root", "format=User,DefaultAccount,Admin"),
)

#: The site's GPU partition, added at installation over two of the pool's nodes (and one of its own): the
#: pool's QOS are kept off it (``DenyQos``), as site-settings.conf says.
SITE_GPU_PARTITION = "site-gpu"
SITE_GPU_NODES = ("cpu2", "a-gpu2", "b-gpu1")
#: Five site jobs that wait in the site's partition, each as (user, sbatch arguments): their priorities as
#: ``sprio`` shows them must be the same before and after the pool is installed.
PENDING_SITE_JOBS = (
    ("dave", ()),
    ("dave", ("--qos=site-normal",)),
    ("dave", ("--qos=scavenger",)),
    ("alice", ()),
    ("alice", ("--qos=normal",)),
)
#: sprio's columns compared: user, partition, priority, and the age, fairshare, job size, partition and QOS factors.
SPRIO_FORMAT = "%i %u %r %Y %A %F %J %P %Q"

SITE_JOB_SUBMIT = """-- The site's own job policy (it was here before slurm-pool).
function slurm_job_submit(job_desc, part_list, submit_uid)
    if job_desc.comment == "forbidden" then
        slurm.log_user("site policy: the comment 'forbidden' is forbidden here")
        return slurm.ERROR
    end
    if job_desc.comment == nil then job_desc.comment = "site-policy" end
    return slurm.SUCCESS
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
    return slurm.SUCCESS
end

return slurm.SUCCESS
"""

SITE_PROLOG = """#!/bin/sh
# The site's own prolog: one mark per job.
mkdir -p {marks} && touch {marks}/"$SLURM_JOB_ID"
exit 0
"""


class SiteCluster:
    """The site's cluster on this machine (real munge, MariaDB, slurmdbd, slurmctld, one slurmd per node)."""

    def __init__(self, state: Path, slurm: str | None):
        self.state = state
        etc = state / "etc"
        self.spec_path = state / "pool-coexist.yaml"
        text = EXAMPLE.read_text()
        text = text.replace("/etc/slurm/site_job_submit.lua", str(etc / "site_job_submit.lua"))
        text = text.replace(
            "coexist:\n",
            f"coexist:\n  prolog_dir: {etc / 'prolog.d'}\n  epilog_dir: {etc / 'epilog.d'}\n",
        )
        state.mkdir(parents=True, exist_ok=True)
        self.spec_path.write_text(text)
        self.pool = LocalCluster(
            self.spec_path, state_dir=state, port_base=free_port_base(8 + 6), slurm=slurm, patience=patience(1)
        )
        self.marks = state / "site-prolog-marks"
        self.handle = ClusterHandle(self.pool)

    # -- the site, before slurm-pool ------------------------------------------------
    def _site_conf(self) -> str:
        """The site's slurm.conf: its daemons, its CPU nodes and partition; nothing of the pool."""
        lc, site = self.pool, self.pool.site()
        L = lc.layout
        first = L.port_base + 100 + len(lc.nodes())
        host = socket.gethostname()
        nodes = [
            f"NodeName={n} NodeAddr=127.0.0.1 NodeHostname={host} Port={first + i} CPUs=2 RealMemory=1000 State=UNKNOWN"
            for i, n in enumerate(SITE_NODES)
        ]
        return "\n".join(
            [
                "# The site's slurm.conf, kept by its configuration management.",
                f"ClusterName={lc.spec.cluster.name}",
                f"SlurmctldHost={host}(127.0.0.1)",
                f"SlurmctldPort={site.slurmctld_port}",
                f"SlurmdPort={site.slurmd_port}",
                "SlurmUser=root",
                "SlurmdUser=root",
                "AuthType=auth/munge",
                "CredType=cred/munge",
                f"AuthInfo=socket={site.munge_socket}",
                f"StateSaveLocation={site.state_save_location}",
                f"SlurmdSpoolDir={site.slurmd_spool_dir}",
                f"SlurmctldPidFile={site.run_dir}/slurmctld.pid",
                f"SlurmdPidFile={site.run_dir}/slurmd-%n.pid",
                f"SlurmctldLogFile={site.log_dir}/slurmctld.log",
                f"SlurmdLogFile={site.log_dir}/slurmd-%n.log",
                "ProctrackType=proctrack/linuxproc",
                "TaskPlugin=task/none",
                "JobAcctGatherType=jobacct_gather/none",
                "MpiDefault=none",
                "ReturnToService=2",
                "MinJobAge=300",
                "KillWait=30",
                "SchedulerType=sched/backfill",
                "SchedulerParameters=sched_interval=2,sched_min_interval=100000,bf_interval=5",
                "SelectType=select/cons_tres",
                "SelectTypeParameters=CR_Core_Memory",
                "PriorityType=priority/multifactor",
                "PriorityWeightFairshare=1000",
                "PriorityWeightQOS=10000",
                "AccountingStorageType=accounting_storage/slurmdbd",
                "AccountingStorageHost=localhost",
                f"AccountingStoragePort={site.slurmdbd_port}",
                f"AccountingStoragePass={site.munge_socket}",
                "AccountingStorageEnforce=associations",
                "JobCompType=jobcomp/none",
                "JobSubmitPlugins=lua",
                f"PlugStackConfig={L.etc / 'plugstack.conf'}",
                f"Prolog={L.etc / 'site-prolog.sh'}",
                "SlurmdParameters=config_overrides",
                *nodes,
                "PartitionName=batch Nodes=cpu[1-2] Default=YES MaxTime=UNLIMITED State=UP",
                "",
            ]
        )

    def boot_site(self) -> None:
        """Start the site as it was before slurm-pool: its configs, daemons, accounting and CPU nodes."""
        lc, L = self.pool, self.pool.layout
        lc.prepare()
        for n in SITE_NODES:
            (L.root / "spool" / "d" / n).mkdir(parents=True, exist_ok=True)
        site = lc.site()
        version = lc.slurm_version()
        ctx = build_context(lc.spec, site, version)
        env = jinja_environment(default_templates_dir())
        ensure_jwt_key(lc.jwt_key_path, site.slurm_user)  # slurmdbd.conf of this machine names it
        dbd = L.etc / "slurmdbd.conf"
        dbd.write_text(render_template(env, "slurmdbd.conf.j2", ctx))
        dbd.chmod(0o600)
        L.slurm_conf.write_text(self._site_conf())
        (L.etc / "gres.conf").write_text("# The site's gres.conf: its CPU nodes have none.\n")
        (L.etc / "plugstack.conf").write_text("# The site's SPANK plugins (none yet).\n")
        (L.etc / "job_submit.lua").write_text(SITE_JOB_SUBMIT)
        prolog = L.etc / "site-prolog.sh"
        prolog.write_text(SITE_PROLOG.format(marks=self.marks))
        prolog.chmod(0o755)
        lc.start_services()
        try:
            pwd.getpwnam("dave")
        except KeyError:
            subprocess.run(["useradd", "--create-home", "--shell", "/bin/bash", "dave"], check=True)
        self._sacctmgr("add", "cluster", lc.spec.cluster.name)
        for argv in SITE_ACCOUNTING:
            self._sacctmgr(*argv)
        lc.start_controller()
        lc.start_nodes(list(SITE_NODES))

    def _sacctmgr(self, *argv: str) -> None:
        self.handle.run(["sacctmgr", "-i", *argv], check=True)

    def snapshot(self) -> dict[str, str]:
        """The site's accounting objects as `sacctmgr -P -n show` prints them."""
        shown = {
            what[0]: self.handle.run(["sacctmgr", "-P", "-n", "show", *what], check=True).stdout for what in SNAPSHOT
        }
        return {
            what: "".join(sorted(text.splitlines(keepends=True))) for what, text in shown.items()
        }  # row order varies

    def accounting(self) -> dict[str, list[str]]:
        """Every QOS, account, association and user as `sacctmgr -P -n show` prints them (all its default
        fields), sorted (row order varies)."""
        return {
            what: sorted(self.handle.run(["sacctmgr", "-P", "-n", "show", what], check=True).stdout.splitlines())
            for what in ("qos", "account", "assoc", "user")
        }

    def files(self) -> dict[Path, tuple[bytes, int]]:
        """Every regular file under the site's configuration directory: its bytes and mode."""
        return {
            p: (p.read_bytes(), p.stat().st_mode & 0o7777)
            for p in sorted(self.pool.layout.etc.rglob("*"))
            if p.is_file() and not p.is_symlink()
        }

    # -- installing slurm-pool, as docs/adoption.md says ----------------------------
    def adopt(self) -> list[str]:
        """Install the pool into the running site; return what `apply accounting --prune` printed."""
        lc, L = self.pool, self.pool.layout
        site, version = lc.site(), lc.slurm_version()
        # 1. Slurm loads one job_submit.lua: the site's moves aside, the pool's chains it.
        shutil.move(L.etc / "job_submit.lua", L.etc / "site_job_submit.lua")
        # 2. The pool's files, rendered for this Slurm.
        files = render_all(lc.spec, site, version)
        for name, text in files.items():
            (L.etc / name).write_text(text)
        # 3. Prolog and epilog as glob directories: the site's script and the pool's hook side by side.
        for kind in ("prolog", "epilog"):
            (L.etc / f"{kind}.d").mkdir(exist_ok=True)
        shutil.move(L.etc / "site-prolog.sh", L.etc / "prolog.d" / "10-site")
        lc.write_node_files(build_context(lc.spec, site, version))
        for kind in ("prolog", "epilog"):
            hook = L.etc / f"{kind}.d" / "50-slurm-pool"
            shutil.copy(L.root / "bin" / f"slurm-pool-{kind}", hook)
            hook.chmod(0o755)
        # 4. The site's slurm.conf, gres.conf and plugstack.conf take the pool in.
        conf = merge_settings(L.slurm_conf.read_text(), lc.spec, version, L.etc)
        deny = ",".join(pool_qos(lc.spec))  # as site-settings.conf says (coexist.site_partitions)
        conf += (
            f"PartitionName={SITE_GPU_PARTITION} Nodes={','.join(SITE_GPU_NODES)} MaxTime=UNLIMITED State=UP"
            f" DenyQos={deny}\n"
        )
        L.slurm_conf.write_text(conf)
        gres = [f"Include {L.etc / name}" for name in files if name.startswith("gres-")]
        with (L.etc / "gres.conf").open("a") as f:
            f.write("\n".join(gres) + "\n")
        with (L.etc / "plugstack.conf").open("a") as f:
            f.write(f"include {L.etc / 'plugstack-slurm-pool.conf'}\n")
        # 5. Accounting (QOS before slurmctld reads partitions that allow them), then the new nodes.
        out = [self.apply_accounting()]
        lc.restart_controller()
        out.append(self.apply_accounting())
        # Every slurmd reads the new slurm.conf: the site's (their Prolog moved) and the pool's (new).
        for n in SITE_NODES:
            lc.procs.stop(f"slurmd-{n}")
        lc.start_nodes([*SITE_NODES, *lc.nodes()])
        return out

    def apply_accounting(self) -> str:
        """`slurm-pool apply accounting --prune`, the CLI way, against this cluster."""
        res = subprocess.run(
            [sys.executable, "-m", "slurm_pool", "apply", "accounting", str(self.spec_path), "--prune"],
            capture_output=True,
            text=True,
            env={**os.environ, **self.pool.layout.env()},
            cwd=REPO,
            timeout=300,
        )
        if res.returncode:
            raise AssertionError(f"apply accounting failed ({res.returncode}):\n{res.stdout}\n{res.stderr}")
        return res.stdout

    def missing_settings(self) -> list[str]:
        """The cluster-wide settings the pool needs that the running slurmctld lacks."""
        config = parse_config_text(self.handle.run(["scontrol", "show", "config"], check=True).stdout)
        return [s.key for s in missing(cluster_settings(self.pool.spec, self.handle.version), config)]

    def cancel_all(self) -> None:
        """Cancel every job (the site's users' too) and wait for an empty queue and idle nodes."""
        self.handle.cancel_all()

    def pending_priorities(self) -> list[str]:
        """``sprio``'s line for each of :data:`PENDING_SITE_JOBS`, without the job id, submitted while one job
        holds every node of the site's partition (so that they wait); every job is cancelled afterwards."""
        h = self.handle
        script = "#!/bin/sh\nsleep 3600\n"
        jobs: list[int] = []
        try:
            whole = ("-p", "batch", "-N", str(len(SITE_NODES)), "--exclusive", "-o", "/dev/null")
            blocker = h.sbatch(*whole, user="dave", script=script)
            jobs.append(blocker)
            h.wait_state(blocker, ["RUNNING"], timeout=60)
            waiting = [
                h.sbatch("-p", "batch", "-o", "/dev/null", *args, user=user, script=script)
                for user, args in PENDING_SITE_JOBS
            ]
            jobs += waiting
            ids = ",".join(map(str, waiting))

            def listed() -> list[str] | None:
                out = h.run(["sprio", "-h", "-j", ids, "-o", SPRIO_FORMAT], check=True).stdout
                lines = [line.split(None, 1)[1] for line in out.splitlines() if line.strip()]
                return lines if len(lines) == len(waiting) else None

            return list(wait_for(listed, 60, "sprio to list the waiting site jobs"))
        finally:
            if jobs:
                h.run(["scancel", *map(str, jobs)])
            h.cancel_all()

    def down(self) -> None:
        self.pool.down()
        subprocess.run(["pkill", "-f", f"{self.state}/"], check=False)


def merge_settings(conf: str, spec: PoolSpec, version: SlurmVersion, etc: Path) -> str:
    """The site's slurm.conf with the pool's cluster-wide settings merged in, as config management would:
    a list gains the pool's items, a single value is replaced, a missing key is added; then the Include."""
    lines = conf.splitlines()
    index = {line.split("=", 1)[0]: i for i, line in enumerate(lines) if "=" in line and not line.startswith("#")}
    for s in cluster_settings(spec, version):
        if s.match == "manual":
            continue
        if s.key in index and s.match == "contains":
            i = index[s.key]
            have = lines[i].split("=", 1)[1].split(",")
            lines[i] = f"{s.key}=" + ",".join(have + [v for v in s.value.split(",") if v not in have])
        elif s.key in index:
            lines[index[s.key]] = s.line
        else:
            lines.append(s.line)
    lines.append(f"Include {etc / 'slurm-pool.conf'}")
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="session")
def brownfield_site():
    """The site's cluster with slurm-pool installed, shared by every ``test_brownfield*`` module (one worker
    runs them all); ``sprio_before`` holds :meth:`SiteCluster.pending_priorities` from before the install."""
    state = Path(tempfile.mkdtemp(prefix="slurm-pool-site-", dir="/var/tmp"))
    state.chmod(0o755)
    sc = SiteCluster(state, os.environ.get("SLURM_POOL_TEST_SLURM") or None)
    try:
        sc.boot_site()
        sc.before = sc.snapshot()
        sc.missing_before = sc.missing_settings()
        # The site works before the pool exists.
        job = sc.handle.sbatch("-o", "/dev/null", user="dave", script="#!/bin/sh\ntrue\n")
        sc.handle.wait_state(job, ["COMPLETED"], timeout=60)
        sc.sprio_before = sc.pending_priorities()
        # everything of the site's, for `slurm-pool uninstall` to leave as it was (test_brownfield_uninstall_e2e.py)
        sc.accounting_before = sc.accounting()
        sc.files_before = sc.files()
        sc.adoption = sc.adopt()
    except BaseException:
        logs = daemon_logs(state)
        sc.down()
        raise RuntimeError(f"the site cluster failed to start or adopt the pool; logs:\n{logs}") from None
    yield sc
    sc.down()
    if not os.environ.get("SLURM_POOL_KEEP_STATE"):
        shutil.rmtree(state, ignore_errors=True)
