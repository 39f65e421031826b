"""Test harnesses: real infrastructure run locally for the tests (not installed).

* :mod:`tests.support.slurm_cluster` -- one local Slurm cluster per test
  session (``ClusterHandle`` and the helpers the daemon tests use).
* :mod:`tests.support.k8s` builds (from the pinned Go modules in
  ``tests/k8s/go``) and runs a real Kubernetes control plane on loopback, with
  kwok nodes that mirror the Slurm pool's nodes; ``python3 -m tests.support.k8s
  build`` from the repository root.
* :mod:`tests.support.kserve` runs KServe's own controller manager (built
  like the control plane, its YAML read from the Go module cache);
  :mod:`tests.support.k8s_fixtures` is the pytest plugin that
  ``tests/conftest.py`` loads.

Nothing here is used by the package at run time; the package (``slurm_pool``)
never imports it.
"""
