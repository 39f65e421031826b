#!/usr/bin/env python3
"""A deterministic stand-in for a training job, for checkpoint/preemption tests.

The "model" is a SHA-256 hash chain: ``state[0] = sha256(seed)``,
``state[i+1] = sha256(state[i] || i)``.  The final state after ``--steps``
steps is the same however often the job is preempted and resumed, so a run
that was interrupted N times must print the same ``final=`` as
``train_sim.py --expect``.

It checkpoints every ``--every`` steps and whenever Slurm asks (preemption,
time limit), through :class:`slurm_pool.checkpoint.Checkpointer`, and resumes
from the newest complete checkpoint.  Every line it prints starts with
``train_sim:`` and carries ``key=value`` fields, e.g.::

    train_sim: start job=42 restart=1 resume_step=380 dir=/ckpt/alice/42
    train_sim: checkpoint step=400 why=periodic
    train_sim: signal step=437 reason=preempt time_left=18.2
    train_sim: checkpoint step=437 why=preempt
    train_sim: stop step=437 reason=preempt exit=85
    train_sim: done steps=1000 final=5f0c...

Lost work per preemption = (``stop``/last ``step`` before the interruption)
minus the next run's ``resume_step``; it must not exceed ``--every``.

Usage (in a batch script)::

    exec slurm-pool run -- python3 examples/train_sim.py --steps 1000 --every 50 --step-time 0.1
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time


def advance(state: bytes, step: int) -> bytes:
    """One deterministic training step."""
    return hashlib.sha256(state + step.to_bytes(8, "little")).digest()


def initial(seed: str) -> bytes:
    return hashlib.sha256(seed.encode()).digest()


def expected(seed: str, steps: int) -> str:
    """The final state of an uninterrupted run."""
    s = initial(seed)
    for i in range(steps):
        s = advance(s, i)
    return s.hex()


def say(**fields: object) -> None:
    event = fields.pop("event")
    print(f"train_sim: {event} " + " ".join(f"{k}={v}" for k, v in fields.items()), flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--every", type=int, default=50, help="checkpoint interval in steps")
    p.add_argument("--step-time", type=float, default=0.1, help="seconds per step (simulated work)")
    p.add_argument("--seed", default="slurm-pool")
    p.add_argument("--checkpoint-dir", default=None)
    p.add_argument("--payload-kib", type=int, default=0, help="pad each checkpoint with this much data")
    p.add_argument("--expect", action="store_true", help="print the uninterrupted final state and exit")
    args = p.parse_args(argv)
    if args.expect:
        say(event="expect", steps=args.steps, final=expected(args.seed, args.steps))
        return 0

    from slurm_pool.checkpoint import Checkpointer

    ck = Checkpointer(args.checkpoint_dir)
    blob = ck.load()
    if blob is not None:
        saved = json.loads(blob)
        if saved.get("seed") != args.seed:
            print("train_sim: checkpoint is for another seed", file=sys.stderr)
            return 2
        step, state = int(saved["step"]), bytes.fromhex(saved["state"])
    else:
        step, state = 0, initial(args.seed)
    say(event="start", job=os.environ.get("SLURM_JOB_ID", "-"), restart=ck.restart_count,
        resume_step=step, dir=ck.directory)
    pad = hashlib.sha256(b"pad").digest() * (args.payload_kib * 32)

    def save(why: str) -> None:
        doc = json.dumps({"seed": args.seed, "step": step, "state": state.hex()}).encode()
        files = {"state": doc, "pad": pad} if pad else doc
        ck.save(step, files, meta={"why": why})
        say(event="checkpoint", step=step, why=why)

    while step < args.steps:
        if ck.requested:
            say(event="signal", step=step, reason=ck.reason,
                time_left="-" if ck.time_left is None else f"{ck.time_left:.1f}")
            save(ck.reason or "request")
            if ck.should_stop:
                say(event="stop", step=step, reason=ck.reason, exit=85)
                ck.exit()
        state = advance(state, step)
        step += 1
        if args.step_time:
            time.sleep(args.step_time)
        if step % args.every == 0 and step < args.steps:
            save("periodic")
    save("final")
    say(event="done", steps=step, final=state.hex())
    return 0


if __name__ == "__main__":
    sys.exit(main())
