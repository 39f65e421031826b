"""``slurm-pool cluster up|down|restart|status|env``."""

from __future__ import annotations

import shlex
from pathlib import Path

import click

from slurm_pool.clitypes import StrictInt
from slurm_pool.text import shown

DEFAULT_SPEC = "examples/pool.yaml"


def _cluster(spec: str | None, state_dir: str | None, port_base: int | None = None, slurm: str | None = None):
    from slurm_pool.localcluster.cluster import ClusterError, LocalCluster, default_state_dir, saved_record

    if spec is None:
        spec = saved_record(Path(state_dir) if state_dir else default_state_dir()).get("spec", DEFAULT_SPEC)
    try:
        return LocalCluster(spec, state_dir, port_base, slurm=slurm)
    except ClusterError as exc:
        raise click.UsageError(str(exc)) from None


@click.group()
def cluster() -> None:
    """Run a real local Slurm cluster (munge, MariaDB, slurmdbd, slurmctld, slurmd per node)."""


_spec_opt = click.option("--spec", type=click.Path(dir_okay=False), help=f"Pool spec (default: {DEFAULT_SPEC}).")


def _plain_dir(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """The state directory goes into slurm.conf's paths: absolute, and a plain path (no spaces, no controls)."""
    from slurm_pool.text import check_path

    if value is None:
        return None
    absolute = str(Path(value).absolute())
    try:
        return check_path(absolute, "")
    except ValueError as exc:
        raise click.BadParameter(f"{exc} (it is written into slurm.conf)") from None


_state_opt = click.option(
    "--state-dir", type=click.Path(file_okay=False), callback=_plain_dir, help="State directory (a plain path)."
)


@cluster.command()
@_spec_opt
@_state_opt
@click.option(
    "--port-base",
    type=StrictInt(1024, 65000),
    help="First of the loopback ports to use (default: 16800, or for a new cluster the next free base, in steps of 200).",
)
@click.option(
    "--slurm",
    help="Slurm to run: an install prefix, or the version of a build cached by "
    "`python3 -m slurm_pool.localcluster.slurmbuild build` (e.g. 26.05). Default: the Slurm on PATH.",
)
@click.option(
    "--with-notebooks",
    is_flag=True,
    help="Also start JupyterHub for the spec's notebook tier (its environment is installed once, cached).",
)
@click.option(
    "--with-console",
    is_flag=True,
    help="Also give the spec's users random passwords and start the web console (slurm-pool serve).",
)
def up(
    spec: str | None,
    state_dir: str | None,
    port_base: int | None,
    slurm: str | None,
    with_notebooks: bool,
    with_console: bool,
) -> None:
    """Start the cluster (safe to run twice)."""
    from slurm_pool.localcluster.cluster import ClusterError
    from slurm_pool.localcluster.console import ConsoleError

    c = _cluster(spec, state_dir, port_base, slurm)
    if with_notebooks and c.spec.notebooks is None:
        raise click.UsageError(f"--with-notebooks: {c.spec_path} has no notebooks section")
    try:
        c.up()
        if with_notebooks:
            hub = c.up_notebooks()
            click.echo(
                f"JupyterHub: {hub.url} (users {', '.join(sorted(_hub_users(c.spec)))}; password in {hub.password_file})"
            )
        if with_console:
            _up_console(c)
    except (ClusterError, ConsoleError, TimeoutError) as exc:
        raise click.ClickException(f"{exc} (logs: {c.layout.log})") from None
    click.echo(
        f'cluster {c.spec.cluster.name} is up; use: eval "$(slurm-pool cluster env --state-dir {c.layout.root})"'
    )


def _up_console(c) -> None:
    """Passwords for the spec's users, then ``slurm-pool serve``; print where and how to log in."""
    from slurm_pool.localcluster import console

    users = console.console_users(c)
    passwords = console.set_passwords(users, c.layout.root)
    url = console.start_console(c)
    shown_user = users[0] if users else None
    login = f"; log in as {shown_user}" if shown_user and shown_user in passwords else ""
    # The passwords stay in their 0600 file: a line printed here ends up in logs others may read.
    click.echo(f"console: {url}{login} (the users' passwords: {console.passwords_file(c.layout.root)}, root only)")


def _hub_users(spec) -> set[str]:
    part = next(p for p in spec.partitions if p.name == spec.notebooks.partition)
    from slurm_pool.spec.notebooks import notebook_users

    return set(notebook_users(spec, part.tier))


@cluster.command()
@_spec_opt
@_state_opt
def down(spec: str | None, state_dir: str | None) -> None:
    """Stop only the daemons that ``up`` started."""
    c = _cluster(spec, state_dir)
    stopped = c.down()
    click.echo("stopped: " + (", ".join(stopped) if stopped else "nothing was running"))


@cluster.command()
@_spec_opt
@_state_opt
@click.option("--node", required=True, help="The node whose slurmd restarts.")
def restart(spec: str | None, state_dir: str | None, node: str) -> None:
    """Restart slurmctld and one node's slurmd on the configs as they are now."""
    from slurm_pool.localcluster.cluster import ClusterError

    c = _cluster(spec, state_dir)
    if node not in c.nodes():
        raise click.UsageError(f"--node: {node!r} is not a node of this cluster ({', '.join(c.nodes())})")
    try:
        c.restart_slurmd(node)
    except (ClusterError, TimeoutError) as exc:
        raise click.ClickException(f"{exc} (logs: {c.layout.log})") from None
    click.echo(f"restarted slurmctld and slurmd on {node}")


@cluster.command()
@_spec_opt
@_state_opt
def env(spec: str | None, state_dir: str | None) -> None:
    """Print the shell line that points Slurm's commands at this cluster."""
    c = _cluster(spec, state_dir)
    for key, value in c.layout.env().items():
        click.echo(f"export {key}={shlex.quote(value)}")


@cluster.command()
@_spec_opt
@_state_opt
def status(spec: str | None, state_dir: str | None) -> None:
    """Show daemons, nodes with GRES, partitions and QOS."""
    from slurm_pool.adapters.runner import CommandError
    from slurm_pool.adapters.slurm import SlurmClient

    c = _cluster(spec, state_dir)
    for name, alive in c.running().items():
        click.echo(f"{name:24s} {'running' if alive else 'stopped'}")
    if not c.running().get("slurmctld"):
        raise SystemExit(1)
    slurm = SlurmClient(c.runner)
    try:
        click.echo("\nNODE        STATE            GRES")
        for n in slurm.nodes():
            line = f"{n.name:11s} {'+'.join(n.state):16s} {n.gres}{'  (' + n.reason + ')' if n.reason else ''}"
            click.echo(shown(line))
        click.echo(
            "\n".join(shown(line) for line in c.runner.run(["sinfo", "-o", "%P %a %l %D %N"]).stdout.splitlines())
        )
        for row in slurm.sacctmgr_show("qos", ["Name", "Priority", "Preempt", "PreemptMode", "GraceTime"]):
            click.echo(shown("  ".join(f"{k}={v}" for k, v in row.items())))
    except CommandError as exc:
        raise click.ClickException(str(exc)) from None
