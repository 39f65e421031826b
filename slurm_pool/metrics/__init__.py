"""Prometheus metrics for the pool: a per-scrape collector and the ``exporter`` command."""
