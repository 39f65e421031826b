"""``slurm-pool rebalance``: one reconcile of the Slurm <-> Kubernetes bridge, for cron.

    * * * * * slurm-pool rebalance --spec /etc/slurm-pool/pool.yaml

Run it as ``bridge.user`` (no root needed: placeholders are submitted as that
user), or as root (they are submitted ``--uid`` that user).  Where Slurm's
PrivateData hides jobs, the user needs ``AdminLevel=Operator`` to see every
pending job (see "Privileges" in docs/operations.md).  Runs never overlap: a
run that would change anything first takes the Kubernetes Lease
``bridge.lease_name`` in ``bridge.lease_namespace``, and a run that finds it
held by another live run changes nothing and exits 0.

Exit 0 when every step succeeded (or there was nothing to do), 1 when any step
failed or was refused (a PodDisruptionBudget's 429 is retried by the next
run) or a Kubernetes object could not be read (the run then held still), 2 for
a bad spec or an answer from Slurm or Kubernetes that made a safe plan
impossible (nothing was changed).  Every text from them is shown
terminal-safe; every non-zero exit says why in one ``error:`` line on stderr
(the report stays on stdout).
"""

from __future__ import annotations

import json
from datetime import datetime, timezone

import click

from slurm_pool.clitypes import Finite, StrictInt
from slurm_pool.cronexit import fail, for_cron
from slurm_pool.errors import InputError, Issue, SpecError
from slurm_pool.spec.bridge import Bridge
from slurm_pool.text import matches, shown


def parse_now(value: str | None, config: Bridge) -> datetime:
    """``--now``: ISO 8601; without an offset it is wall-clock time in ``bridge.timezone`` (or local)."""
    if not value:
        return datetime.now(timezone.utc)
    try:
        t = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise click.BadParameter(f"{value!r} is not an ISO 8601 time", param_hint="--now") from None
    if t.tzinfo is None:
        if config.timezone:
            from zoneinfo import ZoneInfo

            t = t.replace(tzinfo=ZoneInfo(config.timezone))
        else:
            t = t.astimezone()
    return t


@click.command("rebalance")
@click.option(
    "--spec",
    "spec_path",
    required=True,
    type=click.Path(dir_okay=False),
    help="Pool spec; its optional bridge: section configures the bridge.",
)
@click.option(
    "--kubeconfig",
    type=click.Path(dir_okay=False),
    help="Kubeconfig (default: $KUBECONFIG, ~/.kube/config, else in-cluster).",
)
@click.option("--dry-run", is_flag=True, help="Print the plan; change nothing.")
@click.option("--now", help="Plan for this ISO 8601 time instead of the clock (tests, off-peak checks).")
@click.option(
    "--force-after",
    type=StrictInt(0),
    help="Delete pods whose eviction is still refused this many seconds after the reclaim began.",
)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable report.")
@for_cron
def rebalance(
    spec_path: str, kubeconfig: str | None, dry_run: bool, now: str | None, force_after: int | None, as_json: bool
) -> None:
    """Lend idle Slurm nodes to the Kubernetes inference tier off-peak; take them back when Slurm needs them."""
    from slurm_pool.adapters.runner import CommandError, SubprocessRunner
    from slurm_pool.adapters.slurm import SlurmClient
    from slurm_pool.bridge.history import Sources, build_forecast
    from slurm_pool.bridge.k8s import K8sError, KubernetesAPI
    from slurm_pool.bridge.lease import LeaseHeld
    from slurm_pool.bridge.reconcile import reconcile
    from slurm_pool.bridge.slurm_side import SlurmSide
    from slurm_pool.spec import load_spec
    from slurm_pool.spec.bridge import bridge_of, check_bridge, lend_preemptors

    spec = load_spec(spec_path)
    config = bridge_of(spec)
    problems = check_bridge(spec, config)
    if problems:
        raise SpecError([Issue("", p) for p in problems])
    when = parse_now(now, config)
    client = SlurmClient(SubprocessRunner())
    slurm = SlurmSide(client, config)
    try:
        forecast, notes = build_forecast(spec, config, Sources(client), when)
    except InputError:
        raise
    except (CommandError, OSError, ValueError) as exc:
        raise click.ClickException(shown(f"cannot read Slurm's history for the forecast: {exc}")) from None
    try:
        k8s = KubernetesAPI.connect(config, kubeconfig)
    except Exception as exc:  # the client raises several unrelated types for a bad config
        raise click.ClickException(shown(f"cannot reach Kubernetes: {exc}")) from None
    try:
        report = reconcile(
            slurm,
            k8s,
            config,
            now=when,
            dry_run=dry_run,
            force_after=force_after,
            forecast=forecast,
            notes=[*slurm.notes, *notes],
            preemptors=lend_preemptors(spec, config),
        )
    except LeaseHeld as exc:  # another run is at work: nothing wrong, nothing to do
        click.echo(shown(f"skipped: {exc}"), err=True)
        return
    except InputError:  # an answer that makes a safe plan impossible: reported as bad input, exit 2
        raise
    except (CommandError, K8sError, OSError, ValueError) as exc:
        raise click.ClickException(shown(f"cannot observe Slurm and Kubernetes: {exc}")) from None
    finally:
        k8s.close()
    if as_json:
        click.echo(json.dumps(report.to_dict(), indent=2, sort_keys=True))
    else:
        click.echo(report.text())
    if report.exit_code:
        fail(f"rebalance: {report.failure()}", report.exit_code)


@click.command("fence-node")
@click.argument("node")
@click.option(
    "--kubeconfig", required=True, type=click.Path(exists=True, dir_okay=False), help="Kubeconfig on this node."
)
@click.option("--seconds", default=30.0, show_default=True, type=Finite(min=0), help="Deadline.")
def fence_node(node: str, kubeconfig: str, seconds: float) -> None:
    """Cordon NODE in Kubernetes and delete its pods (the placeholder runs this when Slurm preempts it).

    A node lent for a gang takes its whole group with it: every node of the group is
    fenced and the gang's job stopped as one unit; its pods still on NODE after half of
    --seconds are deleted.  Exit 0 once no pod is bound to the node, 1 if some still are
    after --seconds.
    """
    from slurm_pool.bridge.fence import fence_node as fence
    from slurm_pool.bridge.k8s import KubernetesAPI

    if not matches("k8s-name", node):
        raise click.BadParameter(f"{shown(repr(node))} is not a Kubernetes node name", param_hint="NODE")
    try:
        api = KubernetesAPI.connect(Bridge(), kubeconfig)
    except Exception as exc:  # the client raises several unrelated types for a bad config
        raise click.ClickException(shown(f"cannot reach Kubernetes: {exc}")) from None
    try:
        res = fence(api, node, seconds)
    finally:
        api.close()
    click.echo(shown(f"fence {node}: {res.detail}"))
    if not res.ok:
        raise click.exceptions.Exit(1)
