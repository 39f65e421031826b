"""The one interface to Slurm: its commands' JSON output and scontrol/sacctmgr.

Reads use ``sinfo --json``, ``squeue --json`` and ``sacct --json``; writes use
``scontrol`` and ``sacctmgr -i``.  Everything goes through a
:class:`~slurm_pool.adapters.runner.Runner`, so unit tests use the recording
fake and integration tests the real daemons.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Protocol, Sequence

from slurm_pool.adapters.runner import Runner, SubprocessRunner
from slurm_pool.adapters.slurmjson import REASON_PREFIX, is_drained, number, states


@dataclass(frozen=True)
class Node:
    name: str
    state: tuple[str, ...]
    reason: str = ""
    gres: str = ""
    gres_used: str = ""
    partitions: tuple[str, ...] = ()

    @property
    def drained(self) -> bool:
        return is_drained(self.state)

    @property
    def ours(self) -> bool:
        """Drained (or reasoned) by slurm-pool rather than by a person."""
        return self.reason.startswith(REASON_PREFIX)


@dataclass(frozen=True)
class Job:
    job_id: int
    name: str
    state: str
    partition: str = ""
    qos: str = ""
    account: str = ""
    user: str = ""
    nodes: str = ""
    restart_count: int = 0
    comment: str = ""
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)


class SlurmAPI(Protocol):
    """What the rest of slurm-pool needs from Slurm."""

    def nodes(self) -> list[Node]: ...
    def jobs(self) -> list[Job]: ...
    def drain(self, node: str, reason: str) -> None: ...
    def resume(self, node: str) -> None: ...


class SlurmClient:
    """Slurm through its command-line tools."""

    def __init__(self, runner: Runner | None = None):
        self.runner = runner or SubprocessRunner()

    # -- reads ----------------------------------------------------------
    def _json(self, argv: Sequence[str]) -> dict[str, Any]:
        res = self.runner.run(list(argv))
        return json.loads(res.stdout or "{}")

    def nodes(self) -> list[Node]:
        data = self._json(["sinfo", "--json"])
        out: dict[str, Node] = {}
        for n in data.get("nodes", []):
            name = n.get("name") or n.get("hostname")
            state = states(n.get("state")) + states(n.get("state_flags"))
            out[name] = Node(
                name=name,
                state=state,
                reason=n.get("reason") or "",
                gres=n.get("gres") or "",
                gres_used=n.get("gres_used") or "",
                partitions=tuple(n.get("partitions") or ()),
            )
        return list(out.values())

    def node(self, name: str) -> Node:
        for n in self.nodes():
            if n.name == name:
                return n
        raise KeyError(name)

    def jobs(self) -> list[Job]:
        data = self._json(["squeue", "--json"])
        return [_job(j) for j in data.get("jobs", [])]

    def accounting_jobs(self, *args: str) -> list[Job]:
        data = self._json(["sacct", "--json", *args])
        return [_job(j) for j in data.get("jobs", [])]

    def version(self) -> str:
        return self.runner.run(["sinfo", "--version"]).stdout.strip()

    # -- node control ----------------------------------------------------
    def drain(self, node: str, reason: str) -> None:
        self.runner.run(["scontrol", "update", f"NodeName={node}", "State=DRAIN", f"Reason={reason}"])

    def resume(self, node: str) -> None:
        self.runner.run(["scontrol", "update", f"NodeName={node}", "State=RESUME"])

    def requeue(self, job_id: int | str) -> None:
        self.runner.run(["scontrol", "requeue", str(job_id)])

    # -- accounting ------------------------------------------------------
    def sacctmgr_show(self, entity: str, fields: Sequence[str], where: Sequence[str] = ()) -> list[dict[str, str]]:
        """Rows of ``sacctmgr show`` as dicts keyed by the requested field names."""
        argv = ["sacctmgr", "-n", "-P", "show", entity, *where, "format=" + ",".join(fields)]
        res = self.runner.run(argv)
        rows = []
        for line in res.stdout.splitlines():
            if not line.strip():
                continue
            values = line.split("|")
            rows.append({f: (values[i] if i < len(values) else "") for i, f in enumerate(fields)})
        return rows

    def sacctmgr(self, *args: str) -> None:
        """One non-interactive sacctmgr change."""
        self.runner.run(["sacctmgr", "-i", *args])


def _job(j: dict[str, Any]) -> Job:
    state = j.get("job_state") or (j.get("state") or {}).get("current") or ""
    if isinstance(state, list):
        state = state[0] if state else ""
    nodes = j.get("nodes") or ""
    if isinstance(nodes, dict):
        nodes = nodes.get("list") or ""
    return Job(
        job_id=number(j.get("job_id")) or 0,
        name=j.get("name") or "",
        state=str(state).upper(),
        partition=j.get("partition") or "",
        qos=j.get("qos") or "",
        account=j.get("account") or "",
        user=j.get("user_name") or j.get("user") or "",
        nodes=nodes if isinstance(nodes, str) else ",".join(nodes),
        restart_count=number(j.get("restart_cnt")) or 0,
        comment=(j.get("comment") or {}).get("job", "") if isinstance(j.get("comment"), dict) else (j.get("comment") or ""),
        raw=j,
    )
