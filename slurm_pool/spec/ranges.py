"""Slurm's field ranges, as data: what each number the spec renders may be, and where Slurm says so.

A number past its field is not refused by Slurm everywhere: sacctmgr's
``get_uint`` casts a ``long`` into a ``uint32_t`` (1e20 becomes something
else), ``strtoull`` saturates a TRES count into ``INFINITE64`` (unlimited), and
the top values of every width are Slurm's markers (``INFINITE``: unlimited,
``NO_VAL``: unset).  So every bound below stops short of the markers, and each
names its source (Slurm 26.05.3: ``slurm/slurm.h``, ``src/...``; the manuals
slurm.conf(5) and sacctmgr(1)).  :func:`ranged` turns one into a validator;
the spec's models use them, the API's too.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Optional

from pydantic import AfterValidator

#: Slurm's markers (slurm/slurm.h): INFINITE* is "unlimited", NO_VAL* "unset"; NO_CONSUME_VAL64 a TRES marker.
INFINITE16, NO_VAL16 = 0xFFFF, 0xFFFE
INFINITE, NO_VAL = 0xFFFFFFFF, 0xFFFFFFFE
INFINITE64, NO_VAL64, NO_CONSUME_VAL64 = 0xFFFFFFFFFFFFFFFF, 0xFFFFFFFFFFFFFFFE, 0xFFFFFFFFFFFFFFFD
#: The largest C ``int`` (time_str2secs in src/common/parse_time.c adds a time's seconds in an int).
INT_MAX = 2**31 - 1


@dataclass(frozen=True)
class Range:
    """One field of Slurm: its name as Slurm spells it, its bounds, its unit, and where Slurm sets them."""

    field: str
    lo: int | float
    hi: int | float
    source: str
    unit: str = ""

    def problem(self, value: float) -> Optional[str]:
        """Why ``value`` does not fit the field (None: it fits)."""
        if self.lo <= value <= self.hi:
            return None
        if value < self.lo:
            return f"{value!r} is negative" if self.lo == 0 else f"{value!r} is too small (minimum {self.lo})"
        unit = f" {self.unit}" if self.unit else ""
        return f"{value!r} is too large for Slurm's {self.field} (at most {self.hi}{unit}; {self.source})"


RANGES: dict[str, Range] = {
    "qos.priority": Range(
        "QOS Priority", 0, NO_VAL - 1, "uint32 read by sacctmgr's get_uint, src/sacctmgr/common.c; sacctmgr(1)"
    ),
    "qos.grace_time": Range(
        "QOS GraceTime", 0, NO_VAL - 1, "uint32 read by sacctmgr's get_uint, src/sacctmgr/common.c", "seconds"
    ),
    "qos.usage_factor": Range(
        "QOS UsageFactor", 0, NO_VAL - 1, "a double; sacctmgr prints it with %f (src/common/print_fields.c) and "
        "reads INFINITE and NO_VAL as unset",
    ),
    "tres.count": Range(
        "TRES count", 0, NO_CONSUME_VAL64 - 1,
        "uint64 read by strtoull in slurmdb_format_tres_str, src/common/slurmdb_defs.c; the top three are markers",
    ),
    "association.fairshare": Range(
        "Fairshare", 0, NO_VAL - 1, "uint32 read by sacctmgr's get_uint, src/sacctmgr/common.c; sacctmgr(1)"
    ),
    "partition.grace_time": Range(
        "partition GraceTime", 0, NO_VAL - 1, "S_P_UINT32, src/common/read_config.c; slurm.conf(5)", "seconds"
    ),
    "partition.priority_tier": Range("PriorityTier", 0, NO_VAL16 - 1, "S_P_UINT16, src/common/read_config.c"),
    "node.cpus": Range("node CPUs", 1, NO_VAL16 - 1, "S_P_UINT16, src/common/read_config.c; slurm.conf(5)"),
    "node.real_memory": Range(
        "node RealMemory", 1, 2**40, "S_P_UINT64 in MB, src/common/read_config.c; bounded here at a petabyte", "MB"
    ),
    "node.sockets": Range("node Sockets", 1, NO_VAL16 - 1, "S_P_UINT16, src/common/read_config.c; slurm.conf(5)"),
    "node.cores_per_socket": Range(
        "node CoresPerSocket", 1, NO_VAL16 - 1, "S_P_UINT16 (0 is reset to 1), src/common/read_config.c"
    ),
    "node.threads_per_core": Range(
        "node ThreadsPerCore", 1, NO_VAL16 - 1, "S_P_UINT16 (0 is reset to 1), src/common/read_config.c"
    ),
    "node.mem_spec_limit": Range(
        "node MemSpecLimit", 1, 2**40, "S_P_UINT64 in MB, src/common/read_config.c; below RealMemory, slurm.conf(5)",
        "MB",
    ),
    "node.tmp_disk": Range("node TmpDisk", 0, NO_VAL - 1, "S_P_UINT32 in MB, src/common/read_config.c", "MB"),
    "node.weight": Range(
        "node Weight", 0, NO_VAL - 1, "S_P_UINT32, src/common/read_config.c (INFINITE is read as INFINITE - 1)"
    ),
    "def_mem_per_cpu": Range(
        "DefMemPerCPU", 1, 2**40, "S_P_UINT64 in MB whose top bit is a flag, src/common/read_config.c", "MB"
    ),
    "message_timeout": Range("MessageTimeout", 1, NO_VAL16 - 1, "S_P_UINT16, src/common/read_config.c", "seconds"),
    "kill_wait": Range("KillWait", 0, NO_VAL16 - 1, "S_P_UINT16, src/common/read_config.c", "seconds"),
    "health_check_interval": Range(
        "HealthCheckInterval", 0, NO_VAL16 - 1, "S_P_UINT16, src/common/read_config.c", "seconds"
    ),
    "sched_interval": Range(
        "SchedulerParameters sched_interval", 1, INT_MAX, "atoi into an int, src/slurmctld/job_scheduler.c", "seconds"
    ),
    "sched_min_interval": Range(
        "SchedulerParameters sched_min_interval", 0, INT_MAX, "atoi into an int, src/slurmctld/job_scheduler.c",
        "microseconds",
    ),
    "bf_interval": Range(
        "SchedulerParameters bf_interval", 1, 10800, "MAX_BACKFILL_INTERVAL, src/plugins/sched/backfill/backfill.c",
        "seconds",
    ),
    "exit_code": Range("RequeueExit exit code", 0, 255, "a process's exit status; slurm.conf(5) RequeueExit"),
    "max_batch_requeue": Range(
        "MaxBatchRequeue", 1, 65000, "S_P_UINT32, counted in the job's uint16 restart count (src/slurmctld)"
    ),
    "time_seconds": Range(
        "time limit", 0, INT_MAX, "time_str2secs adds days, hours, minutes and seconds in an int, "
        "src/common/parse_time.c", "seconds",
    ),
}  # fmt: skip

#: slurm.conf(5), ClusterName: "must be 40 characters or less" (MySQL/MariaDB table names).
CLUSTER_NAME_MAX = 40
#: sacctmgr prints a UsageFactor with %f: six decimals (src/common/print_fields.c, print_fields_double).
USAGE_FACTOR_DECIMALS = 6


def check(key: str, value: float) -> float:
    """``value`` if it fits Slurm's field ``key`` of :data:`RANGES`, else ValueError saying which and why."""
    problem = RANGES[key].problem(value)
    if problem:
        raise ValueError(problem)
    return value


def ranged(key: str) -> AfterValidator:
    """A validator: the number fits Slurm's field ``key`` of :data:`RANGES`."""
    RANGES[key]  # noqa: B018 -- an unknown key fails at import, not at the first spec
    return AfterValidator(lambda v: v if v is None else check(key, v))


def check_usage_factor(value: float) -> float:
    """A UsageFactor sacctmgr shows as it was given: in range, and exact to its six printed decimals."""
    check("qos.usage_factor", value)
    shown = f"{value:.{USAGE_FACTOR_DECIMALS}f}"
    if not math.isclose(float(shown), value, rel_tol=0, abs_tol=10 ** -(USAGE_FACTOR_DECIMALS + 3)):
        raise ValueError(
            f"{value!r} has more than {USAGE_FACTOR_DECIMALS} decimals: sacctmgr shows and stores UsageFactor as "
            f"{shown} (printed with %f, src/common/print_fields.c)"
        )
    return value


def check_tres(limits: dict[str, int]) -> dict[str, int]:
    """Every count of a TRES limit (GrpTRES, MaxTRESPU) fits a TRES count."""
    for key, val in limits.items():
        problem = RANGES["tres.count"].problem(val)
        if problem:
            raise ValueError(f"{key}={problem}")
    return limits


def check_cluster_name(name: str) -> str:
    if len(name) > CLUSTER_NAME_MAX:
        raise ValueError(
            f"{name!r} is {len(name)} characters; Slurm's ClusterName takes at most {CLUSTER_NAME_MAX} "
            "(slurm.conf(5), ClusterName: the limit on MySQL/MariaDB table names)"
        )
    return name


# -- time limits ----------------------------------------------------------------------------------------------

#: Slurm's time forms (src/common/parse_time.c, time_str2secs): minutes, minutes:seconds, hours:minutes:seconds,
#: days-hours, days-hours:minutes, days-hours:minutes:seconds; UNLIMITED or INFINITE.
TIME_RE = re.compile(
    r"(?P<d>[0-9]+)-(?P<dh>[0-9]+)(?::(?P<dm>[0-9]+))?(?::(?P<ds>[0-9]+))?|(?P<a>[0-9]+)(?::(?P<b>[0-9]+))?(?::(?P<c>[0-9]+))?"
)
#: Characters of a time limit read at all (a longer one is refused before its digits become numbers).
TIME_MAX_LEN = 64
UNLIMITED_WORDS = ("UNLIMITED", "INFINITE")
TIME_SHAPE = "a Slurm time: minutes, [days-]hours:minutes:seconds, days-hours, or UNLIMITED"


def time_seconds(value: str) -> Optional[int]:
    """Seconds of a Slurm time limit; None for UNLIMITED/INFINITE; ValueError when malformed or past Slurm's range."""
    if value in UNLIMITED_WORDS:
        return None
    m = TIME_RE.fullmatch(value) if len(value) <= TIME_MAX_LEN else None
    if m is None:
        raise ValueError(f"{value!r} is not {TIME_SHAPE}")
    g = {k: int(v) if v is not None else 0 for k, v in m.groupdict().items()}
    if m.group("d") is not None:
        seconds = g["d"] * 86400 + g["dh"] * 3600 + g["dm"] * 60 + g["ds"]
    elif m.group("c") is not None:
        seconds = g["a"] * 3600 + g["b"] * 60 + g["c"]
    else:
        seconds = g["a"] * 60 + g["b"]
    if RANGES["time_seconds"].problem(seconds):
        r = RANGES["time_seconds"]
        raise ValueError(f"{value!r} is longer than Slurm's time limits go (at most {r.hi} seconds; {r.source})")
    return seconds


def no_time_limit(value: str) -> bool:
    """``value`` asks for no time limit: UNLIMITED, or zero, which sbatch(1) reads as "no time limit"."""
    return time_seconds(value) in (None, 0)


def check_time(value: str) -> str:
    time_seconds(value)
    return value
