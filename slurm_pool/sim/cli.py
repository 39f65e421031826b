"""``slurm-pool simulate``: what would the pool have done with our own jobs?"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from slurm_pool.clitypes import Finite, Progress
from slurm_pool.sim.engine import BORROWED, GUARANTEED, Result, standard_policies
from slurm_pool.sim.engine import simulate as replay
from slurm_pool.sim.nodelend import OVERFLOW, LendRule, LendStats
from slurm_pool.sim.nodes import NodePolicy, NodeResult, nodes_from_spec, simulate_nodes
from slurm_pool.sim.report import bound_plot, write_report
from slurm_pool.sim.sizing import (
    BORROWER_TOLERANCE,
    MAX_BORROWER_TOLERANCE,
    Sizing,
    borrower_floor,
    gpu_replay,
    node_replay,
    size_pool,
)
from slurm_pool.sim.sizing import summary as sizing_summary
from slurm_pool.sim.sizing_compare import Comparison, compare, draws_needed
from slurm_pool.sim.sizing_compare import summary as compare_summary
from slurm_pool.sim.units import describe
from slurm_pool.text import shown


def summary(r: Result, base: Result, prices: dict[str, tuple[str, float]] | None = None) -> dict[str, Any]:
    """One replay's figures, utilisation also as a ratio to the dedicated baseline.

    ``prices``: the spec tier and usage factor each simulated tier (guaranteed, borrowed) is charged as.
    """
    extra: dict[str, Any] = {}
    if prices:
        named: dict[str, float] = {}
        for t, sec in r.tier_gpu_seconds.items():
            named[prices[t][0]] = named.get(prices[t][0], 0.0) + sec
        extra["gpu_hours_by_tier"] = Result(r.policy, r.window, r.capacity, tier_gpu_seconds=named).charges(
            {name: factor for name, factor in prices.values()}
        )
    return {
        "policy": r.policy,
        "utilization": round(r.utilization, 4),
        "utilization_vs_dedicated": round(r.utilization / base.utilization, 3) if base.utilization else None,
        "owner_wait_p50_seconds": round(r.wait_quantile(0.5), 1),
        "owner_wait_p95_seconds": round(r.wait_quantile(0.95), 1),
        "preemptions": r.preemptions,
        "lost_gpu_hours": round(r.lost_gpu_seconds / 3600, 2),
        "borrower_jobs_done": r.borrower_jobs_done,
        "unfinished_owner_jobs": r.unfinished_owner_jobs,
        **extra,
        **({"lending": lending_summary(r.lending)} if isinstance(r, NodeResult) and r.lending is not None else {}),
    }


def lending_summary(st: LendStats) -> dict[str, Any]:
    """What lending to the inference tier did in one replay."""
    return {
        "lent_gpu_hours": round(st.lent_gpu_seconds / 3600, 2),
        "lends": st.lends,
        "reclaims": st.reclaims,
        "given_back": st.given_back,
    }


def lend_rule(spec: Any, start: float, period: float, prices: dict[str, tuple[str, float]]) -> LendRule:
    """The spec's bridge as the node engine's lending: its off-peak windows from the history's first
    submission (``start``, epoch seconds), its node cap, the lend tier's GraceTime, and which jobs preempt
    placeholders: guaranteed and borrowed time as ``prices`` names their tiers, an owner's job beyond its
    share as the highest-priority other tier its owners may use (the example's ``shared``)."""
    from datetime import datetime, timedelta, timezone

    from slurm_pool.bridge.windows import off_peak
    from slurm_pool.spec.bridge import bridge_of, lend_preemptors

    bridge = bridge_of(spec)
    t0 = datetime.fromtimestamp(start, timezone.utc)

    def window(t: float) -> bool:
        return off_peak(bridge, t0 + timedelta(seconds=t))

    preempting = lend_preemptors(spec, bridge)
    lend_tier = next((t for t in spec.tiers if t.name == bridge.qos), None)
    top = prices[GUARANTEED][0]
    owned = {t for p in spec.projects if p.owns for t in p.tiers} - {top, bridge.qos}
    overflow = max((t for t in spec.tiers if t.name in owned), key=lambda t: t.priority, default=None)
    names = {GUARANTEED: top, BORROWED: prices[BORROWED][0], OVERFLOW: overflow.name if overflow else top}
    return LendRule(
        period=period,
        window=None if bridge.lend_outside_off_peak else window,
        max_nodes=bridge.max_lent_nodes,
        grace=float(lend_tier.grace_time if lend_tier is not None else 0),
        preemptors=frozenset(cls for cls, name in names.items() if name in preempting),
    )


def tier_prices(spec: Any, spot_tier: str | None) -> dict[str, tuple[str, float]]:
    """The spec tier, and its usage factor, that guaranteed and borrowed GPU time is charged as.

    Guaranteed time is the highest-priority tier's; borrowed time is ``spot_tier``'s, by default the
    lowest-priority preemptible tier some project may use, other than the bridge's lend tier.
    """
    from slurm_pool.spec.bridge import bridge_of

    lend = next((p.tier for p in spec.partitions if p.name == bridge_of(spec).partition), None)
    used = {t for p in spec.projects if p.users for t in p.tiers}
    preemptible = {t for tier in spec.tiers for t in tier.preempt}
    top = max(spec.tiers, key=lambda t: t.priority)
    if spot_tier is None:
        spots = [t for t in spec.tiers if t.name in preemptible and t.name in used and t.name != lend]
        spot = min(spots, key=lambda t: t.priority) if spots else top
    else:
        found = next((t for t in spec.tiers if t.name == spot_tier), None)
        if found is None:
            raise click.BadParameter(
                f"{spot_tier!r} is not a tier of the spec ({', '.join(t.name for t in spec.tiers)})",
                param_hint="--spot-tier",
            )
        spot = found
    return {GUARANTEED: (top.name, top.usage_factor), BORROWED: (spot.name, spot.usage_factor)}


def default_grace(spec: Any) -> int:
    """The longest GraceTime of the spec's requeueing tiers (what a preempted job gets)."""
    return max((t.grace_time for t in spec.tiers if t.preempt_mode == "requeue"), default=0)


@click.command()
@click.option(
    "--spec", "spec_path", required=True, type=click.Path(dir_okay=False), help="Pool spec (who owns which servers)."
)
@click.option(
    "--sacct",
    "sacct_path",
    required=True,
    type=click.Path(dir_okay=False, allow_dash=True),
    help="`sacct --json -a -S ... -E ...` output, or - for stdin.",
)
@click.option(
    "--grace",
    type=Finite(min=0),
    default=None,
    help="GraceTime in seconds (default: the spec's longest requeue-tier grace_time).",
)
@click.option(
    "--checkpoint-interval",
    type=Finite(min=0),
    default=1800.0,
    show_default=True,
    help="Periodic checkpoint interval, seconds.",
)
@click.option(
    "--restart-overhead",
    type=Finite(min=0),
    default=120.0,
    show_default=True,
    help="Seconds a resumed job spends loading its checkpoint.",
)
@click.option(
    "--nodes",
    "on_nodes",
    is_flag=True,
    help="Place jobs on the spec's nodes (best fit, whole nodes, backfill) instead of interchangeable GPUs.",
)
@click.option(
    "--size",
    "sizing",
    is_flag=True,
    help="Also find the smallest pool (servers taken away one by one) that keeps owners' p95 wait and borrowers' "
    "work (their jobs done inside the window, less --borrower-tolerance), under checkpoint-on-preempt.",
)
@click.option(
    "--compare",
    "comparing",
    is_flag=True,
    help="With --nodes: size three designs side by side on the same history: dedicated servers, owned nodes "
    "(the pool today) and floating guarantees (nobody owns a node; each owner is guaranteed its dedicated GPUs "
    "on any node).  Implies --size.",
)
@click.option(
    "--draws",
    type=click.IntRange(min=1, max=100),
    default=None,
    help="With --compare: runtime draws, the history as recorded and then runtimes redrawn from its own; a size "
    "passes only if it passes on every draw.  [default: 3]",
)
# --- the owners' bar of --compare (issue 48) ---
@click.option(
    "--owner-slack",
    "owner_slack",
    type=Finite(min=0),
    default=None,
    help="With --compare: owners' p95 wait may exceed the dedicated servers' p95 on the same draw by this "
    "many seconds.  [default: one GraceTime, --grace]",
)
@click.option(
    "--owner-p95",
    "owner_p95",
    type=Finite(min=0),
    default=None,
    help="With --compare: an absolute bar instead: owners' p95 wait at most this many seconds.",
)
@click.option(
    "--confidence",
    type=Finite(min=0, max=1, min_open=True),
    default=None,
    help="With --compare: the share of draws a size must pass, ceil(confidence x draws) of them (0.9 over 10 "
    "draws: 9); 1 asks every draw.  [default: 0.9]",
)
@click.option(
    "--plot",
    "plot_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="With --compare: write a PNG of GPUs against owners' p95 per design (a light line per draw), the bar "
    "and the lower bound.",
)
# --- end of the owners' bar ---
@click.option(
    "--borrower-tolerance",
    "borrower_tolerance",
    type=Finite(min=0, max=MAX_BORROWER_TOLERANCE),
    default=None,
    help="With --size or --compare: the share (0 to 0.2) by which a size's borrower jobs done inside the window "
    "may fall short of all the servers' and still pass, so that one job ending a second late does not decide "
    f"a size.  [default: {BORROWER_TOLERANCE:g}]",
)
@click.option(
    "--report",
    "report_dir",
    type=click.Path(file_okay=False),
    default=None,
    help="Also write PNG plots and report.md into this directory.",
)
@click.option(
    "--spot-tier",
    default=None,
    help="The tier borrowed GPU time is charged as (default: the spec's lowest-priority preemptible tier "
    "its projects use, other than the bridge's).",
)
@click.option(
    "--lend",
    is_flag=True,
    help="With --nodes: the bridge lends whole idle nodes to the inference tier inside the spec's off-peak "
    "windows, and jobs whose tier preempts k8s-lend take them back.",
)
@click.option(
    "--lend-period",
    type=Finite(min=1),
    default=300.0,
    show_default=True,
    help="Seconds between the rebalancer's cron runs, with --lend.",
)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def simulate(
    spec_path: str,
    sacct_path: str,
    grace: float | None,
    checkpoint_interval: float,
    restart_overhead: float,
    on_nodes: bool,
    sizing: bool,
    comparing: bool,
    draws: int | None,
    owner_slack: float | None,
    owner_p95: float | None,
    confidence: float | None,
    plot_path: str | None,
    borrower_tolerance: float | None,
    report_dir: str | None,
    spot_tier: str | None,
    lend: bool,
    lend_period: float,
    as_json: bool,
) -> None:
    """Replay a sacct export on the spec's servers: dedicated per project vs one pool."""
    from slurm_pool.sim import history
    from slurm_pool.spec import load_spec

    if lend and not on_nodes:
        raise click.BadParameter("lending places whole nodes: give --nodes too", param_hint="--lend")
    if comparing and not on_nodes:
        raise click.BadParameter("floating guarantees place jobs on nodes: give --nodes too", param_hint="--compare")
    if draws is not None and not comparing:
        raise click.BadParameter(f"{draws} draws: only --compare replays several draws", param_hint="--draws")
    check_bar(comparing, owner_slack, owner_p95, confidence)
    if plot_path is not None and not comparing:
        raise click.BadParameter(shown(f"{plot_path}: only --compare plots the designs"), param_hint="--plot")
    if borrower_tolerance is not None and not (sizing or comparing):
        raise click.BadParameter(
            f"{borrower_tolerance:g}: only --size or --compare judges borrowers", param_hint="--borrower-tolerance"
        )
    tol = BORROWER_TOLERANCE if borrower_tolerance is None else borrower_tolerance
    spec = load_spec(spec_path)
    prices = tier_prices(spec, spot_tier)
    capacity = history.owned_gpus(spec)
    if not capacity:
        raise click.ClickException(f"{spec_path}: no project owns a node group with GPUs (projects[].owns)")
    mig = history.mig_nodes(spec) if on_nodes else None  # only the node engine models MIG instances
    with Progress(shown=not as_json) as bars:
        hist = history.read_sacct(sacct_path, capacity, mig=mig, progress=bars.step("reading the sacct records"))
        grace = float(default_grace(spec)) if grace is None else grace
        nodes = nodes_from_spec(spec)
        policies = standard_policies(grace, checkpoint_interval, restart_overhead)
        rule = lend_rule(spec, hist.start, lend_period, prices) if lend else None
        tick = bars.step(f"replaying {len(hist.jobs)} jobs under {len(policies)} policies", len(policies))
        results: list[tuple[str, Result]] = []
        for label, pol in policies:
            results.append(
                (label, simulate_nodes(nodes, hist.jobs, NodePolicy(**vars(pol), lend=rule), hist.window))
                if on_nodes
                else (label, replay(capacity, hist.jobs, pol, hist.window))
            )
            tick(len(results))
        base = results[0][1]
        sized: Sizing | None = None
        compared: Comparison | None = None
        pool = next(p for _, p in policies if p.name == "pool-checkpoint-on-preempt")
        if comparing:
            step = bars.step(f"comparing the designs over {draws or 3} runtime draws")
            compared = compare(
                nodes,
                hist.jobs,
                pool,
                hist.window,
                draws=draws or 3,
                lend=rule,
                tol=tol,
                progress=step,
                slack=None if owner_p95 is not None else grace if owner_slack is None else owner_slack,
                owner_p95=owner_p95,
                confidence=DEFAULT_CONFIDENCE if confidence is None else confidence,
            )
            sized = compared.sizing(0)
        elif sizing:
            engine = node_replay if on_nodes else gpu_replay
            sized = size_pool(nodes, hist.jobs, pool, hist.window, engine(hist.jobs, hist.window), tol=tol)
    if report_dir is not None:
        try:
            title = f"Pool replay of {shown(Path(sacct_path).name)}"  # the file's name: no control characters
            write_report(results, report_dir, title=title, sizing=sized, compared=compared)
        except OSError as exc:
            raise click.BadParameter(shown(f"{report_dir}: {exc.strerror or exc}"), param_hint="--report") from None
    if plot_path is not None and compared is not None:
        try:
            bound_plot(compared, plot_path)
        except OSError as exc:
            raise click.BadParameter(shown(f"{plot_path}: {exc.strerror or exc}"), param_hint="--plot") from None
    owners = sum(j.project is not None for j in hist.jobs)
    on_mig = sum(j.profile is not None for j in hist.jobs)
    if as_json:
        click.echo(
            json.dumps(
                {
                    "window_seconds": hist.window,
                    "engine": "nodes" if on_nodes else "gpus",
                    "capacity": capacity,
                    "grace_seconds": grace,
                    "owner_jobs": owners,
                    "borrower_jobs": len(hist.jobs) - owners,
                    "mig_jobs": on_mig,
                    "skipped": dict(hist.skipped),
                    "results": [summary(r, base, prices) for _, r in results],
                    **({"sizing": sizing_summary(sized)} if sized is not None else {}),
                    **({"compare": compare_summary(compared)} if compared is not None else {}),
                },
                indent=2,
            )
        )
        return
    skipped = ", ".join(f"{n} {why}" for why, n in sorted(hist.skipped.items())) or "none"
    click.echo(
        f"history: {len(hist.jobs)} GPU jobs ({owners} of owners, {len(hist.jobs) - owners} of borrowers) "
        f"over {hist.window / 86400:.2f} days; left out: {skipped}"
    )
    click.echo("servers: " + ", ".join(f"{p} {n} GPUs" for p, n in capacity.items()) + f"; GraceTime {grace:g} s")
    if on_nodes:
        sizes = ", ".join(describe(nd) for nd in nodes)
        click.echo(f"placed on {len(nodes)} nodes (GPUs: {sizes}): best fit, whole nodes for bigger jobs, backfill")
        if on_mig:
            click.echo(f"{on_mig} jobs on MIG instances, each on free instances of its own profile")
    click.echo(
        f"{'':32} {'GPU time used':>13} {'vs dedicated':>12} {'owner wait p50':>15} {'p95':>10} "
        f"{'preemptions':>11} {'lost GPU-h':>10}"
    )
    for label, r in results:
        s = summary(r, base)
        ratio = f"{s['utilization_vs_dedicated']:.2f}" if s["utilization_vs_dedicated"] is not None else "-"
        click.echo(
            f"{label:32} {r.utilization:>13.1%} {ratio:>12} {s['owner_wait_p50_seconds']:>14,.0f}s "
            f"{s['owner_wait_p95_seconds']:>9,.0f}s {r.preemptions:>11,} {s['lost_gpu_hours']:>10,.1f}"
        )
    click.echo(
        "\nGPU-hours used / charged (UsageFactor): "
        + ", ".join(f"{name} x{factor:g}" for name, factor in dict(prices.values()).items())
    )
    for label, r in results:
        rows = summary(r, base, prices)["gpu_hours_by_tier"]
        used = sum(v["gpu_hours"] for v in rows.values())
        paid = sum(v["charged_gpu_hours"] for v in rows.values())
        cells = ", ".join(f"{t} {v['gpu_hours']:,.1f} / {v['charged_gpu_hours']:,.1f}" for t, v in rows.items())
        click.echo(f"{label:32} {used:>10,.1f} / {paid:>10,.1f}   ({cells or 'no GPU time'})")
    if lend:
        click.echo("\nlent to the inference tier (whole idle nodes, off-peak):")
        for label, r in results:
            if isinstance(r, NodeResult) and r.lending is not None:
                ls = r.lending
                click.echo(
                    f"{label:32} {ls.lent_gpu_seconds / 3600:>10,.1f} GPU-h in {ls.lends:,} leases, "
                    f"{ls.reclaims:,} taken back by Slurm's jobs"
                )
    if compared is not None:
        echo_compare(compared)
    elif sized is not None:
        echo_sizing(sized)


#: The share of draws a size passes on by default (--confidence).
DEFAULT_CONFIDENCE = 0.9


def check_bar(comparing: bool, slack: float | None, p95: float | None, confidence: float | None) -> None:
    """BadParameter when the owners' bar is given without --compare, or twice."""
    for value, hint in ((slack, "--owner-slack"), (p95, "--owner-p95"), (confidence, "--confidence")):
        if value is not None and not comparing:
            raise click.BadParameter(f"{value:g}: only --compare judges sizes over draws", param_hint=hint)
    if slack is not None and p95 is not None:
        raise click.BadParameter(
            f"{p95:g}: give either a slack over the dedicated p95 or an absolute p95, not both",
            param_hint="--owner-p95",
        )


def echo_sizing(sz: Sizing) -> None:
    """The pool sizes tried, and the answer."""
    best = sz.best
    click.echo("")
    if best is not None and sz.ratio is not None:
        click.echo(
            f"pool size: {best.gpus} GPUs are enough, {sz.ratio:.2f} of the {sz.dedicated_gpus} dedicated GPUs, "
            f"{best.result.utilization:.1%} busy (dedicated {sz.baseline.utilization:.1%})"
        )
    else:
        click.echo(f"pool size: no size passes, not even all {sz.dedicated_gpus} GPUs")
    click.echo(
        f"  bar: owners' p95 wait <= {sz.target_p95:,.0f} s (dedicated servers), "
        f">= {sz.borrowers_floor:,} borrower jobs done inside the window ({sz.borrowers_needed:,} on all servers "
        f"pooled, less {sz.tolerance * 100:g} %)"
    )
    click.echo(f"  {'GPUs':>6} {'GPU time used':>13} {'owner p95':>10} {'preemptions':>11}  result")
    for t in sz.trials:
        r = t.result
        click.echo(
            f"  {t.gpus:>6} {r.utilization:>13.1%} {r.wait_quantile(0.95):>9,.0f}s {r.preemptions:>11,}  "
            + ("passes" if t.passes else "fails: " + "; ".join(t.failures))
        )


def echo_compare(c: Comparison) -> None:
    """The three designs side by side."""
    ds = c.designs
    redrawn = f", then {c.draws - 1} with runtimes redrawn from its own" if c.draws > 1 else ""
    click.echo(f"\ndesigns compared over {c.draws} runtime draws (the history as recorded{redrawn}):")
    targets = c.targets or tuple(b.wait_quantile(0.95) for b in c.baselines)
    where = "" if c.owner_p95 is not None else f" (dedicated servers + {c.slack:,.0f} s, per draw)"
    need = draws_needed(c.draws, c.confidence)
    click.echo(
        f"  bar: owners' p95 wait <= {', '.join(f'{t:,.0f}' for t in targets)} s{where}, "
        f">= {', '.join(f'{borrower_floor(n, c.tolerance):,}' for n in c.needs)} "
        f"borrower jobs done inside the window ({', '.join(f'{n:,}' for n in c.needs)} on owned nodes, all servers, "
        f"less {c.tolerance * 100:g} %); a size passes on at least {need} of the {c.draws} draws "
        f"(confidence {c.confidence:g}), and so does every larger one"
    )
    bound = c.bound
    cells: dict[str, list[str]] = {k: [] for k in ROWS}
    for d in ds:
        i = d.chosen
        rr = d.ratio_range
        f = d.figures(i) if i is not None else None
        cells["GPUs needed"].append(str(d.gpus[i]) if i is not None else "none passes")
        cells["ratio to dedicated"].append(f"{d.gpus[i] / d.dedicated_gpus:.2f}" if i is not None else "-")
        cells["lower bound (any schedule)"].append("-" if bound is None else str(bound))
        cells["ratio to bound"].append(f"{d.gpus[i] / bound:.2f}" if i is not None and bound else "-")
        cells["draws passing"].append(f"{d.passing_share(i):.0%}" if i is not None else "-")
        cells["range over draws"].append(
            "-" if rr is None else f"{rr[0]:.2f}" if rr[0] == rr[1] else f"{rr[0]:.2f}-{rr[1]:.2f}"
        )
        oc = d.overcommit(i) if i is not None else None
        cells["overcommit"].append(f"{oc:.2f}" if oc is not None else "-")
        cells["owners' p95 (worst draw)"].append(f"{f['owner_wait_p95_seconds']:,.0f} s" if f else "-")
        cells["busy: Slurm jobs"].append(f"{f['utilization']:.1%}" if f else "-")
        cells["busy: + lent inference"].append(f"{f['busy_with_lent']:.1%}" if f else "-")
        cells["offered load"].append(f"{f['offered_load']:.1%}" if f and f["offered_load"] is not None else "-")
        cells["preemptions"].append(f"{f['preemptions']:,.0f}" if f else "-")
        cells["lost GPU-h"].append(f"{f['lost_gpu_hours']:,.1f}" if f else "-")
    per = [d.figures(d.chosen)["owner_wait_p95_seconds_per_project"] if d.chosen is not None else {} for d in ds]
    for p in sorted({p for got in per for p in got}):  # one project's burst can decide a size
        cells[shown(f"p95 {p}")[:26]] = [f"{got[p]:,.0f} s" if p in got else "-" for got in per]
    click.echo(f"  {'':26}" + "".join(f"{d.name:>22}" for d in ds))
    lent = cells["busy: Slurm jobs"] != cells["busy: + lent inference"]
    for row, vals in cells.items():
        if row == "busy: + lent inference" and not lent:
            continue
        click.echo(f"  {row:26}" + "".join(f"{v:>22}" for v in vals))
    if c.bounds:
        click.echo(
            f"  lower bound per draw: {', '.join(map(str, c.bounds))} GPUs (the fewest on which any schedule, knowing "
            f"every runtime, keeps the draw's bar); a size passing {need} draws has at least the {need}-th smallest"
        )
    for d in ds[1:]:
        click.echo(f"  {d.name}: what stops a smaller pool: {d.limit}")


ROWS = (
    "GPUs needed",
    "ratio to dedicated",
    "lower bound (any schedule)",
    "ratio to bound",
    "draws passing",
    "range over draws",
    "overcommit",
    "owners' p95 (worst draw)",
    "busy: Slurm jobs",
    "busy: + lent inference",
    "offered load",
    "preemptions",
    "lost GPU-h",
)
