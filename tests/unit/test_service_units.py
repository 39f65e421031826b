"""The shipped systemd units and sudoers drop-in grant what docs/security.md says, and no more."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.service_user import BOUNDING, SERVICE_USER

DOCS = Path(__file__).resolve().parents[2] / "docs"
#: Options that imply NoNewPrivileges=yes for a unit without CAP_SYS_ADMIN (systemd.exec(5)): sudo would stop.
IMPLY_NNP = ("SystemCallFilter", "SystemCallArchitectures", "RestrictAddressFamilies", "RestrictNamespaces",
             "RestrictRealtime", "RestrictSUIDSGID", "LockPersonality", "MemoryDenyWriteExecute", "PrivateDevices",
             "ProtectKernelModules", "ProtectKernelLogs", "ProtectClock", "ProtectHostname", "DynamicUser")  # fmt: skip


def _settings(name: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for line in (DOCS / "systemd" / name).read_text().splitlines():
        if "=" in line and not line.startswith(("#", "[")):
            key, value = line.split("=", 1)
            out.setdefault(key.strip(), []).append(value.strip())
    return out


UNITS = [
    # (unit, setting, value it must have); None: the setting must be absent
    ("slurm-pool-serve.service", "User", SERVICE_USER),
    ("slurm-pool-serve.service", "Group", SERVICE_USER),
    ("slurm-pool-serve.service", "SupplementaryGroups", "shadow"),
    ("slurm-pool-serve.service", "NoNewPrivileges", "no"),
    ("slurm-pool-serve.service", "CapabilityBoundingSet", "CAP_SETUID CAP_SETGID CAP_AUDIT_WRITE"),
    ("slurm-pool-serve.service", "AmbientCapabilities", ""),
    ("slurm-pool-serve.service", "ProtectSystem", "strict"),
    ("slurm-pool-serve.service", "ProtectHome", "read-only"),
    ("slurm-pool-serve.service", "PrivateTmp", "yes"),
    ("slurm-pool-exporter.service", "DynamicUser", "yes"),
    ("slurm-pool-exporter.service", "NoNewPrivileges", "yes"),
    ("slurm-pool-exporter.service", "ProtectSystem", "strict"),
    ("slurm-pool-exporter.service", "User", None),
    ("slurm-pool-exporter.service", "SupplementaryGroups", None),
    ("slurm-pool-exporter.service", "CapabilityBoundingSet", None),
    *[("slurm-pool-serve.service", option, None) for option in IMPLY_NNP],
]


@pytest.mark.parametrize(("unit", "setting", "value"), UNITS)
def test_a_units_setting(unit: str, setting: str, value: str | None) -> None:
    got = _settings(unit).get(setting)
    assert got == (None if value is None else [value]), (unit, setting, got)


def test_the_daemon_test_runs_serve_with_the_units_bounding_set() -> None:
    caps = _settings("slurm-pool-serve.service")["CapabilityBoundingSet"][0].split()
    assert sorted("+" + c.removeprefix("CAP_").lower() for c in caps) == sorted(BOUNDING.split(","))


def test_the_sudoers_drop_in_allows_the_helper_alone() -> None:
    rules = [ln for ln in (DOCS / "sudoers" / "slurm-pool").read_text().splitlines() if ln and not ln.startswith("#")]
    assert rules == [
        'Defaults!/opt/slurm-pool/bin/slurm-pool-as env_keep += "SLURM_CONF"',
        f"{SERVICE_USER} ALL=(root) NOPASSWD: /opt/slurm-pool/bin/slurm-pool-as",
    ]
    serve = _settings("slurm-pool-serve.service")["ExecStart"][0]
    assert serve.startswith("/opt/slurm-pool/bin/slurm-pool serve ")  # the helper is that venv's slurm-pool-as
