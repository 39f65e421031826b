"""The bridge: lend idle Slurm GPU nodes to a Kubernetes (KServe) inference tier.

A level-triggered reconcile, one per ``slurm-pool rebalance`` run (cron):

* :mod:`~slurm_pool.bridge.model` - the observed snapshot of both systems, built
  from plain Slurm/Kubernetes data (pure);
* :mod:`~slurm_pool.bridge.plan` - desired state and the steps to reach it (pure);
* :mod:`~slurm_pool.bridge.execute` - runs the steps, one node's failure never
  stops the others;
* :mod:`~slurm_pool.bridge.slurm_side` and :mod:`~slurm_pool.bridge.k8s` - the
  two thin adapters;
* :mod:`~slurm_pool.bridge.reconcile` and :mod:`~slurm_pool.bridge.cli` - glue.

All state lives in Slurm and Kubernetes: the placeholder job's comment
(``slurm-pool:lend node=NODE``), the node label ``slurm-pool/lent``, the taint
``slurm-pool/reclaimed`` and the annotation ``slurm-pool/reclaim-since``.
"""
