#!/usr/bin/env python3
"""Elastic training on a pool with idle GPUs vs the same job fixed at its core (issue 14).

On the running local cluster (the example pool), ``examples/elastic_train.py``
(gloo on CPU; ``--step-seconds`` stands for the compute of one global-batch
step on one node, which each rank does its share of) runs three ways, in the
same run:

* **fixed**: ``slurm-pool elastic submit --min 1 --max 1`` (the baseline);
* **elastic**: ``--min 1 --max 3`` with a-gpu2's two GPUs idle, so both
  extensions join at once;
* **elastic, preempted**: the same, and once it runs at three nodes an owner
  job takes one GPU of a-gpu2 back, so one extension leaves.

For each: time to finish (submit -> final checkpoint) and GPU-hours used
(sacct: every job's elapsed time x its GPUs), as ratios to the fixed run; the
join time (an extension RUNNING -> the first step at the larger world) and
the leave time (owner submit -> the first step at the smaller world).

    python3 bench/elastic.py [--rounds 2] [--steps 300] [--step-seconds 0.3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from timing import sh  # noqa: E402

from tests.support.elastic_env import TORCH, progress, worlds  # noqa: E402

TRAIN = REPO / "examples" / "elastic_train.py"
SLEEP = "#!/bin/sh\nsleep 600\n"


def sacct_rows(jobs: list[int]) -> list[dict[str, str]]:
    out = sh("sacct", "-n", "-X", "-P", "-D", "-j", ",".join(map(str, jobs)), "-o", "JobID,State,Start,End,AllocTRES")
    rows = []
    for line in out.splitlines():
        job, state, start, end, tres = line.split("|")
        rows.append({"job": job, "state": state, "start": start, "end": end, "tres": tres})
    return rows


def gpu_hours(jobs: list[int]) -> float:
    """GPU-hours every run of ``jobs`` held, from sacct (Start/End, AllocTRES gres/gpu)."""
    total = 0.0
    for row in sacct_rows(jobs):
        if row["start"] in ("", "Unknown", "None") or row["end"] in ("", "Unknown"):
            continue
        gpus = next((int(float(t.split("=")[1])) for t in row["tres"].split(",") if t.startswith("gres/gpu=")), 0)
        span = time.mktime(time.strptime(row["end"], "%Y-%m-%dT%H:%M:%S")) - time.mktime(
            time.strptime(row["start"], "%Y-%m-%dT%H:%M:%S")
        )
        total += max(0.0, span) * gpus / 3600
    return total


def wait(check, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.2)
    raise TimeoutError(what)


def state(job: int) -> str:
    run = subprocess.run(["squeue", "-h", "-j", str(job), "-o", "%T"], capture_output=True, text=True)
    return run.stdout.strip() or (sh("sacct", "-n", "-X", "-P", "-j", str(job), "-o", "State").split() or [""])[-1]


def one(max_nodes: int, preempt: bool, steps: int, step_seconds: float) -> dict[str, float]:
    work = Path(tempfile.mkdtemp(prefix="sp-elastic-bench-", dir="/tmp"))
    work.chmod(0o777)
    t0 = time.monotonic()
    res = subprocess.run(
        [sys.executable, "-m", "slurm_pool.cli", "elastic", "submit", "--min", "1", "--max", str(max_nodes),
         "--core", "-p a-owner --qos=guaranteed -A proja -w a-gpu1",
         "--extension", "-p scavenger --qos=scavenger -A proja -w a-gpu2",
         "--sbatch", f"--uid=alice --gres=gpu:1 -o {work}/%j.out -D {work}",
         "--torchrun", str(TORCH.bin / "torchrun"), "--leave-seconds", "15",
         "--", str(TRAIN), "--checkpoint-dir", str(work), "--steps", str(steps), "--step-seconds", str(step_seconds)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    ids = json.loads(res.stdout)
    jobs = [ids["core"], *ids["extensions"]]
    out: dict[str, float] = {}
    owner = None
    if max_nodes > 1:
        wait(lambda: all(state(e) == "RUNNING" for e in ids["extensions"]), 300, "extensions running")
        started = time.monotonic()
        wait(lambda: (r := progress(work)) and r[-1]["world"] == max_nodes, 300, "grown")
        out["join_s"] = time.monotonic() - started
    if preempt:
        submitted = time.monotonic()
        owner = int(
            sh("sbatch", "--parsable", "--uid=alice", "-p", "a-owner", "--qos=guaranteed", "-A", "proja", "-w",
               "a-gpu2", "--gres=gpu:1", "-o", "/dev/null", "-D", "/tmp", input=SLEEP).split(";")[0]
        )  # fmt: skip
        wait(lambda: worlds(progress(work))[-1:] == [max_nodes - 1], 300, "re-formed smaller")
        out["leave_s"] = time.monotonic() - submitted
    wait(lambda: (work / "final.json").is_file(), 900, "finished")
    out["finish_s"] = time.monotonic() - t0
    wait(lambda: state(ids["core"]) == "COMPLETED", 120, "core completed")
    if owner is not None:
        subprocess.run(["scancel", str(owner)], check=False)
    wait(lambda: all(state(j) not in ("PENDING", "RUNNING", "COMPLETING") for j in jobs), 120, "all ended")
    out["gpu_hours"] = gpu_hours(jobs)
    out["redone_steps"] = len(progress(work)) - steps
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--step-seconds", type=float, default=0.3)
    ap.add_argument("--out", help="result section (default: bench/results/elastic-<slurm>.md)")
    args = ap.parse_args()
    if "SLURM_CONF" not in os.environ:
        print("SLURM_CONF is not set: start a cluster (bench/run_all.py does)", file=sys.stderr)
        return 2
    TORCH.build()
    version = sh("sinfo", "--version").split()[-1]
    series = ".".join(version.split(".")[:2])
    out = Path(args.out or REPO / "bench" / "results" / f"elastic-{series}.md")
    runs: dict[str, list[dict[str, float]]] = {"fixed": [], "elastic": [], "preempted": []}
    for _ in range(args.rounds):
        runs["fixed"].append(one(1, False, args.steps, args.step_seconds))
        runs["elastic"].append(one(3, False, args.steps, args.step_seconds))
        runs["preempted"].append(one(3, True, args.steps, args.step_seconds))

    def med(name: str, key: str) -> float:
        return statistics.median(r[key] for r in runs[name])

    base_t, base_h = med("fixed", "finish_s"), med("fixed", "gpu_hours")
    labels = {
        "fixed": "fixed at the core: --min 1 --max 1 (baseline)",
        "elastic": "elastic --min 1 --max 3, two idle GPUs",
        "preempted": "elastic --min 1 --max 3, one extension preempted",
    }
    lines = [
        f"## Elastic training on Slurm {version}: growing into idle GPUs (issue 14)",
        "",
        f"Command: `python3 bench/elastic.py --rounds {args.rounds} --steps {args.steps} --step-seconds "
        f"{args.step_seconds}` (local cluster on Slurm {version}, example pool; core on a-gpu1 in alice's guaranteed "
        "tier, extensions in scavenger on a-gpu2; gloo on CPU, torch 2.15.0; medians of the rounds)",
        "",
        "| run | time to finish s | ratio | GPU-hours used | ratio | join s | leave s | steps redone |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, label in labels.items():
        t, h = med(name, "finish_s"), med(name, "gpu_hours")
        join = f"{med(name, 'join_s'):.1f}" if "join_s" in runs[name][0] else "-"
        leave = f"{med(name, 'leave_s'):.1f}" if "leave_s" in runs[name][0] else "-"
        lines.append(
            f"| {label} | {t:.1f} | {t / base_t:.2f} | {h:.4f} | {h / base_h:.2f} | {join} | {leave} | "
            f"{med(name, 'redone_steps'):.0f} |"
        )
    lines += [
        "",
        "Join: both extensions RUNNING -> the first step at three nodes.  Leave: the owner's job submitted -> the "
        "first step at two nodes (the preempted extension hears SIGTERM at the start of its 20 s GraceTime; the "
        "survivors' gloo ring fails and torchrun re-forms from the last checkpoint, every 5 steps).  On CPU the "
        "per-rank compute is the stand-in pause, so the speed-up is the model's, not gloo's; GPU-hours are what "
        "Slurm accounts (every job's elapsed time x its GPUs, the core included).",
        "",
    ]
    out.write_text("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
