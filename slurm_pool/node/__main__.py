"""``python3 -I -m slurm_pool.node {prolog,epilog,healthcheck} [--config PATH] [--node NAME] [--ack-xids]``.

The fast entry point for slurm.conf's Prolog=, Epilog= and
HealthCheckProgram= (through the scripts :func:`slurm_pool.nodeconf.render_hook`
writes): no click, no argparse -- it imports only a few standard modules and
``slurm_pool.node``.
"""

from __future__ import annotations

import sys

USAGE = "usage: python3 -m slurm_pool.node {prolog,epilog,healthcheck} [--config PATH] [--node NAME] [--ack-xids]"


def parse(argv: list[str]) -> tuple[str, dict[str, object]]:
    """``(hook, options)``; raises ValueError on bad usage."""
    if not argv or argv[0] not in ("prolog", "epilog", "healthcheck"):
        raise ValueError("the first argument must be prolog, epilog or healthcheck")
    hook, rest = argv[0], list(argv[1:])
    opts: dict[str, object] = {"config": None, "node": None, "ack_xids": False}
    while rest:
        arg = rest.pop(0)
        key, eq, val = arg.partition("=")
        if key in ("--config", "--node"):
            if not eq:
                if not rest:
                    raise ValueError(f"{key} needs a value")
                val = rest.pop(0)
            opts[key[2:]] = val
        elif arg == "--ack-xids" and hook == "healthcheck":
            opts["ack_xids"] = True
        else:
            raise ValueError(f"unknown argument {arg!r}")
    return hook, opts


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] in (["-h"], ["--help"]):
        print(USAGE)
        return 0
    try:
        hook, opts = parse(args)
    except ValueError as exc:
        print(f"{USAGE}\nerror: {exc}", file=sys.stderr)
        return 2
    from slurm_pool.node.hooks import main as run

    return run(hook, opts["config"], node=opts["node"], ack_xids=bool(opts["ack_xids"]))  # type: ignore[arg-type]


if __name__ == "__main__":
    sys.exit(main())
