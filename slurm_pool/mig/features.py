"""MIG layouts as changeable Slurm node features (``node_features/helpers``).

A node group may name the MIG layouts its GPUs can take (``gpus.layouts``);
each name is a node feature.  A job asking ``--constraint=<name>`` for a
layout no node has makes slurmctld send the node a reboot request carrying
the feature, and slurmd runs the Helper program with that name.  This module
is the pure part: the rendered ``helpers.conf`` lines, the per-node layout
table the Helper reads, and the Helper's decisions.  No Slurm or NVML here:
devices come through :class:`slurm_pool.mig.apply.MigBackend`.

The Helper contract (SchedMD 26.05.3 ``doc/man/man5/helpers.conf.5`` and
``src/plugins/node_features/helpers/node_features_helpers.c``):

* no arguments: print the active features, one per line, exit 0.  slurmd
  keeps only names listed in helpers.conf (``_foreach_filter_modes``); a
  non-zero exit makes the query return nothing (``_feature_get_state``);
* one argument, a feature: make it active, exit 0.  A non-zero exit (or
  running past ``ExecTime``: ``run_command`` with ``max_wait = exec_time *
  1000``) makes slurmd set the node DOWN, "Failed to set node feature(s)"
  (``src/slurmd/slurmd/req.c`` ``_rpc_reboot``);
* with ``Flags=rebootless`` slurmd then skips RebootProgram, sets a new boot
  time and re-registers (``_rpc_reboot``: ``refresh_cached_features``, then
  ``send_registration_msg``), so the Helper is queried again;
* a feature name starts with a letter or ``_`` and holds letters, digits,
  ``_``, ``.`` and ``=`` only (``_is_feature_valid``; no ``-``);
* slurmd runs the Helper with its own environment, which has ``SLURM_CONF``
  (``src/slurmd/slurmd/slurmd.c`` sets it) but not the node name, hence one
  Helper path per node where several slurmd share a host.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Protocol, Sequence

from slurm_pool.mig.placement import Layout, canonical
from slurm_pool.mig.profiles import geometry
from slurm_pool.text import check_path, matches

#: Slurm's ``_is_feature_valid`` without ``=`` (kept for key=value features), at most 64 characters.
#: Anchored with ``\Z`` (never ``$``, which matches before a final newline): whole-string with
#: ``re.match`` as with ``re.fullmatch``.
LAYOUT_FEATURE_RE = r"^[A-Za-z_][A-Za-z0-9_.]{0,63}\Z"
#: A ``NodeName=`` hostlist in helpers.conf (``c-gpu[1-2],d-gpu1``).
_HOSTLIST_RE = re.compile(r"[A-Za-z0-9._\[\],-]+")
HELPER_PROGRAM = "slurm-pool-mig-helper"
#: The per-node layout table, next to slurm.conf (the Helper finds it through ``$SLURM_CONF``).
LAYOUTS_FILE = "slurm-pool-mig-layouts.json"
#: Rendered ``ExecTime``: nvidia-smi takes seconds per GPU; Slurm's default is 10.
EXEC_TIME = 60
#: Slurm's default ExecTime, used when helpers.conf cannot be read.
SLURM_DEFAULT_EXEC_TIME = 10
#: Seconds of ExecTime the Helper keeps for rolling back.
ROLLBACK_MARGIN = 0.4

# Exit statuses of the Helper (slurmd only tells zero from non-zero).
OK, FAILED, USAGE = 0, 1, 2

NodeLayouts = Mapping[str, Sequence[Layout | None]]


def node_table(groups: Iterable[tuple[list[str], str, int, Mapping[str, Sequence[Sequence[str] | None]]]]) -> dict:
    """The Helper's table: node -> model, GPU count and its named layouts (canonical order)."""
    nodes: dict[str, Any] = {}
    for hosts, model, count, layouts in groups:
        geo = geometry(model)
        named = {
            name: [None if lay is None else list(canonical(geo, lay)) for lay in per_gpu]
            for name, per_gpu in layouts.items()
        }
        for node in hosts:
            nodes[node] = {"model": model, "gpus": count, "layouts": named}
    return {"version": 1, "nodes": nodes}


def table_error(table: object) -> str | None:
    """What is wrong with a layout table read from disk (None: it has :func:`node_table`'s shape)."""
    if not isinstance(table, dict) or not isinstance(table.get("nodes"), dict):
        return "expected an object with a 'nodes' object"
    for node, entry in table["nodes"].items():
        if not matches("node", node):
            return f"nodes: {node!r} is not a node name"
        where = f"nodes.{node}"
        if not isinstance(entry, dict) or not isinstance(entry.get("layouts"), dict):
            return f"{where}: expected an object with 'model' and 'layouts'"
        model = entry.get("model")
        try:
            profiles = geometry(model).profiles if isinstance(model, str) else None
        except KeyError:
            profiles = None
        if profiles is None:
            return f"{where}.model: {model!r} is not a MIG-capable GPU model"
        for name, per_gpu in entry["layouts"].items():
            if not re.fullmatch(LAYOUT_FEATURE_RE, name):
                return f"{where}.layouts: {name!r} is not a Slurm node feature name"
            ok = isinstance(per_gpu, list) and all(
                lay is None or (isinstance(lay, list) and all(isinstance(p, str) and p in profiles for p in lay))
                for lay in per_gpu
            )
            if not ok:
                return f"{where}.layouts.{name}: expected a list of per-GPU {model} profile lists (or null)"
    return None


def helper_path(bin_dir: str, node: str | None) -> str:
    """The Helper program: one per node (``node``) where slurmds share a host, else one for all."""
    return f"{bin_dir}/{HELPER_PROGRAM}" + (f"-{node}" if node else "")


def helpers_conf_lines(entries: Iterable[tuple[str, Sequence[str], str]]) -> list[str]:
    """``NodeName=... Feature=a,b Helper=... Flags=rebootless`` per (nodes, features, helper).

    ValueError for a hostlist, feature or Helper path that is not one word of its kind.
    """
    entries = list(entries)
    for nodes, features, helper in entries:
        if not matches(_HOSTLIST_RE, nodes):
            raise ValueError(f"helpers.conf NodeName: {nodes!r} is not a hostlist")
        for feature in features:
            if not re.fullmatch(LAYOUT_FEATURE_RE, feature):
                raise ValueError(f"helpers.conf Feature: {feature!r} is not a Slurm node feature name")
        check_path(helper, "helpers.conf Helper")
    return [
        f"NodeName={nodes} Feature={','.join(features)} Helper={helper} Flags=rebootless"
        for nodes, features, helper in entries
        if features
    ]


def parse_exec_time(text: str) -> int:
    """``ExecTime`` of a helpers.conf text (Slurm's default when absent)."""
    for line in text.splitlines():
        m = re.fullmatch(r"\s*ExecTime\s*=\s*([0-9]+)\s*(#.*)?", line, re.IGNORECASE)
        if m:
            return int(m.group(1))
    return SLURM_DEFAULT_EXEC_TIME


def _same(model: str, a: Layout | None, b: Sequence[str] | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    geo = geometry(model)
    return canonical(geo, a) == canonical(geo, b)


def active(model: str, named: Mapping[str, Sequence[Sequence[str] | None]], current: Mapping[int, Layout | None]):
    """Names of the layouts the GPUs hold now (every GPU as the layout says), sorted."""
    return sorted(
        name
        for name, per_gpu in named.items()
        if all(_same(model, current.get(i, ()), lay) for i, lay in enumerate(per_gpu))
    )


class Backend(Protocol):
    """The part of :class:`slurm_pool.mig.apply.MigBackend` the Helper uses."""

    def layouts(self, node: str) -> dict[int, Layout | None]: ...

    def apply(self, node: str, gpu: int, layout: Layout | None) -> None: ...


@dataclass
class HelperResult:
    """What the Helper prints and its exit status."""

    code: int
    out: list[str] = field(default_factory=list)
    err: list[str] = field(default_factory=list)


@dataclass
class HelperDevice:
    """The device side of one node, for the Helper.

    ``busy`` lists the work that forbids a change (other jobs, GPU
    processes); ``after_apply`` tells Slurm about the new GRES.
    """

    backend: Backend
    busy: Callable[[str], list[str]]
    after_apply: Callable[[str], None] = lambda _node: None


def _label(per_gpu: Sequence[Layout | None]) -> str:
    return "; ".join(
        f"GPU {i}: " + ("MIG off" if lay is None else ",".join(lay) or "empty") for i, lay in enumerate(per_gpu)
    )


def unknown_node(table: Mapping[str, Any], node: str) -> HelperResult | None:
    """The Helper's answer for a node the table does not list (None when it does)."""
    nodes = table.get("nodes", {})
    if node in nodes:
        return None
    known = ", ".join(sorted(nodes)) or "none"
    return HelperResult(USAGE, err=[f"node {node!r} has no MIG layouts in the table (nodes: {known})"])


def run_helper(
    feature: str | None,
    node: str,
    table: Mapping[str, Any],
    device: HelperDevice,
    exec_time: float,
    clock: Callable[[], float] = time.monotonic,
) -> HelperResult:
    """The Helper: query (``feature`` None) or make ``feature`` the node's layout.

    A change is refused while anything in ``device.busy`` runs; a change that
    fails, or would overrun ``exec_time``, is rolled back so that the GPUs end
    as they were, and the exit status is non-zero.
    """
    start = clock()
    unknown = unknown_node(table, node)
    if unknown:
        return unknown
    entry = table["nodes"][node]
    model, named = entry["model"], entry["layouts"]
    try:
        current = device.backend.layouts(node)
    except Exception as exc:  # noqa: BLE001 - reported; slurmd sees the status
        return HelperResult(FAILED, err=[f"{node}: cannot read the GPUs' MIG state: {exc}"])
    if feature is None:
        return HelperResult(OK, out=active(model, named, current))
    if feature not in named:
        return HelperResult(
            USAGE, err=[f"{feature!r} is not a MIG layout of {node} (known: {', '.join(sorted(named))})"]
        )
    if feature in active(model, named, current):
        return HelperResult(OK, err=[f"{node}: {feature} is already active"])
    try:
        busy = device.busy(node)
    except Exception as exc:  # noqa: BLE001
        return HelperResult(FAILED, err=[f"{node}: cannot tell whether the GPUs are in use: {exc}"])
    if busy:
        return HelperResult(FAILED, err=[f"{node}: not changing the MIG layout while work runs: " + "; ".join(busy)])
    target = [None if lay is None else tuple(lay) for lay in named[feature]]
    before = {i: current.get(i) for i in range(len(target))}
    budget = exec_time * (1 - ROLLBACK_MARGIN)
    done: list[int] = []
    try:
        for i, lay in enumerate(target):
            if _same(model, before[i], lay):
                continue
            if clock() - start > budget:
                raise TimeoutError(f"{clock() - start:.1f}s used of ExecTime={exec_time:g}s before GPU {i}")
            done.append(i)
            device.backend.apply(node, i, lay)
        after = device.backend.layouts(node)
        if feature not in active(model, named, after):
            raise RuntimeError(f"GPUs hold {_label([after.get(i) for i in range(len(target))])} after applying")
    except Exception as exc:  # noqa: BLE001 - roll back, then report
        err = [f"{node}: applying {feature} ({_label(target)}) failed: {exc}"]
        err.extend(_rollback(node, model, before, done, device.backend))
        return HelperResult(FAILED, err=err)
    try:
        device.after_apply(node)
    except Exception as exc:  # noqa: BLE001 - the GPUs changed; Slurm must not schedule on stale GRES
        return HelperResult(FAILED, err=[f"{node}: {feature} applied, but updating Slurm's GRES failed: {exc}"])
    return HelperResult(OK, err=[f"{node}: {feature} applied in {clock() - start:.2f}s"])


def _rollback(
    node: str, model: str, before: Mapping[int, Layout | None], done: list[int], backend: Backend
) -> list[str]:
    out = []
    for i in reversed(done):
        try:
            backend.apply(node, i, before[i])
        except Exception as exc:  # noqa: BLE001
            out.append(f"{node}: rolling GPU {i} back failed: {exc}")
    try:
        now = backend.layouts(node)
        bad = [i for i in before if not _same(model, now.get(i), before[i])]
    except Exception as exc:  # noqa: BLE001
        return [*out, f"{node}: cannot read the GPUs after rolling back: {exc}"]
    if bad:
        out.append(f"{node}: GPU(s) {', '.join(map(str, bad))} not as before after rolling back")
    else:
        out.append(f"{node}: GPUs left as they were")
    return out


def other_jobs(node_jobs: Iterable[tuple[str, str]]) -> list[str]:
    """The jobs on a node, as ``(job id, state)`` (``SlurmCalls.jobs_on_node``), that forbid a change.

    slurmctld sends the feature change for a job it has allocated the node
    to, which waits CONFIGURING meanwhile; any other job there (running,
    suspended, completing) still uses the GPUs.
    """
    return [f"job {job} is {state}" for job, state in node_jobs if state and state not in ("CONFIGURING", "PENDING")]
