"""Slurm releases and what changed between them, as data.  Pure, stdlib only.

Every behaviour slurm-pool adapts to is one :class:`Fact`: the first release
that has it, what it is called here, and where that is written down (a
CHANGELOG entry of SchedMD's source tree, a source file, or a measurement on
the real daemons).  Code asks ``version.has("name")``; nothing compares
version numbers by hand.

Supported: 22.05 (Debian 12's slurm-wlm) to 26.05.  A version given without
its maintenance release (``23.02``) is taken as the newest one of that series,
which is what sites are told to run; give ``23.02.5`` to mean exactly that.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from slurm_pool.errors import SpecError

MIN_SUPPORTED = (22, 5)
MAX_SUPPORTED = (26, 5)
#: Stands for "the newest maintenance release" when none is given.
LATEST_PATCH = 99


class VersionError(SpecError):
    """Text that is not a supported Slurm version (exit status 2)."""


@dataclass(frozen=True)
class Fact:
    """A behaviour every release from ``since`` on has."""

    name: str
    since: tuple[int, int, int]
    what: str
    source: str


#: How Slurm matches a GRES Type name, the same from 22.05 to 26.05 (read in 26.05.3's source, run on 22.05
#: and 26.05.3 by tests/integration/test_nodeattrs_e2e.py): slurm.conf's and gres.conf's Types are compared
#: case-insensitively (src/interfaces/gres.c ``_match_type``, ``xstrcasecmp``), and with AutoDetect a gres.conf
#: Type must equal or be a substring of the detected name (gres.conf(5), Type).  A site's own name for a model
#: (``gpus.type``) is therefore checked against the catalogue's Types in lower case (slurm_pool.spec.gputypes).
GRES_TYPE_MATCH = "case-insensitive; with AutoDetect, equal to or a substring of the detected name"


FACTS: tuple[Fact, ...] = (
    Fact(
        "preempt_params_line",
        (23, 2, 0),
        "send_user_signal moved from SlurmctldParameters=preempt_send_user_signal to PreemptParameters",
        "CHANGELOG/slurm-23.02.md 23.02.0rc1; slurm.conf(5) PreemptParameters",
    ),
    Fact(
        "json_data_parser",
        (23, 2, 0),
        "--json output from the data_parser plugins: states are lists, numbers are {set, infinite, number} "
        "objects, and sinfo --json groups nodes by partition and state ({'sinfo': [...]}) instead of listing "
        "node records; scontrol --json show nodes/jobs exists",
        "CHANGELOG/slurm-23.02.md 23.02.0rc1 (data_parser/v0.0.39); recorded in tests/data/slurm/",
    ),
    Fact(
        "mig_type_from_profile",
        (23, 2, 6),
        "gpu/nvml names a MIG GRES type <gpu type cut at '-'>_<NVIDIA profile name> (the NVML MIG device name "
        "after 'mig'), e.g. nvidia_a100_3g.40gb; before, _<slices>g.<roundl(memory MiB / 1024)>gb, "
        "e.g. nvidia_a100_3g.39gb",
        "CHANGELOG/slurm-23.02.md 23.02.6 'Fix some mig profile names in slurm not matching nvidia mig "
        'profiles\'; src/plugins/gpu/nvml/gpu_nvml.c _handle_mig (26.05.3: strstr(device_name, "mig_"); '
        "22.05: roundl(attributes.memorySizeMB / 1024))",
    ),
    Fact(
        "preempt_requeues_exited_job",
        (24, 5, 0),
        "a requeueable batch job that exits after its GraceTime signal is recorded PREEMPTED and requeued by "
        "slurmctld itself (on 22.05 it ends COMPLETED and the job must requeue itself)",
        "CHANGELOG/slurm-24.05.md 24.05.0rc1 'For PreemptMode=CANCEL and PreemptMode=REQUEUE assume that job "
        "signalled for GraceTime was preempted'; measured on 26.05.3 and 22.05.8",
    ),
    Fact(
        "max_batch_requeue",
        (23, 2, 0),
        "slurm.conf takes MaxBatchRequeue (default 5): a batch job requeued by slurmctld more times than this is "
        "held (JobHeldAdmin, Reason=launch failure limit exceeded).  From 24.05 every GraceTime preemption "
        "requeue counts (job_mgr.c _job_complete: batch_flag++, then _handle_requeue_limit), and nothing resets "
        "the count while the job lives; batch_flag is a uint16_t",
        "CHANGELOG/slurm-23.02.md 23.02.0rc1 'Add configurable job requeue limit parameter - MaxBatchRequeue'; "
        "26.05.3 src/slurmctld/job_mgr.c _job_complete and _handle_requeue_limit, src/common/job_record.h; "
        "measured on 26.05.3 (held on the 5th preemption)",
    ),
    Fact(
        "reconfigure_restarts_daemons",
        (23, 11, 0),
        "`scontrol reconfigure` starts new slurmctld and slurmd processes, which read slurm.conf and gres.conf "
        "afresh, so a node's changed GRES (MIG types and counts) take effect without a restart by hand; "
        "before 23.11 a node's GRES types change only when slurmctld and that slurmd restart",
        "26.05.3 doc/man/man1/scontrol.1 'reconfigure': 'Starting in 23.11, this command operates by creating new "
        "processes for the daemons'; scontrol.1 'Gres=': a GPU count changes only by editing slurm.conf and "
        "gres.conf and restarting daemons; measured on 22.05.8 (reconfigure kept the old types)",
    ),
    Fact(
        "multiple_qos_per_job",
        (24, 11, 0),
        "a job may ask for several QOS (--qos=a,b)",
        "CHANGELOG/slurm-24.11.md 24.11.0rc1 'Add ability to submit jobs with multiple QOS'",
    ),
    Fact(
        "allow_qos_must_exist",
        (25, 11, 0),
        "slurmctld refuses to start when a partition's AllowQOS/DenyQOS names a QOS slurmdbd does not have "
        "(fatal: Partition P has an invalid AllowQOS)",
        "CHANGELOG/slurm-25.11.md 25.11.0rc1 'Validate AllowQOS, DenyQOS have valid QOS's listed'; "
        "src/slurmctld/read_config.c",
    ),
    Fact(
        "shard_excludes_gpu",
        (23, 11, 5),
        "a GPU with a shard allocated is not also allocated whole (before, once one of several shard jobs on a GPU "
        "ended, a whole-GPU job could be given that GPU while the others still ran on it; seen on 22.05.8)",
        "CHANGELOG/slurm-23.11.md 23.11.5 'Fix issue where you could have a gpu allocated as well as a shard on "
        "that gpu allocated at the same time'",
    ),
    Fact(
        "get_user_env_takes_no_mode",
        (25, 5, 0),
        "sbatch's --get-user-env takes no timeout or mode: 26.05.3 rejects --get-user-env=L (\"option "
        "'--get-user-env' doesn't allow an argument\", measured), which batchspawner's stock SlurmSpawner script uses",
        'CHANGELOG/slurm-25.05.md 25.05.0rc1 \'Deprecate ... "timeout" and "mode" optional parameters from '
        "sbatch's --get-user-env option'; src/common/slurm_opt.c (26.05.3) slurm_opt_get_user_env has_arg = no_argument",
    ),
    Fact(
        "sbatch_scrubs_slurm_jwt",
        (26, 5, 0),
        "sbatch drops SLURM_JWT from the environment it gives the job (before, a token used to submit reached "
        "the job, where srun would try it, expired)",
        "CHANGELOG/slurm-26.05.md 26.05.0rc1 'sbatch - Now scrubs SLURM_JWT from the environment'; measured "
        "by tests/integration/test_jwt_e2e.py on 26.05.3 and 22.05.8",
    ),
    Fact(
        "squeue_json_filters",
        (24, 5, 1),
        "squeue --json applies squeue's filters, the default state filter (pending, running, suspended, "
        "completing, stage-out) included; before, it printed every job the controller had, finished ones too, so "
        "a narrow squeue read adds --states=all to list the same jobs",
        "CHANGELOG/slurm-24.05.md 24.05.1 'Fix filtering arguments being ignored when using squeue --json'; "
        "src/squeue/print.c squeue_filter_jobs_for_json and _filter_job; measured on 22.05.8 (FAILED and "
        "CANCELLED jobs in squeue --json, tests/data/slurm/22.05/squeue-lent.json)",
    ),
    Fact(
        "squeue_format_excnodes",
        (26, 5, 0),
        "squeue --Format takes ExcNodes (a job's --exclude list); without it the narrow job read takes the "
        "excluded nodes from a second read, --format=%A...%x, which every release has.  The first release "
        "with it is not written down: 26.05 is the first this is known of, so releases between read twice",
        "26.05.3 src/squeue/opts.c fmt_data_job {\"ExcNodes\", 'x', _print_job_exc_nodes}; measured on 22.05.8 "
        "(squeue: error: Invalid job format specification: ExcNodes)",
    ),
    # -- slurmctld's OpenMetrics endpoint
    Fact(
        "openmetrics_endpoint",
        (25, 11, 0),
        "slurm.conf takes MetricsType=metrics/openmetrics; slurmctld then answers HTTP GET /metrics/jobs, "
        "/metrics/nodes, /metrics/partitions and /metrics/scheduler on SlurmctldPort (no authentication unless "
        "MetricsAuthUsers or PrivateData is set)",
        "26.05.3 doc/html/metrics.shtml 'Slurm 25.11 introduced'; src/slurmctld/http.c (routes, "
        "_check_metrics_authorized); src/plugins/metrics/openmetrics/openmetrics.c; measured on 26.05.3 by "
        "tests/integration/test_openmetrics_e2e.py",
    ),
    Fact(
        "rebootless_node_features",
        (24, 5, 0),
        "node_features/helpers takes Flags=rebootless: a changed feature is applied without RebootProgram",
        "CHANGELOG/slurm-24.05.md; helpers.conf(5)",
    ),
)
_FACTS = {f.name: f for f in FACTS}

#: How many orders of the preemptable jobs select/cons_tres tries, keeping the one that preempts fewest.
PREEMPT_REORDER_COUNT = 3
#: The slurm.conf key and items that make preemption cheap (fewer jobs preempted), per release: from 23.02 (fact
#: ``preempt_params_line``) ``PreemptParameters=reorder_count=N,strict_order``, before it ``SchedulerParameters=preempt_reorder_count=N,
#: preempt_strict_order``.  Source: 26.05.3 src/plugins/select/cons_tres/select_cons_tres.c (``reorder_count=``
#: and ``strict_order`` from PreemptParameters, else ``preempt_reorder_count=`` and ``preempt_strict_order``
#: from SchedulerParameters); 22.05.8 slurm.conf(5) and select_cons_tres.so know only the SchedulerParameters
#: spellings.  src/interfaces/preempt.c orders the candidates by QOS priority, then node count; its
#: ``youngest_first`` (by start time) ignores QOS priority, so it is not rendered.
PREEMPT_ORDER: dict[bool, tuple[str, tuple[str, ...]]] = {
    True: ("PreemptParameters", ("reorder_count={count}", "strict_order")),
    False: ("SchedulerParameters", ("preempt_reorder_count={count}", "preempt_strict_order")),
}


#: How releases name themselves: ``22.05``, ``24.11.5``, ``slurm 26.05.3``, ``slurm-wlm 22.05.8``, ``23.02.7-1``.
_VERSION_RE = re.compile(r"(?:slurm(?:-wlm)? )?([0-9]{2})\.([0-9]{1,2})(?:\.([0-9]{1,3}))?(?:-[0-9A-Za-z.]{1,32})?")


@dataclass(frozen=True, order=True)
class SlurmVersion:
    """A Slurm release: ``major.minor`` and, when known, the maintenance release."""

    major: int
    minor: int
    patch: int | None = None

    @classmethod
    def parse(cls, text: str, *, what: str = "--slurm-version", output: bool = False) -> "SlurmVersion":
        """``22.05``, ``23.02.7``, ``slurm 26.05.3`` or ``slurm-wlm 22.05.8``, in full.

        ``output``: ``text`` is a command's output (``scontrol --version``), whose
        surrounding white space (its newline) is dropped first; an option is taken as given.
        """
        m = _VERSION_RE.fullmatch((text or "").strip() if output else (text or ""))
        if not m:
            raise VersionError(f"{what}: {text!r} is not a Slurm version like 22.05 or 24.11.5")
        v = cls(int(m.group(1)), int(m.group(2)), int(m.group(3)) if m.group(3) is not None else None)
        if not (MIN_SUPPORTED <= (v.major, v.minor) <= MAX_SUPPORTED):
            lo, hi = MIN_SUPPORTED, MAX_SUPPORTED
            raise VersionError(f"{what}: {v} is not supported (supported: {lo[0]}.{lo[1]:02d} to {hi[0]}.{hi[1]:02d})")
        return v

    def __str__(self) -> str:
        base = f"{self.major}.{self.minor:02d}"
        return base if self.patch is None else f"{base}.{self.patch}"

    @property
    def series(self) -> str:
        return f"{self.major}.{self.minor:02d}"

    def key(self) -> tuple[int, int, int]:
        return (self.major, self.minor, LATEST_PATCH if self.patch is None else self.patch)

    def at_least(self, major: int, minor: int, patch: int = 0) -> bool:
        return self.key() >= (major, minor, patch)

    def has(self, fact: str) -> bool:
        """Whether this release has the behaviour :data:`FACTS` calls ``fact``."""
        return self.key() >= _FACTS[fact].since

    def preempt_order(self) -> tuple[str, list[str]]:
        """The slurm.conf key and items of :data:`PREEMPT_ORDER` this release reads."""
        key, items = PREEMPT_ORDER[self.has("preempt_params_line")]
        return key, [i.format(count=PREEMPT_REORDER_COUNT) for i in items]

    def features(self) -> dict[str, bool]:
        """Every fact, by name, for templates."""
        return {f.name: self.has(f.name) for f in FACTS}


DEFAULT_VERSION = SlurmVersion(22, 5)
