"""The release's sources without building: package versions, one log directory, logrotate, maintainer scripts.

tests/integration/test_dist.py builds and inspects the artefacts themselves.
"""

from __future__ import annotations

import re
import subprocess

import pytest

from tests.support.dist import REPO, build

CRON = sorted((REPO / "docs" / "cron").iterdir())
LOGROTATE = REPO / "docs" / "logrotate" / "slurm-pool"
#: A cron line's log: appended to one file in the one log directory.
CRON_LOG = re.compile(r">>/var/log/slurm-pool/[a-z][a-z-]*\.log 2>&1$")
#: Files a site reads for where logs go.
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), *CRON]


@pytest.mark.parametrize(
    "version, debian",
    [
        ("0.1.0", "0.1.0"),
        ("1.2.0rc1", "1.2.0~rc1"),
        ("1.2.0b2", "1.2.0~b2"),
        ("1.2.0.post1", "1.2.0+post1"),
        ("1.2.0.dev3", "1.2.0~dev3"),
    ],
)
def test_package_version_forms(version, debian):
    assert build.package_version(version) == debian


@pytest.mark.parametrize(
    "older, newer",
    [
        ("0.1.0", "0.1.1"),
        ("1.2.0rc1", "1.2.0"),
        ("1.2.0.dev3", "1.2.0"),
        ("1.2.0", "1.2.0.post1"),
        ("1.2.0a1", "1.2.0b1"),
    ],
)
def test_package_versions_sort_as_pythons_do(older, newer):
    """dpkg orders the package versions as PEP 440 orders the Python ones (``~`` sorts before the release)."""
    a, b = build.package_version(older), build.package_version(newer)
    assert subprocess.run(["dpkg", "--compare-versions", a, "lt", b], check=False).returncode == 0


@pytest.mark.parametrize("text", ['__version__ = "1.2"\n', '__version__ = "1.2.0"\n'])
def test_the_version_is_read_from_the_package(tmp_path, text):
    (tmp_path / "slurm_pool").mkdir()
    (tmp_path / "slurm_pool" / "__init__.py").write_text('"""doc"""\n\n' + text)
    assert build.project_version(tmp_path) == text.split('"')[1]


@pytest.mark.parametrize(
    "text", ['__version__ = "1.2.0-1"\n', '__version__ = "v1"\n', "VERSION = '1.0'\n", '__version__ = "1.0 "\n']
)
def test_a_version_the_packages_cannot_carry_is_refused(tmp_path, text):
    (tmp_path / "slurm_pool").mkdir()
    (tmp_path / "slurm_pool" / "__init__.py").write_text(text)
    with pytest.raises(build.BuildError, match="__version__"):
        build.project_version(tmp_path)


def test_the_version_in_the_source_is_one_the_packages_carry():
    from slurm_pool import __version__

    assert build.project_version(REPO) == __version__


@pytest.mark.parametrize("cron", CRON, ids=lambda p: p.name)
def test_every_cron_entry_logs_into_the_one_log_directory(cron):
    entries = [
        line
        for line in cron.read_text().splitlines()
        if line and not line.startswith("#") and "=" not in line.split()[0]
    ]
    assert entries and all(CRON_LOG.search(line) for line in entries), entries


def test_the_cron_lines_in_operations_log_into_the_one_log_directory():
    lines = [
        line.strip()
        for line in (REPO / "docs" / "operations.md").read_text().splitlines()
        if re.match(r"\s*[\d*]+ [\d*]+ \* \* \* root ", line)
    ]
    assert len(lines) >= 2 and all(CRON_LOG.search(line) for line in lines), lines


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_no_doc_names_a_log_outside_the_log_directory(doc):
    assert not re.findall(r"/var/log/slurm-pool[^/\s]", doc.read_text())


@pytest.mark.parametrize("directive", ["weekly", "rotate 8", "compress", "missingok", "notifempty", "copytruncate"])
def test_logrotate_rotates_the_log_directory(directive):
    text = LOGROTATE.read_text()
    (block,) = re.findall(r"^/var/log/slurm-pool/\*\.log \{\n(.*?)^\}", text, flags=re.M | re.S)
    assert directive in [line.strip() for line in block.splitlines()]


@pytest.mark.parametrize("name", ["postinst.sh", "prerm.sh", "postrm.sh", "control.in", "slurm-pool.spec.in"])
def test_no_packaging_source_names_slurms_configuration(name):
    assert not re.findall(r"/etc/slurm(?![-\w])|slurm\.conf", (REPO / "scripts" / "dist" / name).read_text())
