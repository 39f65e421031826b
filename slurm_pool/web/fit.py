"""What a submitted job asks of its partition's nodes, form and ``#SBATCH`` header together.  Pure.

The console's form becomes sbatch options; the script's ``#SBATCH`` lines add
the options the form does not pass (sbatch lets the command line win,
sbatch(1)).  :func:`ask` merges both into what Slurm will allocate -- nodes,
GPUs per node, GPUs per job -- and :func:`refusals` checks that against the
partition's nodes as the spec describes them: a job no node can hold (4 GPUs
on 2-GPU nodes) is refused before it is submitted, not left pending forever.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from slurm_pool.adapters.sbatchopts import Directive, HeaderError, header, last
from slurm_pool.mig.catalogue import GPU_MODELS
from slurm_pool.spec.hosts import HostlistError, expand
from slurm_pool.spec.model import PoolSpec
from slurm_pool.spec.rules import partition_groups

#: ``[type:]N`` (``--gpus``, ``--gpus-per-node``); ``--gres`` is ``gpu[:type][:N]`` (N defaults to 1).
_GPUS = re.compile(r"(?:([A-Za-z0-9_.+-]+):)?([0-9]{1,6})")
_NODES = re.compile(r"([0-9]{1,6})(?:-([0-9]{1,6}))?")
#: The options the console passes itself; the script's are overridden (their names as sbatch spells them).
OVERRIDDEN = ("partition", "qos", "account", "time", "job-name", "nodelist", "gres")


@dataclass(frozen=True)
class NodeShape:
    """The nodes of one node group in a partition: how many, and the GPUs each holds."""

    group: str
    hosts: tuple[str, ...]
    units: int  # GPU units per node: whole GPUs and MIG instances
    whole: dict[str, int] = field(default_factory=dict)  # whole-GPU GRES type -> count per node


@dataclass
class Ask:
    """What the job asks for, once the form and the header are merged."""

    nodes: int = 1
    per_node: int = 0  # GPUs per node (--gres gpu / --gpus-per-node)
    per_job: int | None = None  # GPUs in all (--gpus)
    gpu_type: str | None = None
    nodelist: tuple[str, ...] = ()
    output: str = ""  # where the job's output goes, as the user would look for it
    notes: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def total(self) -> int:
        """The GPUs of the whole job."""
        return self.per_job if self.per_job is not None else self.per_node * self.nodes


def shapes(spec: PoolSpec, partition: str) -> list[NodeShape]:
    """The node groups of ``partition`` with their GPUs (a group whose hosts cannot be expanded is left out)."""
    part = next((p for p in spec.partitions if p.name == partition), None)
    if part is None:
        return []
    wanted = set(partition_groups(spec, part.nodes))
    out = []
    for g in spec.node_groups:
        if g.name not in wanted:
            continue
        try:
            hosts = tuple(expand(g.hosts))
        except HostlistError:
            continue
        units, whole = 0, {}
        if g.gpus is not None and g.gpus.count > 0:
            layouts = g.gpus.mig or [None] * g.gpus.count
            plain = sum(1 for i in range(g.gpus.count) if i >= len(layouts) or layouts[i] is None)
            units = plain + sum(len(x) for x in layouts[: g.gpus.count] if x is not None)
            model = GPU_MODELS.get(g.gpus.model)
            if model is not None and plain:
                whole[g.gpus.gres_type()] = plain
        out.append(NodeShape(g.name, hosts, units, whole))
    return out


def ask(options: list[str], script: str) -> Ask:
    """The merged request: the form's ``options`` (``--name=value``) win over the script's header."""
    out = Ask()
    given = {o[2:].split("=", 1)[0]: o.split("=", 1)[1] if "=" in o else "" for o in options if o.startswith("--")}
    try:
        directives = last(header(script))
    except HeaderError as exc:
        out.problems.append(f"{exc}: sbatch cannot read this #SBATCH line")
        directives = {}
    for name in OVERRIDDEN:
        d = directives.get(name)
        if d is not None and name in given and d.value != given[name]:
            out.notes.append(
                f"the script's #SBATCH --{name}={d.value} (line {d.line}) is overridden by the form's --{name}={given[name]}"
            )
    mine = {k: v for k, v in directives.items() if k not in given}
    _gpus(out, given.get("gres"), mine)
    _nodes(out, given.get("nodelist"), mine)
    _output(out, mine)
    return out


def _gpus(out: Ask, gres: str | None, header: dict[str, Directive]) -> None:
    for item in (gres or (header["gres"].value if "gres" in header else "")).split(","):
        parts = item.strip().split(":")
        if parts[0] != "gpu" or len(parts) > 3:
            continue  # shard, another GRES, or a form sbatch refuses itself
        count = parts[-1] if len(parts) > 1 and parts[-1].isascii() and parts[-1].isdigit() else "1"
        kind = parts[1] if len(parts) == 3 or (len(parts) == 2 and count != parts[1]) else None
        out.gpu_type, out.per_node = kind, int(count[:6])
    for name in ("gpus-per-node", "gpus"):
        d = header.get(name)
        if d is None:
            continue
        m = _GPUS.fullmatch(d.value)
        if m is None:
            out.problems.append(f"script line {d.line}: --{name}={d.value} is not [type:]count")
            continue
        out.gpu_type = m.group(1) or out.gpu_type
        if name == "gpus":
            out.per_job = int(m.group(2))
        else:
            out.per_node = int(m.group(2))


def _nodes(out: Ask, nodelist: str | None, header: dict[str, Directive]) -> None:
    d = header.get("nodes")
    if d is not None:
        m = _NODES.fullmatch(d.value)
        if m is None:
            out.problems.append(f"script line {d.line}: --nodes={d.value} is not a count or min-max")
        else:
            out.nodes = int(m.group(1))
    listed = nodelist or (header["nodelist"].value if "nodelist" in header else "")
    if listed:
        try:
            out.nodelist = tuple(expand(listed))
        except HostlistError:
            out.problems.append(f"--nodelist={listed} is not a host list")
        out.nodes = max(out.nodes, len(out.nodelist))


def _output(out: Ask, header: dict[str, Directive]) -> None:
    where = header["chdir"].value.rstrip("/") if "chdir" in header else "~"
    array = "array" in header
    name = header["output"].value if "output" in header else ("slurm-%A_%a.out" if array else "slurm-%j.out")
    out.output = name if name.startswith("/") or name == "none" else f"{where}/{name}"


def refusals(job: Ask, partition: str, nodes: list[NodeShape]) -> list[str]:
    """Why no node set of ``partition`` can hold ``job`` ([] if one can)."""
    if not partition or not nodes:
        return []
    out: list[str] = []
    typed = job.gpu_type
    per_node = [(s, s.whole.get(typed, 0) if typed else s.units) for s in nodes]
    largest = max(n for _, n in per_node)
    what = f" of type {typed}" if typed else ""
    if job.per_node > largest:
        out.append(
            f"no node of partition {partition!r} holds {job.per_node} GPU(s){what}: the largest holds {largest}; "
            f"ask for at most {largest} per node (more GPUs: more nodes, #SBATCH --nodes)"
        )
    hosts = sum(len(s.hosts) for s in nodes)
    if job.nodes > hosts:
        out.append(f"partition {partition!r} has {hosts} node(s); the job asks for {job.nodes}")
    if job.nodelist:
        members = {h for s in nodes for h in s.hosts}
        missing = [h for h in job.nodelist if h not in members]
        if missing:
            out.append(f"node(s) {', '.join(missing)} are not in partition {partition!r}")
        else:
            room = {h: n for s, n in per_node for h in s.hosts}
            small = [h for h in job.nodelist if room[h] < job.per_node]
            if small:
                out.append(f"node(s) {', '.join(small)} hold fewer than {job.per_node} GPU(s){what}")
    room_all = sum(n * len(s.hosts) for s, n in per_node)
    if job.per_job is not None and job.per_job > room_all:
        out.append(f"partition {partition!r} has {room_all} GPU(s){what} in all; the job asks for {job.per_job}")
    return out


__all__ = ["Ask", "NodeShape", "OVERRIDDEN", "ask", "refusals", "shapes"]
