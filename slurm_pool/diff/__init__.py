"""``slurm-pool diff``: what a new render would change on the running cluster.

* :mod:`slurm_pool.diff.conf` -- the running configuration (partitions, nodes,
  settings, accounting) against the render; pure.
* :mod:`slurm_pool.diff.files` -- the installed files against the render; pure.
* :mod:`slurm_pool.diff.cli` -- the command: asks Slurm, renders, compares.
"""
