"""Partitions as ``scontrol show partition -o`` prints them (src/api/partition_info.c).

One partition a line of ``Key=Value`` words.  Slurm prints ``AllowQos=ALL``
when the partition limits no QOS, ``AllowQos=<list>`` when it allows some,
and ``DenyQos=<list>`` (instead of AllowQos) when it denies some; ``Nodes=``
is a hostlist (``(null)`` for none).
"""

from __future__ import annotations

from dataclasses import dataclass

from slurm_pool import text
from slurm_pool.adapters.decode import key_values


@dataclass(frozen=True)
class PartitionRecord:
    """The fields of one partition that say which nodes and QOS it takes."""

    name: str
    #: The hostlist Slurm prints ("" for none).
    nodes: str
    #: The QOS it allows (None: every QOS, ``AllowQos=ALL``).
    allow_qos: tuple[str, ...] | None
    #: The QOS it denies.
    deny_qos: tuple[str, ...]


def _list(value: str) -> tuple[str, ...]:
    return tuple(v for v in value.split(",") if v)


def parse_partition_text(output: str) -> tuple[list[PartitionRecord], list[str]]:
    """The partitions of ``scontrol show partition -o``, and the lines skipped (no usable name), each said why."""
    out: list[PartitionRecord] = []
    skipped: list[str] = []
    for line in output.splitlines():
        if not line.strip():
            continue
        pairs = key_values(line.split())
        name = pairs.get("PartitionName", "")
        if not text.matches("partition", name):
            skipped.append(f"a partition line without a usable PartitionName: {text.shown(line[:80])}")
            continue
        nodes = pairs.get("Nodes", "")
        allow = pairs.get("AllowQos")
        out.append(
            PartitionRecord(
                name,
                "" if nodes in ("", "(null)") else nodes,
                None if allow is None or allow in ("", "ALL") else _list(allow),
                _list(pairs.get("DenyQos", "")),
            )
        )
    return out, skipped
