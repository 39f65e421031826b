"""The web console, REST API and the service behind them (``slurm-pool serve``)."""
