"""The embedded local cluster: real Slurm daemons on one machine."""
