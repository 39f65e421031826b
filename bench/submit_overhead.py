#!/usr/bin/env python3
"""Submit overhead of the pool policy (job_submit.lua).

Two measurements:

1. ``sbatch``: against a running cluster (its ``SLURM_CONF``), submit held
   jobs (``sbatch --hold``) with the pool's job_submit.lua in place and with a
   pass-through job_submit.lua, in the same run, interleaved in rounds so that
   drift hits both alike.  slurmctld reloads job_submit.lua when its mtime
   changes, so no restart is needed; the original file is put back at the end
   and every submitted job is cancelled.  Target: jobs/s with policy divided
   by jobs/s without >= ``--target`` (0.95).
2. ``lua``: the per-call cost of slurm_job_submit in-process (lupa, Lua 5.1)
   for a few representative requests, against a pass-through script.

    SLURM_CONF=/path/slurm.conf python bench/submit_overhead.py --spec pool.yaml
    python bench/submit_overhead.py --spec pool.yaml --lua-only

Prints one JSON document; exits 1 when the sbatch ratio misses the target.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from slurm_pool.adapters.slurm import installed_version  # noqa: E402
from slurm_pool.policy.lua import render_job_submit  # noqa: E402
from slurm_pool.policy.tables import build_tables  # noqa: E402
from slurm_pool.spec import load_spec  # noqa: E402
from slurm_pool.spec.model import PoolSpec  # noqa: E402
from slurm_pool.versions import DEFAULT_VERSION, SlurmVersion  # noqa: E402
from tests.support.lua_policy import LuaPolicy, unset_job  # noqa: E402

PASS_THROUGH = """-- slurm-pool bench: pass-through job_submit.lua (baseline)
function slurm_job_submit(job_desc, part_list, submit_uid)
\treturn slurm.SUCCESS
end
function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
\treturn slurm.SUCCESS
end
return slurm.SUCCESS
"""


def default_sbatch_args(spec: PoolSpec) -> list[str]:
    """Arguments that pass the policy: a user of the first project (root is in no
    pool account), its default route, a time limit, --checkpoint."""
    proj = next(p for p in spec.projects if p.tiers and p.users)
    return [
        f"--uid={proj.users[0]}",
        f"--account={proj.name}",
        "--time=10",
        "--checkpoint",
        "--job-name=slurm-pool-bench",
    ]


class LuaSwap:
    """Swap the cluster's job_submit.lua, bumping its mtime so slurmctld reloads it."""

    def __init__(self, path: Path):
        self.path = path
        self.original = path.read_text()
        self.mtime = int(max(time.time(), path.stat().st_mtime)) + 1

    def install(self, text: str, settle: float) -> None:
        tmp = self.path.with_suffix(".bench-tmp")
        tmp.write_text(text)
        os.replace(tmp, self.path)
        self.mtime = max(self.mtime + 1, int(time.time()) + 1)
        os.utime(self.path, (self.mtime, self.mtime))
        time.sleep(settle)

    def restore(self) -> None:
        self.install(self.original, 0)


def submit(args: list[str], env: dict[str, str]) -> tuple[bool, str]:
    res = subprocess.run(
        ["sbatch", "--hold", "--parsable", *args, "--wrap", "true"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    if res.returncode != 0:
        return False, res.stderr.strip()
    return True, res.stdout.strip().split(";")[0]


def submit_batch(n: int, args: list[str], env: dict[str, str], parallel: int) -> tuple[float, list[str], list[str]]:
    """Submit n held jobs; returns (seconds, job ids, errors)."""
    start = time.monotonic()
    with ThreadPoolExecutor(max_workers=parallel) as pool:
        results = list(pool.map(lambda _: submit(args, env), range(n)))
    elapsed = time.monotonic() - start
    ids = [r for ok, r in results if ok]
    errors = [r for ok, r in results if not ok]
    return elapsed, ids, errors


def cancel(ids: list[str], env: dict[str, str]) -> None:
    for i in range(0, len(ids), 200):
        subprocess.run(["scancel", *ids[i : i + 200]], env=env, capture_output=True, timeout=120)


def bench_sbatch(
    spec: PoolSpec, conf: Path, jobs: int, rounds: int, parallel: int, extra: list[str], settle: float
) -> dict[str, Any]:
    env = dict(os.environ, SLURM_CONF=str(conf))
    ping = subprocess.run(["scontrol", "ping"], capture_output=True, text=True, env=env, timeout=60)
    if ping.returncode != 0 or "UP" not in ping.stdout:
        raise SystemExit(f"slurmctld is not answering (SLURM_CONF={conf}): {ping.stdout}{ping.stderr}")
    lua_path = conf.parent / "job_submit.lua"
    if not lua_path.exists():
        raise SystemExit(f"{lua_path} does not exist: is JobSubmitPlugins=lua set?")
    swap = LuaSwap(lua_path)
    policy_text = swap.original
    args = default_sbatch_args(spec) + extra
    per_round = max(1, jobs // rounds)
    times = {"policy": 0.0, "baseline": 0.0}
    counts = {"policy": 0, "baseline": 0}
    errors: dict[str, list[str]] = {"policy": [], "baseline": []}
    ids: list[str] = []
    try:
        submit_batch(min(20, per_round), args, env, parallel)  # warm-up (ids cancelled below)
        for r in range(rounds):
            order = ("baseline", "policy") if r % 2 == 0 else ("policy", "baseline")
            for kind in order:
                swap.install(PASS_THROUGH if kind == "baseline" else policy_text, settle)
                elapsed, got, errs = submit_batch(per_round, args, env, parallel)
                times[kind] += elapsed
                counts[kind] += len(got)
                errors[kind] += errs
                ids += got
    finally:
        swap.restore()
        out = subprocess.run(
            ["squeue", "-h", "-n", "slurm-pool-bench", "-o", "%i"], capture_output=True, text=True, env=env, timeout=120
        )
        cancel(sorted(set(ids) | set(out.stdout.split())), env)
    rate = {k: counts[k] / times[k] if times[k] else 0.0 for k in times}
    return {
        "sbatch_args": shlex.join(args),
        "jobs_per_kind": counts,
        "seconds": {k: round(v, 3) for k, v in times.items()},
        "jobs_per_second": {k: round(v, 2) for k, v in rate.items()},
        "ratio": round(rate["policy"] / rate["baseline"], 4) if rate["baseline"] else None,
        "errors": {k: v[:5] for k, v in errors.items()},
    }


def bench_lua(spec: PoolSpec, source: str, calls: int, version: SlurmVersion) -> dict[str, Any]:
    tables = build_tables(spec, version)
    proj = next(p for p in tables.projects if p.tiers)
    mig = list(tables.mig_by_size)
    cases = {
        "route_default": unset_job(account=proj.name),
        "no_account": unset_job(user_name=next((u for u, p in tables.users if p == proj.name), "nobody")),
        "gpus_and_checkpoint": unset_job(
            account=proj.name,
            tres_per_node="gres:gpu:1",
            time_limit=60,
            spank_job_env=["SLURM_POOL_CHECKPOINT=1", "SLURM_POOL_GPU_MEM_MB=4096"],
        ),
        "rejected": unset_job(account=proj.name, qos="no-such-tier"),
    }
    if mig:
        cases["mig_type"] = unset_job(account=proj.name, tres_per_job=f"gres:gpu:{mig[0]}:1")
    policy, baseline = LuaPolicy(source), LuaPolicy(PASS_THROUGH)
    # calls run inside Lua on a fresh copy of the request each time (the
    # policy edits it), so Python's call overhead is not measured
    loop = """function(n, job)
        for i = 1, n do
            local copy = {}
            for k, v in pairs(job) do copy[k] = v end
            slurm_job_submit(copy, nil, 1000)
            reset_log()
        end
    end"""
    result: dict[str, Any] = {}
    for name, job in cases.items():
        per = {}
        for label, lua in (("policy", policy), ("baseline", baseline)):
            desc = lua.table(job)
            run = lua.lua.eval(loop)
            start = time.perf_counter()
            run(calls, desc)
            per[label] = (time.perf_counter() - start) / calls * 1e6
        result[name] = {"policy_us": round(per["policy"], 2), "baseline_us": round(per["baseline"], 2)}
    return result


def markdown(report: dict[str, Any], opts: argparse.Namespace) -> str:
    """The BENCHMARKS.md section for one run."""
    lines = [
        f"## job_submit.lua overhead on Slurm {report['slurm']} (issue 4)\n",
        f"Command: `python3 bench/submit_overhead.py --spec {opts.spec} --jobs {opts.jobs} --rounds {opts.rounds}` "
        f"(real slurmctld {report['slurm']} of the local cluster; held jobs, interleaved rounds)\n",
    ]
    sb = report.get("sbatch")
    if sb:
        rate = sb["jobs_per_second"]
        lines += [
            "| submissions | jobs | jobs/s |",
            "|---|---:|---:|",
            f"| pass-through job_submit.lua (baseline) | {sb['jobs_per_kind']['baseline']} | {rate['baseline']} |",
            f"| slurm-pool policy | {sb['jobs_per_kind']['policy']} | {rate['policy']} |",
            f"\nThroughput ratio policy / baseline: **{sb['ratio']}** (target >= {opts.target}).\n",
        ]
    lines += [
        "In-process cost per call (lupa, Lua 5.1, the same script slurmctld runs):\n",
        "| case | policy us | pass-through us | ratio |",
        "|---|---:|---:|---:|",
    ]
    for name, r in report["lua"].items():
        ratio = r["policy_us"] / r["baseline_us"] if r["baseline_us"] else float("nan")
        lines.append(f"| {name} | {r['policy_us']} | {r['baseline_us']} | {ratio:.1f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--spec", required=True, help="the pool spec the cluster runs")
    ap.add_argument("--slurm-conf", default=os.environ.get("SLURM_CONF"), help="slurm.conf of the running cluster")
    ap.add_argument("--jobs", type=int, default=1000, help="held jobs per kind (policy, baseline)")
    ap.add_argument("--rounds", type=int, default=4, help="interleaved rounds per kind")
    ap.add_argument("--parallel", type=int, default=4, help="concurrent sbatch processes")
    ap.add_argument("--settle", type=float, default=1.0, help="seconds to wait after swapping job_submit.lua")
    ap.add_argument("--sbatch-arg", action="append", default=[], help="extra sbatch argument (repeatable)")
    ap.add_argument("--target", type=float, default=0.95, help="minimum jobs/s ratio, policy / baseline")
    ap.add_argument("--lua-calls", type=int, default=20000, help="in-process calls per case")
    ap.add_argument("--lua-only", action="store_true", help="skip the sbatch measurement")
    ap.add_argument("--out", help="result section (default: bench/results/submit_overhead-<slurm>.md)")
    opts = ap.parse_args(argv)

    spec = load_spec(opts.spec)
    version = installed_version() or DEFAULT_VERSION
    report: dict[str, Any] = {"target": opts.target, "slurm": str(version)}
    source = render_job_submit(spec, version)
    if not opts.lua_only:
        if not opts.slurm_conf:
            ap.error("set SLURM_CONF or --slurm-conf (or use --lua-only)")
        conf = Path(opts.slurm_conf)
        installed = conf.parent / "job_submit.lua"
        if installed.exists():
            source = installed.read_text()
        report["sbatch"] = bench_sbatch(spec, conf, opts.jobs, opts.rounds, opts.parallel, opts.sbatch_arg, opts.settle)
    report["lua"] = bench_lua(spec, source, opts.lua_calls, version)
    print(json.dumps(report, indent=2))
    out = Path(opts.out or Path(__file__).resolve().parent / "results" / f"submit_overhead-{version.series}.md")
    out.write_text(markdown(report, opts))
    if "sbatch" in report:
        ratio = report["sbatch"]["ratio"]
        if ratio is None or min(report["sbatch"]["jobs_per_kind"].values()) == 0:
            print("submit_overhead: no job was accepted; see the errors above", file=sys.stderr)
            return 1
        return 1 if ratio < opts.target else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
