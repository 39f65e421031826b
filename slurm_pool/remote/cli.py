"""``slurm-pool --remote URL status``: the pool as a remote ``slurm-pool serve`` shows it, through the SDK.

Its own module, not ``metrics.status_cli``: the service reads the pool through
``slurm_pool.metrics``, so the metrics package must not import the SDK (and
through it ``slurm_pool.web``).  Everything the service sends is untrusted: it
reaches the terminal only as rich ``Text`` with control characters shown.
"""

from __future__ import annotations

import json
from typing import Any

import click

from slurm_pool.clitypes import Finite
from slurm_pool.text import shown
from slurm_pool.wellknown import REMOTE_KEY


@click.command("status")
@click.option("--json", "as_json", is_flag=True, help="Print the pool as the service's JSON (its Pool resource).")
@click.option(
    "--timeout", default=10.0, show_default=True, type=Finite(min=0.001), help="Seconds one request may take."
)
def status(as_json: bool, timeout: float) -> None:
    """Show GPUs by state, tier and project, nodes, pending demand and lent nodes, as the service sees them."""
    from slurm_pool.client import ApiError, PoolClient
    from slurm_pool.errors import InputError, ServiceError

    remote = click.get_current_context().meta.get(REMOTE_KEY)
    if remote is None:
        raise click.UsageError("give the service's address: slurm-pool --remote URL status")
    url, token = remote
    try:
        client = PoolClient(url, token, timeout=timeout)
    except ValueError as exc:
        raise InputError(shown(exc)) from None
    with client:
        try:
            pool = client.status()
        except ApiError as exc:
            # str(ApiError) shows controls escaped; one that could not reach the service names it already.
            # The exit status is the kind's (errors.KINDS): 2 for a request the service calls bad input.
            raise ServiceError(exc.status, str(exc) if exc.status == 0 else f"{client.url}: {exc}") from None
    if as_json:
        click.echo(json.dumps(pool.model_dump(mode="json"), indent=2))
        return
    from rich.console import Console

    console = Console(highlight=False)
    for part in remote_tables(pool):
        console.print(part)
        console.print()


def remote_tables(pool: Any) -> list[Any]:
    """A :class:`~slurm_pool.web.models.Pool` as rich renderables.  Every text from the service is a ``Text``
    (never markup) with its control characters shown: the service relays Slurm's words."""
    import time

    from rich.table import Table
    from rich.text import Text

    from slurm_pool.metrics.status import STATES

    def cell(value: Any) -> Text:
        return Text(shown(value))

    def counts(title: str, head: str, rows: dict[str, int]) -> Any:
        table = Table(title=title, title_justify="left")
        table.add_column(head)
        table.add_column("units", justify="right")
        for key, n in rows.items():
            table.add_row(cell(key or "-"), cell(n))
        if not rows:
            table.add_row("-", "0")
        return table

    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(pool.time)) if pool.time > 0 else "?"
    head = Text(shown(f"Pool at {stamp} (refreshed every {pool.refresh_seconds} s)"), style="bold")
    if not pool.fresh:
        head.append(" -- the service's last read of Slurm failed: these are the last good figures", style="red")
    by_state = Table(title="GPU units by state", title_justify="left")
    for col in ("state", "units", "share"):
        by_state.add_column(col, justify="left" if col == "state" else "right")
    names = list(STATES) + [k for k in pool.states if k not in STATES]
    for state in names:
        n = pool.states.get(state, 0)
        by_state.add_row(cell(state), cell(n), f"{100 * n / pool.total:.0f}%" if pool.total else "-")
    by_state.add_row("total", cell(pool.total), "100%" if pool.total else "-", style="bold")
    nodes = Table(title="Nodes", title_justify="left")
    for col in ("node", "slurm state", "owners", "total", *STATES, "reason"):
        nodes.add_column(col, justify="right" if col in STATES or col == "total" else "left")
    for n in pool.nodes:
        reason = n.reason + (f" ({n.drain_owner})" if n.drain_owner else "")
        nums = (cell(getattr(n, s)) for s in ("total", *STATES))
        nodes.add_row(cell(n.name), cell(n.state), cell(", ".join(n.owners)), *nums, cell(reason))
    pending = Table(title="Pending demand by tier", title_justify="left")
    for col in ("tier (QOS)", "jobs", "GPU units"):
        pending.add_column(col, justify="left" if col.startswith("tier") else "right")
    for tier, row in pool.pending.items():
        pending.add_row(cell(tier), cell(row.get("jobs", 0)), cell(row.get("gpus", 0)))
    if not pool.pending:
        pending.add_row("-", "0", "0")
    lent = Text(shown("Lent nodes: " + (", ".join(pool.lent_nodes) or "none")), style="bold")
    return [
        head,
        by_state,
        counts("Allocated by tier", "tier (QOS)", pool.by_tier),
        counts("Allocated by project", "project (account)", pool.by_project),
        nodes,
        pending,
        lent,
    ]
