#!/usr/bin/env python3
"""Render and validate a 10,000-node x 8-GPU pool spec; report the time.

Baseline in the same run: parsing the same YAML text alone (``yaml.safe_load``),
so the figure reads as "validate+render costs N x a YAML parse" on whatever
machine runs it.  Target: validate + render under 2 s.

    python3 bench/render_scale.py [--nodes 10000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from slurm_pool.render import SlurmVersion, render_all  # noqa: E402
from slurm_pool.spec import load_spec_text  # noqa: E402

MODELS = ["A100-80GB", "H100-80GB", "H200-141GB", "A100-40GB"]
MIG = {
    "A100-80GB": ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"],
    "H100-80GB": ["1g.10gb"] * 7,
    "H200-141GB": ["4g.71gb", "3g.71gb"],
    "A100-40GB": ["7g.40gb"],
}


def make_spec(nodes: int, per_group: int = 40, gpus: int = 8) -> str:
    groups = []
    projects = []
    for g in range(nodes // per_group):
        model = MODELS[g % len(MODELS)]
        mig = None
        if g % 5 == 0:  # every fifth group is partly MIG-partitioned
            mig = [MIG[model] if i < 2 else None for i in range(gpus)]
        group = {
            "name": f"g{g:04d}",
            "hosts": f"n{g:04d}-[001-{per_group:03d}]",
            "cpus": 64,
            "memory_mb": 512000,
            "gpus": {"model": model, "count": gpus, **({"mig": mig} if mig else {})},
        }
        groups.append(group)
        if g % 25 == 0:
            projects.append(
                {
                    "name": f"p{g // 25:03d}",
                    "users": [f"u{g // 25:03d}"],
                    "owns": [],
                    "tiers": ["guaranteed", "shared", "scavenger"],
                }
            )
        projects[-1]["owns"].append(group["name"])
    spec = {
        "version": 1,
        "cluster": {"name": "big"},
        "node_groups": groups,
        "tiers": [
            {"name": "guaranteed", "priority": 1000, "preempt": ["shared", "scavenger"]},
            {"name": "shared", "priority": 500, "preempt": ["scavenger"], "preempt_mode": "requeue", "grace_time": 120},
            {"name": "scavenger", "priority": 100, "preempt_mode": "requeue", "grace_time": 120},
        ],
        "partitions": [
            {
                "name": f"{p['name']}-owner",
                "nodes": p["owns"],
                "tier": "guaranteed",
                "priority_tier": 100,
                "allow_accounts": [p["name"]],
            }
            for p in projects
        ]
        + [
            {"name": "shared", "nodes": ["ALL"], "tier": "shared", "priority_tier": 50},
            {"name": "scavenger", "nodes": ["ALL"], "tier": "scavenger", "priority_tier": 10, "default": True},
        ],
        "projects": projects,
        "policy": {"job_submit": False},
    }
    return yaml.safe_dump(spec, sort_keys=False)


def timed(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=10000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "render_scale.md"))
    args = ap.parse_args()
    text = make_spec(args.nodes)
    spec = load_spec_text(text)
    from slurm_pool.spec.hosts import expand

    gpus = sum(g.gpus.count * len(expand(g.hosts)) for g in spec.node_groups if g.gpus)
    t_yaml = timed(lambda: yaml.safe_load(text), args.repeat)
    t_validate = timed(lambda: load_spec_text(text), args.repeat)
    t_render = timed(lambda: render_all(spec, version=SlurmVersion(22, 5)), args.repeat)
    total = t_validate + t_render
    files = render_all(spec, version=SlurmVersion(22, 5))
    md = f"""## Render scale (issue 2)

Command: `python3 bench/render_scale.py --nodes {args.nodes} --repeat {args.repeat}`

| what | median seconds | ratio to YAML parse |
|---|---|---|
| YAML parse only (baseline) | {t_yaml:.3f} | 1.00 |
| validate (schema + cross-field rules) | {t_validate:.3f} | {t_validate / t_yaml:.2f} |
| render every file | {t_render:.3f} | {t_render / t_yaml:.2f} |
| **validate + render** | **{total:.3f}** | {total / t_yaml:.2f} |

Spec: {len(spec.node_groups)} node groups, {args.nodes} nodes, {gpus} GPUs (every fifth group partly MIG),
{len(spec.partitions)} partitions.  slurm.conf is {len(files["slurm.conf"].splitlines())} lines.
Target: validate + render under 2 s -> {"met" if total < 2 else "NOT met"}.
"""
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(md)
    print(md)


if __name__ == "__main__":
    main()
