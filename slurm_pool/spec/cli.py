"""``slurm-pool validate``: check a pool spec without a cluster."""

from __future__ import annotations

import click

from slurm_pool.spec.load import load_spec
from slurm_pool.text import shown


@click.command()
@click.argument("spec", type=click.Path(dir_okay=False))
def validate(spec: str) -> None:
    """Check a pool spec: schema, hostlists, preemption graph, MIG layouts."""
    from slurm_pool.spec.hosts import expand

    s = load_spec(spec)
    nodes = sum(len(expand(g.hosts)) for g in s.node_groups)
    click.echo(
        f"{shown(spec)}: valid (version {s.version}, cluster {s.cluster.name}, {nodes} nodes, "
        f"{len(s.partitions)} partitions, {len(s.tiers)} tiers)"
    )


__all__ = ["validate"]
