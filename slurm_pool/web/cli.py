"""``slurm-pool serve``: the web console and REST API of a pool (uvicorn)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import click

from slurm_pool.errors import InputError

if TYPE_CHECKING:
    from slurm_pool.adapters.slurm import SlurmClient

DEFAULT_LISTEN = "127.0.0.1:8787"
#: Listen addresses that mean every address of the machine.
WILDCARDS = ("0.0.0.0", "::", "[::]", "")


@click.command("serve")
@click.option(
    "--spec",
    "spec_path",
    required=True,
    type=click.Path(dir_okay=False),
    help="The pool spec (with a console: section).",
)
@click.option("--listen", default=DEFAULT_LISTEN, show_default=True, help="HOST:PORT to serve on (put TLS in front).")
@click.option(
    "--state-dir", default=None, help="Directory with <node>/outcomes.jsonl [node.conf's state_dir]; '' reads none."
)
@click.option("--key", "key_path", default=None, help="Slurm's HS256 JWT key [the spec's console.jwt_key].")
@click.option(
    "--helper",
    default=None,
    help="Not run as root: the root helper sudo runs for submissions [slurm-pool-as beside this Python].",
)
def serve(spec_path: str, listen: str, state_dir: str | None, key_path: str | None, helper: str | None) -> None:
    """Serve the pool's web console and REST API: each user sees and does what Slurm lets them."""  # fmt: skip
    from slurm_pool.metrics.cli import parse_listen

    try:
        host, port = parse_listen(listen)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--listen") from None
    from slurm_pool.spec import load_spec

    spec = load_spec(spec_path)
    if spec.console is None:
        raise InputError(
            f"{spec_path}: the spec has no console section; add 'console:' (jwt_key, operators, ...) to serve it"
        )
    from slurm_pool.adapters.asuser import default_helper
    from slurm_pool.adapters.runner import SubprocessRunner
    from slurm_pool.adapters.slurm import SlurmClient
    from slurm_pool.metrics.cli import default_state_dir
    from slurm_pool.spec.console import HOST_RE
    from slurm_pool.web.actions import UserCommands
    from slurm_pool.web.app import create_app
    from slurm_pool.web.hosts import AllowedHosts
    from slurm_pool.web.identity import Authenticator, load_key, pam_checker, user_exists
    from slurm_pool.web.server import build_server

    slurm = SlurmClient(SubprocessRunner(default_timeout=20.0))
    owners = _slurm_user(slurm) if os.geteuid() != 0 else ()
    key = load_key(key_path or spec.console.jwt_key, owners)
    names = list(spec.console.allowed_hosts)
    if host in WILDCARDS:  # every address of the machine: its own names too
        import socket

        names += [n for n in {socket.gethostname(), socket.getfqdn()} if HOST_RE.fullmatch(n)]
    hosts = AllowedHosts.of(names, spec.console.public_url, host)
    auth = Authenticator(
        key, spec.console, check_password=pam_checker(spec.console.pam_service), user_exists=user_exists, hosts=hosts
    )
    app = create_app(
        spec,
        slurm=slurm,
        auth=auth,
        commands=UserCommands(key, helper=helper),
        state_dir=default_state_dir() if state_dir is None else (state_dir or None),
        hosts=hosts,
    )
    click.echo(f"slurm-pool serve: http://{host}:{port}/ (API under /api/v1)", err=True)
    if os.geteuid() != 0:
        click.echo(f"slurm-pool serve: not root: submissions through sudo {helper or default_helper()}", err=True)
    click.echo(f"slurm-pool serve: answering to host names {', '.join(sorted(hosts.names))}", err=True)
    build_server(app, host, port, spec.console, hosts=hosts).run()


def _slurm_user(slurm: SlurmClient) -> tuple[int, ...]:
    """SlurmUser's uid, which may own the JWT key (Slurm's own check, ``auth_jwt.c``); none if not known."""
    from slurm_pool.adapters.asuser import slurm_user_id
    from slurm_pool.adapters.runner import CommandError

    try:
        uid = slurm_user_id(slurm.config())
    except CommandError:
        return ()
    return () if uid is None else (uid,)
