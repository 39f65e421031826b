"""``doctor``'s ``includes`` check: the installed slurm.conf, gres.conf and plugstack.conf, Includes followed.

:func:`gather_includes` reads the three files and every file they include,
as Slurm does (:mod:`slurm_pool.doctor.includes`); :func:`findings` is pure: each
Include that Slurm cannot follow (a missing file, a cycle, a glob where Slurm
takes none), and, for a pool that shares a site's cluster, each of the pool's
fragments that no Include reaches (``slurm-pool.conf`` from slurm.conf,
``gres-GROUP.conf`` from gres.conf, ``plugstack-slurm-pool.conf`` from
plugstack.conf).
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field
from typing import Callable, Mapping

from slurm_pool.doctor.includes import Followed, IncludeProblem, follow, read_text
from slurm_pool.findings import Finding
from slurm_pool.spec.model import PoolSpec


@dataclass(frozen=True)
class IncludeFacts:
    """Each top file (``slurm.conf``, ``gres.conf``, ``plugstack.conf``) -> its path, and what following it found."""

    paths: dict[str, str] = field(default_factory=dict)
    followed: dict[str, Followed] = field(default_factory=dict)

    def problems(self) -> list[IncludeProblem]:
        return [p for f in self.followed.values() for p in f.problems]


def gather_includes(
    slurm_conf: str, config: Mapping[str, str], read: Callable[[str], str | None] = read_text
) -> IncludeFacts:
    """Follow the three files of the slurm.conf at ``slurm_conf`` (PlugStackConfig from ``config``)."""
    if not slurm_conf.startswith("/"):
        return IncludeFacts()
    conf_dir = posixpath.dirname(slurm_conf)
    plugstack = config.get("PlugStackConfig", "")
    plugstack = plugstack if plugstack.startswith("/") else posixpath.join(conf_dir, "plugstack.conf")
    tops = {
        "slurm.conf": (slurm_conf, "slurm"),
        "gres.conf": (posixpath.join(conf_dir, "gres.conf"), "slurm"),
        "plugstack.conf": (plugstack, "spank"),
    }
    cluster = config.get("ClusterName")
    facts = IncludeFacts()
    for name, (path, syntax) in tops.items():
        if read(path) is None:
            continue  # not on this machine (a login node, configless): nothing to follow
        facts.paths[name] = path
        facts.followed[name] = follow(path, syntax, conf_dir, read, cluster if name == "slurm.conf" else None)  # type: ignore[arg-type]
    return facts


def fragments(spec: PoolSpec) -> dict[str, list[str]]:
    """The pool's fragments each top file must reach (a pool in a site's cluster only)."""
    if spec.coexist is None:
        return {}
    return {
        "slurm.conf": ["slurm-pool.conf"],
        "gres.conf": [f"gres-{g.name}.conf" for g in spec.node_groups if g.gpus is not None],
        "plugstack.conf": ["plugstack-slurm-pool.conf"],
    }


def findings(spec: PoolSpec, facts: IncludeFacts) -> list[Finding]:
    """The ``includes`` check's findings."""
    out = [
        Finding(
            "includes", p.line(), "fix the Include line or install the file it names, then restart slurmctld and slurmd"
        )
        for p in facts.problems()
    ]
    for top, names in fragments(spec).items():
        followed = facts.followed.get(top)
        if followed is None:
            continue
        for name in names:
            if name not in followed.names():
                line = ("include " if top == "plugstack.conf" else "Include ") + posixpath.join(
                    posixpath.dirname(facts.paths[top]), name
                )
                out.append(
                    Finding(
                        "includes",
                        f"{facts.paths[top]} does not include the pool's {name}, directly or through another file",
                        f"add '{line}' to it, then restart slurmctld and slurmd",
                    )
                )
    return out
