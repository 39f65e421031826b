"""The pool's policy layer: the generated job_submit.lua and the SPANK plugin's config.

``render_job_submit(spec)`` gives the text of job_submit.lua; the SPANK plugin
(C, under ``spank/``) is loaded through the rendered plugstack.conf.
"""

from slurm_pool.policy.lua import render_job_submit
from slurm_pool.policy.tables import PolicyTables, build_tables

__all__ = ["PolicyTables", "build_tables", "render_job_submit"]
