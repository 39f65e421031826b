"""The node attributes slurmctld holds, as ``scontrol show node -o`` prints them (src/api/node_info.c).

One node a line of ``Key=Value`` words, the same on every release from 22.05
to 26.05.  Two values hold spaces: ``OS=`` (the node's uname, printed before
``RealMemory=``) and ``Reason=`` (free text, after every attribute read here);
both are cut out before the words are split, so neither can pose as an
attribute.  ``MemSpecLimit=`` is printed only when the node has one.
"""

from __future__ import annotations

from slurm_pool import text
from slurm_pool.adapters.decode import key_values

#: The command: every node, one a line.
COMMAND = ("scontrol", "show", "node", "-o")
#: scontrol's key -> the slurm.conf key of the ``NodeName=`` attribute it shows.
SHOWN_AS = {
    "CPUTot": "CPUs",
    "Sockets": "Sockets",
    "CoresPerSocket": "CoresPerSocket",
    "ThreadsPerCore": "ThreadsPerCore",
    "RealMemory": "RealMemory",
    "MemSpecLimit": "MemSpecLimit",
    "TmpDisk": "TmpDisk",
    "Weight": "Weight",
    "AvailableFeatures": "Features",
    "Gres": "Gres",
}


def _words(line: str) -> str:
    """``line`` without the values that hold spaces (OS up to RealMemory, and Reason with all after it)."""
    line = line.split(" Reason=", 1)[0]
    head, sep, rest = line.partition(" OS=")
    if sep:
        _, sep2, tail = rest.partition(" RealMemory=")
        line = head + (" RealMemory=" + tail if sep2 else "")
    return line


def parse_node_attributes(output: str) -> tuple[dict[str, dict[str, str]], list[str]]:
    """Per node name, its attributes by slurm.conf key; and the lines skipped (no usable NodeName), each said why."""
    nodes: dict[str, dict[str, str]] = {}
    skipped: list[str] = []
    for line in output.splitlines():
        if not line.strip():
            continue
        pairs = key_values(_words(line.strip()).split())
        name = pairs.get("NodeName", "")
        if not text.matches("node", name):
            skipped.append(f"a node line without a usable NodeName: {text.shown(line[:80])}")
            continue
        attrs = {conf: pairs[shown] for shown, conf in SHOWN_AS.items() if shown in pairs}
        if attrs.get("Features") == "(null)":
            attrs["Features"] = ""
        nodes.setdefault(name, attrs)
    return nodes, skipped
