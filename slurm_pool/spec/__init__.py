"""The versioned pool spec: schema, loading and cross-field rules.  Pure."""

from slurm_pool.spec.load import load_spec, load_spec_hashed, load_spec_text, parse_spec
from slurm_pool.spec.model import PoolSpec

__all__ = ["PoolSpec", "load_spec", "load_spec_hashed", "load_spec_text", "parse_spec"]
