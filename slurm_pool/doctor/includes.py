"""Follow ``Include`` lines through slurm.conf, gres.conf and plugstack.conf as Slurm does.

slurm.conf and gres.conf (Slurm's ``s_p_parse_file``, src/common/parse_config.c,
``_parse_include_directive``): a line that starts with ``include`` in any case
and then white space names one file, up to the next white space, after ``#``
comments are cut (``\\#`` is a ``#``) and ``\\``-continued lines joined;
``%c`` in it is the cluster's name in lower case; a relative name is taken
from the directory of slurm.conf, not of the including file
(``get_extra_conf_path``, src/common/read_config.c); a name with ``*`` is no
glob but an error, and the line is skipped.  A missing file is an error
(after a minute of retries).  Slurm does not look for cycles: a file that
includes itself recurses until the daemon fails.

plugstack.conf (src/common/spank.c, ``_spank_conf_include``): a line whose
first word is exactly ``include``; a relative pattern is taken from the
directory of the including file and is a glob(3) pattern; a pattern that
matches nothing loads nothing, silently.

:func:`follow` reads through a callable, so it is tested without files.
"""

from __future__ import annotations

import glob
import os
import posixpath
import re
from dataclasses import dataclass, field
from typing import Callable, Iterable, Literal

Syntax = Literal["slurm", "spank"]
#: Deeper than any real configuration: a chain this long is reported rather than followed.
MAX_DEPTH = 16
_SLURM_INCLUDE = re.compile(r"include\s", re.IGNORECASE)


@dataclass(frozen=True)
class IncludeProblem:
    """An ``Include`` that Slurm cannot follow: ``where`` is ``file:line``."""

    where: str
    target: str
    problem: str

    def line(self) -> str:
        return f"{self.where}: include {self.target}: {self.problem}"


@dataclass
class Followed:
    """Every file reached from the top one (in the order Slurm reads them) and what went wrong."""

    files: list[tuple[str, str]] = field(default_factory=list)
    problems: list[IncludeProblem] = field(default_factory=list)

    def text(self) -> str:
        """All the files' texts, one after another."""
        return "\n".join(t for _, t in self.files)

    def names(self) -> set[str]:
        """The base names of every file read."""
        return {posixpath.basename(p) for p, _ in self.files}


def logical_lines(text: str) -> Iterable[tuple[int, str]]:
    """``(first line number, line)`` as ``s_p_parse_file`` reads them: comments cut, continuations joined."""
    buf, start = "", 0
    for n, raw in enumerate(text.splitlines(), 1):
        line = _strip_comment(raw)
        if not buf:
            start = n
        if line.endswith("\\") and not line.endswith("\\\\"):
            buf += line[:-1]
            continue
        yield start, buf + line
        buf = ""
    if buf:
        yield start, buf


def _strip_comment(line: str) -> str:
    backslashes = 0
    for i, ch in enumerate(line):
        if ch == "#" and backslashes % 2 == 0:
            return line[:i]
        backslashes = backslashes + 1 if ch == "\\" else 0
    return line


def include_targets(text: str, syntax: Syntax) -> list[tuple[int, str]]:
    """``(line number, name)`` of each include line of one file."""
    out = []
    if syntax == "slurm":
        for n, line in logical_lines(text):
            if _SLURM_INCLUDE.match(line):
                words = line[len("include") :].split()
                if words:
                    out.append((n, words[0].replace("\\", "")))
    else:
        for n, raw in enumerate(text.splitlines(), 1):
            words = raw.split("#", 1)[0].split()
            if words[:1] == ["include"]:
                out.append((n, words[1] if len(words) > 1 else ""))
    return out


def follow(
    top: str,
    syntax: Syntax,
    conf_dir: str,
    read: Callable[[str], str | None],
    cluster: str | None = None,
    expand: Callable[[str], list[str]] | None = None,
) -> Followed:
    """Read ``top`` and every file it includes, as Slurm would (see the module's text).

    ``read`` returns a file's text or None (missing, unreadable); ``expand``
    lists the paths a plugstack glob matches (default: :func:`glob.glob`).
    """
    out = Followed()
    text = read(top)
    if text is None:
        return out
    _walk(top, text, syntax, conf_dir, read, cluster, expand or _glob, out, (top,))
    return out


def _glob(pattern: str) -> list[str]:
    return sorted(glob.glob(pattern))


def _walk(path, text, syntax, conf_dir, read, cluster, expand, out: Followed, chain: tuple[str, ...]) -> None:
    out.files.append((path, text))
    for n, name in include_targets(text, syntax):
        where = f"{path}:{n}"
        if not name:
            out.problems.append(IncludeProblem(where, "", "names no file"))
            continue
        if syntax == "slurm":
            targets = _slurm_target(name, conf_dir, cluster, where, out)
        else:
            pattern = name if name.startswith("/") else posixpath.join(posixpath.dirname(path), name)
            targets = expand(pattern) if _is_glob(pattern) else [pattern]
            if not targets:
                continue  # spank: a glob that matches nothing loads nothing
        for target in targets:
            target = posixpath.normpath(target)
            if target in chain:
                loop = " -> ".join([*chain[chain.index(target) :], target])
                out.problems.append(
                    IncludeProblem(where, name, f"a cycle ({loop}); Slurm would recurse until it fails")
                )
                continue
            if len(chain) >= MAX_DEPTH:
                out.problems.append(IncludeProblem(where, name, f"nested more than {MAX_DEPTH} deep; not followed"))
                continue
            body = read(target)
            if body is None:
                missing = (
                    "Slurm fails to read this configuration"
                    if syntax == "slurm"
                    else "the plugins in it are not loaded"
                )
                out.problems.append(IncludeProblem(where, name, f"{target} is missing or unreadable: {missing}"))
                continue
            _walk(target, body, syntax, conf_dir, read, cluster, expand, out, (*chain, target))


def _slurm_target(name: str, conf_dir: str, cluster: str | None, where: str, out: Followed) -> list[str]:
    if "%c" in name:
        if not cluster:
            out.problems.append(IncludeProblem(where, name, "%c needs ClusterName, which this file does not set"))
            return []
        name = name.replace("%c", cluster.lower())
    if "*" in name:
        out.problems.append(IncludeProblem(where, name, "Slurm does not expand globs here: the line is skipped"))
        return []
    return [name if name.startswith("/") else posixpath.join(conf_dir, name)]


def _is_glob(pattern: str) -> bool:
    return any(ch in pattern for ch in "*?[")


def read_text(path: str) -> str | None:
    """A file's text, or None when it is missing, not a file or unreadable."""
    try:
        if not os.path.isfile(path):
            return None
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return None
