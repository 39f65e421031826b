"""The lines a site's files gained for the pool, and taking exactly those out again.  Pure.

docs/adoption.md has the admin add one line per fragment to the site's own
files: ``Include DIR/slurm-pool.conf`` to slurm.conf, ``Include
DIR/gres-GROUP.conf`` to gres.conf, ``include DIR/plugstack-slurm-pool.conf``
to plugstack.conf.  :func:`cut_lines` removes each line that is exactly one of
those and keeps every other byte of the file as it was; an ``Include`` of a
fragment written any other way (a relative path, a comment after it, another
directory) is left and reported, and so is the fragment it names (removing it
would leave Slurm an Include it cannot follow).
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass, field
from typing import Iterable

from slurm_pool.spec.model import PoolSpec

#: The site's files that include the pool's fragments, and the keyword Slurm reads in each.
TOP_FILES = ("slurm.conf", "gres.conf", "plugstack.conf")
_INCLUDE = re.compile(r"[ \t]*include[ \t]+(\S+)", re.IGNORECASE)


def fragments(spec: PoolSpec, listed: Iterable[str] = ()) -> dict[str, list[str]]:
    """The pool's fragments each top file includes: the spec's, and those a manifest lists."""
    names = set(listed)
    gres = {f"gres-{g.name}.conf" for g in spec.node_groups if g.gpus is not None}
    gres |= {n for n in names if n.startswith("gres-") and n.endswith(".conf")}
    return {
        "slurm.conf": ["slurm-pool.conf"],
        "gres.conf": sorted(gres),
        "plugstack.conf": ["plugstack-slurm-pool.conf"],
    }


def documented_line(top: str, directory: str, name: str) -> str:
    """The line docs/adoption.md has the admin add to ``top`` for the fragment ``name`` installed in ``directory``."""
    keyword = "include" if top == "plugstack.conf" else "Include"
    return f"{keyword} {posixpath.join(directory, name)}"


@dataclass(frozen=True)
class Cut:
    """A site file with the pool's lines taken out: its new bytes, the lines removed and the lines left."""

    text: bytes
    #: (line number, the line) of each documented line removed.
    removed: list[tuple[int, str]] = field(default_factory=list)
    #: (line number, the line, the fragment it includes) of each Include of a fragment that differs from the doc.
    left: list[tuple[int, str, str]] = field(default_factory=list)


def cut_lines(text: bytes, documented: dict[str, str]) -> Cut:
    """``text`` without the lines that are exactly one of ``documented`` (fragment name -> line).

    Every other byte is kept, line endings included.  A line that includes
    one of the fragments in another way is kept and listed in ``left``.
    """
    kept: list[bytes] = []
    removed: list[tuple[int, str]] = []
    left: list[tuple[int, str, str]] = []
    wanted = {line: name for name, line in documented.items()}
    for no, raw in enumerate(text.splitlines(keepends=True), 1):
        line = raw.rstrip(b"\r\n").decode("utf-8", "surrogateescape")
        if line in wanted:
            removed.append((no, line))
            continue
        kept.append(raw)
        m = _INCLUDE.match(line)
        if m is not None:
            target = posixpath.basename(m.group(1))
            if target in documented:
                left.append((no, line, target))
    return Cut(b"".join(kept), removed, left)
