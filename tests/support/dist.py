"""The release artefacts for tests: ``scripts/dist/build.py`` into a scratch directory, and the
.deb's post-install run with every path it writes moved under a scratch root.

The post-install script runs unchanged except for those paths; no package index is reachable
while it runs, so the venv comes from the package's own wheels or not at all.  The checkout's
artefacts are built once per session (the fixture ``current_dist``).
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("dist_build", REPO / "scripts" / "dist" / "build.py")
assert _spec is not None and _spec.loader is not None
build = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(build)

#: The .deb's absolute paths that its scripts write or test, each moved under the scratch root.
MOVED = ("/opt/slurm-pool", "/usr/share/slurm-pool", "/etc/slurm-pool", "/var/log/slurm-pool", "/run/systemd/system")
#: An absolute path the moved scripts may still name: none outside the scratch root.
_ABSOLUTE = re.compile(r"(?<![\w.-])/(?:opt|etc|var|run|usr/share)/")


def run(*cmd: str | Path, **kw) -> str:
    """Run ``cmd``; its stdout (an AssertionError with its output when it fails)."""
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=900, **kw)
    assert proc.returncode == 0, f"{cmd}: {proc.stdout}{proc.stderr}"
    return proc.stdout


def build_dist(out: Path, source: str | None = None) -> Path:
    """The four artefacts in ``out``: the checkout's, or those of the git revision ``source``."""
    run(sys.executable, REPO / "scripts" / "dist" / "build.py", "--out", out, *(["--source", source] if source else []))
    return out


def deb_in(dist: Path, version: str) -> Path:
    """The .deb of ``version`` that :func:`build_dist` put into ``dist``."""
    return dist / f"slurm-pool_{build.package_version(version)}-{build.PACKAGE_RELEASE}_all.deb"


@pytest.fixture(scope="session")
def current_dist(tmp_path_factory) -> Path:
    """The checkout's artefacts, built once for every test that installs them."""
    return build_dist(tmp_path_factory.mktemp("dist"))


def install_deb(deb: Path, root: Path) -> Path:
    """Unpack ``deb`` into ``root/pkg`` and run its postinst moved under ``root``; the venv's directory.

    The moved postinst and postrm are left as ``root/postinst`` and ``root/postrm``.
    """
    run("dpkg-deb", "-x", deb, root / "pkg")
    run("dpkg-deb", "-e", deb, root / "ctl")
    for name in ("postinst", "postrm"):
        text = (root / "ctl" / name).read_text()
        for path in MOVED:
            text = text.replace(
                path, str(root / "pkg" / path[1:]) if path == "/usr/share/slurm-pool" else f"{root}{path}"
            )
        code = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
        assert not _ABSOLUTE.findall(code.replace(str(root), "ROOT")), code
        (root / name).write_text(text)
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "PIP_NO_COMPILE": "1", "PIP_INDEX_URL": "http://127.0.0.1:9/simple"}
    # root's umask as strict as a hardened site's: the venv must still be readable by the jobs' users
    script = f"umask 077 && exec sh {root / 'postinst'} configure"
    proc = subprocess.run(["sh", "-c", script], capture_output=True, text=True, timeout=900, env=env)
    assert proc.returncode == 0 and "do not fit" not in proc.stderr, proc.stdout + proc.stderr
    return root / "opt/slurm-pool"


def upgrade_deb(deb: Path, root: Path) -> Path:
    """Install ``deb`` over the package :func:`install_deb` put under ``root``, as dpkg does: the old
    package's files are replaced by the new one's, then the new postinst replaces the venv; the venv."""
    for old in ("pkg", "ctl", "postinst", "postrm"):
        path = root / old
        shutil.rmtree(path) if path.is_dir() else path.unlink(missing_ok=True)
    return install_deb(deb, root)
