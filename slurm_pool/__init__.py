"""slurm-pool: one shared, preemptible GPU pool on Slurm."""

__version__ = "0.1.0"
