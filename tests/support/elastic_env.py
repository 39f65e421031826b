"""The torch environment of the elastic-training tests, cached outside the repository.

PyPI's torch wheel pulls its nvidia-* packages even for CPU work (a ~5.4 GB
venv), so it is installed once, only for these tests, into
``<cache>/elastic-torch-<hash>`` (see :mod:`slurm_pool.localcluster.cachedenv`).

    python3 -m tests.support.elastic_env build
"""

from __future__ import annotations

import sys

from slurm_pool.localcluster.cachedenv import CachedEnv, EnvError

TORCH = CachedEnv("elastic-torch", ("torch==2.15.0",), programs=("venv/bin/torchrun",))


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
