"""A batch script's ``#SBATCH`` header, read as sbatch reads it.  Pure, stdlib only.

sbatch takes options from ``#SBATCH`` lines up to the first line that is neither
blank nor a comment (sbatch(1), "the batch script may contain options preceded
with #SBATCH before any executable commands"); job_submit.lua's header reader
follows the same rule.  Each line's words are split at blanks, quotes keep a
value together, and a ``#`` that starts a word ends the line.  Options on the
command line win over the script's (sbatch(1)), so :func:`header` only says
what the script asks for; the caller knows which options it passes itself.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: sbatch's short options that take a value -> their long names (sbatch(1)).
SHORT = {
    "A": "account", "a": "array", "C": "constraint", "c": "cpus-per-task", "D": "chdir", "d": "dependency",
    "e": "error", "G": "gpus", "i": "input", "J": "job-name", "L": "licenses", "M": "clusters", "m": "distribution",
    "N": "nodes", "n": "ntasks", "o": "output", "p": "partition", "q": "qos", "S": "core-spec", "t": "time",
    "w": "nodelist", "x": "exclude",
}  # fmt: skip
#: Long options that take a value in the next word when not given as ``--name=value``.
TAKES_VALUE = frozenset(SHORT.values()) | {
    "gres", "gpus-per-node", "gpus-per-task", "gpus-per-socket", "ntasks-per-node", "mem", "mem-per-cpu",
    "mem-per-gpu", "time-min", "begin", "comment", "mail-type", "mail-user", "signal", "uid", "gid", "export",
    "reservation", "wckey", "nice", "priority", "cpus-per-gpu", "gres-flags", "checkpoint", "open-mode",
}  # fmt: skip
#: How many header lines are read at most (a script is capped well below this by the service).
MAX_LINES = 10_000
_LONG = re.compile(r"--([A-Za-z][A-Za-z0-9-]*)(?:=(.*))?", re.S)


@dataclass(frozen=True)
class Directive:
    """One option of the header: its long name (without ``--``), its value ("" for a flag) and line."""

    name: str
    value: str
    line: int


class HeaderError(ValueError):
    """An ``#SBATCH`` line sbatch itself could not read (unbalanced quotes)."""


def header(script: str) -> list[Directive]:
    """The options of ``script``'s ``#SBATCH`` lines, in order (a later one overrides an earlier one)."""
    out: list[Directive] = []
    for number, raw in enumerate(script.splitlines()[:MAX_LINES], start=1):
        line = raw.strip()
        if not line:
            continue
        if not line.startswith("#"):
            break  # the first command ends the header
        if not line.startswith("#SBATCH") or line[7:8] not in ("", " ", "\t"):
            continue  # another comment ("#!/bin/bash", "#SBATCHX", "# SBATCH")
        out += _options(_words(line[7:], number), number)
    return out


def _words(text: str, number: int) -> list[str]:
    """The words of one ``#SBATCH`` line: quotes group, a ``#`` that starts a word ends the line."""
    words: list[str] = []
    i, n = 0, len(text)
    while i < n:
        while i < n and text[i] in " \t":
            i += 1
        if i >= n or text[i] == "#":
            break
        word: list[str] = []
        quote = ""
        while i < n and (quote or text[i] not in " \t"):
            c = text[i]
            i += 1
            if quote:
                if c == quote:
                    quote = ""
                else:
                    word.append(c)
            elif c in "'\"":
                quote = c
            else:
                word.append(c)
        if quote:
            raise HeaderError(f"script line {number}: a {quote} quote is not closed")
        words.append("".join(word))
    return words


def _options(words: list[str], number: int) -> list[Directive]:
    out: list[Directive] = []
    i = 0
    while i < len(words):
        word = words[i]
        i += 1
        long = _LONG.fullmatch(word)
        if long:
            name, value = long.group(1), long.group(2)
            if value is None and name in TAKES_VALUE and i < len(words):
                value, i = words[i], i + 1
            out.append(Directive(name, value or "", number))
        elif len(word) >= 2 and word[0] == "-" and word[1] in SHORT:
            value = word[2:]
            if not value and i < len(words):
                value, i = words[i], i + 1
            out.append(Directive(SHORT[word[1]], value, number))
        elif len(word) >= 2 and word[0] == "-":
            out.append(Directive(word[1:], "", number))  # a flag such as -H, -k, -Q
    return out


def last(directives: list[Directive]) -> dict[str, Directive]:
    """Each option's last occurrence (what sbatch uses)."""
    return {d.name: d for d in directives}


__all__ = ["Directive", "HeaderError", "header", "last"]


# -- the options the console submits a form with (slurm_pool.web) -------------------------------


def form_options(
    *,
    partition: str,
    qos: str,
    account: str,
    time: str,
    name: str,
    gres: str | None = None,
    nodelist: str | None = None,
) -> list[str]:
    """sbatch's options for a console form, ``--parsable`` first (its answer is the job id)."""
    return [
        "--parsable",
        *([f"--partition={partition}"] if partition else []),
        f"--qos={qos}",
        f"--account={account}",
        f"--time={time}",
        f"--job-name={name}",
        *gres_options(gres),
        *([f"--nodelist={nodelist}"] if nodelist else []),
    ]


def gres_options(gres: str | None) -> list[str]:
    """``--gres=GRES`` (``gpu:a100:2``, ``shard:4``), or nothing."""
    return [f"--gres={gres}"] if gres else []


def checkpoint_options(signal: str, warn_seconds: int) -> list[str]:
    """A checkpointing job's options: the SPANK plugin's ``--checkpoint``, requeue, and the signal that wakes
    ``slurm-pool run`` ``warn_seconds`` before the job is preempted (its batch shell only: ``B:``)."""
    warn = f"@{warn_seconds}" if warn_seconds > 0 else ""
    return ["--checkpoint", "--requeue", f"--signal=B:{signal}{warn}"]
