"""slurmctld's own counts, from its OpenMetrics endpoint (Slurm 25.11 and later).

With ``MetricsType=metrics/openmetrics`` in slurm.conf, slurmctld answers HTTP
``GET /metrics/jobs``, ``/metrics/nodes``, ``/metrics/partitions`` and
``/metrics/scheduler`` on its own port (SlurmctldPort).  Read in 26.05.3's source:

* src/slurmctld/http.c: the routes (``http_router_bind``), the body as
  ``text/plain``, and ``_check_metrics_authorized``: no authentication unless
  ``MetricsAuthUsers`` or ``PrivateData`` is set (then a JWT, which this reader
  does not send: such a controller answers an error and the commands are used);
* src/plugins/metrics/openmetrics/openmetrics.c: the names (``slurm_`` + the
  ``ADD_METRIC`` name) and the one label of the per-partition counts, ``partition``;
* src/slurmctld/statistics.c: what each count counts (``_statistics_part_aggregate_job``:
  a job's base state, the completing flag apart, by the job's one partition string;
  ``statistics_get_nodes``: one base state per node, the drain flag apart).

The body is parsed by prometheus_client's text parser; each sample is then
checked by its kind (a known name, a partition name, a whole count) and one
that fails is left out and named in :attr:`SlurmctldCounts.refused`.
"""

from __future__ import annotations

import http.client
import math
import re
from dataclasses import dataclass, field
from typing import Mapping

from prometheus_client.parser import text_string_to_metric_families

from slurm_pool.versions import SlurmVersion

#: slurm.conf's MetricsType that serves the endpoint (doc/html/metrics.shtml).
METRICS_TYPE = "metrics/openmetrics"
#: The paths read (src/slurmctld/http.c ``http_router_bind``).
PATHS = {"jobs": "/metrics/partitions", "nodes": "/metrics/nodes"}
#: The pool's job state word -> the per-partition count of it (openmetrics.c ``_part_stats_to_metric``).
#: Only the states of the queue: the endpoint also counts finished jobs slurmctld still holds (MinJobAge),
#: which squeue leaves out from 24.05.1 (versions fact ``squeue_json_filters``).
JOB_STATES: Mapping[str, str] = {
    "pending": "slurm_partition_jobs_pending",
    "running": "slurm_partition_jobs_running",
    "suspended": "slurm_partition_jobs_suspended",
    "completing": "slurm_partition_jobs_completing",
}
#: The pool's node state word -> the counts that make it (openmetrics.c ``metrics_p_parse_nodes_metrics``;
#: statistics.c counts a draining node under ``draining`` and not ``drain``).
NODE_STATES: Mapping[str, tuple[str, ...]] = {
    "idle": ("slurm_nodes_idle",),
    "mixed": ("slurm_nodes_mixed",),
    "allocated": ("slurm_nodes_alloc",),
    "down": ("slurm_nodes_down",),
    "future": ("slurm_nodes_future",),
    "unknown": ("slurm_nodes_unknown",),
    "drain": ("slurm_nodes_drain", "slurm_nodes_draining"),
}
#: Bytes read at most from one answer: 26.05.3 prints about 450 bytes per node (/metrics/nodes) and 5 KB per
#: partition (/metrics/partitions), so 64 MiB holds some 140,000 nodes.
MAX_BYTES = 64 << 20
#: Seconds for connecting and for each read.
TIMEOUT = 2.0
#: The counts are uint16/uint32/uint64 in statistics.h; anything above 2**53 is not a count a float keeps.
MAX_COUNT = 2**53
#: A partition name as slurm.conf takes it (no space, comma, quote or control character).
_PARTITION_RE = re.compile(r"[A-Za-z0-9_.@+-][A-Za-z0-9_.@+:-]{0,127}")
#: A host name or address to connect to.
_HOST_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9.:-]{0,253}")
#: ``SlurmctldHost[0] = name(addr)`` or ``= name``.
_CTLD_HOST_RE = re.compile(r"([A-Za-z0-9][A-Za-z0-9.-]{0,253})(?:\(([A-Za-z0-9.:-]{1,253})\))?")


class Unavailable(Exception):
    """The endpoint is not served, refused, timed out or answered something that is not counts."""


@dataclass
class SlurmctldCounts:
    """What slurmctld counted: jobs by partition and state, nodes by state."""

    jobs: dict[tuple[str, str], int] = field(default_factory=dict)  # (partition, state) -> jobs
    nodes: dict[str, int] = field(default_factory=dict)  # state -> nodes
    refused: list[str] = field(default_factory=list)  # samples left out, each named


def served_by(version: SlurmVersion) -> bool:
    """Whether ``version`` has the endpoint at all (versions fact ``openmetrics_endpoint``)."""
    return version.has("openmetrics_endpoint")


def endpoint(config: Mapping[str, str]) -> tuple[str, int] | None:
    """``(host, port)`` of slurmctld's endpoint from ``scontrol show config``; None where it is not served.

    The host is the first SlurmctldHost's address (a standby answers 303 to it, http.c
    ``_metrics_redirect_to_primary``); of a port range, its first port.
    """
    if config.get("MetricsType", "").strip() != METRICS_TYPE:
        return None
    host = config.get("SlurmctldHost[0]") or config.get("SlurmctldHost", "")  # the parsed key drops "[0]"
    m = _CTLD_HOST_RE.fullmatch(host.strip())
    port_text = config.get("SlurmctldPort", "").strip().split("-", 1)[0]
    if not m or not re.fullmatch(r"[0-9]{1,5}", port_text) or not 0 < int(port_text) < 65536:
        return None
    return (m.group(2) or m.group(1), int(port_text))


def fetch(host: str, port: int, path: str, *, timeout: float = TIMEOUT, max_bytes: int = MAX_BYTES) -> str:
    """The body of ``GET path``; :class:`Unavailable` for anything but a 200 of UTF-8 text within bounds."""
    if not _HOST_RE.fullmatch(host) or path not in PATHS.values():
        raise Unavailable(f"not a slurmctld endpoint: {host!r} {path!r}")
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        conn.request("GET", path, headers={"Accept": "text/plain"})
        resp = conn.getresponse()
        if resp.status != 200:
            raise Unavailable(f"GET {path}: HTTP {resp.status}")
        body = resp.read(max_bytes + 1)
    except (OSError, http.client.HTTPException) as exc:
        raise Unavailable(f"GET {path}: {type(exc).__name__}: {exc}") from None
    finally:
        conn.close()
    if len(body) > max_bytes:
        raise Unavailable(f"GET {path}: more than {max_bytes} bytes")
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        raise Unavailable(f"GET {path}: not UTF-8") from None


def _samples(text: str, what: str, wanted: frozenset[str]) -> list[tuple[str, Mapping[str, str], float]]:
    """The samples named in ``wanted``; the other lines (per-node values: ten a node) are not parsed."""
    kept = "".join(f"{line}\n" for line in text.splitlines() if line.partition("{")[0].partition(" ")[0] in wanted)
    try:
        return [(s.name, s.labels, s.value) for fam in text_string_to_metric_families(kept) for s in fam.samples]
    except (ValueError, IndexError, KeyError, TypeError) as exc:
        raise Unavailable(f"{what}: not OpenMetrics text ({exc})") from None


def _count(value: float) -> int | None:
    if not math.isfinite(value) or value < 0 or value > MAX_COUNT or not float(value).is_integer():
        return None
    return int(value)


def parse(partitions: str, nodes: str) -> SlurmctldCounts:
    """The counts of ``/metrics/partitions`` and ``/metrics/nodes``; a sample that is not one is refused."""
    out = SlurmctldCounts()
    job_names = {name: state for state, name in JOB_STATES.items()}
    for name, labels, value in _samples(partitions, PATHS["jobs"], frozenset(job_names)):
        state = job_names.get(name)
        if state is None:
            continue
        part, n = labels.get("partition", ""), _count(value)
        if set(labels) != {"partition"} or not _PARTITION_RE.fullmatch(part) or n is None:
            out.refused.append(f"{name}{dict(labels)!r} {value!r}"[:200])
            continue
        out.jobs[(part, state)] = n
    node_names = {name: state for state, names in NODE_STATES.items() for name in names}
    for name, labels, value in _samples(nodes, PATHS["nodes"], frozenset(node_names)):
        state = node_names.get(name)
        if state is None:
            continue
        n = _count(value)
        if labels or n is None:
            out.refused.append(f"{name}{dict(labels)!r} {value!r}"[:200])
            continue
        out.nodes[state] = out.nodes.get(state, 0) + n
    if not out.jobs or not out.nodes:  # every partition has its counts, even of 0 (openmetrics.c)
        raise Unavailable(f"no {'job' if not out.jobs else 'node'} counts in the answers")
    return out


def read(host: str, port: int, *, timeout: float = TIMEOUT) -> SlurmctldCounts:
    """Both answers, read and parsed; :class:`Unavailable` when either cannot be had."""
    return parse(fetch(host, port, PATHS["jobs"], timeout=timeout), fetch(host, port, PATHS["nodes"], timeout=timeout))
