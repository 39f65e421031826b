"""Schema of the pool spec, version 1.

Every model forbids unknown keys.  Field-level rules live here; rules that
relate several fields (nodes named by a partition exist, the preemption graph
has no cycle, MIG layouts fit their GPU) live in :mod:`slurm_pool.spec.rules`.
"""

from __future__ import annotations

from typing import Annotated, Literal, Optional

from pydantic import AfterValidator, Field, field_validator

from slurm_pool import text
from slurm_pool.mig.catalogue import GPU_MODELS, canonical_model
from slurm_pool.spec.adopt import Adopt
from slurm_pool.spec.base import Feature, Host, Name, PlainPath, SlurmTime, Strict, User
from slurm_pool.spec.bridge import Bridge
from slurm_pool.spec.coexist import Coexist
from slurm_pool.spec.console import Console
from slurm_pool.spec.guarantees import Guarantee, Guarantees
from slurm_pool.spec.notebooks import Notebooks
from slurm_pool.spec.ranges import check_cluster_name, check_tres, check_usage_factor, ranged

PreemptMode = Literal["off", "cancel", "requeue", "suspend"]


class Cluster(Strict):
    #: slurm.conf's ClusterName (at most 40 characters).
    name: Annotated[Name, AfterValidator(check_cluster_name)]
    #: slurm.conf's SlurmctldHost.
    control_host: Host = "localhost"
    #: slurmctld serves its own counts over HTTP on SlurmctldPort (``MetricsType=metrics/openmetrics``,
    #: Slurm 25.11+), which the exporter reads instead of counting job lists.
    openmetrics: bool = False


#: Bounds that keep rendered numbers sane (Slurm's own fields: :mod:`slurm_pool.spec.ranges`).
MAX_WARN_SECONDS = 86400


def _description(v: str) -> str:
    """sacctmgr -P separates fields with "|"; a description is one printable line without it or quotes."""
    return text.check_free_text(v, "", max_len=120, forbid="|'\"")


#: A QOS or account description (sacctmgr's Description=).
Description = Annotated[str, AfterValidator(_description)]
#: Signals sbatch --signal can send that a job may catch (not KILL or STOP).
#: Shards per GPU: Slurm counts them in 64 bits, but more jobs than this on one GPU make no sense.
MAX_SHARDS_PER_GPU = 1024
CHECKPOINT_SIGNALS = ("USR1", "USR2", "TERM", "INT", "HUP", "CONT", "URG", "ALRM", "QUIT", "XCPU")


#: gres.conf(5) Cores: core indexes as a comma-separated list of indexes and ranges ("0-7", "0,2,4-6").
CORE_LIST_RE = text.INDEX_LIST_RE


def core_indexes(value: str) -> list[int]:
    """The core indexes of a gres.conf ``Cores=`` list (already of :data:`CORE_LIST_RE`'s shape)."""
    out: list[int] = []
    for part in value.split(","):
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out


def _core_list(v: str) -> str:
    if not text.matches(CORE_LIST_RE, v):
        raise ValueError(f"{v!r} is not a list of core indexes and ranges (e.g. '0-7' or '0,2,4-6')")
    for part in v.split(","):
        lo, _, hi = part.partition("-")
        if hi and int(hi) < int(lo):
            raise ValueError(f"{v!r}: the range {part!r} runs backwards")
    return v


def _gres_type(v: str) -> str:
    if not text.matches("gres-type", v):
        raise ValueError(f"{v!r} is not {text.SHAPES['gres-type']}")
    return v


#: A site's own GRES Type for a GPU model, as its users type it (``--gres=gpu:a100``).
GresType = Annotated[str, AfterValidator(_gres_type)]


class Gpus(Strict):
    """The GPUs of every node in a group.

    ``mig`` is a list with one entry per GPU index: ``null`` (MIG off, whole
    GPU) or a list of MIG profile names (MIG on; ``[]`` is an empty GPU).
    ``layouts`` names the MIG layouts the GPUs may take, each in the shape of
    ``mig``; every name becomes a changeable node feature (Slurm 24.05+, see
    :mod:`slurm_pool.mig.features`) that jobs ask for with ``--constraint``.
    ``shards`` shares every GPU without MIG: Slurm's ``gres/shard``, this many
    per GPU (a group uses MIG or shards, never both).
    """

    model: str
    count: int = Field(ge=0, le=64)
    mig: Optional[list[Optional[list[str]]]] = None
    layouts: Optional[dict[str, list[Optional[list[str]]]]] = None
    shards: Optional[int] = Field(default=None, ge=1, le=MAX_SHARDS_PER_GPU)
    #: gres.conf's ``Cores=`` (gres.conf(5)): the core indexes near each GPU, one entry per GPU, or one for all.
    cores: Optional[list[Annotated[str, AfterValidator(_core_list)]]] = None
    #: The site's own GRES Type for these whole GPUs (``a100`` for ``--gres=gpu:a100``) instead of the name
    #: NVML's autodetection gives the model; MIG instances keep theirs.  Read it through :meth:`gres_type`.
    type: Optional[GresType] = None

    def gres_type(self) -> str:
        """GRES Type of one whole GPU of the group: the site's ``type``, else the catalogue's for the model."""
        if self.type is not None:
            return self.type
        model = GPU_MODELS.get(self.model)
        return model.slurm_type if model is not None else self.model

    @field_validator("layouts")
    @classmethod
    def _layout_names(cls, v: Optional[dict[str, list]]) -> Optional[dict[str, list]]:
        from slurm_pool.mig.features import LAYOUT_FEATURE_RE

        for name in v or {}:
            if not text.matches(LAYOUT_FEATURE_RE, name):
                raise ValueError(
                    f"layout name {name!r} is not a Slurm node feature name (a letter or '_', then letters, "
                    "digits, '_' or '.'; at most 64)"
                )
        if v is not None and not v:
            raise ValueError("name at least one layout, or leave layouts out")
        return v

    @field_validator("model")
    @classmethod
    def _canonical_model(cls, v: str) -> str:
        # An alias or the name nvidia-smi prints becomes the catalogue name; an unknown one is reported by the rules.
        return canonical_model(v) or v


class NodeGroup(Strict):
    """A group of alike nodes: one ``NodeName=`` line (slurm.conf(5)) and its gres.conf lines.

    ``memory_mb`` is the nodes' ``RealMemory``.  The optional attributes pass
    through under slurm.conf's names; left out, the line leaves them out and
    Slurm's defaults hold.  Rules across them: :mod:`slurm_pool.spec.rules`.
    """

    name: Name
    hosts: str = Field(min_length=1)
    cpus: Annotated[int, ranged("node.cpus")]
    memory_mb: Annotated[int, ranged("node.real_memory")]
    gpus: Optional[Gpus] = None
    # Written into slurm.conf's Features=: a word, never a separator or a newline.
    features: list[Feature] = []
    sockets: Annotated[Optional[int], ranged("node.sockets")] = None
    cores_per_socket: Annotated[Optional[int], ranged("node.cores_per_socket")] = None
    threads_per_core: Annotated[Optional[int], ranged("node.threads_per_core")] = None
    #: MB of ``memory_mb`` kept for the system (MemSpecLimit), below it.
    mem_spec_limit: Annotated[Optional[int], ranged("node.mem_spec_limit")] = None
    #: MB of the nodes' TmpFS (TmpDisk).
    tmp_disk: Annotated[Optional[int], ranged("node.tmp_disk")] = None
    #: Scheduling weight: the lowest weight that fits is allocated first (Weight).
    weight: Annotated[Optional[int], ranged("node.weight")] = None

    def core_count(self) -> int:
        """Cores of a node: Sockets x CoresPerSocket when given, else its CPUs over its threads per core."""
        if self.sockets is not None and self.cores_per_socket is not None:
            return self.sockets * self.cores_per_socket
        return max(1, self.cpus // (self.threads_per_core or 1))


class TierPolicy(Strict):
    """What the generated job_submit.lua enforces for jobs in one tier."""

    max_gpus_per_job: Annotated[Optional[int], Field(default=None, ge=1), ranged("tres.count")] = None
    require_time_limit: bool = False
    checkpoint: Literal["none", "reject", "add_requeue"] = "none"
    #: A job asking for one GPU of no type gets this many shards of a shared GPU instead.
    gpu_shards: Optional[int] = Field(default=None, ge=1, le=MAX_SHARDS_PER_GPU)


class Tier(Strict):
    """A pool tier: one Slurm QOS, used by one or more partitions."""

    name: Name
    description: Description = ""
    priority: Annotated[int, ranged("qos.priority")]
    preempt: list[Name] = []
    preempt_mode: PreemptMode = "off"
    grace_time: Annotated[int, ranged("qos.grace_time")] = 0
    usage_factor: Annotated[float, AfterValidator(check_usage_factor)] = 1.0
    grp_tres: dict[str, int] = {}
    max_tres_per_user: dict[str, int] = {}
    policy: TierPolicy = TierPolicy()

    @field_validator("grp_tres", "max_tres_per_user")
    @classmethod
    def _tres(cls, v: dict[str, int]) -> dict[str, int]:
        for key, val in v.items():
            if not text.matches("tres", key):
                raise ValueError(f"{key!r} is not a TRES name (cpu, mem, node, billing, gres/gpu[:type])")
            if val < 0:
                raise ValueError(f"{key}={val} is negative")
        return check_tres(v)


class Partition(Strict):
    name: Name
    nodes: list[str] = Field(min_length=1)
    tier: Name
    priority_tier: Annotated[int, ranged("partition.priority_tier")]
    preempt_mode: Optional[PreemptMode] = None
    grace_time: Annotated[Optional[int], ranged("partition.grace_time")] = None
    default: bool = False
    max_time: SlurmTime = "UNLIMITED"
    default_time: Optional[SlurmTime] = None
    allow_accounts: Optional[list[Name]] = None


class Project(Strict):
    """A project: one Slurm account, its users, owned nodes or floating guarantee, and allowed tiers."""

    name: Name
    description: Description = ""
    users: list[User] = []
    owns: list[Name] = []
    #: GPUs promised anywhere in the pool's guaranteed partition (:mod:`slurm_pool.spec.guarantees`).
    guarantee: Guarantee = {}
    tiers: list[Name] = Field(min_length=1)
    default_tier: Optional[Name] = None
    fairshare: Annotated[int, ranged("association.fairshare")] = 1


class Scheduler(Strict):
    """Scheduler timing.  Small values make preemption prompt."""

    sched_interval: Annotated[int, ranged("sched_interval")] = 60
    sched_min_interval_us: Annotated[int, ranged("sched_min_interval")] = 2_000_000
    bf_interval: Annotated[int, ranged("bf_interval")] = 30
    message_timeout: Annotated[int, ranged("message_timeout")] = 10
    kill_wait: Annotated[int, ranged("kill_wait")] = 30
    def_mem_per_cpu: Annotated[int, ranged("def_mem_per_cpu")] = 1024
    requeue_exit: list[Annotated[int, ranged("exit_code")]] = [85]
    #: Slurm's MaxBatchRequeue (rendered from 23.02 on).  From 24.05 every preemption counts, for the
    #: job's whole life, so Slurm's default of 5 holds a scavenger job on its 5th preemption.  Prolog
    #: failures count too, but each one drains its node, so they cannot loop.  At most 65000: Slurm
    #: keeps the count in 16 bits.
    max_batch_requeue: Annotated[int, ranged("max_batch_requeue")] = 1000


class Policy(Strict):
    """Switches for the generated job_submit.lua."""

    job_submit: bool = True
    on_error: Literal["reject", "accept"] = "reject"
    default_tier: Optional[Name] = None
    right_size_mig: bool = True
    #: Named in job_submit.lua's messages to users.
    admin_contact: str = Field(default="your cluster administrators", min_length=1, max_length=200)


class Checkpoint(Strict):
    """Defaults for checkpoint-on-preempt."""

    base_dir: PlainPath = "/var/lib/slurm-pool/checkpoints"
    signal: str = "USR1"
    warn_seconds: int = Field(default=120, ge=0, le=MAX_WARN_SECONDS)
    max_self_requeues: int = Field(default=5, ge=0, le=1000)

    @field_validator("signal")
    @classmethod
    def _catchable_signal(cls, v: str) -> str:
        name = v.removeprefix("SIG")
        if name not in CHECKPOINT_SIGNALS:
            raise ValueError(
                f"{v!r} is not a signal a job can catch to checkpoint (one of {', '.join(CHECKPOINT_SIGNALS)})"
            )
        return v


class Health(Strict):
    """Prolog/epilog and HealthCheckProgram wiring."""

    prolog: bool = True
    epilog: bool = True
    health_check_interval: Annotated[int, ranged("health_check_interval")] = 300


class PoolSpec(Strict):
    version: Literal[1]
    cluster: Cluster
    node_groups: list[NodeGroup] = Field(min_length=1)
    tiers: list[Tier] = Field(min_length=1)
    partitions: list[Partition] = Field(min_length=1)
    projects: list[Project] = Field(min_length=1)
    scheduler: Scheduler = Scheduler()
    policy: Policy = Policy()
    checkpoint: Checkpoint = Checkpoint()
    health: Health = Health()
    #: The Slurm <-> Kubernetes rebalancer; absent: defaults, checked when it runs.
    bridge: Optional[Bridge] = None
    #: JupyterHub's notebook servers as Slurm jobs; absent: no notebook tier.
    notebooks: Optional[Notebooks] = None
    #: The web console and REST API (``slurm-pool serve``); present, Slurm also accepts JWTs.
    console: Optional[Console] = None
    #: The pool shares a cluster the site already runs (see :mod:`slurm_pool.spec.coexist`); absent: it owns it.
    coexist: Optional[Coexist] = None
    #: A site's own accounts and QOS the pool manages although it did not create them.
    adopt: Adopt = Adopt()
    #: Floating guarantees (projects' ``guarantee``); absent: owners have only the nodes they own.
    guarantees: Optional[Guarantees] = None

    def tier(self, name: str) -> Tier:
        return next(t for t in self.tiers if t.name == name)

    def group(self, name: str) -> NodeGroup:
        return next(g for g in self.node_groups if g.name == name)
