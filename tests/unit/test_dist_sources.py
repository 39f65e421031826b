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


# ``build.py --source REV``: an earlier commit's files, packaged by today's packaging.
#: A commit of this repository before docs/logrotate/ existed (its __version__ is 0.1.0); the
#: upgrade test (tests/integration/test_upgrade_e2e.py) builds its package as the earlier release.
BEFORE_LOGROTATE = "1b4b477fec9dbc83abd0fd52effed092349df33f"


def test_a_revision_is_staged_as_git_has_it(tmp_path):
    commit = build.stage_revision(tmp_path, BEFORE_LOGROTATE[:7])
    assert commit == BEFORE_LOGROTATE
    tracked = subprocess.run(
        ["git", "ls-tree", "-r", "--name-only", commit], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split()
    staged = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file() or p.is_symlink())
    assert staged == sorted(tracked)
    shown = subprocess.run(
        ["git", "show", f"{commit}:slurm_pool/__init__.py"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout
    assert (tmp_path / "slurm_pool" / "__init__.py").read_text() == shown
    assert build.project_version(tmp_path) == "0.1.0"


def test_packaging_a_revision_predates_is_taken_from_the_checkout(tmp_path):
    build.stage_revision(tmp_path, BEFORE_LOGROTATE)
    assert not (tmp_path / "docs/logrotate/slurm-pool").exists()
    before = {name: (tmp_path / name).read_bytes() for name in build.packaging_inputs() if (tmp_path / name).exists()}
    missing = [name for name in build.packaging_inputs() if name not in before]
    assert "docs/logrotate/slurm-pool" in missing and "docs/cron/slurm-pool-rebalance" not in missing
    assert build.borrow_packaging(tmp_path) == missing
    assert all((tmp_path / name).read_bytes() == (REPO / name).read_bytes() for name in missing)
    assert all((tmp_path / name).read_bytes() == data for name, data in before.items())  # the revision's own kept


def test_the_checkout_lacks_no_packaging_input():
    assert all((REPO / name).is_file() for name in build.packaging_inputs())


@pytest.mark.parametrize(
    "rev, error",
    [
        ("--output=/tmp/x", "is not a git revision"),
        ("-h", "is not a git revision"),
        ("HEAD\n", "is not a git revision"),
        ("main;true", "is not a git revision"),
        ("", "is not a git revision"),
        ("0" * 40, "is no commit of this repository"),
        ("no-such-branch-here", "is no commit of this repository"),
    ],
)
def test_a_source_that_is_no_revision_is_refused(tmp_path, rev, error):
    with pytest.raises(build.BuildError, match=error):
        build.stage_revision(tmp_path, rev)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("argv", [["--source=-x"], ["--source", "0" * 40]])
def test_build_main_says_what_is_wrong_with_the_source(tmp_path, capsys, argv):
    assert build.main(["--out", str(tmp_path / "out"), *argv]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: --source: ") and "Traceback" not in err
    assert not (tmp_path / "out").exists()
