"""Thin adapters over external systems (Slurm commands, NVML, Kubernetes).

Everything outside this package is pure: it takes data in and returns data or
text out.  Adapters implement the small Protocols defined next to them and are
the only place that talks to processes, devices or APIs.
"""
