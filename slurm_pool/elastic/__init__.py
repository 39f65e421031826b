"""Elastic training: a torchrun job with a core of guaranteed nodes that grows into idle GPUs."""
