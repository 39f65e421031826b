"""``mig apply --config-managed``: the site's config management writes the files, apply does the rest.

Where Ansible or Puppet own slurm.conf and gres.conf, ``mig apply`` must not
edit them (the next run would undo the edit).  In this mode it reads them and
writes none:

1. a node whose files do not carry its planned lines yet is left untouched (no
   drain, no write) and the exact change is printed, a unified diff per file,
   for the site to put into its config management;
2. once every file of a node carries them, the node is driven as usual (drain,
   wait, repartition, verify, reconfigure or restart, resume) with the file
   writes replaced by a check that the files carry the lines of the GPUs as
   they now are;
3. a node whose files carry something else (a ``Gres=`` neither Slurm's running
   one nor the planned one, or one file changed and another not) is refused and
   nothing at all is done.

The planned gres.conf lines of explicit mode name the GPU instance IDs; the
driver picks them when it creates the instances, so they are predicted as the
instances are created on an emptied GPU (one per placement, in placement
order).  After repartitioning, the lines of the devices as they exist are
checked against the files before Slurm reads them: a driver that numbered them
otherwise leaves the node drained, and the report names the lines to carry.
``--gres-mode autodetect`` has no such dependence (its line never changes).
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, Sequence

from slurm_pool.adapters.gres import gpu_counts
from slurm_pool.errors import InputError
from slurm_pool.mig.apply import REASON, ApplyReport, MigBackend, NodeControl, apply_plan, same_layout, targets_by_node
from slurm_pool.mig.confedit import ConfEditError, node_gres, node_lines, replace_node_gres_conf, set_node_gres
from slurm_pool.mig.emit import MigDevice, gres_conf_autodetect, gres_conf_explicit, slurm_gres
from slurm_pool.mig.placement import Layout, find_placement
from slurm_pool.mig.planner import Plan
from slurm_pool.text import shown
from slurm_pool.versions import SlurmVersion

#: Exit status of a run that left nodes waiting for config management (their changes printed).
WAITING = 3


@dataclass(frozen=True)
class ConfFile:
    """One file a node's change lives in, as read: ``kind`` is ``gres`` (gres.conf) or ``slurm``."""

    host: str
    path: str
    kind: Literal["gres", "slurm"]
    text: str

    @property
    def where(self) -> str:
        return f"{self.path} on {self.host}"


class ConfReader(Protocol):
    """What a NodeControl needs for this mode (:class:`~slurm_pool.mig.remote.RemoteNodeControl` has it)."""

    def read_conf(self, node: str) -> list[ConfFile]:
        """The node's gres.conf, then each slurm.conf naming it, read and never written."""

    def running_gres(self, node: str) -> str:
        """The ``Gres=`` slurmctld runs the node with now."""


@dataclass(frozen=True)
class Wanted:
    """What a node's files must carry: its gres.conf lines and its slurm.conf ``Gres=``."""

    node: str
    gres: str
    lines: tuple[str, ...]


def carried(f: ConfFile, want: Wanted) -> bool:
    """Whether ``f`` carries exactly the node's planned lines (gres.conf) or ``Gres=`` (slurm.conf)."""
    if f.kind == "gres":
        return sorted(line.strip() for _, line in node_lines(f.text, want.node)) == sorted(want.lines)
    have = node_gres(f.text, want.node)
    return have is not None and gpu_counts(have) == gpu_counts(want.gres)


def file_problem(f: ConfFile, want: Wanted) -> str:
    """Why ``f`` does not carry ``want`` (the file and the line), or '' when it does."""
    if carried(f, want):
        return ""
    if f.kind == "slurm":
        mine = node_lines(f.text, want.node, comments=True)
        if not mine:
            return f"{f.where}: no NodeName line names {want.node}"
        n, line = mine[0]
        return f"{f.where} line {n}: {shown(line)!r} does not give Gres={want.gres}"
    have = [(n, line) for n, line in node_lines(f.text, want.node)]
    extra = [(n, line) for n, line in have if line.strip() not in want.lines]
    if extra:
        n, line = extra[0]
        return f"{f.where} line {n}: {shown(line)!r} is not one of {want.node}'s planned lines"
    missing = [line for line in want.lines if line not in {x.strip() for _, x in have}]
    return f"{f.where}: lacks {want.node}'s line {missing[0]!r}" if missing else f"{f.where}: differs"


def predicted_devices(model: str, layouts: dict[int, Layout | None], keep: Sequence[MigDevice]) -> list[MigDevice]:
    """The MIG devices after the change: ``keep`` (GPUs not changed) plus, per changed GPU, one per placement."""
    out = list(keep)
    kept = {d.gpu_index for d in keep}
    for idx, layout in sorted(layouts.items()):
        if idx in kept or not layout:
            continue
        for gi, (prof, start) in enumerate(find_placement(model, list(layout)) or ()):
            out.append(MigDevice(idx, gi + 1, 0, prof, start=start))
    return out


def wanted(
    model: str,
    node: str,
    targets: dict[int, Layout | None],
    backend: MigBackend,
    gres_mode: str,
    version: SlurmVersion,
    dev_dir: str,
) -> Wanted:
    """The lines ``node``'s files must carry for ``targets`` (read from the GPUs, changing nothing)."""
    current = backend.layouts(node)
    after = {**current, **targets}
    gres = slurm_gres(model, [after[i] for i in sorted(after)], version)
    if gres_mode == "autodetect":
        return Wanted(node, gres, tuple(gres_conf_autodetect(node)))
    changed = {i for i, lay in targets.items() if not same_layout(model, current.get(i, ()), lay)}
    keep = [d for d in backend.devices(node) if d.gpu_index not in changed] if len(changed) < len(after) else []
    devices = predicted_devices(model, {i: after[i] for i in after if i in changed}, keep)
    whole = [(i, i) for i, lay in sorted(after.items()) if lay is None]
    lines = gres_conf_explicit(node, model, devices, version, whole, backend.mig_minors(node), dev_dir)
    return Wanted(node, gres, tuple(lines))


@dataclass
class Survey:
    """Each node of the plan by what its files carry."""

    ready: list[str] = field(default_factory=list)  # the files carry the change: drive it
    done: list[str] = field(default_factory=list)  # layouts and files as planned: nothing to do
    waiting: dict[str, Wanted] = field(default_factory=dict)  # not yet: print the change
    problems: list[str] = field(default_factory=list)  # something else: refuse, touch nothing
    files: dict[str, list[ConfFile]] = field(default_factory=dict)


def survey(
    plan: Plan,
    nodes: NodeControl,
    backend: MigBackend,
    *,
    gres_mode: str,
    version: SlurmVersion,
    dev_dir: str = "/dev",
) -> Survey:
    """Read every node's GPUs and files (writing nothing) and sort the nodes of ``plan``."""
    read = getattr(nodes, "read_conf", None)
    running = getattr(nodes, "running_gres", None)
    if not (callable(read) and callable(running)):
        raise InputError(
            "--config-managed: these node controls cannot read the site's files (read_conf); use --controls ssh"
        )
    out = Survey()
    for node, targets in sorted(targets_by_node(plan).items()):
        want = wanted(plan.model, node, targets, backend, gres_mode, version, dev_dir.replace("{node}", node))
        files = read(node)
        out.files[node] = files
        done = [f for f in files if carried(f, want)]
        todo = [f for f in files if f not in done]
        st = nodes.status(node)
        ours = st.drained and st.reason.startswith(REASON)
        if not todo:
            current = backend.layouts(node)
            same = all(same_layout(plan.model, current.get(i, ()), lay) for i, lay in targets.items())
            (out.done if same and not ours else out.ready).append(node)
            continue
        problem = _conflict(want, files, done, todo, running(node), gres_mode)
        if problem:
            out.problems.append(problem)
        else:
            out.waiting[node] = want
    return out


def _conflict(
    want: Wanted, files: list[ConfFile], done: list[ConfFile], todo: list[ConfFile], running: str, gres_mode: str
) -> str:
    """Why the node's files are neither before nor after the change ('' when they are before it)."""
    for f in files:
        if f.kind == "slurm" and f in todo:
            have = node_gres(f.text, want.node)
            if have is None or gpu_counts(have) != gpu_counts(running):
                why = file_problem(f, want)
                return f"{why}, nor Slurm's running Gres={running}" if have is not None else why
    progress = [f for f in done if f.kind == "slurm" or gres_mode == "explicit"]
    if progress:
        return f"partly applied: {progress[0].where} carries the change, but {file_problem(todo[0], want)}"
    for f in todo:  # the edit the site must make has to be one mig apply could make
        try:
            _edit(f, want)
        except (ConfEditError, ValueError) as exc:
            return f"{f.where}: {exc}"
    return ""


def _edit(f: ConfFile, want: Wanted, text: str | None = None) -> str:
    text = f.text if text is None else text
    if f.kind == "gres":
        return replace_node_gres_conf(text, want.node, want.lines)
    return set_node_gres(text, want.node, want.gres)


def changes(s: Survey) -> list[tuple[str, str]]:
    """(file, unified diff) per file the waiting nodes need changed, the edits of all of them together."""
    texts: dict[tuple[str, str], tuple[ConfFile, str]] = {}
    for node, want in sorted(s.waiting.items()):
        for f in s.files[node]:
            key = (f.host, f.path)
            old = texts.get(key, (f, f.text))[1]
            texts[key] = (f, _edit(f, want, old))
    out = []
    for (host, path), (f, new) in texts.items():
        label = f"{host}:{path}"
        diff = difflib.unified_diff(f.text.splitlines(keepends=True), new.splitlines(keepends=True), label, label, n=1)
        text = "".join(diff)
        if text:
            out.append((f.where, text))
    return out


@dataclass
class ManagedResult:
    """What a config-managed run found and did; ``code`` is the exit status."""

    code: int
    survey: Survey
    report: ApplyReport | None = None

    def lines(self) -> list[str]:
        """The human report (what the waiting nodes need), each line safe for a terminal."""
        s = self.survey
        out = [f"refused: {p}" for p in s.problems]
        if s.problems:
            out.append("nothing was done: make the files carry either the old or the planned lines")
            return [shown(x) for x in out]
        out += [f"{n}: nothing to do" for n in s.done]
        for node, want in sorted(s.waiting.items()):
            out.append(f"{node}: waiting for config management (mig apply wrote and drained nothing)")
            for f in s.files[node]:
                if f.kind == "gres":
                    out += [f"  {f.where}: {node}'s lines:"] + [f"    {line}" for line in want.lines]
                else:
                    out.append(f"  {f.where}: NodeName={node} ... Gres={want.gres}")
        diffs = changes(s)
        if diffs:
            out.append("the change, one unified diff per file (config management applies it; then run this again):")
            for _, text in diffs:
                out += text.rstrip("\n").split("\n")
        if not (s.ready or s.waiting or s.done):
            out.append("nothing to change")
        return [shown(x) for x in out]

    def failure(self) -> str:
        """Why :attr:`code` is not 0, in one line ("" when it is)."""
        s = self.survey
        if self.code == 2 and s.problems:
            return f"refused, nothing done: {s.problems[0]} ({len(s.problems)} problem(s))"
        if self.report is not None and not self.report.ok:
            return self.report.failure()
        if self.code:
            return f"{len(s.waiting)} node(s) wait for config management to carry the printed change"
        return ""

    def to_dict(self) -> dict[str, Any]:
        s = self.survey
        return {
            "code": self.code,
            "problems": s.problems,
            "done": s.done,
            "ready": s.ready,
            "waiting": {n: {"gres": w.gres, "gres_conf": list(w.lines)} for n, w in sorted(s.waiting.items())},
            "changes": [{"file": where, "diff": text} for where, text in changes(s)] if not s.problems else [],
            "report": self.report.to_dict() if self.report else None,
        }


def apply_managed(
    plan: Plan,
    nodes: NodeControl,
    backend: MigBackend,
    *,
    gres_mode: str,
    version: SlurmVersion,
    dev_dir: str = "/dev",
    **kwargs: Any,
) -> ManagedResult:
    """Survey; refuse (2) on a conflict; drive the nodes whose files carry the change; 3 while any waits."""
    s = survey(plan, nodes, backend, gres_mode=gres_mode, version=version, dev_dir=dev_dir)
    if s.problems:
        return ManagedResult(2, s)
    report = None
    if s.ready:
        report = apply_plan(
            plan,
            nodes,
            backend,
            gres_mode=gres_mode,  # type: ignore[arg-type]
            version=version,
            dev_dir=dev_dir,
            managed=True,
            only=s.ready,
            **kwargs,
        )
    code = 1 if report is not None and not report.ok else (WAITING if s.waiting else 0)
    return ManagedResult(code, s, report)
