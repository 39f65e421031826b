"""What a new render would change on the running cluster: a pure comparison.

:func:`compare` takes the rendered files and what the cluster reports
(``scontrol show partition -o``, the node records, ``scontrol show config``
and the accounting changes of :func:`slurm_pool.accounting.apply.diff`) and
returns one :class:`Difference` per value that differs.  Values are compared
normalised, so an unchanged spec shows nothing on 22.05 and 26.05 alike:
times (``UNLIMITED``, ``2-00:00:00``, ``120 sec``), case (``CR_Core_Memory``),
unset plugins (``none`` rendered, ``(null)`` reported), comma lists as sets,
node lists as hostlists (ClusterShell's NodeSet).

Compared: the rendered partitions' fields (with Slurm's defaults for
AllowAccounts, AllowQos, Default, GraceTime, MaxTime, PriorityTier and State
when the render leaves one out), the rendered nodes' CPUs, RealMemory, Gres
and Features, and the cluster-wide keys the render sets that ``scontrol show
config`` reports and that do not depend on the :class:`~slurm_pool.render.site.Site`
(paths, ports, hosts, users, plugins a site picks): the caller renders twice,
with two different sites, and passes the keys that differ as ``site_keys``.
Settings the render does not set are never shown.  When the render is the
cluster's whole slurm.conf, a partition or node the cluster has and the render
lacks shows as ``removed``; a pool in a site's cluster (``coexist``) shows none:
those are the site's.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Callable, Iterable, Mapping, Sequence

from ClusterShell.NodeSet import NodeSet, NodeSetException

from slurm_pool.adapters.records import NodeRecord
from slurm_pool.adapters.slurmjson import parse_duration
from slurm_pool.text import shown

#: Fields that are the whole difference (no values): ``partition x: added``, ``file gres-a.conf: not installed``.
SINGLE_WORD_FIELDS = frozenset(
    {"added", "removed", "not installed", "not slurm-pool's", "policy added", "policy removed"}
)


@dataclass(frozen=True)
class Difference:
    """One value the new render would change: ``kind`` (partition, node, config, accounting, file, node.conf,
    or a policy table's tier, partition, project, user, policy) and ``name``."""

    kind: str
    name: str
    field: str
    cluster: str
    rendered: str

    def line(self) -> str:
        """``partition shared: GraceTime 20 -> 30`` (Slurm's words made printable)."""
        if self.kind == "accounting":
            return f"accounting: {shown(self.field)}"
        where = f"{self.kind} {shown(self.name)}" if self.name else self.kind
        if self.field in SINGLE_WORD_FIELDS:
            return f"{where}: {self.field}"
        return f"{where}: {shown(self.field)} {shown(self.cluster or '-')} -> {shown(self.rendered or '-')}"

    def to_json(self) -> dict[str, str]:
        return asdict(self)


@dataclass(frozen=True)
class ConfLines:
    """A rendered slurm.conf: its cluster-wide keys, NodeName lines and PartitionName lines."""

    settings: dict[str, str]
    nodes: list[dict[str, str]]
    partitions: list[dict[str, str]]


def _pairs(line: str) -> dict[str, str]:
    """``Key=Value Key=Value`` (no quoting: the renderer writes none) as a dict."""
    out: dict[str, str] = {}
    for word in line.split():
        key, sep, value = word.partition("=")
        if sep:
            out[key] = value
    return out


def parse_conf(*texts: str) -> ConfLines:
    """The keys of rendered slurm.conf texts; a later text's value wins."""
    settings: dict[str, str] = {}
    nodes: list[dict[str, str]] = []
    parts: dict[str, dict[str, str]] = {}
    for text in texts:
        for raw in text.splitlines():
            line = raw.split("#", 1)[0].strip()
            if not line or "=" not in line:
                continue
            pairs = _pairs(line)
            first = line.split("=", 1)[0]
            if first == "NodeName":
                nodes.append(pairs)
            elif first == "PartitionName":
                parts[pairs["PartitionName"]] = pairs
            elif len(pairs) == 1:
                settings.update(pairs)
    seen: dict[str, dict[str, str]] = {}
    for n in nodes:  # slurm.conf and its fragment may both hold a node line
        seen[n["NodeName"]] = n
    return ConfLines(settings, list(seen.values()), list(parts.values()))


def parse_partitions(text: str) -> dict[str, dict[str, str]]:
    """``scontrol show partition -o`` (one partition a line, ``Key=Value`` words): name -> fields."""
    out: dict[str, dict[str, str]] = {}
    for line in text.splitlines():
        pairs = _pairs(line)
        if "PartitionName" in pairs:
            out[pairs["PartitionName"]] = pairs
    return out


# -- normalisation -------------------------------------------------------------------------------

_UNSET = {"", "(null)", "n/a", "none", "(null type)"}
_SECONDS = re.compile(r"([0-9]+) ?(sec|secs)?")
#: Partition fields Slurm reports with this value when slurm.conf leaves them out.
PARTITION_DEFAULTS = {
    "AllowAccounts": "ALL",
    "AllowQos": "ALL",
    "Default": "NO",
    "GraceTime": "0",
    "MaxTime": "UNLIMITED",
    "PriorityTier": "1",
    "State": "UP",
}
#: Comma lists Slurm completes with its own entries: the rendered ones must be there, others may be.
SUPERSET_KEYS = frozenset({"AccountingStorageTRES"})
#: Keys whose value is a time in minutes when a bare number (slurm.conf(5) MaxTime, DefaultTime).
MINUTE_KEYS = frozenset({"MaxTime", "DefaultTime"})
#: Keys whose -1 means "no time": read as INFINITE (``src/common/read_config.c``, time_str2secs),
#: printed as NONE (``src/api/config_info.c``); 0 is a time, printed 00:00:00.
NONE_TIME_KEYS = frozenset({"PreemptExemptTime"})


def _time(key: str, value: str) -> str:
    v = value.strip()
    if v.upper() in ("UNLIMITED", "INFINITE"):
        return "UNLIMITED"
    if v.isascii() and v.isdigit() and key in MINUTE_KEYS:
        return str(int(v) * 60)
    n = parse_duration(v)
    return v.upper() if n is None else str(int(n))


def norm(key: str, value: str) -> object:
    """A value as compared: the same for each spelling Slurm or the renderer uses."""
    v = value.strip()
    if key in NONE_TIME_KEYS and v.upper() in ("-1", "NONE", "INFINITE", "UNLIMITED"):
        return "NONE"
    if key in MINUTE_KEYS or key in NONE_TIME_KEYS or key == "GraceTime":
        return _time(key, v)
    m = _SECONDS.fullmatch(v)
    if m:
        return str(int(m.group(1)))
    low = v.lower()
    if low in _UNSET or low.endswith("/none"):
        return ""
    low = re.sub(r"\([0-9]+\)", "", low)  # SlurmUser root(0)
    if "," in low:
        return frozenset(x for x in low.split(",") if x)
    return low


def _same(key: str, cluster: str, rendered: str, lists_may_grow: bool = False) -> bool:
    have, want = norm(key, cluster), norm(key, rendered)
    if key in SUPERSET_KEYS or lists_may_grow:
        as_set = lambda x: x if isinstance(x, frozenset) else frozenset([x] if x else [])  # noqa: E731
        return as_set(want) <= as_set(have)
    return have == want


def _hosts(value: str, everything: Iterable[str]) -> NodeSet:
    if value.upper() == "ALL":
        return NodeSet.fromlist(list(everything))
    try:
        return NodeSet(value)
    except NodeSetException:
        return NodeSet()


_GRES_SOCKETS = re.compile(r"\((?:S|IDX):[^)]*\)")


def _gres(value: str) -> frozenset[str]:
    """A Gres string without its socket/index suffixes, as a set of ``name:type:count``."""
    return frozenset(x for x in _GRES_SOCKETS.sub("", value).split(",") if x and x != "(null)")


# -- comparison -----------------------------------------------------------------------------------

#: The rendered files that hold slurm.conf lines, a later one's value winning.
CONF_FILES = ("slurm.conf", "site-settings.conf", "slurm-pool.conf")


def _partitions(
    want: Sequence[Mapping[str, str]], have: Mapping[str, Mapping[str, str]], all_nodes: Sequence[str], whole: bool
):
    for part in want:
        name = part["PartitionName"]
        got = have.get(name)
        if got is None:
            yield Difference("partition", name, "added", "", "")
            continue
        fields = {**PARTITION_DEFAULTS, **{k: v for k, v in part.items() if k != "PartitionName"}}
        for key, value in fields.items():
            if key not in part and key not in got:
                continue  # a default this Slurm does not report
            current = got.get(key, "")
            if key == "Nodes":
                same = _hosts(current, all_nodes) == _hosts(value, all_nodes)
            else:
                same = _same(key, current, value)
            if not same:
                yield Difference("partition", name, key, current, value)
    if whole:  # the render is the cluster's whole slurm.conf: every partition is the pool's
        rendered = {p["PartitionName"] for p in want}
        yield from (Difference("partition", n, "removed", "", "") for n in have if n not in rendered)


def _words(value: str) -> frozenset[str]:
    return frozenset(x for x in value.split(",") if x)


#: Node fields compared: slurm.conf key -> (the record's value as text, how both sides are compared).
NODE_FIELDS: dict[str, tuple[Callable[[NodeRecord], str], Callable[[str], object]]] = {
    "CPUs": (lambda r: str(r.cpus or ""), str.strip),
    "RealMemory": (lambda r: str(r.memory_mb or ""), str.strip),
    "Gres": (lambda r: r.gres, _gres),
    "Features": (lambda r: ",".join(r.features), _words),
}


#: Node attributes compared where the rendered line sets them (a spec's node group names them; left out,
#: Slurm's default stands and is not compared), as ``scontrol show node -o`` shows them.
NODE_ATTRIBUTES = ("Sockets", "CoresPerSocket", "ThreadsPerCore", "MemSpecLimit", "TmpDisk", "Weight")


def attributes_needed(rendered: Mapping[str, str]) -> bool:
    """Whether a rendered node line sets one of :data:`NODE_ATTRIBUTES` (then the nodes' attributes are read)."""
    conf = parse_conf(*(rendered[n] for n in CONF_FILES if n in rendered))
    return any(key in line for line in conf.nodes for key in NODE_ATTRIBUTES)


def _nodes(
    want: Sequence[Mapping[str, str]],
    have: Sequence[NodeRecord],
    whole: bool,
    attributes: Mapping[str, Mapping[str, str]],
):
    records = {n.name: n for n in have}
    found: dict[tuple[str, str, str], list[str]] = {}  # (field, cluster, rendered) -> nodes
    listed: set[str] = set()
    for line in want:
        for node in _hosts(line["NodeName"], ()):
            listed.add(node)
            rec = records.get(node)
            if rec is None:
                found.setdefault(("added", "", ""), []).append(node)
                continue
            for key, (text, key_norm) in NODE_FIELDS.items():
                current, rendered = text(rec), line.get(key, "")
                if key_norm(current) != key_norm(rendered):
                    found.setdefault((key, current, rendered), []).append(node)
            for key in NODE_ATTRIBUTES:
                if key in line and node in attributes:
                    current = attributes[node].get(key, "")
                    if current.strip() != line[key].strip():
                        found.setdefault((key, current, line[key]), []).append(node)
    if whole:  # every node is the pool's
        found.update({("removed", "", ""): [n for n in records if n not in listed]})
    for (key, cluster, value), names in found.items():
        if names:
            yield Difference("node", str(NodeSet.fromlist(names)), key, cluster, value)


def _config(want: Mapping[str, str], have: Mapping[str, str], site_keys: Iterable[str], lists_may_grow: bool):
    skip = set(site_keys)
    for key, value in want.items():
        if key in skip or key not in have:
            continue  # a site's choice, or a key scontrol show config does not report
        if not _same(key, have[key], value, lists_may_grow):
            yield Difference("config", "", key, have[key], value)


def compare(
    rendered: Mapping[str, str],
    partitions_text: str,
    nodes: Sequence[NodeRecord],
    config: Mapping[str, str],
    accounting: Sequence[str] = (),
    site_keys: Iterable[str] = (),
    attributes: Mapping[str, Mapping[str, str]] | None = None,
) -> list[Difference]:
    """Every difference between the rendered files and what the cluster reports, partitions first.

    ``attributes``: each node's attributes as slurmctld holds them (``SlurmCalls.node_attributes``), for the
    :data:`NODE_ATTRIBUTES` a rendered line sets.

    A pool in a site's cluster (``coexist``: no slurm.conf, but ``site-settings.conf``) needs its
    items in the site's lists (``SchedulerParameters``, ``PrologFlags``, ...): there a list may hold more.
    """
    conf = parse_conf(*(rendered[n] for n in CONF_FILES if n in rendered))
    whole = "slurm.conf" in rendered
    all_nodes = [n.name for n in nodes]
    return [
        *_partitions(conf.partitions, parse_partitions(partitions_text), all_nodes, whole),
        *_nodes(conf.nodes, nodes, whole, attributes or {}),
        *_config(conf.settings, config, site_keys, not whole),
        *(Difference("accounting", "", line, "", "") for line in accounting),
    ]


def site_dependent(a: Mapping[str, str], b: Mapping[str, str]) -> set[str]:
    """The cluster-wide keys whose value differs between two renders for two different sites."""
    sa = parse_conf(*(a[n] for n in CONF_FILES if n in a)).settings
    sb = parse_conf(*(b[n] for n in CONF_FILES if n in b)).settings
    return {k for k in sa.keys() | sb.keys() if sa.get(k) != sb.get(k)}
