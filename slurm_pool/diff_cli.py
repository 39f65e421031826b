"""``slurm-pool diff``: what a new render would change on the running cluster.

The thin side of :mod:`slurm_pool.diffconf`: it asks Slurm (through a
:class:`~slurm_pool.adapters.runner.Runner`), renders the spec for the
release slurmctld runs, and prints one line per difference.  Exit status as
diff(1): 0 no difference, 1 differences, 2 trouble (a bad spec, Slurm not
answering, a tier or project named like a site's QOS or account that the
spec does not adopt: one ``error:`` line per collision, with both ways out).  Read-only: the accounting part is ``apply accounting --dry-run``'s diff.
"""

from __future__ import annotations

import dataclasses
import json

import click

from slurm_pool.adapters.runner import CommandError, Runner
from slurm_pool.diffconf import Difference, compare, site_dependent
from slurm_pool.render.site import Site
from slurm_pool.spec import load_spec
from slurm_pool.spec.model import PoolSpec
from slurm_pool.text import shown


def probe_site() -> Site:
    """A :class:`Site` with every scalar field changed: keys it moves depend on the site."""
    changes: dict[str, object] = {}
    for f in dataclasses.fields(Site):
        value = getattr(Site(), f.name)
        if isinstance(value, bool):
            changes[f.name] = not value
        elif isinstance(value, int):
            changes[f.name] = value + 1000
        elif isinstance(value, str):
            changes[f.name] = f"{value}-probe"
        elif value is None:  # an optional host, address or path
            changes[f.name] = "/probe" if f.name in ("jwt_key", "munge_socket") else "probe"
    return dataclasses.replace(Site(), **changes)  # type: ignore[arg-type]


def differences(spec: PoolSpec, runner: Runner) -> list[Difference]:
    """Ask the cluster and compare; raises CommandError when Slurm cannot be asked."""
    from slurm_pool.accounting.apply import cluster_plan, diff
    from slurm_pool.adapters.records import parse_config_text
    from slurm_pool.adapters.slurm import SlurmClient
    from slurm_pool.render import render_all
    from slurm_pool.versions import SlurmVersion, VersionError

    config = parse_config_text(runner.run(["scontrol", "show", "config"]).stdout)
    try:
        slurm = SlurmClient(runner, SlurmVersion.parse(config.get("SLURM_VERSION", ""), what="slurmctld", output=True))
    except VersionError:  # the commands' release, then
        slurm = SlurmClient(runner)
    version = slurm.version()
    partitions = runner.run(["scontrol", "show", "partition", "-o"]).stdout
    nodes = slurm.nodes_json()
    # a tier or project named like a site's object the spec does not adopt: NameCollision, exit 2
    accounting = [c.summary for c in diff(cluster_plan(spec, slurm), slurm, deferred=[])]
    rendered = render_all(spec, Site(), version)
    site_keys = site_dependent(rendered, render_all(spec, probe_site(), version))
    return compare(rendered, partitions, nodes, config, accounting, site_keys)


@click.command("diff")
@click.option("--spec", "spec_path", required=True, type=click.Path(dir_okay=False), help="The pool spec.")
@click.option("--json", "as_json", is_flag=True, help="Print the differences as a JSON list.")
def diff_cmd(spec_path: str, as_json: bool) -> None:
    """Show what rendering SPEC would change on the running cluster: partitions, nodes, settings, accounting.

    One line per difference (``partition shared: GraceTime 20 -> 30``, the
    cluster's value first).  Exit status 0: no difference; 1: differences; 2: trouble.
    """
    from slurm_pool.adapters.runner import SubprocessRunner
    from slurm_pool.errors import PoolError

    try:
        found = differences(load_spec(spec_path), SubprocessRunner())
    except CommandError as exc:
        click.echo(f"slurm-pool diff: cannot ask Slurm: {shown(exc)}", err=True)
        raise SystemExit(2) from None
    except PoolError as exc:
        for line in exc.lines():
            click.echo(f"error: {shown(line)}", err=True)
        raise SystemExit(2) from None
    if as_json:
        click.echo(json.dumps([d.to_json() for d in found], indent=2))
    else:
        for d in found:
            click.echo(d.line())
    raise SystemExit(1 if found else 0)
