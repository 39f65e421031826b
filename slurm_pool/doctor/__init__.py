"""``slurm-pool doctor``: a running cluster against what the pool spec renders.

* :mod:`slurm_pool.doctor.diagnose` -- what is asked of Slurm, and every check;
* :mod:`slurm_pool.doctor.coexist`, :mod:`~slurm_pool.doctor.nodes`,
  :mod:`~slurm_pool.doctor.installed` -- the checks of a pool in a site's cluster,
  of its node lines and of the installed files;
* :mod:`slurm_pool.doctor.includes` -- ``Include`` lines followed as Slurm follows them;
* :mod:`slurm_pool.doctor.cli` -- the command.

The ``guarantees`` check lives with the guarantees (:mod:`slurm_pool.guarantees.check`);
what every check reports is a :class:`slurm_pool.findings.Finding`.
"""
