"""``python -m slurm_pool`` is ``slurm-pool``."""

from slurm_pool.cli import main

main()
