"""Build slurm-pool's release artefacts: the wheel, the sdist, a Debian 12 .deb and an EL9 .rpm.

    python scripts/dist/build.py [--out dist] [--cache DIR] [--offline] [--source REV]

The version is ``slurm_pool.__version__`` and names every artefact.  The sources are the
checkout's files that git tracks or would track (nothing ignored), copied to a scratch
directory first, so a build never writes into the checkout and two builds never meet.
With ``--source REV`` they are the files of that git revision of this repository instead
(``git archive``), packaged by this checkout's packaging: an earlier release rebuilt, for an
upgrade or a rollback.  A packaging file that the revision predates (a unit, a cron entry, the
sudoers drop-in, the logrotate config) is taken from the checkout, and the build names it on stderr.

Both packages carry the project's wheel and its runtime dependencies' wheels (with the
``console`` and ``k8s`` extras) for the interpreter that runs this script, so a site
without a package index installs them; their post-install script builds the venv
``/opt/slurm-pool`` from those wheels.  The dependencies' wheels are kept in ``--cache``
and fetched with pip only when the cache lacks one (never with ``--offline``).

Everything is built in a scratch directory and moved into ``--out`` at the end: all four
artefacts or none.  Needs ``dpkg-deb``, ``fakeroot`` and ``rpmbuild`` (``make deps``).
"""

from __future__ import annotations

import argparse
import configparser
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
#: What the packages install into their venv; the post-install script names the same.
EXTRAS = ("console", "k8s")
#: The version forms this script turns into Debian's and RPM's: 1.2.3, 1.2.3rc1, 1.2.3.post1, 1.2.3.dev4.
VERSION_RE = re.compile(r"(\d+(?:\.\d+){1,3})((?:a|b|rc)\d+)?(\.post\d+)?(\.dev\d+)?")
PACKAGE_RELEASE = "1"
UNITS = (
    "slurm-pool-exporter.service",
    "slurm-pool-rebalance.service",
    "slurm-pool-rebalance.timer",
    "slurm-pool-serve.service",
)
#: The sudoers drop-in the console's unit needs, shipped for the admin to install (never installed by the package).
SUDOERS = "slurm-pool"
CRON = ("slurm-pool-rebalance", "slurm-pool-guarantees-reconcile")
SPANK = ("Makefile", "slurm_pool_spank.c", "pool_opts.c", "pool_opts.h")
SPANK_README = """\
The SPANK plugin's source (slurm_pool_spank.so).  A SPANK plugin loads only into the Slurm whose
headers built it, so it is compiled on each node, against the site's Slurm:

    slurm-pool spank build [--slurm-include DIR | --slurm-prefix DIR] [--out DIR]

It needs gcc, make and Slurm's headers (Debian: libslurm-dev; EL9: slurm-devel) and compiles the
copy the venv holds (/opt/slurm-pool/share/slurm-pool/spank), the same files as this directory.
Then name the .so in plugstack.conf (see docs/operations.md).
"""


class BuildError(Exception):
    """A step of the build failed; the message says which."""


def run(cmd: list[str], cwd: Path | None = None, env: dict[str, str] | None = None) -> str:
    """Run ``cmd``; its stdout, or :class:`BuildError` with its output."""
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise BuildError(f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stdout}{proc.stderr}")
    return proc.stdout


def project_version(root: Path) -> str:
    """``__version__`` from ``slurm_pool/__init__.py``, the one place it is written."""
    m = re.search(r'^__version__ = "([^"]+)"$', (root / "slurm_pool" / "__init__.py").read_text(), re.M)
    if m is None or not VERSION_RE.fullmatch(m.group(1)):
        raise BuildError(f"slurm_pool/__init__.py: no __version__ of the form {VERSION_RE.pattern}")
    return m.group(1)


def package_version(version: str) -> str:
    """The version as Debian and RPM order it: pre-releases and dev builds sort before the release (``~``)."""
    m = VERSION_RE.fullmatch(version)
    assert m is not None
    base, pre, post, dev = m.groups()
    out = base + (f"~{pre}" if pre else "") + (f"+{post[1:]}" if post else "")
    return out + (f"~{dev[1:]}" if dev else "")


def stage_sources(dest: Path) -> None:
    """Copy the files git tracks or would track (untracked, not ignored) into ``dest``."""
    listed = run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO)
    for name in sorted(set(filter(None, listed.split("\0")))):
        src = REPO / name
        if src.is_file() and not src.is_symlink():  # a tracked file deleted in the work tree is left out
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)


#: A git revision as ``--source`` takes it: a commit id, a tag or a branch name, never an option.
REVISION_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/@{}^~-]{0,199}")


def stage_revision(dest: Path, rev: str) -> str:
    """The files of git revision ``rev`` of this repository into ``dest``; its full commit id."""
    if not REVISION_RE.fullmatch(rev):
        raise BuildError(f"--source: {rev!r} is not a git revision")
    try:
        commit = run(["git", "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"], cwd=REPO).strip()
    except BuildError:
        raise BuildError(f"--source: {rev!r} is no commit of this repository") from None
    archive = subprocess.run(["git", "archive", "--format=tar", commit], cwd=REPO, capture_output=True, check=False)
    if archive.returncode != 0:
        raise BuildError(f"git archive {commit} exited {archive.returncode}: {archive.stderr.decode(errors='replace')}")
    untar = subprocess.run(["tar", "-x", "-C", str(dest)], input=archive.stdout, capture_output=True, check=False)
    if untar.returncode != 0:
        raise BuildError(f"tar -x of {commit} exited {untar.returncode}: {untar.stderr.decode(errors='replace')}")
    return commit


def packaging_inputs() -> list[str]:
    """The files of the sources that :func:`payload` packages (besides the docs and the Python package)."""
    return [
        *(f"spank/{name}" for name in SPANK),
        *(f"docs/cron/{name}" for name in CRON),
        *(f"docs/systemd/{name}" for name in UNITS),
        f"docs/sudoers/{SUDOERS}",
        "docs/logrotate/slurm-pool",
        "README.md",
        "CHANGELOG.md",
    ]


def borrow_packaging(src: Path) -> list[str]:
    """Copy from the checkout the packaging inputs that the staged ``src`` lacks; their names."""
    borrowed = []
    for name in packaging_inputs():
        if not (src / name).is_file() and (REPO / name).is_file():
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, src / name)
            borrowed.append(name)
    return borrowed


def build_python(src: Path, out: Path) -> tuple[Path, Path]:
    """The sdist and the wheel, through setuptools' PEP 517 hooks with this interpreter's setuptools."""
    hooks = (
        "import sys; from setuptools import build_meta as b; out = sys.argv[1]; "  # the hooks rewrite sys.argv
        "s = b.build_sdist(out); w = b.build_wheel(out); print('\\nbuilt:', s, w)"
    )
    said = run([sys.executable, "-c", hooks, str(out)], cwd=src)
    names = [line for line in said.splitlines() if line.startswith("built: ")][-1].split()[1:]
    return out / names[0], out / names[1]


def requirements(src: Path) -> list[str]:
    """The runtime requirements and those of :data:`EXTRAS`, from setup.cfg."""
    cfg = configparser.ConfigParser()
    cfg.read(src / "setup.cfg")
    lines = cfg["options"]["install_requires"].splitlines()
    for extra in EXTRAS:
        lines += cfg["options.extras_require"][extra].splitlines()
    return sorted({line.strip() for line in lines if line.strip()})


def wheelhouse(reqs: list[str], cache: Path, dest: Path, offline: bool) -> None:
    """Wheels of ``reqs`` and their dependencies into ``dest``: from ``cache``, filled by pip when it lacks one."""
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "wheel", "--quiet"]
    cache.mkdir(parents=True, exist_ok=True)
    local = [*pip, "--no-index", "--find-links", str(cache), "-w", str(dest), *reqs]
    try:
        run(local)
        return
    except BuildError:
        if offline:
            raise
    run([*pip, "--find-links", str(cache), "-w", str(cache), *reqs])
    for stale in dest.iterdir():
        stale.unlink()
    run(local)


def payload(root: Path, src: Path, wheels: Path, unitdir: str) -> None:
    """The files both packages install, under ``root``."""
    share, doc = root / "usr/share/slurm-pool", root / "usr/share/doc/slurm-pool"
    made = [
        share / "wheels",
        share / "spank",
        share / "cron",
        share / "sudoers",
        doc / "docs",
        root / unitdir.lstrip("/"),
    ]
    for d in made:
        d.mkdir(parents=True)
    for w in sorted(wheels.iterdir()):
        shutil.copy2(w, share / "wheels" / w.name)
    for name in SPANK:
        shutil.copy2(src / "spank" / name, share / "spank" / name)
    (share / "spank" / "README").write_text(SPANK_README)
    for name in CRON:
        shutil.copy2(src / "docs" / "cron" / name, share / "cron" / name)
    for name in UNITS:
        shutil.copy2(src / "docs" / "systemd" / name, root / unitdir.lstrip("/") / name)
    shutil.copy2(src / "docs" / "sudoers" / SUDOERS, share / "sudoers" / SUDOERS)
    (root / "etc/logrotate.d").mkdir(parents=True)
    shutil.copy2(src / "docs" / "logrotate" / "slurm-pool", root / "etc/logrotate.d/slurm-pool")
    for name in ("README.md", "CHANGELOG.md"):
        shutil.copy2(src / name, doc / name)
    for md in sorted(p for p in (src / "docs").glob("*.md") if not p.name.endswith(".template.md")):
        shutil.copy2(md, doc / "docs" / md.name)
    (root / "usr/bin").mkdir(parents=True)
    os.symlink("/opt/slurm-pool/bin/slurm-pool", root / "usr/bin/slurm-pool")
    for p in root.rglob("*"):
        if not p.is_symlink():
            p.chmod(0o755 if p.is_dir() else 0o644)


def script(name: str, version: str) -> str:
    """A maintainer script's body from this directory, with the version filled in."""
    return (HERE / name).read_text().replace("@VERSION@", version).rstrip("\n")


def build_deb(src: Path, wheels: Path, version: str, work: Path, out: Path) -> Path:
    """``slurm-pool_<version>-1_all.deb``, with dpkg-deb under fakeroot."""
    root = work / "deb"
    payload(root, src, wheels, "/lib/systemd/system")
    control = root / "DEBIAN"
    control.mkdir()
    size_kib = sum(p.stat().st_size for p in root.rglob("*") if p.is_file() and not p.is_symlink()) // 1024
    text = (HERE / "control.in").read_text().replace("@DEBVERSION@", f"{package_version(version)}-{PACKAGE_RELEASE}")
    (control / "control").write_text(text.replace("@INSTALLED_SIZE@", str(size_kib)).replace("@VERSION@", version))
    (control / "conffiles").write_text("/etc/logrotate.d/slurm-pool\n")
    sums = []
    for p in sorted(root.rglob("*")):
        if p.is_file() and not p.is_symlink() and control not in p.parents and not str(p).startswith(str(root / "etc")):
            sums.append(f"{hashlib.md5(p.read_bytes()).hexdigest()}  {p.relative_to(root)}\n")  # dpkg's md5sums format
    (control / "md5sums").write_text("".join(sums))
    steps = {
        "postinst": ("configure", "postinst.sh"),
        "prerm": ("remove|deconfigure", "prerm.sh"),
        "postrm": ("remove|purge", "postrm.sh"),
    }
    for name, (when, body) in steps.items():
        text = f'#!/bin/sh\nset -e\ncase "$1" in\n    {when}) ;;\n    *) exit 0 ;;\nesac\n{script(body, version)}\n'
        (control / name).write_text(text)
        (control / name).chmod(0o755)
    deb = out / f"slurm-pool_{package_version(version)}-{PACKAGE_RELEASE}_all.deb"
    run(["fakeroot", "dpkg-deb", "--root-owner-group", "-Zgzip", "-z6", "--build", str(root), str(deb)])
    return deb


def build_rpm(src: Path, wheels: Path, version: str, work: Path, out: Path) -> Path:
    """``slurm-pool-<version>-1.noarch.rpm``, with rpmbuild (Debian's ``rpm`` package serves)."""
    root = work / "rpmroot"
    payload(root, src, wheels, "/usr/lib/systemd/system")
    spec = (HERE / "slurm-pool.spec.in").read_text()
    fills = {
        "@POSTINST@": script("postinst.sh", version),
        "@PRERM@": script("prerm.sh", version),
        "@POSTRM@": script("postrm.sh", version),
        "@RPMVERSION@": package_version(version),
        "@VERSION@": version,
        "@STAGE@": str(root),
    }
    for key, value in fills.items():
        spec = spec.replace(key, value)
    (work / "slurm-pool.spec").write_text(spec)
    top = work / "rpmbuild"
    run(
        [
            "rpmbuild",
            "-bb",
            "--quiet",
            "--define",
            f"_topdir {top}",
            "--define",
            "_rpmdir %{_topdir}/RPMS",
            "--define",
            "_build_name_fmt %%{NAME}-%%{VERSION}-%%{RELEASE}.%%{ARCH}.rpm",
            "--nodeps",
            str(work / "slurm-pool.spec"),
        ]
    )
    built = top / "RPMS" / f"slurm-pool-{package_version(version)}-{PACKAGE_RELEASE}.noarch.rpm"
    rpm = out / built.name
    shutil.move(built, rpm)
    return rpm


def build(out: Path, cache: Path, offline: bool, source: str | None = None) -> list[Path]:
    """All four artefacts into ``out`` (or none), from the checkout or the git revision ``source``; their paths."""
    for tool in ("git", "dpkg-deb", "fakeroot", "rpmbuild"):
        if shutil.which(tool) is None:
            raise BuildError(f"{tool} is not installed (make deps installs it)")
    with tempfile.TemporaryDirectory(prefix="slurm-pool-dist.") as tmp:
        work = Path(tmp)
        src, made, wheels = work / "src", work / "out", work / "wheels"
        for d in (src, made, wheels):
            d.mkdir()
        if source is None:
            stage_sources(src)
        else:
            commit = stage_revision(src, source)
            for name in borrow_packaging(src):
                print(f"{commit[:12]} has no {name}: taken from the checkout", file=sys.stderr)
        version = project_version(src)
        sdist, wheel = build_python(src, made)
        for path in (sdist, wheel):
            if version not in path.name:
                raise BuildError(f"{path.name} does not carry the version {version}")
        wheelhouse(requirements(src), cache, wheels, offline)
        shutil.copy2(wheel, wheels / wheel.name)
        artefacts = [
            wheel,
            sdist,
            build_deb(src, wheels, version, work, made),
            build_rpm(src, wheels, version, work, made),
        ]
        out.mkdir(parents=True, exist_ok=True)
        for path in artefacts:
            shutil.move(path, out / path.name)  # over an older build's file of the same name
        return [out / p.name for p in artefacts]


def default_cache() -> Path:
    """``$XDG_CACHE_HOME/slurm-pool/wheelhouse`` (``~/.cache`` without it)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "slurm-pool" / "wheelhouse"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "dist", help="where the artefacts go (default: dist/)")
    parser.add_argument("--cache", type=Path, default=default_cache(), help="the dependencies' wheels, kept")
    parser.add_argument("--offline", action="store_true", help="use only the cache's wheels, never fetch")
    parser.add_argument("--source", metavar="REV", help="build this git revision's files, not the work tree's")
    args = parser.parse_args(argv)
    try:
        for path in build(args.out, args.cache, args.offline, args.source):
            print(path)
    except BuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
