"""Commands asked of a remote ``slurm-pool serve`` (``slurm-pool --remote URL ...``), through the SDK.

The SDK itself is :mod:`slurm_pool.client` (a top-level module: its users import it by that name).
"""
