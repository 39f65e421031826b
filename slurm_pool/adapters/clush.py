"""Commands on a remote node, through ClusterShell's ssh worker.

:class:`NodeRunner` is a :class:`~slurm_pool.adapters.runner.Runner` whose
commands run on one node: the same seam as local commands, so the code above it
is tested with the recording fake.  ssh itself is configured as ClusterShell
does it (``ssh_options``, ``ssh_user``, ``connect_timeout``); a site's
``~/.ssh/config`` applies as usual.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Sequence

from ClusterShell.Event import EventHandler
from ClusterShell.Task import task_self

from slurm_pool.adapters.runner import CommandError, Result, decode_output

#: ClusterShell's code for a command that reached its timeout.
_TIMED_OUT = 124


class _Collect(EventHandler):
    def __init__(self) -> None:
        self.out: list[bytes] = []
        self.err: list[bytes] = []
        self.rc: int | None = None

    def ev_read(self, worker, node, sname, msg):  # noqa: ANN001 - ClusterShell's signature
        (self.err if sname == worker.SNAME_STDERR else self.out).append(bytes(msg))

    def ev_hup(self, worker, node, rc):  # noqa: ANN001
        self.rc = rc


@dataclass
class NodeRunner:
    """Runs each command on ``node`` over ssh (ClusterShell); never through a local shell."""

    node: str
    ssh_options: str = "-o BatchMode=yes"
    connect_timeout: float = 10.0
    default_timeout: float = 300.0
    #: ClusterShell's worker for distant commands: ``ssh``, or ``exec`` to run them here (tests).
    worker: str = "ssh"

    def run(
        self,
        argv: Sequence[str],
        *,
        check: bool = True,
        input: str | None = None,
        timeout: float | None = None,
    ) -> Result:
        task = task_self()
        task.set_info("ssh_options", self.ssh_options)
        task.set_info("connect_timeout", self.connect_timeout)
        task.set_default("distant_workername", self.worker)
        collect = _Collect()
        command = shlex.join(argv)
        if self.worker == "exec":  # the local worker expands %h-style patterns; ssh passes the line on
            command = command.replace("%", "%%")
        worker = task.shell(
            command,
            nodes=self.node,
            handler=collect,
            stderr=True,
            stdin=input is not None,
            timeout=timeout or self.default_timeout,
        )
        if input is not None:
            worker.write(input.encode())
            worker.set_write_eof()
        task.run()
        rc = _TIMED_OUT if collect.rc is None else collect.rc
        out = decode_output(b"\n".join(collect.out))
        err = decode_output(b"\n".join(collect.err))
        if rc == _TIMED_OUT and collect.rc is None:
            err = (err + "\n" if err else "") + f"timed out after {timeout or self.default_timeout:g}s on {self.node}"
        if rc == 255 and not out:  # ssh's own failure, not the command's
            err = f"ssh to {self.node} failed: {err.strip() or 'no reason given'}"
        res = Result(("@" + self.node, *argv), rc, out + ("\n" if out else ""), err)
        if check and not res.ok:
            raise CommandError(res)
        return res
