"""``slurm-pool diff``: what a new render would change on the running cluster.

The thin side of :mod:`slurm_pool.diff.conf`: it asks Slurm (through a
:class:`~slurm_pool.adapters.runner.Runner`), renders the spec for the
release slurmctld runs, and prints one line per difference.  Exit status as
diff(1): 0 no difference, 1 differences, 2 trouble (a bad spec, Slurm not
answering, a tier or project named like a site's QOS or account that the
spec does not adopt: one ``error:`` line per collision, with both ways out).  Read-only: the accounting part is ``apply accounting --dry-run``'s diff.

Beside what Slurm reports, the installed files (the directory of the cluster's
``SLURM_CONF``, or ``--installed DIR``) are compared with the new render
(:mod:`slurm_pool.diff.files`): job_submit.lua's policy rule by rule, node.conf
setting by setting, the others line by line; a slurm.conf line whose change
the running cluster already shows is not repeated.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from pathlib import Path

import click

from slurm_pool.adapters.runner import CommandError, Runner
from slurm_pool.diff.conf import Difference, attributes_needed, compare, site_dependent
from slurm_pool.diff.files import not_seen
from slurm_pool.render.site import Site
from slurm_pool.render.templates import default_templates_dir
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


def probe_nodes_site(spec: PoolSpec) -> Site:
    """:func:`probe_site` with a slurmd port per node too (one line per node, ``Port=``)."""
    from slurm_pool.spec.hosts import expand

    nodes = [n for g in spec.node_groups for n in expand(g.hosts)]
    return dataclasses.replace(probe_site(), node_ports={n: 9999 for n in nodes})


def template_keys(name: str) -> frozenset[str]:
    """The ``Key=`` a template can write at the start of a line."""
    text = (default_templates_dir() / name).read_text(encoding="utf-8")
    return frozenset(re.findall(r"^([A-Za-z][A-Za-z0-9]*)=", text, re.MULTILINE))


def read_installed(directory: Path, names: list[str]) -> dict[str, str | None]:
    """Each file's text in ``directory`` (None: not there or unreadable)."""
    out: dict[str, str | None] = {}
    for name in names:
        try:
            out[name] = (directory / name).read_text(encoding="utf-8", errors="replace")
        except OSError:
            out[name] = None
    return out


def installed_node_conf(directory: Path) -> dict[str, str] | None:
    """node.conf where the hooks read it for a slurm.conf in ``directory``; defaults filled in (None: none)."""
    from slurm_pool import nodeconf

    path = nodeconf.default_path({"SLURM_CONF": str(directory / "slurm.conf")})
    try:
        return dict(nodeconf.load(path, trusted=False).values)
    except nodeconf.ConfigError:
        return None


def file_differences(spec: PoolSpec, version, directory: Path) -> list[Difference]:
    """The new render against the files installed in ``directory`` (and node.conf)."""
    from slurm_pool import nodeconf
    from slurm_pool.diff.files import compare_files, compared_names
    from slurm_pool.render import render_all

    rendered = render_all(spec, Site(), version)
    probe = render_all(spec, probe_nodes_site(spec), version)
    installed = read_installed(directory, compared_names(rendered))
    node_want = dict(nodeconf.NodeConfig(nodeconf.parse(nodeconf.render(spec))).values)
    written = {"slurm.conf": template_keys("slurm.conf.j2")}
    return compare_files(rendered, probe, installed, node_want, installed_node_conf(directory), written)


def installed_dir(config: dict[str, str]) -> Path | None:
    """The directory of slurmctld's slurm.conf (``scontrol show config``), if this machine has it."""
    conf = config.get("SLURM_CONF") or os.environ.get("SLURM_CONF", "")
    d = Path(conf).parent if conf.startswith("/") else None
    return d if d is not None and d.is_dir() else None


def differences(
    spec: PoolSpec, runner: Runner, installed: Path | None = None, notes: list[str] | None = None
) -> list[Difference]:
    """Ask the cluster and compare; raises CommandError when Slurm cannot be asked.

    ``installed``: where the pool's files are (default: beside the cluster's
    slurm.conf, when this machine has that directory; else a line in ``notes``).
    """
    from slurm_pool.accounting.apply import cluster_plan, diff
    from slurm_pool.adapters.slurm import SlurmClient
    from slurm_pool.render import render_all
    from slurm_pool.versions import SlurmVersion, VersionError

    config = SlurmClient(runner).config()
    try:
        slurm = SlurmClient(runner, SlurmVersion.parse(config.get("SLURM_VERSION", ""), what="slurmctld", output=True))
    except VersionError:  # the commands' release, then
        slurm = SlurmClient(runner)
    version = slurm.version()
    partitions = slurm.partitions_text()
    nodes = slurm.nodes_json()
    # a tier or project named like a site's object the spec does not adopt: NameCollision, exit 2
    accounting = [c.summary for c in diff(cluster_plan(spec, slurm), slurm, deferred=[])]
    rendered = render_all(spec, Site(), version)
    site_keys = site_dependent(rendered, render_all(spec, probe_site(), version))
    attributes = slurm.node_attributes() if attributes_needed(rendered) else None
    found = compare(rendered, partitions, nodes, config, accounting, site_keys, attributes)
    directory = installed or installed_dir(config)
    if directory is None:
        if notes is not None:
            notes.append("the installed files were not compared: slurm.conf's directory is not on this machine")
        return found
    return [*found, *not_seen(file_differences(spec, version, directory), found)]


@click.command("diff")
@click.option("--spec", "spec_path", required=True, type=click.Path(dir_okay=False), help="The pool spec.")
@click.option("--json", "as_json", is_flag=True, help="Print the differences as a JSON list.")
@click.option(
    "--installed",
    type=click.Path(file_okay=False, exists=True),
    default=None,
    help="Where the pool's files are installed [the directory of the cluster's slurm.conf].",
)
def diff_cmd(spec_path: str, as_json: bool, installed: str | None) -> None:
    """Show what rendering SPEC would change on the running cluster: partitions, nodes, settings, accounting,
    and the installed files (job_submit.lua's policy, node.conf's settings, the other files' lines).

    One line per difference (``partition shared: GraceTime 20 -> 30``,
    ``tier shared: policy.checkpoint add_requeue -> reject``, the cluster's or
    installed value first).  Exit status 0: no difference; 1: differences; 2: trouble.
    """
    from slurm_pool.adapters.runner import SubprocessRunner
    from slurm_pool.errors import PoolError

    try:
        notes: list[str] = []
        found = differences(load_spec(spec_path), SubprocessRunner(), Path(installed) if installed else None, notes)
    except CommandError as exc:
        click.echo(f"slurm-pool diff: cannot ask Slurm: {shown(exc)}", err=True)
        raise SystemExit(2) from None
    except PoolError as exc:
        for line in exc.lines():
            click.echo(f"error: {shown(line)}", err=True)
        raise SystemExit(2) from None
    for note in notes:
        click.echo(f"slurm-pool diff: {note}", err=True)
    if as_json:
        click.echo(json.dumps([d.to_json() for d in found], indent=2))
    else:
        for d in found:
            click.echo(d.line())
    raise SystemExit(1 if found else 0)
