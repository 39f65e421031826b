"""The SPANK plugin's Python side: ``slurm-pool spank build`` (:mod:`slurm_pool.spank.cli`).

The plugin's C source is the checkout's ``spank/`` (installed as data files).
"""
