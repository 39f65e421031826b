"""Prometheus' HTTP API: instant and range queries, as plain data.

The one place slurm-pool reads Prometheus (the dashboard's PNGs, the bridge's
inference-demand history).  A refused query, an HTTP error or an unreachable
server is a :class:`QueryError` naming the query.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Mapping

from slurm_pool.errors import PoolError
from slurm_pool.text import shown, strict_float


class QueryError(PoolError):
    """Prometheus refused a query, or could not be reached."""


def api(prometheus_url: str, endpoint: str, params: Mapping[str, str], timeout: float = 10.0) -> Any:
    """``data`` of one Prometheus API call; a failed or refused query is a :class:`QueryError`."""
    url = f"{prometheus_url.rstrip('/')}/api/v1/{endpoint}?{urllib.parse.urlencode(params)}"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310 -- the operator's Prometheus
            body = json.loads(resp.read().decode())
    except urllib.error.HTTPError as exc:
        try:
            body = json.loads(exc.read().decode())
        except ValueError:
            raise QueryError(f"{url}: HTTP {exc.code}") from None
    except (OSError, ValueError) as exc:
        raise QueryError(f"{prometheus_url}: {exc}") from None
    if not isinstance(body, dict):
        raise QueryError(f"{params.get('query', endpoint)!r}: the answer is not a JSON object")
    if body.get("status") != "success":
        raise QueryError(f"{params.get('query', endpoint)!r}: {body.get('errorType')}: {body.get('error')}")
    return body["data"]


#: Prometheus refuses a range query of more than 11,000 points per series.
MAX_POINTS = 11000


def matrix(data: Any) -> list[tuple[dict[str, str], list[tuple[float, float]]]]:
    """Each series of a ``query_range`` result's matrix: its labels and its ``(time, value)`` samples.

    NaN and infinite samples are left out; anything not shaped like Prometheus' matrix, or a
    number Prometheus would not print (``1_0``, other scripts' digits), is a :class:`QueryError`.
    """
    if not isinstance(data, dict) or data.get("resultType") != "matrix":
        raise QueryError(
            f"expected a matrix, got {shown(data.get('resultType') if isinstance(data, dict) else data)!r}"
        )
    result = data.get("result") or []
    if not isinstance(result, list):
        raise QueryError("the matrix's result is not a list")
    out = []
    for series in result:
        values = series.get("values") if isinstance(series, dict) else None
        labels = series.get("metric") if isinstance(series, dict) else None
        if not isinstance(values, list) or not isinstance(labels or {}, dict):
            raise QueryError(f"a series without labels and a list of values: {shown(series)[:200]}")
        points = []
        for pair in values:
            if not (isinstance(pair, list) and len(pair) == 2):
                raise QueryError(f"a sample is not [time, value]: {shown(pair)[:200]}")
            t, v = pair
            if v in _NOT_FINITE:
                continue
            try:
                points.append((strict_float(t, "time"), strict_float(v, "value")))
            except ValueError as exc:
                raise QueryError(f"a sample Prometheus would not print: {shown(exc)}") from None
        out.append(({str(k): str(x) for k, x in (labels or {}).items()}, points))
    return out


def range_samples(data: Mapping[str, Any], *, combine: str = "sum") -> list[tuple[float, float]]:
    """``(time, value)`` of a ``query_range`` result's matrix, series summed (or maxed) per time (see :func:`matrix`)."""
    per_time: dict[float, list[float]] = {}
    for _labels, points in matrix(data):
        for t, v in points:
            per_time.setdefault(t, []).append(v)
    pick = max if combine == "max" else sum
    return sorted((t, float(pick(vs))) for t, vs in per_time.items())


#: How Prometheus prints the samples it has no finite value for.
_NOT_FINITE = frozenset({"NaN", "+Inf", "-Inf", "Inf"})


def query_range(
    prometheus_url: str, query: str, start: float, end: float, step: float, timeout: float = 30.0
) -> list[tuple[float, float]]:
    """``query`` over ``[start, end]``, series summed per time; long ranges go in several calls."""
    out: list[tuple[float, float]] = []
    t = start
    while t <= end:
        stop = min(end, t + step * (MAX_POINTS - 1))
        params = {"query": query, "start": f"{t:.3f}", "end": f"{stop:.3f}", "step": f"{step:g}"}
        out += range_samples(api(prometheus_url, "query_range", params, timeout))
        t = stop + step
    return out
