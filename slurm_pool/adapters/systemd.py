"""systemd's units through ``systemctl``: the one place that names its commands."""

from __future__ import annotations

from slurm_pool.adapters.runner import Runner


def stop_and_disable(runner: Runner, unit: str) -> None:
    """``systemctl disable --now UNIT``: stopped, and no longer started at boot or by its timer."""
    runner.run(["systemctl", "disable", "--now", unit])


def reload_units(runner: Runner) -> None:
    """``systemctl daemon-reload``: systemd forgets the unit files that were removed."""
    runner.run(["systemctl", "daemon-reload"])
