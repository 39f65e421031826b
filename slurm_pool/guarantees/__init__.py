"""Floating guarantees, beyond the spec's section (:mod:`slurm_pool.spec.guarantees`).

* :mod:`slurm_pool.guarantees.check` -- ``doctor``'s ``guarantees`` check; pure;
* :mod:`slurm_pool.guarantees.cli` -- ``slurm-pool guarantees reconcile``: overflowed
  jobs moved back into their guarantee (planned by :mod:`slurm_pool.policy.overflow`,
  which reads the tags job_submit.lua writes).
"""
