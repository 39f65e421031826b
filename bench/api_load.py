#!/usr/bin/env python3
"""Load on the REST API of ``slurm-pool serve``, and the Slurm calls it makes (issues 27, 47).

Against the local cluster (``SLURM_CONF``; ``bench/run_all.py`` starts one, or
``--start-cluster``), or against a recorded snapshot (``--snapshot full``: 10,000
nodes / 200,000 jobs, ``quick``: 500 / 5,000, scaled up from the 26.05 fixtures
by :mod:`bench.slurm_docs` and answered by :class:`bench.scale_slurm.DocRunner`;
the service runs its real code path, only Slurm is played back).  Phases, each
``--seconds`` long, polled by the same clients:

1. **exporter** (cluster runs) -- the exporter's collector alone, its ``/metrics``;
2. **baseline** (``--baseline REV``) -- the service as git revision REV has it;
3. **service** -- ``create_app`` under uvicorn as ``slurm-pool serve`` runs it,
   each client polling ``/api/v1/pool`` and ``/api/v1/jobs`` with a token minted
   for one of the pool's users, sending back the last answer's ETag as the
   console's page does.

Each service runs in a child process of its own, the clients (``--clients``,
each its own connection, one round every ``--interval`` seconds) in another.
Reported: p50/p95 latency (200 and 304 answers), requests/s, Slurm calls/s,
the service's CPU seconds, the load average before and after, and the reads
of the pool per refresh interval (goal: at most one, whatever the number of
clients; p95 under 100 ms).  ``--profile`` samples where the service's threads
spend their time.

    python3 bench/api_load.py [--seconds 60] [--clients 200] [--interval 1] [--baseline REV]
    python3 bench/api_load.py --snapshot full [--baseline REV] ...

Prints one JSON document, writes ``bench/results/api_load-<slurm series>.md``
(``api_load-10k.md`` for ``--snapshot full``); exits 1 when a goal is missed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
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
if os.environ.get("API_LOAD_TREE"):  # the service of another revision (``--baseline REV``): its package first
    sys.path.insert(0, os.environ["API_LOAD_TREE"])

from timing import emit, p95  # noqa: E402

from slurm_pool.adapters.runner import Result, Runner, SubprocessRunner  # noqa: E402

API_PATHS = ("/api/v1/pool", "/api/v1/jobs")
#: Where the recorded snapshots are made (kept between runs), and the seed that makes them.
SCALE_INPUTS = REPO / "bench" / "results" / "scale-inputs" / "console"
SEED = 32
#: A call of one of these (in its first words) is part of a read of the pool.
READ_WORDS = frozenset({"squeue", "sinfo", "nodes", "node"})
#: Answers that count: the body, or 304 (the client's copy is current).
OK = (200, 304)
#: The goals of issue 27.
GOAL_P95_MS = 100.0
GOAL_READS_PER_INTERVAL = 1.0


class Counting:
    """A Runner that counts the commands it runs, by program and first argument, with their times."""

    def __init__(self, inner: Runner):
        self.inner = inner
        self.calls: Counter[str] = Counter()
        self.reads: list[float] = []  # monotonic time of each call that reads the pool (nodes, jobs)
        self._lock = threading.Lock()

    def run(
        self, argv: Sequence[str], *, check: bool = True, input: str | None = None, timeout: float | None = None
    ) -> Result:
        with self._lock:
            self.calls[" ".join(list(argv)[:2])] += 1
            if READ_WORDS & set(list(argv)[:4]) and "--version" not in argv:
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
class Conn:
    """One client's keep-alive HTTP/1.1 connection, as plain as can be: the clients' own cost stays small
    beside the server's (200 httpx clients in one process measure httpx on a loaded 2-core machine)."""

    def __init__(self, host: str, port: int, token: str | None):
        self.host, self.port = host, port
        self.auth = f"Authorization: Bearer {token}\r\n" if token else ""
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def get(self, path: str, etag: str | None) -> tuple[int, str | None]:
        """The status and ETag of ``GET path`` (its body read and dropped)."""
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        assert self.reader is not None
        match = f"If-None-Match: {etag}\r\n" if etag else ""
        self.writer.write(f"GET {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n{self.auth}{match}\r\n".encode())
        head = (await self.reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
        status = int(head[0].split()[1])
        fields = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in head[1:] if h)}
        if "content-length" in fields:
            await self.reader.readexactly(int(fields["content-length"]))
        elif status != 304:
            await self.reader.read()  # no length: the body ends with the connection
        if (
            fields.get("connection", "").lower() == "close"
            or head[0].startswith("HTTP/1.0")
            or ("content-length" not in fields and status != 304)
        ):
            await self.close()
        return status, fields.get("etag")

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            with contextlib.suppress(OSError):
                await self.writer.wait_closed()
        self.reader = self.writer = None


async def _client(conn: Conn, paths: Sequence[str], until: float, interval: float, out: list) -> None:
    tags: dict[str, str | None] = {}
    await asyncio.sleep(random.uniform(0, interval))  # spread the clients over the interval
    while time.monotonic() < until:
        start = time.monotonic()
        for path in paths:
            t = time.perf_counter()
            try:  # as the console's page polls: the last answer's entity tag sent back (304: unchanged)
                code, tag = await asyncio.wait_for(conn.get(path, tags.get(path)), 30.0)
                tags[path] = tag or tags.get(path)
            except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, asyncio.TimeoutError, ValueError):
                code = 0
                await conn.close()
            out.append((path, time.perf_counter() - t, code))
        await asyncio.sleep(max(0.0, interval - (time.monotonic() - start)))
    await conn.close()


async def _load(base: str, paths: Sequence[str], tokens: list[str | None], seconds: float, interval: float) -> list:
    out: list = []
    host, port = base.removeprefix("http://").rsplit(":", 1)
    conns = [Conn(host, int(port), t) for t in tokens]
    until = time.monotonic() + seconds
    await asyncio.gather(*(_client(c, paths, until, interval, out) for c in conns))
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
    return summary_of(got, counter.total() - calls_before, counter.reads[reads_from:], refresh)


def summary_of(got: dict, calls: int, reads: list[float], refresh: float | None) -> dict:
    """Latencies of ``got``'s samples, requests/s, and the Slurm ``calls`` and pool ``reads`` of the target."""
    samples = got["samples"]
    secs = got["seconds"]
    lat = [s for _, s, code in samples if code in OK]
    # one read of the pool runs its commands back to back (for seconds on a loaded machine): a read starts
    # with the first call after half a refresh interval (a second for the exporter's reads per scrape)
    starts: list[float] = []
    for t in reads:
        if not starts or t - starts[-1] >= (refresh / 2 if refresh else 1.0):
            starts.append(t)
    reads = starts
    gaps = [b - a for a, b in zip(reads, reads[1:], strict=False)]
    out = {
        "requests": len(samples),
        "errors": dict(Counter(str(code) for _, _, code in samples if code not in OK)),
        "not_modified": sum(1 for _, _, code in samples if code == 304),
        "seconds": round(secs, 2),
        "requests_per_s": round(len(samples) / secs, 1) if secs else 0.0,
        "p50_ms": round(statistics.median(lat) * 1000, 2) if lat else None,
        "p95_ms": round(p95(lat) * 1000, 2) if lat else None,
        "p95_ms_by_path": {
            path: round(p95(xs) * 1000, 2)
            for path in sorted({p for p, _, _ in samples})
            if (xs := [s for q, s, code in samples if q == path and code in OK])
        },
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


def serve_child(config: dict[str, Any]) -> None:
    """The service (uvicorn on a free port, as ``slurm-pool serve`` configures it) in this process: prints
    ``{"port": N}`` once it answers, then, when stdin closes, its Slurm calls and CPU seconds (one JSON line each)."""
    import resource

    import httpx

    from slurm_pool.adapters.slurm import SlurmClient
    from slurm_pool.spec import load_spec
    from slurm_pool.spec.console import Console
    from slurm_pool.web.actions import UserCommands
    from slurm_pool.web.app import create_app
    from slurm_pool.web.identity import Authenticator, mint, user_exists
    from slurm_pool.web.server import build_server

    spec = load_spec(config["spec"])
    key = bytes.fromhex(config["key"])
    console = spec.console or Console()
    if config["inputs"]:  # the recorded snapshot: its users exist for the service only
        from bench.scale_slurm import DocRunner

        nodes, jobs = (Path(p) for p in config["inputs"])
        played = DocRunner(nodes, jobs)
        # each narrow read's text is made once and played back after (its per-read token swapped), as Slurm's
        # own process would print it: the service's process pays for reading it, not for making it
        played.record, played.answers = True, played.recorded
        inner: Runner = played
        known = frozenset(config["users"])
        exists: Any = known.__contains__
    else:
        inner, exists = SubprocessRunner(default_timeout=20.0), user_exists
    counter = Counting(inner)
    auth = Authenticator(key, console, check_password=lambda u, p: False, user_exists=exists)
    app = create_app(spec, slurm=SlurmClient(counter), auth=auth, commands=UserCommands(key))
    port = free_port()
    server = build_server(app, "127.0.0.1", port, console, log_level="warning")
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    sampler = Sampler() if config.get("profile") else None
    try:
        deadline = time.monotonic() + 30
        while not server.started:
            if time.monotonic() > deadline or not thread.is_alive():
                raise SystemExit("the service did not start")
            time.sleep(0.05)
        base = f"http://127.0.0.1:{port}"
        token = mint(key, config["users"][0], lifespan=600)
        # counted from the first request on, its first read of Slurm included (the exporter's first scrape is too)
        before, reads_from = counter.total(), len(counter.reads)
        cpu0 = resource.getrusage(resource.RUSAGE_SELF)
        until = time.monotonic() + 900
        while True:  # the first read done (a big one takes longer than the first request waits for it)
            warm = httpx.get(base + "/api/v1/pool", headers={"Authorization": f"Bearer {token}"}, timeout=600)
            if warm.status_code != 200:
                raise SystemExit(f"the service answered {warm.status_code}: {warm.text[:300]}")
            if warm.json().get("nodes") or time.monotonic() > until:
                break
            time.sleep(1.0)
        print(json.dumps({"port": port, "before": before, "reads_from": reads_from}), flush=True)
        if sampler is not None:
            sampler.start()
        sys.stdin.read()  # the parent closes it when the clients are done
        cpu1 = resource.getrusage(resource.RUSAGE_SELF)
        cpu = (cpu1.ru_utime + cpu1.ru_stime) - (cpu0.ru_utime + cpu0.ru_stime)
        out = {"calls": dict(counter.calls), "total": counter.total(), "reads": counter.reads, "cpu_s": round(cpu, 2)}
        if sampler is not None:
            out["profile"] = sampler.stop()
        print(json.dumps(out), flush=True)
    finally:
        server.should_exit = True
        thread.join(timeout=10)


class Sampler:
    """Where the service's threads spend their time: each thread's innermost frames of this project, sampled."""

    def __init__(self, every: float = 0.005, depth: int = 6):
        self.every, self.depth = every, depth
        self.counts: Counter[str] = Counter()
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        me = threading.get_ident()
        while not self._stop.wait(self.every):
            for ident, frame in sys._current_frames().items():
                if ident == me:
                    continue
                names = []
                f: Any = frame
                while f is not None and len(names) < self.depth:
                    code = f.f_code
                    names.append(f"{Path(code.co_filename).name}:{code.co_name}")
                    f = f.f_back
                idle = names[0].split(":")[1] in ("select", "wait", "_worker", "read", "poll", "acquire", "get")
                if not idle:
                    self.counts[" < ".join(names)] += 1
                    self.samples += 1

    def stop(self, top: int = 25) -> list[tuple[str, int]]:
        self._stop.set()
        self._thread.join(timeout=5)
        return self.counts.most_common(top)


def phase_service(opts: argparse.Namespace, config: dict[str, Any], tree: str | None, users: list[str]) -> dict:
    """The service in a child process (the code at ``tree``, else this checkout's), polled by the clients."""
    import subprocess

    from slurm_pool.web.identity import mint

    env = dict(os.environ, API_LOAD_TREE=tree or "")
    proc = subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve()), "--serve-child", json.dumps(config)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    assert proc.stdin is not None and proc.stdout is not None
    try:
        line = proc.stdout.readline()
        if not line:
            raise SystemExit(f"the service did not start (exit {proc.wait()})")
        ready = json.loads(line)
        base = f"http://127.0.0.1:{ready['port']}"
        key = bytes.fromhex(config["key"])
        lifespan = int(opts.seconds) + 300
        tokens: list[str | None] = [mint(key, users[i % len(users)], lifespan=lifespan) for i in range(opts.clients)]
        load0 = os.getloadavg()[0]
        got = drive(base, API_PATHS, tokens, opts.seconds, opts.interval)
        load1 = os.getloadavg()[0]
        proc.stdin.close()
        done = json.loads(proc.stdout.readline())
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    refresh = float(config["refresh"])
    calls = done["total"] - ready["before"]
    reads = done["reads"][ready["reads_from"] :]
    out = {"calls": done["calls"], **summary_of(got, calls, reads, refresh)}
    out.update(cpu_s=done["cpu_s"], load_1min=[round(load0, 2), round(load1, 2)])
    if "profile" in done:
        out["profile"] = done["profile"]
    return out


def bench_key(path: str | None) -> tuple[bytes, str]:
    """The cluster's JWT key (tokens then work with Slurm too), else a fresh one (reads need only the service)."""
    from slurm_pool.web.identity import load_key

    state = os.environ.get("SLURM_POOL_STATE_DIR")
    path = path or (str(Path(state) / "etc" / "jwt_hs256.key") if state else None)
    if path and Path(path).exists():
        return load_key(path), "the cluster's"
    return secrets.token_bytes(32), "a fresh"


def baseline_tree(rev: str, where: Path) -> str:
    """The package (and the test support the snapshot's runner may use) at git revision ``rev``, under ``where``."""
    import subprocess
    import tarfile

    sha = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--verify", f"{rev}^{{commit}}"], capture_output=True, text=True
    )
    if sha.returncode != 0:
        raise SystemExit(f"--baseline: {rev!r} is not a revision of this checkout")
    tree = where / sha.stdout.strip()[:12]
    if not tree.exists():
        archive = subprocess.run(
            ["git", "-C", str(REPO), "archive", sha.stdout.strip(), "slurm_pool", "tests/support"],
            capture_output=True, check=True,
        )  # fmt: skip
        tmp = where / (tree.name + ".tmp")
        tmp.mkdir(parents=True, exist_ok=True)
        import io

        with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
            tar.extractall(tmp)  # noqa: S202 -- this checkout's own history
        tmp.rename(tree)
    return str(tree)


def snapshot_inputs(size: str) -> tuple[Path, Path, Path]:
    """The recorded snapshot of ``size`` (``quick``: 500 nodes / 5,000 jobs, ``full``: 10,000 / 200,000):
    spec, node and job documents scaled up from the 26.05 fixtures (made once, kept)."""
    from bench.slurm_docs import FULL, PARTITIONS, PROJECTS, QUICK, generate
    from bench.slurm_docs import size_name as named

    n, j = FULL if size == "full" else QUICK
    where = SCALE_INPUTS
    where.mkdir(parents=True, exist_ok=True)
    generate(where, n, j, SEED, PROJECTS, PARTITIONS)
    return where / f"spec-{named(n)}.yaml", where / f"nodes-{named(n)}.json", where / f"squeue-{named(n, j)}.json"


def markdown(report: dict, opts: argparse.Namespace) -> list[str]:
    rows: list[tuple[str, dict]] = [(label, report[k]) for k, label in report["phases"]]
    base = rows[0][1]

    def ratio(a: Any, b: Any) -> str:
        return f"{a / b:.2f}" if isinstance(a, (int, float)) and b else "-"

    args = " ".join(opts.argv_shown)
    where = (
        f"the recorded snapshot of {report['snapshot']} (26.05 fixtures scaled up, answered by a runner that "
        "plays the recorded commands; the service runs its real code path)"
        if report.get("snapshot")
        else "the local cluster's real Slurm"
    )
    lines = [
        f"## REST API under load: {report['target']}\n",
        f"Command: `python3 bench/api_load.py {args}` ({where}; {opts.clients} clients, each its own connection, "
        f"one round every {opts.interval:g} s: the service's clients GET /api/v1/pool and /api/v1/jobs with a "
        "token each (each client a user of the spec), the exporter's GET its /metrics). Each service runs in its "
        "own process, the clients in another.\n",
        "| target | requests | requests/s | p50 ms | p95 ms | p95 ms /pool | p95 ms /jobs | p95 / first row | "
        "304s | errors | Slurm calls/s | service CPU s | load (1 min) before, after |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---|",
    ]
    for label, r in rows:
        by = r.get("p95_ms_by_path", {})
        load = r.get("load_1min")
        lines.append(
            f"| {label} | {r['requests']} | {r['requests_per_s']} | {r['p50_ms']} | {r['p95_ms']} | "
            f"{by.get('/api/v1/pool', '-')} | {by.get('/api/v1/jobs', '-')} | {ratio(r['p95_ms'], base['p95_ms'])} | "
            f"{r.get('not_modified', 0)} | {r['errors'] or '-'} | {r['slurm_calls_per_s']} | {r.get('cpu_s', '-')} | "
            f"{', '.join(f'{x:.2f}' for x in load) if load else '-'} |"
        )
    sv = report["service"]
    lines += [
        "",
        f"The service read the pool {sv['pool_reads']} times in {sv['seconds']} s "
        f"(refresh every {sv.get('refresh_seconds')} s: {sv.get('reads_per_refresh_interval')} reads and "
        f"{sv.get('slurm_calls_per_refresh_interval')} Slurm calls per interval; shortest gap between reads "
        f"{sv['shortest_gap_between_reads_s']} s), whatever the number of clients. Calls are counted from "
        "each target's first request, its first read included.",
        f"Goals: at most {GOAL_READS_PER_INTERVAL:g} read per refresh interval -- "
        f"{'met' if report['goals']['reads'] else 'MISSED'}; p95 under {GOAL_P95_MS:g} ms -- "
        f"{'met' if report['goals']['p95'] else 'MISSED'}.",
    ]
    return lines


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--serve-child"]:
        serve_child(json.loads(argv[1]))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--spec", default=str(REPO / "examples" / "pool.yaml"), help="the pool spec the cluster runs")
    ap.add_argument("--seconds", type=float, default=60.0, help="length of each phase")
    ap.add_argument("--clients", type=int, default=200, help="concurrent clients")
    ap.add_argument("--interval", type=float, default=1.0, help="seconds between one client's rounds")
    ap.add_argument("--key", default=None, help="HS256 key [$SLURM_POOL_STATE_DIR/etc/jwt_hs256.key, else fresh]")
    ap.add_argument("--start-cluster", action="store_true", help="boot a local cluster for the run (no SLURM_CONF)")
    ap.add_argument(
        "--snapshot", choices=("quick", "full"),
        help="serve a recorded snapshot (full: 10,000 nodes / 200,000 jobs; quick: 500 / 5,000) instead of a cluster",
    )  # fmt: skip
    ap.add_argument("--baseline", metavar="REV", help="also serve the package at git revision REV (same clients)")
    ap.add_argument("--no-exporter", action="store_true", help="skip the exporter's phase (cluster runs)")
    ap.add_argument("--profile", action="store_true", help="sample where the service's threads spend their time")
    ap.add_argument("--out", help="result section (default: bench/results/api_load-<slurm or 10k>.md)")
    opts = ap.parse_args(argv)
    opts.argv_shown = [a for a in argv if a != "--profile"]
    if opts.seconds <= 0 or opts.clients < 1 or opts.interval <= 0:
        ap.error("--seconds, --clients and --interval must be positive")

    import tempfile

    from slurm_pool.spec import load_spec
    from slurm_pool.spec.bridge import bridge_of
    from slurm_pool.web.identity import user_exists

    handle = state = None
    if opts.snapshot:
        opts.spec, *inputs = (str(p) for p in snapshot_inputs(opts.snapshot))
    elif opts.start_cluster:
        from tests.support.slurm_cluster import start_session_cluster

        handle, state = start_session_cluster(opts.spec, slurm=os.environ.get("SLURM_POOL_TEST_SLURM") or None)
        os.environ.update({**handle.env, "SLURM_POOL_STATE_DIR": str(handle.cluster.layout.root)})
    elif not os.environ.get("SLURM_CONF"):
        ap.error("set SLURM_CONF to a running cluster's slurm.conf (bench/run_all.py does), or --start-cluster")
    try:
        spec = load_spec(opts.spec)
        users = [u for p in spec.projects for u in p.users if opts.snapshot or user_exists(u)]
        if not users:
            raise SystemExit("none of the spec's users exists on this machine: is the local cluster up?")
        key, which = bench_key(None if opts.snapshot else opts.key)
        report: dict[str, Any] = {"key": which, "users": len(set(users)), "phases": []}
        if opts.snapshot:
            report.update(target=f"recorded {opts.snapshot} snapshot", snapshot=Path(inputs[1]).stem)
        else:
            from slurm_pool.adapters.slurm import installed_version

            version = installed_version()
            report.update(slurm=str(version) if version else "?", target=f"Slurm {version or '?'}")
        console = spec.console
        config = {
            "spec": opts.spec, "key": key.hex(), "users": users, "profile": opts.profile,
            "inputs": inputs if opts.snapshot else None, "refresh": console.refresh_seconds if console else 10,
        }  # fmt: skip
        if not opts.snapshot and not opts.no_exporter:
            report["exporter"] = phase_exporter(opts, bridge_of(spec).partition)
            report["phases"].append(("exporter", "exporter's collector alone"))
        if opts.baseline:
            with tempfile.TemporaryDirectory(prefix="api-load-") as tmp:
                tree = baseline_tree(opts.baseline, Path(tmp))
                report["baseline"] = phase_service(opts, config, tree, users)
            report["phases"].append(("baseline", f"slurm-pool serve at {opts.baseline} (baseline)"))
        report["service"] = phase_service(opts, config, None, users)
        report["phases"].append(("service", "slurm-pool serve (this checkout)"))
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
    if opts.snapshot:
        name = "10k" if opts.snapshot == "full" else "quick"
    else:
        name = version.series if version else "unknown"
    emit(markdown(report, opts), Path(opts.out or REPO / "bench" / "results" / f"api_load-{name}.md"))
    return 0 if all(report["goals"].values()) and not sv["errors"] else 1


if __name__ == "__main__":
    sys.exit(main())
