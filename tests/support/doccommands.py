"""The commands docs/adoption.md gives, how each is run by a test, and its table of global settings.

A command is a line of a fenced ``sh`` block, or an inline code span of two
words or more that starts with a program (:data:`PROGRAMS`).  Each must be in
:data:`COVERED`, which says where it runs: ``unit`` (no Slurm daemons:
tests/unit/test_adoption_doc.py), ``site`` (the live brownfield site:
tests/integration/test_brownfield_seen_e2e.py) or ``uninstall`` (the live site, taking the pool out and
putting it back: tests/integration/test_brownfield_uninstall_e2e.py).  Paths are substituted
(:func:`substitute`), and ``slurm-pool`` is this checkout's CLI.
"""

from __future__ import annotations

import os
import re
import stat
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "adoption.md"
PROGRAMS = frozenset(
    {"slurm-pool", "sacctmgr", "scontrol", "sbatch", "srun", "salloc", "squeue", "sinfo", "sprio"}
    | {"install", "mv", "cp", "touch", "rm", "diff", "systemctl", "make", "for"}
)

#: Every documented command, and where a test runs it.
COVERED: dict[str, str] = {
    "install -d /etc/slurm/prolog.d /etc/slurm/epilog.d": "unit",
    "mv /etc/slurm/prolog.sh /etc/slurm/prolog.d/10-site": "unit",
    "install -m 755 /usr/local/bin/slurm-pool-prolog /etc/slurm/prolog.d/50-slurm-pool": "unit",
    "install -m 755 /usr/local/bin/slurm-pool-epilog /etc/slurm/epilog.d/50-slurm-pool": "unit",
    "for what in qos account assoc user; do sacctmgr -n -P show $what > before-$what.txt; done": "site",
    "slurm-pool apply accounting pool.yaml --prune": "site",
    "for what in qos account assoc user; do sacctmgr -n -P show $what > after-$what.txt; done": "site",
    "for what in qos account assoc user; do diff before-$what.txt after-$what.txt; done": "site",
    "slurm-pool validate pool.yaml": "unit",
    "slurm-pool render pool.yaml -o stage/ --slurm-version 24.11": "unit",
    "mv /etc/slurm/job_submit.lua /etc/slurm/site_job_submit.lua": "unit",
    "install -m 644 stage/job_submit.lua /etc/slurm/job_submit.lua": "unit",
    "install -m 644 stage/slurm-pool.conf stage/plugstack-slurm-pool.conf /etc/slurm/": "unit",
    "install -m 644 stage/gres-*.conf /etc/slurm/": "unit",
    "slurm-pool apply accounting pool.yaml --dry-run": "site",
    "slurm-pool apply accounting pool.yaml": "site",
    "slurm-pool doctor --spec pool.yaml": "site",
    "slurm-pool diff --spec pool.yaml": "site",
    # -- removing the pool: run on the live site by tests/integration/test_brownfield_uninstall_e2e.py
    "slurm-pool uninstall --spec pool.yaml --dry-run": "uninstall",
    "slurm-pool uninstall --spec pool.yaml": "uninstall",
}

_FENCE = re.compile(r"^```(\S*)\s*$")
_SPAN = re.compile(r"`([^`\n]+)`")


def commands(text: str) -> list[str]:
    """The commands of a Markdown text, in order (duplicates kept once)."""
    out: list[str] = []
    fence: str | None = None
    for raw in text.splitlines():
        line = raw.strip()
        m = _FENCE.match(line)
        if m:
            fence = None if fence is not None else m.group(1)
            continue
        if fence is not None:
            if fence == "sh" and line and not line.startswith("#"):
                out.append(line)
            continue
        for span in _SPAN.findall(raw):
            words = span.split()
            if len(words) >= 2 and words[0] in PROGRAMS:
                out.append(span.strip())
    return list(dict.fromkeys(out))


def doc_commands() -> list[str]:
    return commands(DOC.read_text())


def substitute(command: str, paths: dict[str, str]) -> str:
    """The command with the site's paths: ``/etc/slurm``, ``/usr/local/bin``, ``stage/``, ``pool.yaml``."""
    out = command
    for old, new in paths.items():
        out = re.sub(rf"(?<![\w/.-]){re.escape(old)}", new, out)
    return out


def cli_shim(bindir: Path) -> Path:
    """A ``slurm-pool`` on PATH that runs this checkout's CLI with this interpreter."""
    bindir.mkdir(parents=True, exist_ok=True)
    shim = bindir / "slurm-pool"
    shim.write_text(f'#!/bin/sh\nPYTHONPATH={REPO} exec {sys.executable} -m slurm_pool "$@"\n')
    shim.chmod(shim.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return shim


def shell_env(bindir: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    return {**os.environ, **(extra or {}), "PATH": f"{bindir}:{(extra or {}).get('PATH', os.environ['PATH'])}"}


# -- the table "what changes for the site's own jobs" -------------------------------------------------

#: Settings whose items each get a row (comma lists of independent options).
ITEM_KEYS = frozenset({"SchedulerParameters", "PreemptParameters", "SlurmctldParameters"})


def table_rows(text: str) -> list[tuple[str, str, str]]:
    """``(setting, item or "", checked)`` of each row of the table under "What changes for the site's own jobs"."""
    section = text.split("## What changes for the site's own jobs", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        if not line.startswith("| `"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        names = re.findall(r"`([^`]+)`", cells[0])
        rows.append((names[0], names[1] if len(names) > 1 else "", cells[-1]))
    return rows
