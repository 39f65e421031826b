"""The torch environment of the elastic-training tests, cached outside the repository.

PyPI's torch wheel pulls its nvidia-* packages even for CPU work (a ~5.4 GB
venv), so it is installed once, only for these tests, into
``<cache>/elastic-torch-<hash>`` (see :mod:`slurm_pool.localcluster.cachedenv`).

    python3 -m tests.support.elastic_env build
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from slurm_pool.localcluster.cachedenv import CachedEnv, EnvError

TORCH = CachedEnv("elastic-torch", ("torch==2.15.0",), programs=("venv/bin/torchrun",))


def progress(workdir: Path) -> list[dict]:
    """The training's ``progress.jsonl`` (examples/elastic_train.py): one row per step rank 0 ran."""
    path = workdir / "progress.jsonl"
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]


def worlds(rows: list[dict]) -> list[int]:
    """World sizes in the order the training ran at them (repeats folded)."""
    out: list[int] = []
    for r in rows:
        if not out or out[-1] != r["world"]:
            out.append(r["world"])
    return out


def main(argv: list[str] | None = None) -> int:
    args = argv if argv is not None else sys.argv[1:]
    if args != ["build"]:
        print("usage: python3 -m tests.support.elastic_env build", file=sys.stderr)
        return 2
    try:
        print(TORCH.build().root)
    except EnvError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
