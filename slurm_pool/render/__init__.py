"""Pure renderers: spec in, configuration text out."""

from slurm_pool.render.render import render_all
from slurm_pool.render.site import Site
from slurm_pool.versions import SlurmVersion

__all__ = ["Site", "SlurmVersion", "render_all"]
