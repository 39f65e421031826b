"""``python3 -m slurm_pool.checkpoint [OPTIONS] -- CMD ...``: ``slurm-pool run`` without click.

For job environments that have Python and slurm_pool on ``PYTHONPATH`` but
not the CLI's dependencies (containers, a system python).  Options as for
``slurm-pool run``: ``--checkpoint-dir DIR``, ``--warn-seconds N``,
``--max-self-requeues N``, ``--poll SECONDS``.
"""

from __future__ import annotations

import sys
from typing import Callable

from slurm_pool.text import shown, strict_float, strict_int

USAGE = (
    "usage: python3 -m slurm_pool.checkpoint [--checkpoint-dir DIR] [--warn-seconds N] "
    "[--max-self-requeues N] [--poll SECONDS] -- CMD ..."
)
_OPTS: dict[str, Callable[[str], str | int | float]] = {
    "--checkpoint-dir": str,
    "--warn-seconds": strict_int,
    "--max-self-requeues": strict_int,
    "--poll": strict_float,
}


def parse(argv: list[str]) -> tuple[dict[str, object], list[str]]:
    """``(options, command)``; raises ValueError on bad usage."""
    opts: dict[str, object] = {}
    rest = list(argv)
    while rest and rest[0] != "--" and rest[0].startswith("--"):
        arg = rest.pop(0)
        key, eq, val = arg.partition("=")
        if key not in _OPTS:
            raise ValueError(f"unknown option {key}")
        if not eq:
            if not rest:
                raise ValueError(f"{key} needs a value")
            val = rest.pop(0)
        try:
            value = _OPTS[key](val)
        except ValueError:
            raise ValueError(f"{key}: bad value {val!r}") from None
        if not isinstance(value, str) and value < 0:
            raise ValueError(f"{key}: {val!r} is below 0")
        opts[key[2:].replace("-", "_")] = value
    if rest[:1] == ["--"]:
        rest = rest[1:]
    if not rest:
        raise ValueError("no command given")
    return opts, rest


def main(argv: list[str] | None = None) -> int:
    try:
        opts, cmd = parse(sys.argv[1:] if argv is None else argv)
    except ValueError as exc:
        print(f"{USAGE}\nerror: {shown(exc)}", file=sys.stderr)
        return 2
    from slurm_pool.checkpoint.settings import resolve
    from slurm_pool.checkpoint.supervisor import Supervisor

    def given(key: str) -> str | None:
        value = opts.get(key)
        return None if value is None else str(value)

    def count(key: str) -> int | None:
        value = given(key)
        return None if value is None else int(value)

    try:
        st = resolve(
            checkpoint_dir=given("checkpoint_dir"),
            warn_seconds=count("warn_seconds"),
            max_self_requeues=count("max_self_requeues"),
        )
    except ValueError as exc:
        print(f"error: {shown(exc)}", file=sys.stderr)
        return 2
    return Supervisor(cmd, st, poll_seconds=float(given("poll") or 0.0)).run()


if __name__ == "__main__":
    sys.exit(main())
