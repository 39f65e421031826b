"""``slurm-pool simulate --report DIR``: the replay's figures as PNG plots and a Markdown page.

Pure of Slurm: it takes the :class:`~slurm_pool.sim.engine.Result` of each
policy and writes ``busy.png`` (GPUs busy over time by tier, one panel per
policy), ``owner_waits.png`` (the
CDF of owners' waits) and ``report.md`` (the figures, and per-project waits).
Given a :class:`~slurm_pool.sim.sizing.Sizing` it also writes ``sizing.png``
(GPUs against owners' p95 wait, for every pool size tried) and its table;
given a :class:`~slurm_pool.sim.sizing_compare.Comparison`, ``sizing.png``
shows the three designs (dedicated, owned nodes, floating guarantees).
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any, Callable

from slurm_pool.outfiles import write_all
from slurm_pool.sim.engine import Result, quantile
from slurm_pool.sim.sizing import Sizing, borrowers_done_in_window
from slurm_pool.sim.sizing_compare import Comparison, Design, draws_needed

PLOTS = ("busy.png", "owner_waits.png")
SIZING_PLOT = "sizing.png"


def cdf(values: list[float]) -> tuple[list[float], list[float]]:
    """Sorted values and their cumulative share."""
    ordered = sorted(values)
    n = len(ordered)
    return ordered, [(i + 1) / n for i in range(n)]


def per_project(r: Result) -> dict[str, list[float]]:
    """Owners' waits by project."""
    out: dict[str, list[float]] = {}
    for project, wait in zip(r.owner_projects, r.owner_waits, strict=True):
        out.setdefault(project, []).append(wait)
    return out


def markdown(results: list[tuple[str, Result]], title: str) -> str:
    """The page: one row per policy, then owners' waits per project and policy."""
    base = results[0][1]
    lines = [
        f"# {title}",
        "",
        f"Window {base.window / 3600:,.1f} hours, {base.capacity} GPUs.",
        "",
        "![GPUs busy over time, by tier](busy.png)",
        "",
        "![Owners' waits](owner_waits.png)",
        "",
        "| policy | GPU time used | vs first row | owner wait p50 (s) | p95 (s) | preemptions | lost GPU-h |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for label, r in results:
        ratio = f"{r.utilization / base.utilization:.2f}" if base.utilization else "-"
        lines.append(
            f"| {label} | {r.utilization:.1%} | {ratio} | {r.wait_quantile(0.5):,.0f} | {r.wait_quantile(0.95):,.0f} "
            f"| {r.preemptions:,} | {r.lost_gpu_seconds / 3600:,.1f} |"
        )
    projects = sorted({p for _, r in results for p in r.owner_projects})
    if projects:
        lines += ["", "## Owners' waits per project (p50 / p95, seconds)", ""]
        lines.append("| project | jobs | " + " | ".join(label for label, _ in results) + " |")
        lines.append("|---|---:|" + "---:|" * len(results))
        by = [per_project(r) for _, r in results]
        for p in projects:
            cells = []
            for waits in by:
                w = waits.get(p, [])
                cells.append(f"{quantile(w, 0.5):,.0f} / {quantile(w, 0.95):,.0f}" if w else "-")
            lines.append(f"| {p} | {len(by[0].get(p, []))} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def sizing_markdown(sz: Sizing) -> str:
    """The pool sizes tried, smallest passing one in bold."""
    best = sz.best
    answer = (
        f"**{best.gpus} GPUs are enough: {sz.ratio:.2f} of the {sz.dedicated_gpus} dedicated GPUs**, "
        f"{best.result.utilization:.1%} busy (dedicated: {sz.baseline.utilization:.1%})."
        if best is not None and sz.ratio is not None
        else f"No pool size passes, not even all {sz.dedicated_gpus} GPUs."
    )
    lines = [
        "## Pool size",
        "",
        f"The smallest pool whose owners' p95 wait is no worse than on dedicated servers "
        f"({sz.target_p95:,.0f} s) and whose borrowers get as many jobs done inside the window as on all "
        f"servers ({sz.borrowers_needed:,}), less a {sz.tolerance * 100:g} % tolerance (at least "
        f"{sz.borrowers_floor:,}).  {answer}",
        "",
        f"![GPUs against owners' p95 wait]({SIZING_PLOT})",
        "",
        "| GPUs | nodes | GPU time used | owner wait p95 (s) | preemptions | lost GPU-h | borrower jobs done "
        "| fails on |",
        "|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for t in sz.trials:
        gpus = f"**{t.gpus}**" if t is best else str(t.gpus)
        r = t.result
        lines.append(
            f"| {gpus} | {len(t.nodes)} | {r.utilization:.1%} | {r.wait_quantile(0.95):,.0f} | {r.preemptions:,} "
            f"| {r.lost_gpu_seconds / 3600:,.1f} | {borrowers_done_in_window(r):,} | {'; '.join(t.failures) or '-'} |"
        )
    return "\n".join(lines) + "\n"


def compare_markdown(c: Comparison) -> str:
    """The three designs side by side: each one's answer over the draws."""
    lines = [
        "## Designs compared",
        "",
        f"Dedicated servers, owned nodes and floating guarantees on the same history, over {c.draws} runtime "
        f"draws (the history as recorded, then runtimes redrawn from its own).  Bar: {c.bar()}.  A size passes "
        f"when it passes on at least {draws_needed(c.draws, c.confidence)} of the {c.draws} draws (confidence "
        f"{c.confidence:g}); the answer is the smallest size whose larger sizes all pass too.  Lower bound: the "
        f"fewest GPUs on which any schedule, knowing every runtime, keeps the bar (per draw: "
        f"{', '.join(map(str, c.bounds)) or '-'}; see docs/guarantees.md).",
        "",
        f"![GPUs against owners' p95 wait, three designs]({SIZING_PLOT})",
        "",
        "| design | GPUs | ratio to dedicated | range over draws | overcommit | owners' p95 (s, worst draw) "
        "| busy: Slurm / + lent | preemptions | lost GPU-h | what stops a smaller pool | lower bound "
        "| ratio to bound | draws passing |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|",
    ]
    bound = c.bound
    shown_bound = "-" if bound is None else str(bound)
    for d in c.designs:
        i, rr = d.chosen, d.ratio_range
        span = "-" if rr is None else f"{rr[0]:.2f}" if rr[0] == rr[1] else f"{rr[0]:.2f}-{rr[1]:.2f}"
        if i is None:
            lines.append(
                f"| {d.name} | none passes | - | {span} | - | - | - | - | - | {d.limit} | {shown_bound} | - | - |"
            )
            continue
        f = d.figures(i)
        oc = f"{f['overcommit']:.2f}" if f["overcommit"] is not None else "-"
        ratio = f"{f['gpus'] / bound:.2f}" if bound else "-"
        lines.append(
            f"| {d.name} | {f['gpus']} | {f['gpus'] / d.dedicated_gpus:.2f} | {span} | {oc} | "
            f"{f['owner_wait_p95_seconds']:,.0f} | {f['utilization']:.1%} / {f['busy_with_lent']:.1%} | "
            f"{f['preemptions']:,.0f} | {f['lost_gpu_hours']:,.1f} | {d.limit} | {shown_bound} | "
            f"{ratio} | {f['draws_passing_share']:.0%} |"
        )
    per = {d.name: d.figures(d.chosen)["owner_wait_p95_seconds_per_project"] for d in c.designs if d.chosen is not None}
    projects = sorted({p for got in per.values() for p in got})
    if projects:
        lines += ["", "Owners' p95 wait per project at each answer (seconds, worst draw):", ""]
        lines.append("| project | " + " | ".join(per) + " |")
        lines.append("|---|" + "---:|" * len(per))
        for p in projects:
            lines.append(f"| {p} | " + " | ".join(f"{got[p]:,.0f}" if p in got else "-" for got in per.values()) + " |")
    return "\n".join(lines) + "\n"


def _plot(
    size: tuple[float, float],
    xlabel: str,
    ylabel: str,
    draw: Callable[[Any], None],
    rows: int = 1,
    legend: str = "lower right",
) -> bytes:
    """One PNG's bytes: ``draw`` fills the axes (a list of them, one per row, when ``rows`` > 1)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, grid = plt.subplots(rows, 1, figsize=size, dpi=100, sharex=True, squeeze=False)
    axes = [row[0] for row in grid]
    draw(axes[0] if rows == 1 else axes)
    for ax in axes:
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc=legend)
    axes[-1].set_xlabel(xlabel)
    fig.tight_layout()
    png = io.BytesIO()
    fig.savefig(png, format="png")
    plt.close(fig)
    return png.getvalue()


def tier_steps(r: Result) -> tuple[list[float], list[float], list[float]]:
    """``(hours, guaranteed GPUs busy, other GPUs busy)`` as steps (GPU-equivalents), from the tier timeline."""
    xs, guaranteed, borrowed = [], [], []
    for t, g, b in r.tier_timeline:
        xs.append(t / 3600)
        guaranteed.append(g)
        borrowed.append(b)
    if xs:
        xs.append(r.window / 3600)
        guaranteed.append(guaranteed[-1])
        borrowed.append(borrowed[-1])
    return xs, guaranteed, borrowed


def sizing_curves(sizings: list[tuple[str, Sizing]], path: str | Path) -> Path:
    """Several workloads on one plot: pool GPUs and owners' p95, both as ratios to dedicated servers."""

    def draw(ax: Any) -> None:
        for label, sz in sizings:
            xs = [t.gpus / sz.dedicated_gpus for t in sz.trials]
            ys = [t.result.wait_quantile(0.95) / sz.target_p95 if sz.target_p95 else 0.0 for t in sz.trials]
            (line,) = ax.plot(xs, ys, "-", linewidth=1, label=label)
            if sz.best is not None:
                i = sz.trials.index(sz.best)
                ax.plot([xs[i]], [ys[i]], "o", color=line.get_color())
        ax.axhline(1.0, color="grey", linestyle="--", linewidth=0.8, label="owners' p95 on dedicated servers")
        ax.axvline(0.5, color="grey", linestyle=":", linewidth=0.8, label="the promise: half the GPUs")
        ax.set_yscale("symlog", linthresh=0.01)
        ax.set_ylim(bottom=0)

    png = _plot((7, 4.5), "pool GPUs / dedicated GPUs", "owners' p95 wait / dedicated p95", draw)
    target = Path(path)
    return write_all(target.parent, {target.name: png}, option="--out")[0]


DESIGN_STYLE = {"dedicated": "s", "owned": ".-", "floating": ".--"}


def design_points(d: Design, scale_gpus: float = 1.0, scale_p95: float = 1.0) -> tuple[list[float], list[float]]:
    """Each size's GPUs and owners' worst p95 over the draws, divided by the scales."""
    xs = [g / scale_gpus for g in d.gpus]
    ys = [max(dr[i].result.wait_quantile(0.95) for dr in d.trials) / scale_p95 for i in range(len(xs))]
    return xs, ys


def draw_designs(ax: Any, c: Comparison, color: str | None = None, relative: bool = False) -> None:
    """The three designs of ``c`` on ``ax``: a line per design, a dot at each design's answer; labelled
    by design unless ``color`` is given (then the caller labels)."""
    ded = c.designs[0].dedicated_gpus
    target = max(b.wait_quantile(0.95) for b in c.baselines)
    gx, py = (float(ded), (target or 1.0)) if relative else (1.0, 3600.0)
    for d in c.designs:
        xs, ys = design_points(d, gx, py)
        (line,) = ax.plot(xs, ys, DESIGN_STYLE[d.name], linewidth=1, color=color, label=None if color else d.name)
        if d.chosen is not None:
            ax.plot([xs[d.chosen]], [ys[d.chosen]], "o", color=line.get_color())


def design_curves(comparisons: list[tuple[str, Comparison]], path: str | Path) -> Path:
    """Several workloads' three designs on one plot: GPUs and owners' p95 as ratios to dedicated servers
    (a colour per workload, a line style per design)."""

    def draw(ax: Any) -> None:
        for k, (label, c) in enumerate(comparisons):
            draw_designs(ax, c, color=f"C{k}", relative=True)
            ax.plot([], [], "-", color=f"C{k}", label=label)
        for name, style in DESIGN_STYLE.items():
            ax.plot([], [], style, color="black", linewidth=1, label=name)
        ax.axhline(1.0, color="grey", linestyle="--", linewidth=0.8, label="owners' p95 on dedicated servers")
        ax.axvline(0.5, color="grey", linestyle=":", linewidth=0.8, label="the promise: half the GPUs")
        ax.set_yscale("symlog", linthresh=0.01)
        ax.set_ylim(bottom=0)

    png = _plot(
        (9, 6), "pool GPUs / dedicated GPUs", "owners' p95 wait / dedicated p95 (worst draw)", draw, legend="lower left"
    )
    target = Path(path)
    return write_all(target.parent, {target.name: png}, option="--out")[0]


def bound_plot(c: Comparison, path: str | Path) -> Path:
    """``simulate --compare --plot FILE``: GPUs against owners' p95 per design, a light line per draw and a
    bold one for the worst draw, the bar and the lower bound as lines; written whole or not at all."""

    def draw(ax: Any) -> None:
        for k, d in enumerate(c.designs[1:]):
            color = f"C{k}"
            for trials in d.trials:
                ax.plot(d.gpus, [t.result.wait_quantile(0.95) / 3600 for t in trials], "-", color=color, alpha=0.25)
            xs, ys = design_points(d, 1.0, 3600.0)
            ax.plot(xs, ys, DESIGN_STYLE[d.name], color=color, linewidth=1.5, label=f"{d.name} (worst draw)")
            if d.chosen is not None:
                ax.plot([xs[d.chosen]], [ys[d.chosen]], "o", color=color)
        ded = c.designs[0]
        ax.plot(
            [ded.dedicated_gpus],
            [max(b.wait_quantile(0.95) for b in c.baselines) / 3600],
            "s",
            color="black",
            label="dedicated servers",
        )
        if c.targets:
            ax.axhline(max(c.targets) / 3600, color="grey", linestyle="--", linewidth=0.8, label="the bar (worst draw)")
        if c.bound is not None:
            ax.axvline(c.bound, color="black", linestyle=":", linewidth=1, label=f"lower bound: {c.bound} GPUs")
        ax.set_ylim(bottom=0)

    png = _plot((7, 4.5), "GPUs in the pool", "owners' p95 wait (hours)", draw, legend="upper right")
    target = Path(path)
    return write_all(target.parent, {target.name: png}, option="--plot")[0]


def write_report(
    results: list[tuple[str, Result]],
    directory: str | Path,
    title: str = "Pool replay",
    sizing: Sizing | None = None,
    compared: Comparison | None = None,
) -> list[Path]:
    """Write the plots and ``report.md`` into ``directory``, every file or none; return the paths written."""
    return write_all(Path(directory), report_files(results, title, sizing, compared), option="--report")


def report_files(
    results: list[tuple[str, Result]],
    title: str = "Pool replay",
    sizing: Sizing | None = None,
    compared: Comparison | None = None,
) -> dict[str, bytes | str]:
    """The plots (PNG bytes) and ``report.md`` (text), by file name."""
    if not results:
        raise ValueError("results: nothing to report")
    files: dict[str, bytes | str] = {}

    def plot(
        name: str,
        size: tuple[float, float],
        xlabel: str,
        ylabel: str,
        draw: Callable[[Any], None],
        rows: int = 1,
        legend: str = "lower right",
    ) -> None:
        files[name] = _plot(size, xlabel, ylabel, draw, rows, legend)

    def busy(axes: Any) -> None:
        for ax, (label, r) in zip(axes if len(results) > 1 else [axes], results, strict=True):
            xs, guaranteed, borrowed = tier_steps(r)
            ax.fill_between(xs, 0, guaranteed, step="post", alpha=0.7, label="owners, guaranteed tier")
            on_top = [g + b for g, b in zip(guaranteed, borrowed, strict=True)]
            ax.fill_between(xs, guaranteed, on_top, step="post", alpha=0.7, label="borrowed (preemptible)")
            ax.axhline(r.capacity, color="grey", linestyle="--", linewidth=0.8, label="capacity")
            ax.set_title(label.replace("**", ""), fontsize=8)

    def waits(ax: Any) -> None:
        for label, r in results:
            if r.owner_waits:
                minutes, share = cdf([w / 60 for w in r.owner_waits])
                ax.step(minutes, share, where="post", label=label.replace("**", ""), linewidth=1)
        ax.set_xscale("symlog", linthresh=1)

    def sizes(ax: Any) -> None:
        assert sizing is not None
        for passes, marker in ((True, "o"), (False, "x")):
            these = [t for t in sizing.trials if t.passes is passes]
            if these:
                xs = [t.gpus for t in these]
                ax.plot(
                    xs,
                    [t.result.wait_quantile(0.95) / 3600 for t in these],
                    marker,
                    label="passes" if passes else "fails",
                )
        ax.axhline(sizing.target_p95 / 3600, color="grey", linestyle="--", linewidth=0.8, label="dedicated p95")
        ax.axvline(sizing.dedicated_gpus, color="grey", linestyle=":", linewidth=0.8, label="dedicated GPUs")

    plot(PLOTS[0], (9, 1.2 + 1.8 * len(results)), "hours into the window", "GPUs busy", busy, rows=len(results))
    plot(PLOTS[1], (6, 4), "owner job wait (minutes)", "share of owner jobs", waits)

    def designs(ax: Any) -> None:
        assert compared is not None
        draw_designs(ax, compared)
        target = max(b.wait_quantile(0.95) for b in compared.baselines)
        ax.axhline(target / 3600, color="grey", linestyle=":", linewidth=0.8, label="dedicated p95 (worst draw)")

    if compared is not None:
        plot(
            SIZING_PLOT,
            (6, 4),
            "GPUs in the pool",
            "owners' p95 wait, worst draw (hours)",
            designs,
            legend="upper right",
        )
    elif sizing is not None:
        plot(SIZING_PLOT, (6, 4), "GPUs in the pool", "owners' p95 wait (hours)", sizes)

    files["report.md"] = (
        markdown(results, title)
        + ("\n" + compare_markdown(compared) if compared is not None else "")
        + ("\n" + sizing_markdown(sizing) if sizing is not None else "")
    )
    return files
