"""Apply a MIG plan safely: drain, wait, repartition, reconfigure, resume.

Written against two small Protocols so the same orchestration drives real
nodes (``NvidiaSmiBackend`` plus a Slurm ``NodeControl``), the emulated local
cluster and unit-test fakes.  Guarantees, per node:

* only nodes with a changed GPU are touched; nodes drained by someone else
  (a reason not starting with ``slurm-pool: mig reconfigure``) are skipped;
* the node is drained before anything changes and resumed only after the new
  layout is verified, gres.conf/slurm.conf are written and slurmd restarted;
* on any failure the node stays drained, its reason saying what failed, and a
  failure before gres.conf is written puts the GPUs back as they were;
* at most ``max_drained`` nodes change at once, within a churn budget of GPUs;
* re-running is idempotent: GPUs already in their target layout are left
  alone, and a node left drained by an earlier failed run is picked up again;
* nothing is touched before the plan's node names and device directories are
  checked, and, where the NodeControl has ``check_files(nodes)``, every file
  the change will edit (it raises when one cannot be edited);
* with ``managed`` (``mig apply --config-managed``) no file is written: the
  step that writes them checks the site's files carry the node's lines instead.
"""

from __future__ import annotations

import functools
import re
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable, Collection, Literal, Protocol, Sequence

from slurm_pool.adapters.runner import Runner
from slurm_pool.errors import InputError, PoolError
from slurm_pool.mig.emit import (
    MigDevice,
    gres_conf_autodetect,
    gres_conf_explicit,
    nvidia_smi_commands,
    parse_mig_minors,
    slurm_gres,
)
from slurm_pool.mig.placement import Layout, canonical
from slurm_pool.mig.planner import Plan
from slurm_pool.mig.profiles import geometry
from slurm_pool.text import check_path, matches, shown
from slurm_pool.versions import DEFAULT_VERSION, SlurmVersion

REASON = "slurm-pool: mig reconfigure"


@dataclass(frozen=True)
class NodeStatus:
    """What apply needs to know about a node before touching it."""

    drained: bool
    reason: str = ""


class NodeControl(Protocol):
    """Slurm-side control of one node.

    It may also have ``check_files(nodes)``, which raises when a file the change
    of ``nodes`` edits cannot be edited; :func:`apply_plan` calls it first.
    """

    def status(self, node: str) -> NodeStatus: ...

    def drain(self, node: str, reason: str) -> None:
        """Drain (or, when already drained, update the reason)."""

    def resume(self, node: str) -> None: ...

    def wait_idle(self, node: str, timeout: float) -> bool:
        """Block until no job runs on the node; False on timeout."""

    def write_gres(self, node: str, gres_conf: Sequence[str], gres: str) -> None:
        """Install the node's gres.conf lines and its slurm.conf ``Gres=`` value.

        With ``managed`` (config management owns the files) :func:`apply_plan` calls
        ``confirm_gres(node, gres_conf, gres)`` instead, which writes nothing and raises
        when the files do not carry exactly these lines.
        """

    def restart_slurmd(self, node: str) -> None: ...


class MigBackend(Protocol):
    """Device-side view and control of a node's GPUs."""

    def layouts(self, node: str) -> dict[int, Layout | None]:
        """Current layout per GPU index (None: MIG off)."""

    def apply(self, node: str, gpu: int, layout: Layout | None) -> None:
        """Make GPU ``gpu`` hold exactly ``layout``."""

    def devices(self, node: str) -> list[MigDevice]:
        """The MIG devices that exist now (for explicit gres.conf lines)."""

    def mig_minors(self, node: str) -> dict[str, int] | None:
        """The driver's MIG capability minors (``/proc/driver/nvidia-caps/mig-minors``), or None to derive them."""


class ApplyError(PoolError, RuntimeError):
    """One step of applying a node failed."""


@dataclass
class NodeResult:
    node: str
    status: Literal["applied", "unchanged", "skipped", "failed", "dry-run", "deferred"]
    actions: list[str] = field(default_factory=list)
    error: str = ""
    gpus: int = 0  # GPUs this node's change repartitions


@dataclass
class ApplyReport:
    results: list[NodeResult]

    @property
    def ok(self) -> bool:
        return not any(r.status == "failed" for r in self.results)

    def failure(self) -> str:
        """Which nodes failed and the first one's reason, in one line ("" when :attr:`ok`)."""
        bad = [r for r in self.results if r.status == "failed"]
        return f"{len(bad)} node(s) failed, left drained; first {bad[0].node}: {bad[0].error}" if bad else ""

    def to_dict(self) -> dict[str, object]:
        return {"ok": self.ok, "nodes": [r.__dict__ for r in self.results]}


def targets_by_node(plan: Plan) -> dict[str, dict[int, Layout | None]]:
    """Node -> GPU index -> the layout the plan gives it, for the GPUs the plan changes."""
    out: dict[str, dict[int, Layout | None]] = {}
    for i in plan.changed():
        g = plan.gpus[i]
        out.setdefault(g.node, {})[g.index] = plan.layouts[i]
    return out


def same_layout(model: str, a: Layout | None, b: Layout | None) -> bool:
    """Whether two layouts of a ``model`` GPU are the same slices (in any order); None only equals None."""
    if a is None or b is None:
        return a is b
    geo = geometry(model)
    return canonical(geo, a) == canonical(geo, b)


#: Called as ``on_step(node, label)`` after each step that succeeded.
StepHook = Callable[[str, str], None]


def apply_plan(
    plan: Plan,
    nodes: NodeControl,
    backend: MigBackend,
    *,
    dry_run: bool = False,
    timeout: float = 3600.0,
    gres_mode: Literal["explicit", "autodetect"] = "explicit",
    version: SlurmVersion = DEFAULT_VERSION,
    max_drained: int = 1,
    max_gpus: int | None = None,
    on_step: StepHook | None = None,
    dev_dir: str = "/dev",
    managed: bool = False,
    only: Collection[str] | None = None,
) -> ApplyReport:
    """Apply ``plan``; never raises for a node's failure (see the report).

    ``version`` is the nodes' Slurm: it decides the MIG GRES type names written.
    At most ``max_drained`` nodes are drained for the change at once; at most
    ``max_gpus`` GPUs are repartitioned in this run (the churn budget), taking
    nodes in name order: a node that does not fit the budget left is
    ``deferred`` and untouched.  Restarts never overlap.  ``dev_dir`` is where
    the nodes keep their device files (``{node}``: the node's name).  A bad node
    name or device directory, or a file that cannot be edited, raises before
    anything changes.  ``managed``: the site's config management has written the
    files; they are checked, never written (see :mod:`slurm_pool.mig.managed`).
    ``only``: change these nodes of the plan and no other.
    """
    if max_drained < 1:
        raise ValueError(f"max_drained must be at least 1, not {max_drained}")
    if max_gpus is not None and max_gpus < 0:
        raise ValueError(f"max_gpus must not be negative, not {max_gpus}")
    for g in plan.gpus:
        if not matches("node", g.node):
            raise InputError(f"plan: node {g.node!r} is not a node name")
        try:
            check_path(dev_dir.replace("{node}", g.node), "dev_dir")
        except ValueError as exc:
            raise InputError(str(exc)) from None
    serial = _Serialized(nodes)
    hook = on_step or (lambda node, label: None)
    todo: list[tuple[str, dict[int, Layout | None]]] = []
    results: dict[str, NodeResult] = {}
    budget = max_gpus
    for node, targets in sorted(targets_by_node(plan).items()):
        if only is not None and node not in only:
            continue
        if budget is not None and len(targets) > budget:
            results[node] = NodeResult(
                node, "deferred", [], f"churn budget: {len(targets)} GPU(s) to change, {budget} left", len(targets)
            )
            continue
        if budget is not None:
            budget -= len(targets)
        todo.append((node, targets))
    check_files = getattr(nodes, "check_files", None)
    if todo and callable(check_files) and not managed:
        check_files([node for node, _ in todo])

    def one(item: tuple[str, dict[int, Layout | None]]) -> NodeResult:
        node, targets = item
        where = dev_dir.replace("{node}", node)
        return _apply_node(
            plan.model, node, targets, serial, backend, dry_run, timeout, gres_mode, version, hook, where, managed
        )

    with ThreadPoolExecutor(max_workers=max_drained) as pool:
        for res in pool.map(one, todo):
            results[res.node] = res
    return ApplyReport([results[n] for n in sorted(results)])


class _Serialized:
    """A NodeControl whose restarts run one at a time (a restart may restart slurmctld)."""

    def __init__(self, nodes: NodeControl):
        self._nodes = nodes
        self._lock = threading.Lock()

    def status(self, node: str) -> NodeStatus:
        return self._nodes.status(node)

    def drain(self, node: str, reason: str) -> None:
        self._nodes.drain(node, reason)

    def resume(self, node: str) -> None:
        self._nodes.resume(node)

    def wait_idle(self, node: str, timeout: float) -> bool:
        return self._nodes.wait_idle(node, timeout)

    def write_gres(self, node: str, gres_conf: Sequence[str], gres: str) -> None:
        with self._lock:
            self._nodes.write_gres(node, gres_conf, gres)

    def confirm_gres(self, node: str, gres_conf: Sequence[str], gres: str) -> None:
        confirm = getattr(self._nodes, "confirm_gres", None)
        if not callable(confirm):
            raise ApplyError("these node controls cannot check the site's files (confirm_gres)")
        confirm(node, gres_conf, gres)

    def restart_slurmd(self, node: str) -> None:
        with self._lock:
            self._nodes.restart_slurmd(node)


def _apply_node(
    model: str,
    node: str,
    targets: dict[int, Layout | None],
    nodes: _Serialized,
    backend: MigBackend,
    dry_run: bool,
    timeout: float,
    gres_mode: str,
    version: SlurmVersion,
    hook: StepHook,
    dev_dir: str = "/dev",
    managed: bool = False,
) -> NodeResult:
    res = NodeResult(node, "applied", gpus=len(targets))
    try:
        st = nodes.status(node)
        ours = st.drained and st.reason.startswith(REASON)
        if st.drained and not ours:
            return NodeResult(node, "skipped", [], f"drained by someone else: {st.reason or '(no reason)'}")
        current = backend.layouts(node)
    except Exception as exc:  # noqa: BLE001 - reported, node untouched
        return NodeResult(node, "failed", [], f"cannot read node state: {exc}")
    todo = {i: lay for i, lay in targets.items() if not same_layout(model, current.get(i, ()), lay)}
    if not todo and not ours:
        return NodeResult(node, "unchanged")
    res.gpus = len(todo)
    steps: list[tuple[str, Callable[[], object]]] = []
    if not ours:
        steps.append((f"drain {node} reason={REASON!r}", lambda: nodes.drain(node, REASON)))
    steps.append((f"wait until {node} is idle", lambda: _wait(nodes, node, timeout)))
    for idx, lay in sorted(todo.items()):
        label = "MIG off" if lay is None else (",".join(lay) or "empty")
        steps.append((f"set GPU {idx} to {label}", functools.partial(backend.apply, node, idx, lay)))
    steps.append(("verify layouts", lambda: _verify(model, node, targets, backend)))
    if managed:
        label, write = "check gres.conf and slurm.conf carry the node's lines", nodes.confirm_gres
    else:
        label, write = "write gres.conf and slurm.conf Gres", nodes.write_gres
    steps.append((label, lambda: write(node, *_conf_lines(model, node, backend, gres_mode, version, dev_dir))))
    steps.append(("restart slurmd", lambda: nodes.restart_slurmd(node)))
    steps.append((f"resume {node}", lambda: _resume_if_ours(nodes, node, res)))
    if dry_run:
        res.status = "dry-run"
        res.actions = [label for label, _ in steps]
        for idx, lay in sorted(todo.items()):
            for cmd in nvidia_smi_commands(model, idx, lay, current.get(idx) is not None):
                res.actions.append("  would run: " + " ".join(cmd))
        return res
    touched = len(steps) - 3  # the steps before gres.conf is written: a failure there is rolled back
    for n, (label, fn) in enumerate(steps):
        try:
            fn()
            res.actions.append(label)
            hook(node, label)
        except Exception as exc:  # noqa: BLE001 - any failure leaves the node drained
            res.status = "failed"
            res.error = f"{label}: {exc}"
            if n < touched:
                _roll_back(model, node, todo, current, backend, res)
            reason = f"{REASON} failed: {_short(res.error)}"
            try:
                human = _human_drain(nodes, node)
                if human is not None:  # an admin's reason says more than ours; it stays
                    res.actions.append(f"left drained by someone else: {human or '(no reason)'}")
                else:
                    nodes.drain(node, reason)
                    res.actions.append(f"left drained: {reason}")
            except Exception as exc2:  # noqa: BLE001
                res.error += f"; and re-draining failed: {exc2}"
            return res
    return res


def _roll_back(
    model: str,
    node: str,
    todo: dict[int, Layout | None],
    before: dict[int, Layout | None],
    backend: MigBackend,
    res: NodeResult,
) -> None:
    """Put every GPU the change was to touch back into the layout it had."""
    try:
        now = backend.layouts(node)
    except Exception as exc:  # noqa: BLE001
        res.error += f"; cannot read the GPUs to roll back: {exc}"
        return
    for idx in sorted(todo):
        old = before.get(idx)
        if same_layout(model, now.get(idx, ()), old):
            continue
        try:
            backend.apply(node, idx, old)
            res.actions.append(f"rolled back GPU {idx} to {'MIG off' if old is None else ','.join(old) or 'empty'}")
        except Exception as exc:  # noqa: BLE001
            res.error += f"; rolling back GPU {idx} failed: {exc}"


def _human_drain(nodes: NodeControl, node: str) -> str | None:
    """The reason of a drain someone else set on ``node`` (possibly while we waited), else None."""
    st = nodes.status(node)
    if st.drained and not st.reason.startswith(REASON):
        return st.reason
    return None


def _resume_if_ours(nodes: NodeControl, node: str, res: NodeResult) -> None:
    """Resume the node, unless an admin drained it meanwhile: a human's drain is never undone."""
    human = _human_drain(nodes, node)
    if human is not None:
        res.actions.append(f"not resumed: drained by someone else meanwhile: {human or '(no reason)'}")
        return
    nodes.resume(node)


def _short(text: str, limit: int = 120) -> str:
    """``text`` on one line, its controls shown escaped, at most ``limit`` characters (a drain reason)."""
    text = shown(" ".join(text.split()))
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _wait(nodes: NodeControl, node: str, timeout: float) -> None:
    if not nodes.wait_idle(node, timeout):
        raise ApplyError(f"jobs still running on {node} after {timeout:g}s")


def _verify(model: str, node: str, targets: dict[int, Layout | None], backend: MigBackend) -> None:
    after = backend.layouts(node)
    bad = [i for i, lay in targets.items() if not same_layout(model, after.get(i, ()), lay)]
    if bad:
        got = ", ".join(f"GPU {i}: {after.get(i)}" for i in bad)
        raise ApplyError(f"layout not as planned on {node} ({got})")


def _conf_lines(
    model: str, node: str, backend: MigBackend, gres_mode: str, version: SlurmVersion, dev_dir: str = "/dev"
) -> tuple[list[str], str]:
    """The node's gres.conf lines and slurm.conf ``Gres=`` for its GPUs as they are now."""
    after = backend.layouts(node)
    gres = slurm_gres(model, [after[i] for i in sorted(after)], version)
    if gres_mode == "autodetect":
        lines = gres_conf_autodetect(node)
    else:
        minors = backend.mig_minors(node)
        whole = [(i, i) for i, lay in sorted(after.items()) if lay is None]
        lines = gres_conf_explicit(node, model, backend.devices(node), version, whole, minors, dev_dir)
    return lines, gres


# ---------------------------------------------------------------- nvidia-smi

_LGI_RE = re.compile(r"\|\s*([0-9]+)\s+MIG\s+(\S+)\s+([0-9]+)\s+([0-9]+)\s+([0-9]+):([0-9]+)\s*\|")
_LCI_RE = re.compile(r"\|\s*([0-9]+)\s+([0-9]+)\s+MIG\s+(\S+)\s+([0-9]+)\s+([0-9]+)\s+([0-9]+):([0-9]+)\s*\|")


def parse_lgi(text: str) -> list[tuple[int, str, int, int]]:
    """``nvidia-smi mig -lgi`` rows as (gpu, profile, gi_id, start)."""
    return [(int(m[1]), m[2], int(m[4]), int(m[5])) for m in _LGI_RE.finditer(text)]


def parse_lci(text: str) -> list[tuple[int, int, int]]:
    """``nvidia-smi mig -lci`` rows as (gpu, gi_id, ci_id)."""
    return [(int(m[1]), int(m[2]), int(m[5])) for m in _LCI_RE.finditer(text)]


@dataclass
class NvidiaSmiBackend:
    """Real GPUs through ``nvidia-smi`` (via the Runner; ``remote`` prefixes e.g. ssh)."""

    runner: Runner
    model: str
    remote: Callable[[str], list[str]] | None = None
    #: The runner for one node (e.g. over ClusterShell), in place of ``runner``.
    on_node: Callable[[str], Runner] | None = None
    #: The nvidia-smi to run on the nodes; ``{node}`` is replaced by the node's name.
    nvidia_smi: str = "nvidia-smi"

    def _run(self, node: str, argv: Sequence[str], check: bool = True) -> str:
        if argv and argv[0] == "nvidia-smi":
            argv = [self.nvidia_smi.replace("{node}", node), *argv[1:]]
        if self.on_node is not None:
            return self.on_node(node).run(argv, check=check).stdout
        prefix = self.remote(node) if self.remote else []
        return self.runner.run([*prefix, *argv], check=check).stdout

    def _modes(self, node: str) -> dict[int, bool]:
        out = self._run(node, ["nvidia-smi", "--query-gpu=index,mig.mode.current", "--format=csv,noheader"])
        modes = {}
        for line in out.splitlines():
            if "," in line:
                idx, mode = (s.strip() for s in line.split(",", 1))
                if not (idx.isascii() and idx.isdigit()):
                    raise ApplyError(f"nvidia-smi on {node}: {shown(line)!r} does not start with a GPU index")
                modes[int(idx)] = mode.lower() == "enabled"
        return modes

    def _lgi(self, node: str) -> list[tuple[int, str, int, int]]:
        rows = parse_lgi(self._run(node, ["nvidia-smi", "mig", "-lgi"], check=False))
        profiles = geometry(self.model).profiles
        for _, prof, _, _ in rows:
            if prof not in profiles:
                raise ApplyError(f"nvidia-smi on {node} lists {shown(prof)!r}, which is not a {self.model} profile")
        return rows

    def layouts(self, node: str) -> dict[int, Layout | None]:
        modes = self._modes(node)
        geo = geometry(self.model)
        found: dict[int, list[str]] = {i: [] for i, on in modes.items() if on}
        if found:
            for gpu, prof, _, _ in self._lgi(node):
                found.setdefault(gpu, []).append(prof)
        return {i: (canonical(geo, found[i]) if on else None) for i, on in modes.items()}

    def apply(self, node: str, gpu: int, layout: Layout | None) -> None:
        enabled = self._modes(node).get(gpu, False)
        for cmd in nvidia_smi_commands(self.model, gpu, layout, enabled):
            destroy = "-dci" in cmd or "-dgi" in cmd
            self._run(node, cmd, check=not destroy)  # destroying nothing exits non-zero

    def devices(self, node: str) -> list[MigDevice]:
        gis = {(g, gi): (prof, start) for g, prof, gi, start in self._lgi(node)}
        out = []
        for g, gi, ci in parse_lci(self._run(node, ["nvidia-smi", "mig", "-lci"], check=False)):
            prof, start = gis.get((g, gi), ("", None))
            if prof:
                out.append(MigDevice(g, gi, ci, prof, start=start))
        return out

    def mig_minors(self, node: str) -> dict[str, int] | None:
        text = self._run(node, ["cat", "/proc/driver/nvidia-caps/mig-minors"], check=False)
        return parse_mig_minors(text) or None
