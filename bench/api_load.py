#!/usr/bin/env python3
"""Load on the REST API of ``slurm-pool serve`` against the local cluster, and the Slurm calls it makes (issue 27).

Two phases in one run, each ``--seconds`` long, against the same running
cluster (``SLURM_CONF``; ``bench/run_all.py`` starts one, or ``--start-cluster``):

1. **baseline** -- the exporter's collector alone (``build_registry``, as
   ``slurm-pool exporter`` serves it), its ``/metrics`` polled by the same clients;
2. **service** -- ``create_app`` under uvicorn (as ``slurm-pool serve`` runs it)
   in this process on a free port, each client polling ``/api/v1/pool`` and
   ``/api/v1/jobs`` with a token minted for one of the pool's users.

Both read Slurm through a counting wrapper around the Runner, so the Slurm
command calls per second of each are measured in the same run.  The clients
(``--clients``, each its own connection, one round every ``--interval``
seconds) run in a child process so their work does not share this one's GIL.
Reported: p50/p95 latency, requests/s, Slurm calls/s (service / exporter),
and the service's reads of the pool per refresh interval (goal: at most one,
whatever the number of clients; p95 under 100 ms).

    python3 bench/api_load.py [--seconds 60] [--clients 200] [--interval 1]

Prints one JSON document, writes ``bench/results/api_load-<slurm>.md``; exits 1
when a goal is missed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import random
import secrets
import socket
import statistics
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any, Sequence

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from timing import emit, p95  # noqa: E402

from slurm_pool.adapters.runner import Result, Runner, SubprocessRunner  # noqa: E402

API_PATHS = ("/api/v1/pool", "/api/v1/jobs")
#: The goals of issue 27.
GOAL_P95_MS = 100.0
GOAL_READS_PER_INTERVAL = 1.0


class Counting:
    """A Runner that counts the commands it runs, by program and first argument, with their times."""

    def __init__(self, inner: Runner):
        self.inner = inner
        self.calls: Counter[str] = Counter()
        self.reads: list[float] = []  # monotonic time of each ``squeue`` (one per read of the pool)
        self._lock = threading.Lock()

    def run(
        self, argv: Sequence[str], *, check: bool = True, input: str | None = None, timeout: float | None = None
    ) -> Result:
        with self._lock:
            self.calls[" ".join(list(argv)[:2])] += 1
            if argv and argv[0] == "squeue":
                self.reads.append(time.monotonic())
        return self.inner.run(argv, check=check, input=input, timeout=timeout)

    def total(self) -> int:
        with self._lock:
            return sum(self.calls.values())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# -- the clients (child process) ------------------------------------------------------------------------------
async def _client(base: str, paths: Sequence[str], token: str | None, until: float, interval: float, out: list) -> None:
    import httpx

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with httpx.AsyncClient(base_url=base, headers=headers, timeout=30.0) as client:
        await asyncio.sleep(random.uniform(0, interval))  # spread the clients over the interval
        while time.monotonic() < until:
            start = time.monotonic()
            for path in paths:
                t = time.perf_counter()
                try:
                    code = (await client.get(path)).status_code
                except httpx.HTTPError:
                    code = 0
                out.append((path, time.perf_counter() - t, code))
            await asyncio.sleep(max(0.0, interval - (time.monotonic() - start)))


async def _load(base: str, paths: Sequence[str], tokens: list[str | None], seconds: float, interval: float) -> list:
    out: list = []
    until = time.monotonic() + seconds
    await asyncio.gather(*(_client(base, paths, t, until, interval, out) for t in tokens))
    return out


def _child(conn: Any, base: str, paths: Sequence[str], tokens: list[str | None], seconds: float, interval: float):
    started = time.monotonic()
    samples = asyncio.run(_load(base, paths, tokens, seconds, interval))
    conn.send({"samples": samples, "seconds": time.monotonic() - started})
    conn.close()


def drive(base: str, paths: Sequence[str], tokens: list[str | None], seconds: float, interval: float) -> dict:
    """Run the clients in a child process; their samples ``(path, seconds, status)`` and wall time."""
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(child, base, paths, tokens, seconds, interval), daemon=True)
    proc.start()
    child.close()
    got = parent.recv()
    proc.join(timeout=30)
    return got


def summary(got: dict, counter: Counting, calls_before: int, reads_from: int, refresh: float | None) -> dict:
    samples = got["samples"]
    secs = got["seconds"]
    lat = [s for _, s, code in samples if code == 200]
    calls = counter.total() - calls_before
    reads = counter.reads[reads_from:]
    gaps = [b - a for a, b in zip(reads, reads[1:], strict=False)]
    out = {
        "requests": len(samples),
        "errors": dict(Counter(str(code) for _, _, code in samples if code != 200)),
        "seconds": round(secs, 2),
        "requests_per_s": round(len(samples) / secs, 1) if secs else 0.0,
        "p50_ms": round(statistics.median(lat) * 1000, 2) if lat else None,
        "p95_ms": round(p95(lat) * 1000, 2) if lat else None,
        "slurm_calls": calls,
        "slurm_calls_per_s": round(calls / secs, 3) if secs else 0.0,
        "pool_reads": len(reads),
        "shortest_gap_between_reads_s": round(min(gaps), 3) if gaps else None,
    }
    if refresh:
        intervals = max(1.0, secs / refresh)
        out["refresh_seconds"] = refresh
        out["slurm_calls_per_refresh_interval"] = round(calls / intervals, 2)
        # more than one read in a window of refresh_seconds is what the goal forbids; a gap shorter than the
        # interval shows it whatever the run's length (a 5 s run has fewer reads than one per interval)
        out["reads_per_refresh_interval"] = round(len(reads) / intervals, 2)
        out["more_than_one_read_per_interval"] = bool(gaps) and min(gaps) < refresh * 0.8
    return out


# -- the two phases -------------------------------------------------------------------------------------------
def phase_exporter(opts: argparse.Namespace, lend: str) -> dict:
    """The baseline: the exporter's collector alone, its /metrics polled by the same clients."""
    from prometheus_client import start_http_server

    from slurm_pool.metrics.cli import build_registry

    counter = Counting(SubprocessRunner(default_timeout=20.0))
    registry = build_registry(counter, lend_partition=lend, process_metrics=False)
    port = free_port()
    server, thread = start_http_server(port, addr="127.0.0.1", registry=registry)
    try:
        tokens: list[str | None] = [None] * opts.clients
        before, reads_from = counter.total(), len(counter.reads)
        got = drive(f"http://127.0.0.1:{port}", ["/metrics"], tokens, opts.seconds, opts.interval)
        return {"calls": dict(counter.calls), **summary(got, counter, before, reads_from, None)}
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def phase_service(opts: argparse.Namespace, spec: Any, key: bytes, users: list[str]) -> dict:
    """The service in this process (uvicorn on a free port, as ``slurm-pool serve`` configures it)."""
    import httpx

    from slurm_pool.adapters.slurm import SlurmClient
    from slurm_pool.spec.console import Console
    from slurm_pool.web.actions import UserCommands
    from slurm_pool.web.app import create_app
    from slurm_pool.web.identity import Authenticator, mint, user_exists
    from slurm_pool.web.server import build_server

    console = spec.console or Console()
    counter = Counting(SubprocessRunner(default_timeout=20.0))
    auth = Authenticator(key, console, check_password=lambda u, p: False, user_exists=user_exists)
    app = create_app(spec, slurm=SlurmClient(counter), auth=auth, commands=UserCommands(key))
    port = free_port()
    server = build_server(app, "127.0.0.1", port, console, log_level="warning")
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while not server.started:
            if time.monotonic() > deadline or not thread.is_alive():
                raise SystemExit("the service did not start")
            time.sleep(0.05)
        base = f"http://127.0.0.1:{port}"
        lifespan = int(opts.seconds) + 300
        tokens: list[str | None] = [mint(key, users[i % len(users)], lifespan=lifespan) for i in range(opts.clients)]
        # counted from the first request on, its first read of Slurm included (the exporter's first scrape is too)
        before, reads_from = counter.total(), len(counter.reads)
        warm = httpx.get(base + "/api/v1/pool", headers={"Authorization": f"Bearer {tokens[0]}"}, timeout=60)
        if warm.status_code != 200:
            raise SystemExit(f"the service answered {warm.status_code}: {warm.text[:300]}")
        got = drive(base, API_PATHS, tokens, opts.seconds, opts.interval)
        refresh = float(console.refresh_seconds)
        return {"calls": dict(counter.calls), **summary(got, counter, before, reads_from, refresh)}
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def bench_key(path: str | None) -> tuple[bytes, str]:
    """The cluster's JWT key (tokens then work with Slurm too), else a fresh one (reads need only the service)."""
    from slurm_pool.web.identity import load_key

    state = os.environ.get("SLURM_POOL_STATE_DIR")
    path = path or (str(Path(state) / "etc" / "jwt_hs256.key") if state else None)
    if path and Path(path).exists():
        return load_key(path), "the cluster's"
    return secrets.token_bytes(32), "a fresh"


def markdown(report: dict, opts: argparse.Namespace) -> list[str]:
    ex, sv = report["exporter"], report["service"]

    def ratio(a: Any, b: Any) -> str:
        return f"{a / b:.2f}" if isinstance(a, (int, float)) and b else "-"

    lines = [
        f"## REST API under load on Slurm {report['slurm']} (issue 27)\n",
        f"Command: `python3 bench/api_load.py --seconds {opts.seconds:g} --clients {opts.clients} "
        f"--interval {opts.interval:g}` (the local cluster's real Slurm; {opts.clients} clients, each its own "
        f"connection, one round every {opts.interval:g} s: the service's clients GET /api/v1/pool and "
        "/api/v1/jobs with a token each, the baseline's GET the exporter's /metrics)\n",
        "| target | requests | requests/s | p50 ms | p95 ms | errors | Slurm calls | Slurm calls/s |",
        "|---|---:|---:|---:|---:|---|---:|---:|",
    ]
    for label, r in (("exporter's collector alone (baseline)", ex), ("slurm-pool serve", sv)):
        lines.append(
            f"| {label} | {r['requests']} | {r['requests_per_s']} | {r['p50_ms']} | {r['p95_ms']} | "
            f"{r['errors'] or '-'} | {r['slurm_calls']} | {r['slurm_calls_per_s']} |"
        )
    lines += [
        "",
        f"Slurm calls/s, service / exporter alone: **{ratio(sv['slurm_calls_per_s'], ex['slurm_calls_per_s'])}**; "
        f"p95, service / exporter: {ratio(sv['p95_ms'], ex['p95_ms'])}.",
        f"The service read the pool {sv['pool_reads']} times in {sv['seconds']} s "
        f"(refresh every {sv.get('refresh_seconds')} s: {sv.get('reads_per_refresh_interval')} reads and "
        f"{sv.get('slurm_calls_per_refresh_interval')} Slurm calls per interval; shortest gap between reads "
        f"{sv['shortest_gap_between_reads_s']} s), whatever the number of clients; the exporter read it "
        f"{ex['pool_reads']} times (one read per scrape, shared by the scrapes in flight). Calls are counted from "
        "each target's first request, its first read included.",
        f"Goals: at most {GOAL_READS_PER_INTERVAL:g} read per refresh interval -- "
        f"{'met' if report['goals']['reads'] else 'MISSED'}; p95 under {GOAL_P95_MS:g} ms -- "
        f"{'met' if report['goals']['p95'] else 'MISSED'}.",
    ]
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--spec", default=str(REPO / "examples" / "pool.yaml"), help="the pool spec the cluster runs")
    ap.add_argument("--seconds", type=float, default=60.0, help="length of each phase")
    ap.add_argument("--clients", type=int, default=200, help="concurrent clients")
    ap.add_argument("--interval", type=float, default=1.0, help="seconds between one client's rounds")
    ap.add_argument("--key", default=None, help="HS256 key [$SLURM_POOL_STATE_DIR/etc/jwt_hs256.key, else fresh]")
    ap.add_argument("--start-cluster", action="store_true", help="boot a local cluster for the run (no SLURM_CONF)")
    ap.add_argument("--out", help="result section (default: bench/results/api_load-<slurm>.md)")
    opts = ap.parse_args(argv)
    if opts.seconds <= 0 or opts.clients < 1 or opts.interval <= 0:
        ap.error("--seconds, --clients and --interval must be positive")

    from slurm_pool.adapters.slurm import installed_version
    from slurm_pool.spec import load_spec
    from slurm_pool.spec.bridge import bridge_of
    from slurm_pool.web.identity import user_exists

    handle = state = None
    if opts.start_cluster:
        from tests.support.slurm_cluster import start_session_cluster

        handle, state = start_session_cluster(opts.spec, slurm=os.environ.get("SLURM_POOL_TEST_SLURM") or None)
        os.environ.update({**handle.env, "SLURM_POOL_STATE_DIR": str(handle.cluster.layout.root)})
    elif not os.environ.get("SLURM_CONF"):
        ap.error("set SLURM_CONF to a running cluster's slurm.conf (bench/run_all.py does), or --start-cluster")
    try:
        spec = load_spec(opts.spec)
        users = [u for p in spec.projects for u in p.users if user_exists(u)]
        if not users:
            raise SystemExit("none of the spec's users exists on this machine: is the local cluster up?")
        key, which = bench_key(opts.key)
        version = installed_version()
        report: dict[str, Any] = {"slurm": str(version) if version else "?", "key": which, "users": sorted(set(users))}
        report["exporter"] = phase_exporter(opts, bridge_of(spec).partition)
        report["service"] = phase_service(opts, spec, key, users)
    finally:
        if handle is not None and state is not None:
            from tests.support.slurm_cluster import stop_session_cluster

            stop_session_cluster(handle, state)
    sv = report["service"]
    report["goals"] = {
        "reads": not sv.get("more_than_one_read_per_interval", True),
        "p95": sv["p95_ms"] is not None and sv["p95_ms"] < GOAL_P95_MS,
    }
    print(json.dumps(report, indent=2))
    series = version.series if version else "unknown"
    emit(markdown(report, opts), Path(opts.out or REPO / "bench" / "results" / f"api_load-{series}.md"))
    return 0 if all(report["goals"].values()) and not sv["errors"] else 1


if __name__ == "__main__":
    sys.exit(main())
