"""An elastic DDP training script for ``slurm-pool elastic`` (gloo on CPU; NCCL works the same way on GPUs).

torchrun starts it on every node of the job, and starts it again, from the
last checkpoint, each time a node joins or leaves.  What makes that safe is
the checkpoint contract (docs/elastic.md):

* the state that matters (model, optimizer, step) is in one checkpoint that
  rank 0 writes atomically every ``--every`` steps, and the script resumes
  from it;
* the data of a step depends only on the step number, and the global batch
  stays the same whatever the world size: each rank takes its slice;
* the gradient is the mean over the global batch (DDP averages the ranks'),
  so a step gives the same update at any world size, up to the order of
  floating-point sums.

It logs one JSON line per step to ``progress.jsonl`` in the checkpoint
directory (step, world size, loss), which the tests and the benchmark read.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

FEATURES = 8


def batch(step: int, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The global batch of ``step``: the same for every world size and every restart."""
    gen = torch.Generator().manual_seed(10_000 + step)
    x = torch.randn(size, FEATURES, generator=gen)
    w = torch.arange(1, FEATURES + 1, dtype=torch.float32).unsqueeze(1) / FEATURES
    return x, x @ w + 0.01 * torch.randn(size, 1, generator=gen)


def save(path: Path, state: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--checkpoint-dir", required=True, type=Path)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--global-batch", type=int, default=12)
    ap.add_argument("--every", type=int, default=5, help="Checkpoint every this many steps.")
    ap.add_argument(
        "--step-seconds",
        type=float,
        default=0.0,
        help="Stands for the compute of one step of the global batch on one node: each rank pauses its share of it.",
    )
    args = ap.parse_args()

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    if args.global_batch % world:
        raise SystemExit(f"the global batch {args.global_batch} does not split into {world} equal slices")
    per = args.global_batch // world
    torch.manual_seed(0)
    model = torch.nn.Linear(FEATURES, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    ckpt = args.checkpoint_dir / "checkpoint.pt"
    step = 0
    if ckpt.exists():
        state = torch.load(ckpt, weights_only=True)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        step = int(state["step"])
    ddp = DistributedDataParallel(model)
    progress = args.checkpoint_dir / "progress.jsonl"
    while step < args.steps:
        x, y = batch(step, args.global_batch)
        xs, ys = x[rank * per : (rank + 1) * per], y[rank * per : (rank + 1) * per]
        loss = torch.nn.functional.mse_loss(ddp(xs), ys)
        opt.zero_grad()
        loss.backward()
        opt.step()
        step += 1
        if rank == 0:
            if step % args.every == 0 or step == args.steps:
                save(ckpt, {"model": model.state_dict(), "optimizer": opt.state_dict(), "step": step})
            with open(progress, "a") as fh:
                fh.write(json.dumps({"step": step, "world": world, "loss": loss.item(), "time": time.time()}) + "\n")
        if args.step_seconds:
            time.sleep(args.step_seconds / world)
    if rank == 0:
        weights = [p.detach().flatten().tolist() for p in model.parameters()]
        (args.checkpoint_dir / "final.json").write_text(json.dumps({"step": step, "weights": weights}) + "\n")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
