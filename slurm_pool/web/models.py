"""The REST API's resources: one set of pydantic models, shared by the service and the SDK.

Pure: nothing here talks to Slurm.  Requests are strict (unknown fields
refused, no coercion across types, no control characters in free text);
responses are what the service built from Slurm's records, so the SDK reads
them leniently (``extra="ignore"``) and a newer server can add fields.

API version 1, under ``/api/v1``; the OpenAPI schema the service serves is
pinned by ``tests/golden/api/openapi.json``.
"""

from __future__ import annotations

from typing import Annotated, Literal, Optional

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from slurm_pool import text
from slurm_pool.spec.base import Feature, MigProfile, SlurmTime, word
from slurm_pool.spec.base import Name as Word

API_VERSION = "v1"
#: Job control a user may ask for (each runs as that user; Slurm decides).
ACTIONS = ("cancel", "hold", "release", "requeue")
#: Kinds of event on a job's timeline, in the order a job lives them.
EVENT_KINDS = ("submitted", "started", "preempted", "checkpointed", "requeued", "resumed", "finished")
#: Largest batch script the service accepts (bytes of UTF-8).
MAX_SCRIPT = 64 * 1024


def _no_controls(allowed: str = "") -> AfterValidator:
    """A validator: no control character in the string but those in ``allowed``."""

    def check(v: str) -> str:
        bad = text.control_chars(v.translate({ord(c): None for c in allowed}))
        if bad:
            raise ValueError(f"holds control characters ({', '.join(dict.fromkeys(bad))})")
        return v

    return AfterValidator(check)


NodeName = Annotated[str, word("node")]
Script = Annotated[str, Field(min_length=1, max_length=MAX_SCRIPT), _no_controls("\n\t")]
Label = Annotated[str, Field(max_length=128), _no_controls()]


class Request(BaseModel):
    """What a client sends: strict."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)


class Response(BaseModel):
    """What the service answers: read leniently by the SDK."""

    model_config = ConfigDict(extra="ignore")


# -- who is asking ----------------------------------------------------------
class Me(Response):
    """The caller, and what the pool lets them see."""

    user: str
    projects: list[str] = []
    #: Accounts this user coordinates in Slurm: their jobs are shown in full.
    coordinates: list[str] = []
    operator: bool = False
    #: For browser sessions, in the login's answer only: send it back as ``X-CSRF-Token`` on every request.
    csrf_token: Optional[str] = None
    #: Tiers this user may submit to (their projects' tiers).
    tiers: list[str] = []
    hub_url: Optional[str] = None


class Login(Request):
    user: Annotated[str, word("login")]
    password: str = Field(min_length=1, max_length=1024)


# -- the pool ---------------------------------------------------------------
class NodeView(Response):
    name: str
    state: str
    #: The projects owning the node (from the spec's ``owns``).
    owners: list[str] = []
    total: int = 0
    allocated: int = 0
    lent: int = 0
    idle: int = 0
    drained: int = 0
    down: int = 0
    #: GPU units by type (a whole GPU model, a MIG profile, or "shard").
    by_type: dict[str, int] = {}
    lent_out: bool = False
    #: ``slurm-pool`` or ``human`` when drained; the reason is shown only to who may see it.
    drain_owner: Optional[str] = None
    reason: str = ""
    #: Projects whose jobs run here, and how many GPU units each holds (borrowers of an owner's node).
    used_by: dict[str, int] = {}
    #: When the pool last took this node back from Kubernetes (the end of its last lend-partition job, last 24 h).
    last_reclaim: Optional[float] = None


class Sample(Response):
    time: float
    allocated: int = 0
    lent: int = 0
    idle: int = 0
    total: int = 0


class Pool(Response):
    """The pool at a glance: every GPU unit is in exactly one state."""

    time: float
    refresh_seconds: int
    total: int = 0
    states: dict[str, int] = {}
    by_tier: dict[str, int] = {}
    by_project: dict[str, int] = {}
    lent_nodes: list[str] = []
    #: Pending demand by tier: jobs and GPU units.
    pending: dict[str, dict[str, int]] = {}
    nodes: list[NodeView] = []
    history: list[Sample] = []
    #: False when the last read of Slurm failed (the figures are then the last good ones).
    fresh: bool = True


# -- jobs -------------------------------------------------------------------
class JobView(Response):
    job_id: int
    name: str = ""
    user: str = ""
    project: str = ""
    partition: str = ""
    tier: str = ""
    state: str = ""
    reason: str = ""
    nodes: str = ""
    gpus: int = 0
    gpu_types: dict[str, int] = {}
    shards: int = 0
    submit_time: Optional[float] = None
    start_time: Optional[float] = None
    end_time: Optional[float] = None
    time_limit_s: Optional[float] = None
    restart_count: int = 0


class JobList(Response):
    """Jobs the caller may see in full, and counts by state of the rest."""

    jobs: list[JobView] = []
    hidden: dict[str, int] = {}


class Event(Response):
    time: Optional[float] = None
    kind: Literal["submitted", "started", "preempted", "checkpointed", "requeued", "resumed", "finished"]
    detail: str = ""


class JobDetail(Response):
    job: JobView
    timeline: list[Event] = []
    restarts: int = 0
    #: Seconds between the last checkpoint and the last preemption, when the epilog recorded one.
    checkpoint_age_s: Optional[float] = None
    #: Where the job's output file is, as the accounting records it ("" when it does not say).
    output: str = ""


class SubmitRequest(Request):
    """A batch job: the form's fields, turned into sbatch options by the service."""

    tier: Word
    project: Optional[Word] = None
    gpus: int = Field(default=1, ge=0, le=64)
    gpu_type: Optional[Feature] = None
    mig: Optional[MigProfile] = None
    shards: Optional[int] = Field(default=None, ge=1, le=1024)
    time_limit: SlurmTime = "01:00:00"
    #: Ask for these nodes (``--nodelist``), e.g. to borrow a named idle server.
    nodes: Optional[NodeName] = None
    name: Label = "console"
    script: Script
    #: The SPANK plugin's ``--checkpoint``: the job checkpoints when preempted.
    checkpoint: bool = False


class Explanation(Response):
    """What the pool's submit policy makes of a request, before it is sent."""

    ok: bool
    tier: str
    partition: str = ""
    qos: str = ""
    #: The sbatch options the service would pass (the script goes on stdin).
    options: list[str] = []
    notes: list[str] = []
    #: Why it would be refused, and what to change.
    refusals: list[str] = []
    #: Where the job's output goes (``%j`` is the job id; ``~`` the user's home, where sbatch runs).
    output: str = ""


class Submitted(Response):
    job_id: int
    explanation: Explanation


class ActionRequest(Request):
    action: Literal["cancel", "hold", "release", "requeue"]


class TierChange(Request):
    tier: Word


class ActionResult(Response):
    # A service before Slurm's notation answered the id as a number: still read.
    model_config = ConfigDict(extra="ignore", coerce_numbers_to_str=True)

    #: The job acted on, in Slurm's notation as asked (``42``, ``4_2``, ``5+1``, ``4_[1-3]``).
    job_id: str
    action: str
    ok: bool
    message: str = ""


# -- why a job waits --------------------------------------------------------
class WhyCause(Response):
    """One thing a pending job waits for: ``kind`` (owner, borrower, lent, preempts, dependency, begin, queue,
    now), in words, with the jobs (only those the caller may see) and nodes it names."""

    kind: str
    text: str
    jobs: list[int] = []
    nodes: list[str] = []


class WhyAlternative(Response):
    """Another way to submit the job, how to ask for it, and when the model starts it then (None: not soon)."""

    what: str
    how: str
    predicted_start: Optional[float] = None


class WhyPart(Response):
    """Why a pending job waits and when the pool's model starts it (Unix seconds; None: not within its horizon)."""

    job_id: int
    #: When the forecast ran.
    now: float
    #: Slurm's reason code, and it in the pool's words.
    reason: str = ""
    reason_text: str = ""
    predicted_start: Optional[float] = None
    #: Earliest and latest start: runtimes from the users' history, and every job using its whole time limit.
    range: tuple[Optional[float], Optional[float]] = (None, None)
    runtime_seconds: float = 0.0
    #: What the runtime rests on: history, user history, time limit, default.
    runtime_basis: str = ""
    note: str = ""
    #: Slurm's own estimate (``squeue --start``; None: it gives none).
    slurm_estimate: Optional[float] = None
    causes: list[WhyCause] = []
    alternatives: list[WhyAlternative] = []
    #: The job in Slurm's notation (``4_2``, ``5+1``, ``4_[1-3]``: tasks not started yet); empty: its id.
    name: str = ""


class Why(WhyPart):
    """The answer for the first waiting job the asked id names, and (``parts``) for each of them."""

    #: Every waiting job the asked id names (a het job's components, an array's tasks), each answered alone;
    #: empty when it names one.
    parts: list[WhyPart] = []
    #: A het job's components start together: when the last of them is predicted to (None: not known).
    het_start: Optional[float] = None


# -- projects ---------------------------------------------------------------
class ProjectView(Response):
    name: str
    #: GPU-hours over ``hours`` in the project's guaranteed tier, borrowed elsewhere, and given by its servers.
    hours: int = 24
    guaranteed_gpu_hours: float = 0.0
    borrowed_gpu_hours: float = 0.0
    lent_gpu_hours: float = 0.0
    #: Charged GPU-hours per tier (the tier's UsageFactor applied: the spot tier at its price).
    charges: dict[str, float] = {}
    owns: list[str] = []


class Problem(Response):
    """Every error: a status, a message, and the field it is about when there is one."""

    status: int
    message: str
    field: Optional[str] = None
