"""The one text rule: what may leave the program into a config line, a command, a terminal or a report.

Everything slurm-pool writes somewhere -- slurm.conf and gres.conf lines,
sacctmgr arguments, Kubernetes objects, a terminal, a Rich table -- comes
from someone it does not trust: a spec, a plan file, a job name, a node's
drain reason, a Kubernetes object.  This module is the one place that says
what such text may be.  Stdlib only (the node hooks import it).

* Every rule is a *full-string* match (``re.fullmatch``): ``$`` also matches
  before a trailing newline, so ``"n1\\n"`` passes ``re.match(r"...$")``.
* :func:`control_chars` finds what splits a line or drives a terminal: C0 and
  C1 controls, DEL, Unicode line and paragraph separators, and the bidi
  controls that reorder what a terminal shows.  Free text refuses them.
* :func:`shown` makes any text safe to print (controls become ``\\xNN``);
  :func:`markup_safe` also escapes Rich markup, so data is never read as it.
* :func:`strict_int` and :func:`strict_float` read numbers from outside data:
  no booleans, NaN, infinities, ``1_0`` or non-ASCII digits.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any, Iterable, Iterator, Pattern

#: Characters that split a line, drive a terminal or reorder what it shows.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069\ufeff]")

#: The named rules' patterns (see :data:`RULES`).
_SOURCES: dict[str, str] = {
    # Pool names: clusters, tiers (QOS), partitions, projects (accounts), node groups.
    "name": r"[a-z][a-z0-9_-]{0,62}",
    # POSIX-portable login names, as useradd and sacctmgr take them.
    "user": r"[a-z_][a-z0-9_-]{0,31}",
    # A job's user as a directory name (SLURM_JOB_USER): letters, digits, '_', '.', '-'; '.' and '..' refused apart.
    "login": r"[A-Za-z_][A-Za-z0-9_.-]{0,63}",
    # A job id as Slurm writes it: ASCII digits only.
    "job-id": r"[0-9]{1,20}",
    # A Slurm node (or host) name.
    "node": r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}",
    # A host name or address slurm.conf takes (SlurmctldHost, NodeAddr): letters, digits, '.', '-', ':' (IPv6).
    "host": r"[A-Za-z0-9](?:[A-Za-z0-9.:-]{0,252}[A-Za-z0-9])?",
    # A site's Slurm partition name (slurm.conf PartitionName=; ',' splits Slurm's lists, '=' its lines).
    "partition": r"[A-Za-z0-9_][A-Za-z0-9_.+-]{0,63}",
    # A node feature (slurm.conf Features=, --constraint words).
    "feature": r"[A-Za-z0-9_.+-]{1,64}",
    # Slurm's time: [days-]hours:minutes:seconds, minutes, or UNLIMITED.
    "time": r"UNLIMITED|INFINITE|(?:[0-9]+-)?[0-9]+(?::[0-9]{2}){0,2}",
    # A TRES name the spec's limits may use.
    "tres": r"cpu|mem|node|billing|gres/gpu(?::[a-z0-9._-]+)?",
    # A site's own GRES Type for a GPU model (--gres=gpu:a100): one lower-case word of a TRES name.
    "gres-type": r"[a-z0-9][a-z0-9._-]{0,63}",
    # A MIG profile name (3g.20gb, 1g.10gb+me).
    "mig-profile": r"[1-7]g\.[0-9]+gb(?:\+me)?",
    # A Kubernetes DNS-1123 label (namespaces) and subdomain (object names): dot-separated labels, 253 in all, as
    # IsDNS1123Label and IsDNS1123Subdomain of k8s.io/apimachinery/pkg/util/validation/validation.go have them.
    "k8s-label": r"[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?",
    "k8s-name": r"(?=[-a-z0-9.]{1,253}\Z)[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*",
    # A plain absolute path: no spaces, commas or '=' (gres.conf and slurm.conf split on them).
    "path": r"/[A-Za-z0-9._+@/-]*",
}


class Rules(Mapping[str, Pattern[str]]):
    """The named rules, each compiled when first asked for: the node hooks, which start a Python for every job,
    use three of them and pay for no other."""

    def __init__(self, sources: dict[str, str]):
        self._sources = sources
        self._compiled: dict[str, Pattern[str]] = {}

    def __getitem__(self, name: str) -> Pattern[str]:
        pattern = self._compiled.get(name)
        if pattern is None:
            pattern = self._compiled[name] = re.compile(self._sources[name])
        return pattern

    def __contains__(self, name: object) -> bool:  # Mapping's own would compile the rule to find it
        return name in self._sources

    def __iter__(self) -> Iterator[str]:
        return iter(self._sources)

    def __len__(self) -> int:
        return len(self._sources)


#: Named rules for the words that reach config lines and commands.  Each is matched in full.
RULES = Rules(_SOURCES)

#: What each rule's words look like, for error messages.
SHAPES = {
    "name": "a lower-case letter, then up to 62 lower-case letters, digits, '_' or '-'",
    "user": "a login name: a lower-case letter or '_', then up to 31 lower-case letters, digits, '_' or '-'",
    "login": "a user name: a letter or '_', then up to 63 letters, digits, '_', '.' or '-'",
    "job-id": "a job id: 1 to 20 ASCII digits",
    "node": "a node name: a letter or digit, then up to 127 letters, digits, '.', '_' or '-'",
    "host": "a host name or address: letters, digits, '.', '-' or ':'",
    "partition": "a partition name: a letter, digit or '_', then up to 63 letters, digits, '_', '.', '+' or '-'",
    "feature": "1 to 64 letters, digits, '_', '.', '+' or '-'",
    "time": "a Slurm time: [days-]hours:minutes:seconds, minutes, or UNLIMITED",
    "tres": "a TRES name: cpu, mem, node, billing or gres/gpu[:type]",
    "gres-type": "a GRES type: a lower-case letter or digit, then up to 63 lower-case letters, digits, '.', '_' or '-'",
    "mig-profile": "a MIG profile such as 3g.20gb",
    "k8s-label": "a Kubernetes DNS label: lower-case letters, digits and '-', at most 63",
    "k8s-name": "a Kubernetes object name: DNS labels (lower-case letters, digits, inner '-') joined by '.', at most 253",
    "path": "an absolute path of letters, digits and . _ + @ - /",
}


def matches(rule: str | Pattern[str], value: object) -> bool:
    """``value`` is a string that matches ``rule`` (a name in :data:`RULES`, or a pattern) in full."""
    pattern = RULES[rule] if isinstance(rule, str) and rule in RULES else rule
    return isinstance(value, str) and re.fullmatch(pattern, value) is not None


def control_chars(value: str) -> list[str]:
    """The control characters in ``value``, each as ``\\xNN`` / ``\\uNNNN`` (empty: none)."""
    return [_escape(m.group()) for m in _CONTROL.finditer(value)]


def has_control(value: str) -> bool:
    return _CONTROL.search(value) is not None


def _escape(ch: str) -> str:
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def _at(what: str) -> str:
    return f"{what}: " if what else ""


def check(rule: str, value: object, what: str = "value") -> str:
    """``value`` if it matches the named rule in full, else ValueError naming ``what`` and the value."""
    if not isinstance(value, str):
        raise ValueError(f"{_at(what)}{value!r} is not a string")
    if not matches(rule, value):
        raise ValueError(f"{_at(what)}{value!r} does not match {SHAPES.get(rule, rule)}")
    return value


def check_free_text(value: object, what: str = "value", max_len: int | None = None, forbid: str = "") -> str:
    """One line of free text: no control characters, none of ``forbid``, at most ``max_len`` characters."""
    if not isinstance(value, str):
        raise ValueError(f"{_at(what)}{value!r} is not a string")
    bad = control_chars(value)
    if bad:
        raise ValueError(f"{_at(what)}{value!r} holds control characters ({', '.join(dict.fromkeys(bad))})")
    if forbid and any(ch in value for ch in forbid):
        raise ValueError(f"{_at(what)}{value!r} holds one of {' '.join(repr(c) for c in forbid)}")
    if max_len is not None and len(value) > max_len:
        raise ValueError(f"{_at(what)}longer than {max_len} characters")
    return value


def check_path(value: object, what: str = "path") -> str:
    """A plain absolute path: printable ASCII, no spaces, commas, '=' or '.'/'..' components."""
    check("path", value, what)
    assert isinstance(value, str)
    if any(part in (".", "..") for part in value.split("/")):
        raise ValueError(f"{_at(what)}{value!r} has a '.' or '..' component")
    return value


def shown(value: object) -> str:
    """``value`` as text safe for a terminal: every control character becomes a visible ``\\xNN`` escape."""
    text = value if isinstance(value, str) else str(value)
    return _CONTROL.sub(lambda m: _escape(m.group()), text)


def shown_lines(value: object) -> str:
    """:func:`shown`, keeping its line breaks: ``\r\n`` becomes ``\n``, every other control is escaped.

    For messages shown as text (an HTML element's ``textContent`` with ``white-space: pre-wrap``), where
    a line break is layout, not a control.
    """
    text = value if isinstance(value, str) else str(value)
    return "\n".join(shown(line) for line in text.replace("\r\n", "\n").split("\n"))


def markup_safe(value: object) -> str:
    """:func:`shown`, with Rich markup escaped too, for text put into a Rich markup string."""
    from rich.markup import escape

    return escape(shown(value))


# -- numbers from outside data --------------------------------------------------------

_INT = re.compile(r"[+-]?[0-9]+")
_FLOAT = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def strict_int(value: Any, what: str = "value") -> int:
    """An integer from JSON, YAML or an option: an int (not a bool) or ASCII digits; else ValueError."""
    if isinstance(value, bool):
        raise ValueError(f"{_at(what)}{value!r} is not a number")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    if isinstance(value, str) and _INT.fullmatch(value.strip()):
        return int(value.strip())
    raise ValueError(f"{_at(what)}{value!r} is not a whole number")


def strict_float(value: Any, what: str = "value") -> float:
    """A finite number: an int or float (not a bool, NaN or an infinity) or its ASCII decimal text."""
    if isinstance(value, bool):
        raise ValueError(f"{_at(what)}{value!r} is not a number")
    if isinstance(value, (int, float)):
        try:
            out = float(value)
        except OverflowError:
            raise ValueError(f"{_at(what)}{value!r} is too large") from None
    elif isinstance(value, str) and _FLOAT.fullmatch(value.strip()):
        out = float(value.strip())
    else:
        raise ValueError(f"{_at(what)}{value!r} is not a number")
    if not math.isfinite(out):
        raise ValueError(f"{_at(what)}{value!r} is not a finite number")
    return out


#: A list of indexes and ranges (``0-3``, ``0,2,4-6``): gres.conf(5) Cores= and Linux's cpulists.
INDEX_LIST_RE = re.compile(r"[0-9]{1,5}(?:-[0-9]{1,5})?(?:,[0-9]{1,5}(?:-[0-9]{1,5})?)*")


def index_ranges(indexes: Iterable[int]) -> str:
    """``0-3,8`` for [0, 1, 2, 3, 8]: a list of indexes and ranges as gres.conf and Linux's cpulists write it."""
    out: list[str] = []
    values = sorted(set(indexes))
    if not values:
        return ""
    start = prev = values[0]
    for v in [*values[1:], None]:
        if v is not None and v == prev + 1:
            prev = v
            continue
        out.append(f"{start}-{prev}" if prev > start else f"{start}")
        if v is not None:
            start = prev = v
    return ",".join(out)
