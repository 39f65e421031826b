#!/usr/bin/env python3
"""Latency of the node hooks as slurmd runs them: prolog + epilog, N times each.

Each sample runs the prolog and then the epilog of a fresh job as separate
processes -- the very ``/bin/sh`` scripts that
:func:`slurm_pool.nodeconf.render_hook` writes for slurm.conf (``python3
-I -S`` with an explicit ``sys.path``) -- with a replayed healthy 8-GPU
snapshot, so no NVML time is included.  The epilog asks a stub ``scontrol`` (a /bin/sh script
printing a canned job record) about the job, which stands in for one
slurmctld RPC.  The same pair through the click CLI (``python3 -m slurm_pool
prolog``) is measured for comparison.  Budget: p95 of prolog + epilog <= 150 ms.

    python3 bench/prolog_latency.py [-n 50] [--out bench/results/prolog_latency.md]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SNAPSHOT = ROOT / "tests" / "data" / "nvml" / "h100x8_healthy.json"
BUDGET_MS = 150.0

STUB = """#!/bin/sh
case "$*" in
  *"show job"*) cat "{job}" ;;
  *"show node"*) cat "{node}" ;;
esac
"""


def setup(tmp: Path) -> tuple[Path, dict[str, str]]:
    snap = tmp / "snapshot.json"
    shutil.copyfile(SNAPSHOT, snap)
    snap.chmod(0o644)
    (tmp / "job.json").write_text(
        json.dumps(
            {
                "jobs": [
                    {
                        "job_id": 1,
                        "job_state": "COMPLETING",
                        "state_reason": "None",
                        "start_time": int(time.time()) - 600,
                        "end_time": int(time.time()),
                        "preempt_time": 0,
                        "time_limit": 60,
                        "restart_cnt": 0,
                        "comment": "",
                    }
                ]
            }
        )
    )
    (tmp / "node.json").write_text(json.dumps({"nodes": [{"name": "bench1", "state": "idle", "gres": "gpu:h100:8"}]}))
    stub = tmp / "scontrol"
    stub.write_text(STUB.format(job=tmp / "job.json", node=tmp / "node.json"))
    stub.chmod(0o755)
    conf = tmp / "node.conf"
    conf.write_text(
        f"state_dir = {tmp / 'state'}\ncheckpoint_base_dir = {tmp / 'ckpt'}\n"
        f"gpus = replay:{snap}\nscontrol = {stub}\nexpected_gpus = 8\nlog = none\n"
    )
    conf.chmod(0o644)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "SLURMD_NODENAME": "bench1",
        "SLURM_JOB_USER": "bench",
        "SLURM_JOB_UID": str(os.getuid()),
        "SLURM_JOB_GID": str(os.getgid()),
        "SLURM_JOB_GPUS": "0,1",
        "CUDA_VISIBLE_DEVICES": "0,1",
    }
    return conf, env


def run_once(argv: list[str], env: dict[str, str]) -> float:
    t = time.perf_counter()
    res = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    dt = (time.perf_counter() - t) * 1000
    if res.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {res.returncode}: {res.stderr.decode()}")
    return dt


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, int(round(q / 100 * len(s) + 0.5)) - 1))]


def hook_scripts(tmp: Path, conf: Path, coexist: bool = False) -> dict[str, list[str]]:
    """The rendered hook scripts, as slurm.conf would name them; ``coexist``: a cluster shared with a site, whose
    wrappers decide whose job it is before Python runs (:mod:`slurm_pool.nodeconf.wrappers`)."""
    from slurm_pool.nodeconf import NodeConfig, hook_paths, parse, render_hook

    values = parse(conf.read_text())
    if coexist:
        values.update(coexist="yes", pool_partitions="a-owner,shared,spot,k8s-lend", pool_accounts="proja,projb")
    cfg = NodeConfig(values, str(conf))
    out = {}
    for kind in ("prolog", "epilog"):
        p = tmp / f"slurm-pool-{kind}{'-coexist' if coexist else ''}"
        p.write_text(render_hook(kind, sys.executable, str(conf), paths=hook_paths(), cfg=cfg))
        p.chmod(0o755)
        out[kind] = [str(p)]
    return out


def click_cli(conf: Path) -> dict[str, list[str]]:
    return {k: [sys.executable, "-m", "slurm_pool", k, "--config", str(conf)] for k in ("prolog", "epilog")}


def measure(n: int, argv: dict[str, list[str]], env: dict[str, str], start_job: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"prolog": [], "epilog": [], "prolog+epilog": []}
    for i in range(n):
        e = dict(env, SLURM_JOB_ID=str(start_job + i))
        p = run_once(argv["prolog"], e)
        q = run_once(argv["epilog"], e)
        out["prolog"].append(p)
        out["epilog"].append(q)
        out["prolog+epilog"].append(p + q)
    return out


def table(title: str, res: dict[str, list[float]]) -> list[str]:
    lines = [f"**{title}**", "", "| hook | p50 ms | p95 ms | max ms |", "|---|---:|---:|---:|"]
    for k, xs in res.items():
        lines.append(f"| {k} | {statistics.median(xs):.1f} | {pct(xs, 95):.1f} | {max(xs):.1f} |")
    return lines + [""]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=50)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "prolog_latency.md"))
    ap.add_argument("--no-click", action="store_true", help="skip the click-CLI comparison")
    args = ap.parse_args()
    py = sys.executable
    sys.path.insert(0, str(ROOT))
    with tempfile.TemporaryDirectory() as d:
        conf, env = setup(Path(d))
        scripts = hook_scripts(Path(d), conf)
        for _ in range(3):  # warm the page cache and .pyc files
            measure(1, scripts, env, 900000)
        base = [run_once([py, "-I", "-S", "-c", "pass"], env) for _ in range(args.n)]
        fast = measure(args.n, scripts, env, 1000)
        shared = hook_scripts(Path(d), conf, coexist=True)
        pool_job = dict(env, SLURM_JOB_PARTITION="shared", SLURM_JOB_ACCOUNT="proja")
        site_job = dict(env, SLURM_JOB_PARTITION="site-gpu", SLURM_JOB_ACCOUNT="physics")
        pooled = measure(args.n, shared, pool_job, 3000)
        sited = measure(args.n, shared, site_job, 4000)
        slow = None if args.no_click else measure(args.n, click_cli(conf), env, 5000)
    p95 = pct(fast["prolog+epilog"], 95)
    verdict = "within" if p95 <= BUDGET_MS else "OVER"
    lines = [
        "## Prolog + epilog latency",
        "",
        f"N={args.n} runs of each hook as a separate process on {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}; replayed healthy "
        "8-GPU snapshot (no NVML time); the epilog asks a stub scontrol (/bin/sh) about the job once.",
        "",
        f"p95 of prolog + epilog through the rendered hook scripts: **{p95:.1f} ms** "
        f"({verdict} the {BUDGET_MS:.0f} ms budget).",
        "",
        *table("Rendered hook scripts (/bin/sh exec python3 -I -S, slurm_pool.node)", fast),
        *table("A cluster shared with a site (coexist): a pool job (its hook exec'd after two `case`)", pooled),
        *table("A cluster shared with a site (coexist): a site job (the hook run, its status not passed on)", sited),
    ]
    if slow is not None:
        lines += table("Through the click CLI: python3 -m slurm_pool <hook>", slow)
    lines += [
        f"Interpreter alone (`python3 -I -S -c pass`): p50 {statistics.median(base):.1f} ms, "
        f"p95 {pct(base, 95):.1f} ms.",
        "",
    ]
    text = "\n".join(lines)
    print(text)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
