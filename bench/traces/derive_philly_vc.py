#!/usr/bin/env python3
"""Derive ``philly_vc_arrivals_30d.csv`` from Gavel's Philly virtual-cluster traces.

Keeps, for six virtual clusters, each job's arrival time and GPU count from
the first 30 days (the columns the pool simulator uses), as
``vc,arrival_seconds,num_gpus``.  Gavel's job types and step counts are
dropped: they were assigned by Gavel, not measured in Philly.

    python3 bench/traces/derive_philly_vc.py GAVEL_MSR_SEED0_DIR > bench/traces/philly_vc_arrivals_30d.csv
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from slurm_pool.sim.workload import DAY, arrivals_csv, parse_vc_trace  # noqa: E402

VCS = ("0e4a51", "103959", "b436b2", "6c71a0", "ed69ec", "2869ce")
WINDOW = 30 * DAY


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        sys.exit(__doc__)
    src = Path(argv[0])
    rows = {}
    for vc in VCS:
        arrivals = parse_vc_trace((src / f"{vc}.trace").read_text(), f"{vc}.trace")
        rows[vc] = [a for a in arrivals if a.time < WINDOW]
    sys.stdout.write(arrivals_csv(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
