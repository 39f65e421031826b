"""What the cluster benchmarks share: shell calls, percentiles and the result table."""

from __future__ import annotations

import statistics
import subprocess
from pathlib import Path


def p95(xs: list[float]) -> float:
    """The 95th percentile (the largest value when there are fewer than 20)."""
    return statistics.quantiles(xs, n=20, method="inclusive")[18] if len(xs) >= 2 else xs[0]


def sh(*argv: str, input: str | None = None) -> str:
    return subprocess.run(argv, input=input, capture_output=True, text=True, check=True).stdout.strip()


def interval_table(rows: list[tuple[str, list[float]]]) -> list[str]:
    """Markdown rows: p50, p95 and max of each interval, and its p50 over the first row's (the baseline)."""
    base = statistics.median(rows[0][1])
    out = ["| interval | p50 s | p95 s | max s | p50 ratio to baseline |", "|---|---|---|---|---|"]
    for label, xs in rows:
        out.append(
            f"| {label} | {statistics.median(xs):.2f} | {p95(xs):.2f} | {max(xs):.2f} | "
            f"{statistics.median(xs) / base:.2f} |"
        )
    return out


def emit(lines: list[str], out: Path) -> None:
    """Print a result section and write it to ``out`` (its folder made if need be)."""
    text = "\n".join(lines)
    print(text)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
