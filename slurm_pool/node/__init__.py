"""Node side of the pool: prolog, epilog and health check (run as root by slurmd).

Import little here: these hooks run for every job, so their import graph is
kept to the standard library plus this package (no pydantic, jinja, click on
the fast path ``python3 -I -m slurm_pool.node <hook>``).
"""
