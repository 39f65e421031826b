"""``slurm-pool uninstall``: take the pool out of a site's cluster (:mod:`slurm_pool.uninstall.run`)."""
