"""A fake Slurm on ``PATH`` that prints bytes: for commands run for real (``SubprocessRunner``).

:func:`install` writes one script under the names of Slurm's commands into a
directory; each answers from the ``--json`` documents it is given (narrow reads
through :func:`tests.support.narrow_text.answer`), then replaces ``MARK`` in its
output by the bytes it is given (``b"\\xff"``: what ``sbatch -J $'\\xff'`` makes
Slurm print) and appends its argv to ``calls.log``.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
COMMANDS = ("squeue", "sinfo", "scontrol", "sacct", "sacctmgr")

_SCRIPT = """#!{python}
import json, os, sys
sys.path.insert(0, {root!r})
here = {here!r}
argv = [os.path.basename(sys.argv[0]), *sys.argv[1:]]
with open(os.path.join(here, "calls.log"), "a") as log:
    log.write(json.dumps(argv) + "\\n")
docs = json.load(open(os.path.join(here, "docs.json")))
mark = bytes.fromhex(docs["mark"])
out = ""
if argv[:2] == ["sinfo", "--version"]:
    out = "slurm 22.05.8\\n"
elif argv[:2] == ["squeue", "--json"]:
    out = json.dumps(docs["jobs"])
elif argv[:2] == ["sinfo", "--json"]:
    out = json.dumps(docs["nodes"])
elif argv[:2] == ["sacct", "--json"]:
    out = json.dumps(docs.get("sacct") or {{"jobs": []}})
elif argv[0] in ("squeue", "sinfo") and any(a.startswith(("--Format=", "--format=")) for a in argv):
    from tests.support.narrow_text import answer
    out = answer(["env", "SLURM_TIME_FORMAT=%s", *argv], nodes_doc=docs["nodes"], jobs_doc=docs["jobs"]) or ""
sys.stdout.buffer.write(out.encode().replace(b"MARK", mark))
"""


def install(bin_dir: Path, jobs: Any, nodes: Any, mark: bytes, sacct: Any = None) -> dict[str, str]:
    """Write the fake commands into ``bin_dir``; the environment that runs them first on ``PATH``."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    (bin_dir / "docs.json").write_text(json.dumps({"jobs": jobs, "nodes": nodes, "sacct": sacct, "mark": mark.hex()}))
    script = _SCRIPT.format(python=sys.executable, root=str(ROOT), here=str(bin_dir))
    for name in COMMANDS:
        path = bin_dir / name
        path.write_text(script)
        path.chmod(0o755)
    env = dict(os.environ)
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
    env.pop("PYTHONWARNINGS", None)
    return env


def calls(bin_dir: Path) -> list[list[str]]:
    """The argv of every fake command run, in order."""
    log = bin_dir / "calls.log"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
