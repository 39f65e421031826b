"""Slurm node control for ``mig apply`` on a real cluster, over ssh (ClusterShell).

:class:`SlurmNodes` drains, resumes and waits through Slurm's commands where
``mig apply`` runs.  :class:`RemoteNodeControl` adds what changes on the
nodes: each node's lines in its gres.conf, its ``Gres=`` in slurm.conf (on
this host or on ``controller``), and the restart that Slurm release needs
(``versions`` Fact ``reconfigure_restarts_daemons``): from 23.11 one
``scontrol reconfigure``; before it, slurmctld and that node's slurmd restart.
It then waits until the node registers the new GRES.  Files are replaced
atomically, keeping their mode, with the old one kept as ``<file>.slurm-pool.bak``.

All or nothing: :meth:`RemoteNodeControl.check_files` reads every file a node's
change will edit, edits it in memory and checks it can be replaced, before
``mig apply`` drains anything; :meth:`~RemoteNodeControl.write_gres` again
computes every new text before it writes the first, and puts the files it
wrote back when a later one cannot be written.

Config-managed (``mig apply --config-managed``): :meth:`~RemoteNodeControl.read_conf`
and :meth:`~RemoteNodeControl.running_gres` only read, and
:meth:`~RemoteNodeControl.confirm_gres` checks the files carry a node's lines
where :meth:`~RemoteNodeControl.write_gres` would write them.
"""

from __future__ import annotations

import shlex
import time
from dataclasses import dataclass
from typing import Callable, Sequence

from slurm_pool.adapters.clush import NodeRunner
from slurm_pool.adapters.gres import gpu_counts
from slurm_pool.adapters.runner import CommandError, Runner, SubprocessRunner
from slurm_pool.adapters.slurm import SlurmClient
from slurm_pool.mig.apply import ApplyError, NodeStatus, NvidiaSmiBackend
from slurm_pool.mig.confedit import ConfEditError, replace_node_gres_conf, set_node_gres
from slurm_pool.mig.managed import ConfFile, Wanted, file_problem
from slurm_pool.text import check, check_free_text, check_path
from slurm_pool.versions import SlurmVersion

#: Replace "$1" atomically with standard input, keeping its mode; keep the old file.
_REPLACE = 'cp -p "$1" "$1.slurm-pool.bak" && cp -p "$1" "$1.slurm-pool.tmp" && cat > "$1.slurm-pool.tmp" && mv -f "$1.slurm-pool.tmp" "$1"'


def _replace(path: str) -> list[str]:
    """The command that replaces ``path`` atomically with its standard input."""
    return ["sh", "-c", _REPLACE, "sh", path]


#: "$1" is a regular file that can be replaced as _REPLACE does (written, and its directory too).
_WRITABLE = 'test -f "$1" && test -w "$1" && test -w "$(dirname -- "$1")"'


class SlurmNodes:
    """Status, drain, resume and wait-for-idle of nodes, through Slurm's commands."""

    def __init__(self, slurm: SlurmClient, poll: float = 0.5):
        self.slurm = slurm
        self.poll = poll

    def status(self, node: str) -> NodeStatus:
        n = self.slurm.node(node)
        return NodeStatus(drained=n.drained, reason=n.reason)

    def drain(self, node: str, reason: str) -> None:
        self.slurm.drain(node, reason)

    def resume(self, node: str) -> None:
        if self.slurm.node(node).drained:
            self.slurm.resume(node)

    def wait_idle(self, node: str, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                jobs = self.slurm.jobs_on_node(node)
            except CommandError:  # squeue failed: not known to be idle
                jobs = None
            if jobs == []:
                if not self.slurm.node(node).state.any(("ALLOCATED", "MIXED", "COMPLETING")):
                    return True
            time.sleep(self.poll)
        return False


@dataclass(frozen=True)
class RemoteSettings:
    """Where a site keeps its Slurm files and how it restarts its daemons.

    Commands are split like a shell would and ``{node}`` is replaced by the node's name.
    An empty restart command is skipped.  ``reconfigure`` None: decided by the release.
    """

    gres_conf: str = "/etc/slurm/gres.conf"
    slurm_confs: tuple[str, ...] = ("/etc/slurm/slurm.conf",)
    controller: str | None = None
    restart_slurmctld: str = "systemctl restart slurmctld"
    restart_slurmd: str = "systemctl restart slurmd"
    reconfigure: bool | None = None
    register_timeout: float = 180.0

    def __post_init__(self) -> None:
        for what, path in [("gres_conf", self.gres_conf), *(("slurm_confs", p) for p in self.slurm_confs)]:
            check_path(path, what)
        if self.controller is not None:
            check("host", self.controller, "controller")
        for what, command in (("restart_slurmctld", self.restart_slurmctld), ("restart_slurmd", self.restart_slurmd)):
            check_free_text(command, what)
            try:
                shlex.split(command)
            except ValueError as exc:
                raise ValueError(f"{what}: {command!r} cannot be split into words ({exc})") from None


class RemoteNodeControl(SlurmNodes):
    """``mig apply``'s NodeControl for nodes reached over ssh."""

    def __init__(
        self,
        slurm: SlurmClient,
        on_node: Callable[[str], Runner],
        version: SlurmVersion,
        settings: RemoteSettings = RemoteSettings(),
        poll: float = 0.5,
    ):
        super().__init__(slurm, poll)
        self.on_node = on_node
        self.version = version
        self.settings = settings
        self._wanted: dict[str, str] = {}

    def _controller(self) -> Runner:
        host = self.settings.controller
        return self.on_node(host) if host else self.slurm.runner

    def _files(self, node: str) -> list[tuple[Runner, str, str]]:
        """Each file a change of ``node`` edits: its runner, the host it is on, its path (gres.conf first)."""
        ctl = self.settings.controller or "this host"
        return [(self.on_node(node), node, self.settings.gres_conf)] + [
            (self._controller(), ctl, path) for path in self.settings.slurm_confs
        ]

    def _edited(self, node: str, lines: Sequence[str], gres: str) -> list[tuple[Runner, str, str, str, str]]:
        """(runner, host, path, old, new) of every file, or ConfEditError naming the file before any is written."""
        out = []
        for n, (runner, host, path) in enumerate(self._files(node)):
            old = runner.run(["cat", "--", path]).stdout
            try:
                new = replace_node_gres_conf(old, node, lines) if n == 0 else set_node_gres(old, node, gres)
            except ConfEditError as exc:
                raise ConfEditError(f"{path} on {host}: {exc}") from None
            out.append((runner, host, path, old, new))
        return out

    def check_files(self, nodes: Sequence[str]) -> None:
        """Check every file the change of ``nodes`` will edit, before anything changes.

        Each can be edited for each node (slurm.conf names it once, on a line that
        can be split; gres.conf's hostlists parse) and replaced by this user.
        ConfEditError (the text) or ApplyError (a file that cannot be replaced).
        """
        seen: set[tuple[str, str]] = set()
        for node in nodes:
            for runner, host, path, _, _ in self._edited(node, [], "gpu:check:1"):
                if (host, path) not in seen:
                    seen.add((host, path))
                    if not runner.run(["sh", "-c", _WRITABLE, "sh", path], check=False).ok:
                        raise ApplyError(f"{path} on {host}: not a regular file this user can replace")

    def write_gres(self, node: str, gres_conf: Sequence[str], gres: str) -> None:
        """The node's gres.conf lines (on the node), then its ``Gres=`` in each slurm.conf given.

        Every new text is made before the first file is written; a file that cannot
        be written puts back the ones written before it.
        """
        written: list[tuple[Runner, str, str]] = []
        for runner, _, path, old, new in self._edited(node, gres_conf, gres):
            try:
                runner.run(_replace(path), input=new)
            except Exception as exc:
                lost = [p for r, p, text in reversed(written) if not r.run(_replace(p), input=text, check=False).ok]
                if lost:
                    raise ApplyError(f"{exc}; and putting back {', '.join(lost)} failed") from exc
                raise
            written.append((runner, path, old))
        self._wanted[node] = gres

    def read_conf(self, node: str) -> list[ConfFile]:
        """The node's gres.conf (on the node), then each slurm.conf (on the controller), as they are."""
        return [
            ConfFile(host, path, "gres" if n == 0 else "slurm", runner.run(["cat", "--", path]).stdout)
            for n, (runner, host, path) in enumerate(self._files(node))
        ]

    def running_gres(self, node: str) -> str:
        return self.slurm.node(node).gres

    def confirm_gres(self, node: str, gres_conf: Sequence[str], gres: str) -> None:
        """Write nothing; ApplyError naming the file and line unless every file carries these lines."""
        want = Wanted(node, gres, tuple(gres_conf))
        for f in self.read_conf(node):
            problem = file_problem(f, want)
            if problem:
                lines = "; ".join(gres_conf)
                raise ApplyError(f"{problem} (the GPUs as they are now need Gres={gres} and gres.conf: {lines})")
        self._wanted[node] = gres

    def _command(self, template: str, node: str) -> list[str]:
        return [w.replace("{node}", node) for w in shlex.split(template)]

    def restart_slurmd(self, node: str) -> None:
        """Make Slurm read the new files, then wait until ``node`` registers the GRES written."""
        before = self.status(node)
        reconfigure = self.settings.reconfigure
        if reconfigure is None:
            reconfigure = self.version.has("reconfigure_restarts_daemons")
        if reconfigure:
            self.slurm.reconfigure()
        else:
            if self.settings.restart_slurmctld.strip():
                self._controller().run(self._command(self.settings.restart_slurmctld, node))
            if self.settings.restart_slurmd.strip():
                self.on_node(node).run(self._command(self.settings.restart_slurmd, node))
        self._wait_registered(node, before)

    def _wait_registered(self, node: str, before: NodeStatus) -> None:
        want = gpu_counts(self._wanted.get(node))
        deadline = time.monotonic() + self.settings.register_timeout
        seen = "no answer from slurmctld"
        while time.monotonic() < deadline:
            try:
                n = self.slurm.node(node)
            except (CommandError, KeyError) as exc:  # slurmctld restarting
                seen = str(exc)
                time.sleep(self.poll)
                continue
            seen = f"state {'+'.join(n.state)}, Gres={n.gres}"
            up = n.state.base not in ("DOWN", "UNKNOWN", "FUTURE", "") and not n.state.any(
                ("NOT_RESPONDING", "INVALID_REG")
            )
            if up and gpu_counts(n.gres) == want:
                if before.drained and not n.drained:  # a changed node can lose its drain as it registers
                    self.drain(node, before.reason)
                    continue
                return
            time.sleep(self.poll)
        raise ApplyError(
            f"{node} did not register Gres={self._wanted.get(node)} within {self.settings.register_timeout:g}s ({seen})"
        )


def ssh_controls(
    model: str,
    version: SlurmVersion,
    settings: RemoteSettings,
    *,
    ssh_options: str = "-o BatchMode=yes",
    nvidia_smi: str = "nvidia-smi",
) -> tuple[RemoteNodeControl, NvidiaSmiBackend]:
    """``mig apply --controls ssh``: Slurm from here, the nodes over ClusterShell's ssh."""
    runners: dict[str, NodeRunner] = {}

    def on_node(node: str) -> Runner:
        return runners.setdefault(node, NodeRunner(node, ssh_options=ssh_options))

    slurm = SlurmClient(SubprocessRunner(), version)
    nodes = RemoteNodeControl(slurm, on_node, version, settings)
    backend = NvidiaSmiBackend(slurm.runner, model, on_node=on_node, nvidia_smi=nvidia_smi)
    return nodes, backend
