"""Test harnesses that run real infrastructure locally.

``slurm_pool.testing.k8s`` builds (from pinned Go modules) and runs a real
Kubernetes control plane on loopback, with kwok nodes that mirror the Slurm
pool's nodes; ``slurm_pool.testing.k8s_controller`` is a small stand-in for the
KServe controller.  Nothing here is used at run time by the plugin or bridge.
"""
