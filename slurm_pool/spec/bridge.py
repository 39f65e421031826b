"""Schema of the optional ``bridge:`` section: lending idle Slurm nodes to KServe.

The bridge (``slurm-pool rebalance``, :mod:`slurm_pool.bridge`) lends idle
nodes of the lend partition to a Kubernetes inference tier off-peak and takes
them back when Slurm needs them.  Everything here has a default, so a spec
without ``bridge:`` gets the example pool's names (partition and QOS
``k8s-lend``, account ``k8s-bridge``, user ``slurmpool``).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Annotated, Literal, Optional

from pydantic import AfterValidator, Field, field_validator

from slurm_pool import text
from slurm_pool.spec.base import CommandLine, K8sLabel, K8sName, Name, PlainPath, Strict, User
from slurm_pool.wellknown import BRIDGE_ACCOUNT, BRIDGE_USER, LEND_PARTITION, LEND_QOS

if TYPE_CHECKING:  # pragma: no cover
    from slurm_pool.spec.model import PoolSpec

Day = Literal["mon", "tue", "wed", "thu", "fri", "sat", "sun"]
DAYS: tuple[Day, ...] = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
#: Seconds a run may spend outside its waits (reads, patches, submissions) within its Lease.
LEASE_MARGIN = 60
#: Seconds the placeholder's fence needs beyond the pods' grace (the API calls, Slurm's signal).
FENCE_MARGIN = 5
CLOCK_RE = re.compile(r"(?:[01][0-9]|2[0-3]):[0-5][0-9]|24:00")
#: A Kubernetes resource name (``nvidia.com/gpu``, ``nvidia.com/mig-3g.20gb``): a qualified name, its prefix a
#: DNS-1123 subdomain of at most 253 (IsQualifiedName, k8s.io/apimachinery/pkg/util/validation/validation.go).
RESOURCE_RE = re.compile(
    r"(?:(?=[-a-z0-9.]{1,253}/)[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
)
# Which of Kubernetes' name rules each name of this section takes, as the API server checks it
# (k8s.io/apimachinery/pkg/util/validation/validation.go; the kinds' validation in k8s.io/kubernetes
# pkg/apis/*/validation): namespaces are DNS-1123 labels (``K8sLabel``); Lease, PriorityClass and Node names
# and a pod's schedulerName DNS-1123 subdomains (``K8sName``); PriorityClass names may not start ``system-``.

#: Kubernetes keeps PriorityClass names starting so for its own (ValidatePriorityClass, k8s.io/kubernetes
#: pkg/apis/scheduling/validation/validation.go: "priority class names with 'system-' prefix are reserved").
SYSTEM_PRIORITY_PREFIX = "system-"
#: A Slurm job state reason (``JobHeldUser``).
REASON_RE = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,63}")
#: A Kubernetes label selector (``app=x,tier!=y``, ``env in (a,b)``): printable ASCII, no quotes.
SELECTOR_RE = re.compile(r"[A-Za-z0-9 ._/=!,()-]*")
#: An http(s) URL without spaces or quotes.
URL_RE = re.compile(r"https?://[A-Za-z0-9._~:/?#\[\]@!$&()*+,;=%-]+")


def _matching(pattern: "re.Pattern[str]", shape: str) -> AfterValidator:
    def check(v: str) -> str:
        if not pattern.fullmatch(v):
            raise ValueError(f"{v!r} does not match {shape}")
        return v

    return AfterValidator(check)


Resource = Annotated[str, _matching(RESOURCE_RE, "a Kubernetes resource name such as nvidia.com/gpu")]
Reason = Annotated[str, _matching(REASON_RE, "a Slurm job reason such as JobHeldUser")]
Selector = Annotated[str, _matching(SELECTOR_RE, "a Kubernetes label selector (letters, digits, . _ / = ! , ( ) -)")]
Url = Annotated[str, _matching(URL_RE, "an http:// or https:// URL")]


class OffPeakWindow(Strict):
    """A daily time window (local time of ``bridge.timezone``) when lending is allowed.

    ``end`` at or before ``start`` wraps past midnight; the window then belongs
    to the day it starts on (``fri 19:00-07:00`` ends on Saturday morning).
    """

    start: str
    end: str
    days: list[Day] = list(DAYS)

    @field_validator("start", "end")
    @classmethod
    def _clock(cls, v: str) -> str:
        if not CLOCK_RE.fullmatch(v):
            raise ValueError(f"{v!r} is not a time of day (HH:MM, 00:00 to 24:00)")
        return v

    @field_validator("days")
    @classmethod
    def _days(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError("names no day")
        return v


class ForecastSettings(Strict):
    """Forecast-driven lending: look ahead by hour of week (:mod:`slurm_pool.bridge.forecast`)."""

    #: History the forecasts are made from: sacct for Slurm, Prometheus for inference.
    history_days: int = Field(default=28, ge=1, le=366)
    #: Quantile of each hour's history.  Slurm's is per hour of the week; inference's per hour of the
    #: day (``inference_cycle: day``, more samples from a short history) or of the week.  A high
    #: inference quantile lends ahead of most rises (bench/forecast_replay.py: fewer cold starts); a
    #: high Slurm quantile lends less, for fewer reclaims.
    slurm_quantile: float = Field(default=0.5, ge=0, le=1)
    inference_quantile: float = Field(default=0.9, ge=0, le=1)
    inference_cycle: Literal["day", "week"] = "day"
    #: A model's cold start: nodes are lent this far ahead of a forecast inference rise.
    warmup_seconds: int = Field(default=600, ge=0, le=86400)
    #: Where the exporter's inference demand (``inference_query``) is kept.
    prometheus_url: Url = "http://127.0.0.1:9090"
    inference_query: str = Field(default="slurm_pool_inference_demand_gpus", min_length=1, max_length=4096)


#: A Kubernetes label key: an optional DNS subdomain prefix and '/', then a name of up to 63 characters.
LABEL_KEY_RE = re.compile(
    r"(?:[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?)*/)?"
    r"[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
)
#: Where the node's name goes in a ``node_names.rule`` template.
NODE_MARK = "{node}"
#: What a rule template may hold around ``{node}``: characters of that system's node names.
SLURM_AFFIX_RE = re.compile(r"[A-Za-z0-9._-]{0,63}")
K8S_AFFIX_RE = re.compile(r"[a-z0-9.-]{0,63}")


def _label_key(v: str) -> str:
    if not LABEL_KEY_RE.fullmatch(v) or len(v.rpartition("/")[0]) > 253:
        raise ValueError(f"{v!r} is not a Kubernetes label key such as slurm-pool/slurm-node")
    return v


LabelKey = Annotated[str, AfterValidator(_label_key)]


def _template(affix: "re.Pattern[str]", chars: str) -> AfterValidator:
    def check(v: str) -> str:
        head, mark, tail = v.partition(NODE_MARK)
        if not mark or NODE_MARK in tail:
            raise ValueError(f"{v!r} must hold {NODE_MARK} exactly once")
        if len(head) + len(tail) > 63 or not (affix.fullmatch(head) and affix.fullmatch(tail)):
            raise ValueError(f"{v!r}: around {NODE_MARK} only {chars} (63 in all)")
        return v

    return AfterValidator(check)


SlurmTemplate = Annotated[str, _template(SLURM_AFFIX_RE, "letters, digits, '.', '_' and '-'")]
K8sTemplate = Annotated[str, _template(K8S_AFFIX_RE, "lower-case letters, digits, '.' and '-'")]


class NodeNames(Strict):
    """How a Slurm node is matched with its Kubernetes Node (:mod:`slurm_pool.bridge.names`).

    ``by: name`` (the default): the same name.  ``by: label``: the Kubernetes Node
    carries ``label`` with the Slurm node's name as its value.  ``by: rule``: the
    names differ by fixed text around a common part, ``slurm: "gpu{node}"`` and
    ``kubernetes: "k8s-{node}.example.org"`` match Slurm's ``gpu01`` with
    Kubernetes' ``k8s-01.example.org``.  Each setting is read only with its ``by``.
    """

    by: Literal["name", "label", "rule"] = "name"
    label: LabelKey = "slurm-pool/slurm-node"
    slurm: SlurmTemplate = NODE_MARK
    kubernetes: K8sTemplate = NODE_MARK

    def k8s_name(self, slurm: str) -> str | None:
        """The Kubernetes Node name of Slurm node ``slurm`` where the rule alone tells (not ``by: label``)."""
        if self.by == "name":
            return slurm
        if self.by == "rule":
            core = _template_core(self.slurm, slurm)
            name = None if core is None else self.kubernetes.replace(NODE_MARK, core, 1)
            return name if text.matches("k8s-name", name) else None
        return None

    def slurm_name(self, k8s: str) -> str | None:
        """The Slurm node name of Kubernetes Node ``k8s`` where the rule alone tells (not ``by: label``)."""
        if self.by == "name":
            return k8s
        if self.by == "rule":
            core = _template_core(self.kubernetes, k8s)
            name = None if core is None else self.slurm.replace(NODE_MARK, core, 1)
            return name if text.matches("node", name) else None
        return None


def _template_core(template: str, name: str) -> str | None:
    """The part of ``name`` that stands for ``{node}`` in ``template`` (None: ``name`` does not fit)."""
    head, _, tail = template.partition(NODE_MARK)
    if len(name) <= len(head) + len(tail) or not (name.startswith(head) and name.endswith(tail)):
        return None
    return name[len(head) : len(name) - len(tail)]


#: The most a PriorityClass value may be for users' pods (values above are reserved for the system).
PRIORITY_MAX = 1_000_000_000


def _priority_class_name(v: str) -> str:
    if v.startswith(SYSTEM_PRIORITY_PREFIX):
        raise ValueError(
            f"{v!r} starts with {SYSTEM_PRIORITY_PREFIX!r}, which Kubernetes keeps for its own PriorityClasses"
        )
    return v


class PriorityClassSpec(Strict):
    """A Kubernetes PriorityClass ``render`` writes (``k8s-priorityclasses.yaml``) for training and batch pods."""

    name: Annotated[K8sName, AfterValidator(_priority_class_name)]
    value: int = Field(ge=-PRIORITY_MAX, le=PRIORITY_MAX)
    description: str = Field(default="", max_length=1024)
    #: ``Never``: pods of this class wait rather than preempt lower ones (Kubernetes' preemptionPolicy).
    preemption: Literal["PreemptLowerPriority", "Never"] = "PreemptLowerPriority"

    @field_validator("description")
    @classmethod
    def _plain(cls, v: str) -> str:
        if text.has_control(v):
            raise ValueError(f"{v!r} holds control characters")
        return v


class GangSettings(Strict):
    """``bridge.gangs``: lending to Volcano gang jobs (``batch.volcano.sh`` Jobs, ``minAvailable``).

    A pending PodGroup of ``scheduler_name`` is one indivisible unit: its ``minMember`` pods
    are lent for all at once or not at all, and the nodes lent for it are one group, given
    back and reclaimed as one (its vcjob stopped with a bus Command, never pod by pod).
    """

    scheduler_name: K8sName = "volcano"
    #: Namespaces whose gangs count (empty: all).
    namespaces: list[K8sLabel] = []
    #: Who gets a free node first when inference and a gang both want it.
    first: Literal["inference", "gangs"] = "inference"
    #: The longest ``terminationGracePeriodSeconds`` a gang's pods may have to be lent for: a
    #: reclaim gives them that long to checkpoint, inside ``fence_seconds`` (checked).
    grace_seconds: int = Field(default=20, ge=0, le=3600)
    #: PriorityClasses ``render`` writes next to the bridge's RBAC (training above batch).
    priority_classes: list[PriorityClassSpec] = []

    @field_validator("priority_classes")
    @classmethod
    def _unique(cls, v: list[PriorityClassSpec]) -> list[PriorityClassSpec]:
        names = [c.name for c in v]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"PriorityClass {dup[0]!r} is named twice")
        return v


class Bridge(Strict):
    """How ``slurm-pool rebalance`` lends nodes to Kubernetes and takes them back."""

    enabled: bool = True
    #: Slurm side: the placeholder job that holds a lent node.
    partition: Name = LEND_PARTITION
    qos: Name = LEND_QOS
    account: Name = BRIDGE_ACCOUNT
    user: Optional[User] = BRIDGE_USER
    #: When lending is allowed (an allow-list; empty: at any time).  Outside every window lent
    #: nodes are reclaimed, unless ``lend_outside_off_peak`` lets inference demand alone decide.
    off_peak: list[OffPeakWindow] = [OffPeakWindow(start="19:00", end="07:00")]
    timezone: Optional[str] = None
    lend_outside_off_peak: bool = False
    max_lent_nodes: Optional[int] = Field(default=None, ge=0)
    #: Kubernetes side.
    kserve_namespace: Optional[K8sLabel] = None
    kserve_selector: Selector = ""
    node_selector: Selector = ""
    gpu_resource: Resource = "nvidia.com/gpu"
    #: How a Slurm node's Kubernetes Node is found (default: the same name).
    node_names: NodeNames = NodeNames()
    #: Seconds one run waits for a placeholder to start and for evicted pods to go.
    placeholder_start_timeout: int = Field(default=30, ge=0)
    reclaim_wait: int = Field(default=45, ge=0)
    #: One run at a time: the Kubernetes Lease a run holds (:mod:`slurm_pool.bridge.lease`), and for how
    #: long; it must outlast a run's waits, so that a live run never loses it.
    lease_namespace: K8sLabel = "default"
    lease_name: K8sName = "slurm-pool-rebalance"
    lease_seconds: int = Field(default=300, ge=1, le=86400)
    #: Delete pods whose eviction is still refused this many seconds after the
    #: reclaim began (``None``: never force; ``--force-after`` overrides).
    force_after: Optional[int] = Field(default=None, ge=0)
    #: The placeholder's fence: when Slurm preempts it, the placeholder itself cordons its
    #: Kubernetes node and deletes the pods on it, and exits only once they are gone (or
    #: after ``fence_seconds``), so the preempting job never shares the GPUs with a pod.
    #: ``fence_kubeconfig`` is a kubeconfig on the nodes, readable by ``user``; without it
    #: there is no fence and pods leave at the next run.  ``fence_command`` is slurm-pool
    #: on the nodes.  The tier's GraceTime must cover ``fence_seconds`` (checked).
    fence_kubeconfig: Optional[PlainPath] = None
    fence_command: CommandLine = "slurm-pool"
    fence_seconds: int = Field(default=30, ge=1, le=3600)
    #: The Kubernetes user names the rendered RBAC (``k8s-bridge-rbac.yaml``) grants to: the
    #: rebalancer's, and each node's fence (``{node}``: the node's name).
    k8s_user: str = Field(default="slurm-pool-rebalancer", min_length=1, max_length=253)
    fence_user: str = Field(default="slurm-pool-node:{node}", min_length=1, max_length=253)
    #: The cost model.  A node lent stays lent at least ``min_lease_seconds`` (from its
    #: placeholder's start) unless Slurm needs it, and is returned for a drop in inference
    #: demand only once the rest covers it with ``hysteresis_gpus`` to spare.  Before a
    #: forecast Slurm rise, or the end of the off-peak windows, nodes go back one per run,
    #: ``stagger_seconds`` apart, the last ``return_ahead_seconds`` ahead of it.
    min_lease_seconds: int = Field(default=0, ge=0, le=7 * 86400)
    hysteresis_gpus: int = Field(default=0, ge=0)
    return_ahead_seconds: int = Field(default=900, ge=0, le=86400)
    stagger_seconds: int = Field(default=300, ge=0, le=86400)
    forecast: Optional[ForecastSettings] = None
    #: Lending to Volcano gang jobs (None: the bridge reads no Volcano objects).
    gangs: Optional[GangSettings] = None
    #: Pending jobs held for these reasons do not claim a node back.
    ignore_pending_reasons: list[Reason] = [
        "JobHeldUser",
        "JobHeldAdmin",
        "BeginTime",
        "Dependency",
        "DependencyNeverSatisfied",
        "AssocGrpGRES",
        "AssocMaxJobsLimit",
        "QOSMaxGRESPerUser",
        "QOSMaxJobsPerUserLimit",
        "PartitionDown",
        "PartitionInactive",
    ]

    @field_validator("fence_user")
    @classmethod
    def _per_node(cls, v: str) -> str:
        if "{node}" not in v:
            raise ValueError(f"{v!r} does not name the node: put {{node}} where its name goes")
        return v

    @field_validator("timezone")
    @classmethod
    def _tz(cls, v: Optional[str]) -> Optional[str]:
        if v is None:
            return v
        from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

        try:
            ZoneInfo(v)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"{v!r} is not a known IANA time zone") from None
        return v


def bridge_of(spec: "PoolSpec") -> Bridge:
    """The spec's ``bridge`` section, or the defaults when the spec has none."""
    return spec.bridge if spec.bridge is not None else Bridge()


def lend_preemptors(spec: "PoolSpec", bridge: Bridge | None = None) -> frozenset[str]:
    """The tiers (QOS) whose jobs preempt the bridge's placeholders: Slurm takes a lent node back for them.

    A pending job of any other tier waits for the bridge, which gives it only a lent
    node that serves no inference pod (no cold start for a job that cannot preempt).
    """
    b = bridge or bridge_of(spec)
    return frozenset(t.name for t in spec.tiers if b.qos in t.preempt)


def check_bridge(spec: "PoolSpec", bridge: Bridge | None = None) -> list[str]:
    """Cross-checks against the rest of the spec: the names the bridge uses exist."""
    b = bridge or bridge_of(spec)
    problems = []
    parts = {p.name: p for p in spec.partitions}
    projects = {p.name: p for p in spec.projects}
    if b.partition not in parts:
        problems.append(f"bridge.partition: {b.partition!r} is not a partition of the spec")
    elif parts[b.partition].tier != b.qos:
        problems.append(
            f"bridge.qos: {b.qos!r} is not the tier of partition {b.partition!r} ({parts[b.partition].tier!r})"
        )
    if b.account not in projects:
        problems.append(f"bridge.account: {b.account!r} is not a project of the spec")
    else:
        proj = projects[b.account]
        if b.qos not in proj.tiers:
            problems.append(f"bridge.account: project {b.account!r} may not use tier {b.qos!r}")
        if b.user and b.user not in proj.users:
            problems.append(f"bridge.user: {b.user!r} is not a user of project {b.account!r}")
    waits = b.placeholder_start_timeout + b.reclaim_wait + LEASE_MARGIN
    if b.lease_seconds < waits:
        problems.append(
            f"bridge.lease_seconds: {b.lease_seconds} is shorter than a run can take (placeholder_start_timeout "
            f"+ reclaim_wait + {LEASE_MARGIN} = {waits}): a slow run would lose its Lease to the next one"
        )
    tiers = {t.name: t for t in spec.tiers}
    if b.fence_kubeconfig and b.qos in tiers:
        grace = tiers[b.qos].grace_time
        if grace < b.fence_seconds + FENCE_MARGIN:
            problems.append(
                f"bridge.fence_seconds: {b.fence_seconds} + {FENCE_MARGIN} s does not fit in tier {b.qos!r}'s "
                f"grace_time ({grace}): Slurm would kill the placeholder before its pods are gone"
            )
    if b.gangs is not None and b.fence_kubeconfig and b.gangs.grace_seconds + FENCE_MARGIN > b.fence_seconds:
        problems.append(
            f"bridge.gangs.grace_seconds: {b.gangs.grace_seconds} + {FENCE_MARGIN} s does not fit in "
            f"bridge.fence_seconds ({b.fence_seconds}): a gang's pods could not checkpoint before Slurm takes a node"
        )
    if b.max_lent_nodes == 0 and b.enabled:
        problems.append("bridge.max_lent_nodes: 0 lends nothing; set enabled: false instead")
    return problems
