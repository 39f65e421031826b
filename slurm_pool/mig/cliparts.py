"""The parts of ``slurm-pool mig`` below its commands (:mod:`slurm_pool.mig.cli`).

Its two errors, and ``mig apply``'s own: the options that reach a file or a
command checked, the node controls loaded (``--controls``), progress and the
report printed.
"""

from __future__ import annotations

import importlib
import re
import shlex
from typing import Any

import click

from slurm_pool.errors import InputError, PoolError
from slurm_pool.text import check as check_rule
from slurm_pool.text import check_free_text, check_path, markup_safe, matches, shown
from slurm_pool.versions import SlurmVersion


class MigInputError(InputError):
    """Bad user input: exit status 2."""


class MigFailed(PoolError):
    """``mig apply`` could not start (a file it must edit, a node it must read): exit status 1."""


#: ``--nvidia-smi``: a program name on the nodes' PATH (a path is checked as a path).
PROGRAM_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")


def load_controls(spec: str, result: Any) -> tuple[Any, Any]:
    module, _, attr = spec.partition(":")
    try:
        factory = getattr(importlib.import_module(module), attr or "controls")
    except (ImportError, AttributeError, ValueError) as exc:
        raise MigInputError(f"cannot load --controls {spec!r}: {shown(exc)}") from None
    try:
        return factory(result)
    except Exception as exc:  # noqa: BLE001 - a site's factory: its failure is reported, nothing changed
        raise MigFailed(f"--controls {spec!r}: {shown(exc)}") from None


def check_options(ssh: dict[str, Any]) -> None:
    """Exit 2 naming the option when one that reaches a file or a command cannot be used."""
    paths = [("--dev-dir", ssh["dev_dir"].replace("{node}", "node")), ("--gres-conf", ssh["gres_conf"])]
    paths += [("--slurm-conf", p) for p in ssh["slurm_conf"]]
    for option, value in paths:
        try:
            check_path(value, option)
        except ValueError as exc:
            raise MigInputError(shown(exc)) from None
    program = ssh["nvidia_smi"].replace("{node}", "node")
    if not (matches(PROGRAM_RE, program) or matches("path", program)):
        raise MigInputError(f"--nvidia-smi: {ssh['nvidia_smi']!r} is not a program name or an absolute path")
    if ssh["controller"] is not None:
        try:
            check_rule("host", ssh["controller"], "--controller")
        except ValueError as exc:
            raise MigInputError(shown(exc)) from None
    for option in ("ssh_options", "restart_slurmctld", "restart_slurmd"):
        flag = "--" + option.replace("_", "-")
        try:
            check_free_text(ssh[option], flag)
            shlex.split(ssh[option])
        except ValueError as exc:
            raise MigInputError(f"{flag}: {ssh[option]!r} cannot be used ({shown(exc)})") from None


def controls_over_ssh(model: str, version: SlurmVersion, opts: dict[str, Any]) -> tuple[Any, Any]:
    from slurm_pool.mig.remote import RemoteSettings, ssh_controls

    try:
        settings = RemoteSettings(
            gres_conf=opts["gres_conf"],
            slurm_confs=tuple(opts["slurm_conf"]),
            controller=opts["controller"],
            restart_slurmctld=opts["restart_slurmctld"],
            restart_slurmd=opts["restart_slurmd"],
            reconfigure=opts["reconfigure"],
        )
    except ValueError as exc:
        raise MigInputError(shown(exc)) from None
    return ssh_controls(model, version, settings, ssh_options=opts["ssh_options"], nvidia_smi=opts["nvidia_smi"])


def progress() -> Any:
    """Each finished step, as it happens, on standard error."""
    from rich.console import Console

    console = Console(stderr=True, highlight=False)
    return lambda node, label: console.print(f"[bold]{markup_safe(node)}[/bold]: {markup_safe(label)}")


def print_report(report: Any) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    for r in report.results:
        click.echo(shown(f"{r.node}: {r.status}" + (f" ({r.error})" if r.error else "")))
        for a in r.actions:
            click.echo(f"  {shown(a)}")
    if not report.results:
        click.echo("nothing to change")
        return
    table = Table("node", "status", "GPUs", "detail", title="mig apply")
    for r in report.results:
        table.add_row(*(Text(shown(v)) for v in (r.node, r.status, r.gpus, r.error)))
    Console(stderr=True, highlight=False).print(table)
    changed = [r for r in report.results if r.status == "applied"]
    click.echo(
        f"changed {sum(r.gpus for r in changed)} GPU(s) on {len(changed)} node(s)"
        + "".join(
            f"; {s}: {sum(r.status == s for r in report.results)}"
            for s in ("deferred", "skipped", "failed")
            if any(r.status == s for r in report.results)
        )
    )
