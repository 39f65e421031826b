"""The Grafana dashboard's panels as PNGs, drawn with matplotlib from Prometheus' query API.

For a look at the dashboard (``docs/grafana/slurm-pool.json``) where no
Grafana runs: every panel with targets becomes ``<id>-<title>.png``, one line
per series of its range queries.  ``$__rate_interval``, ``$__interval``,
``$__range`` and the dashboard's own variables (their current value) are
expanded as Grafana would with fixed values.  matplotlib is a test/ops extra,
imported only here.
"""

from __future__ import annotations

import datetime
import io
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping

import click

from slurm_pool.adapters.prometheus import api, matrix
from slurm_pool.clitypes import Finite
from slurm_pool.errors import InputError
from slurm_pool.outfiles import write_all
from slurm_pool.text import shown
from slurm_pool.textio import read_json

_LEGEND = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
_SLUG = re.compile(r"[^a-z0-9]+")
#: Grafana units as a panel title says them.
UNITS = {"percentunit": "ratio", "ops": "per second", "short": "", "none": ""}


@dataclass(frozen=True)
class Rendered:
    """One panel drawn: its title, the PNG, and how many series it plotted."""

    title: str
    path: Path
    series: int


def load_dashboard(path: str | Path) -> dict[str, Any]:
    """A dashboard JSON file (a Grafana export with ``panels``)."""
    data = read_json(str(path))
    if not isinstance(data, dict) or not isinstance(data.get("panels"), list):
        raise InputError(f"{path}: no 'panels' list; not a Grafana dashboard")
    return data


def panels(dashboard: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel with targets, rows' nested panels included, in order."""
    for p in dashboard.get("panels") or []:
        if p.get("type") == "row":
            yield from panels({"panels": p.get("panels") or []})
        elif p.get("targets"):
            yield p


def variables(dashboard: Mapping[str, Any], rate_interval: str = "1m", range_: str = "1h") -> dict[str, str]:
    """Values for the dashboard's variables: its templating's current values and Grafana's built-ins."""
    out = {"__rate_interval": rate_interval, "__interval": rate_interval, "__range": range_}
    for var in (dashboard.get("templating") or {}).get("list") or []:
        current = (var.get("current") or {}).get("value")
        if var.get("name") and isinstance(current, str):
            out[var["name"]] = current
    return out


def expand(expr: str, values: Mapping[str, str]) -> str:
    """``$name`` and ``${name}`` replaced by ``values`` (longest names first)."""
    for name in sorted(values, key=len, reverse=True):
        expr = expr.replace("${" + name + "}", values[name]).replace("$" + name, values[name])
    return expr


def legend(fmt: str, labels: Mapping[str, str]) -> str:
    """Grafana's ``{{label}}`` legend format; where that is blank, the labels themselves."""
    text = _LEGEND.sub(lambda m: labels.get(m.group(1), ""), fmt).strip()
    if text:
        return text
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()) if k != "__name__") or "value"


def plot_text(text: str) -> str:
    """Label values (node names, reasons) as matplotlib shows them literally: controls made visible, ``$``
    escaped (a pair would be read as mathtext, and a malformed one ends the drawing), and a leading ``_``
    kept (matplotlib leaves such a label out of the legend)."""
    out = shown(text).replace("$", r"\$")
    return " " + out if out.startswith("_") else out


def _filename(panel: Mapping[str, Any]) -> str:
    slug = _SLUG.sub("-", str(panel.get("title", "panel")).lower()).strip("-") or "panel"
    return f"{int(panel.get('id') or 0):02d}-{slug[:60]}.png"


def render_panels(
    dashboard: Mapping[str, Any],
    prometheus_url: str,
    out_dir: str | Path,
    *,
    range_s: float = 3600.0,
    end: float | None = None,
    rate_interval: str = "1m",
) -> list[Rendered]:
    """Draw every panel of ``dashboard`` over the last ``range_s`` seconds into ``out_dir`` (every PNG, or none)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt

    out = Path(out_dir)
    end = time.time() if end is None else end
    start = end - range_s
    step = max(1.0, range_s / 300)
    values = variables(dashboard, rate_interval, f"{int(range_s)}s")
    done, pngs = [], {}
    for panel in panels(dashboard):
        fig, ax = plt.subplots(figsize=(8, 3.5), dpi=100)
        n = 0
        for target in panel["targets"]:
            expr = expand(str(target.get("expr", "")), values)
            data = api(
                prometheus_url, "query_range", {"query": expr, "start": str(start), "end": str(end), "step": str(step)}
            )
            for labels, pts in matrix(data):
                if not pts:
                    continue
                xs = [mdates.date2num(datetime.datetime.fromtimestamp(t)) for t, _ in pts]
                label = legend(str(target.get("legendFormat", "")), labels)
                ax.plot(xs, [v for _, v in pts], label=plot_text(label), marker=".", markersize=3, linewidth=1)
                n += 1
        unit = ((panel.get("fieldConfig") or {}).get("defaults") or {}).get("unit", "")
        unit = UNITS.get(unit, unit)
        ax.set_title(str(panel.get("title", "")) + (f" ({unit})" if unit else ""), fontsize=10)
        ax.set_xlim(
            mdates.date2num(datetime.datetime.fromtimestamp(start)),
            mdates.date2num(datetime.datetime.fromtimestamp(end)),
        )
        ax.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M:%S"))
        ax.tick_params(labelsize=8)
        ax.grid(alpha=0.3)
        if n:
            ax.legend(fontsize=7, loc="upper left")
        else:
            ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)
        fig.tight_layout()
        png = io.BytesIO()
        fig.savefig(png, format="png")
        plt.close(fig)
        pngs[_filename(panel)] = png.getvalue()
        done.append(Rendered(str(panel.get("title", "")), out / _filename(panel), n))
    write_all(out, pngs, option="--out")
    return done


@click.command("dashboard-png")
@click.argument("dashboard", type=click.Path(exists=True, dir_okay=False))
@click.option("--prometheus", "prometheus_url", required=True, help="Prometheus base URL, e.g. http://127.0.0.1:9090.")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False), help="Directory for the PNGs.")
@click.option("--range", "range_s", default=3600.0, show_default=True, type=Finite(min=1), help="Seconds.")
@click.option("--rate-interval", default="1m", show_default=True, help="What $__rate_interval stands for.")
def dashboard_png(dashboard: str, prometheus_url: str, out_dir: str, range_s: float, rate_interval: str) -> None:
    """Draw each panel of a Grafana dashboard as a PNG from Prometheus' query API (no Grafana needed)."""
    for r in render_panels(
        load_dashboard(dashboard), prometheus_url, out_dir, range_s=range_s, rate_interval=rate_interval
    ):
        click.echo(f"{shown(r.path)}\t{r.series} series\t{shown(r.title)}")
