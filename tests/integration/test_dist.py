"""``make dist``: the wheel, the sdist, the .deb and the .rpm, their contents and maintainer scripts.

The artefacts are built once for the session (scripts/dist/build.py into a scratch directory:
``current_dist``, which the installing tests share).
The .deb's post-install script then runs for real with its paths moved into a scratch root:
it builds the venv from the package's own wheels with no index reachable, and the venv's
``slurm-pool render`` reproduces the golden render.  No daemon; nothing outside tmp is written
but the dependency wheel cache the build keeps.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tarfile
import zipfile
from pathlib import Path

import pytest

from slurm_pool import __version__
from tests.support.dist import REPO, build, install_deb, run
from tests.support.golden import GOLDEN, golden_view

EXAMPLE = REPO / "examples" / "pool.yaml"

PKG_VERSION = f"{build.package_version(__version__)}-{build.PACKAGE_RELEASE}"
WHEEL = f"slurm_pool-{__version__}-py3-none-any.whl"
SDIST = f"slurm-pool-{__version__}.tar.gz"
DEB = f"slurm-pool_{PKG_VERSION}_all.deb"
RPM = f"slurm-pool-{PKG_VERSION}.noarch.rpm"
UNITDIR = {"deb": "lib/systemd/system", "rpm": "usr/lib/systemd/system"}
#: What both packages install (the unit directory differs), every unit and cron file of docs/ among them.
PAYLOAD = sorted(
    [
        "etc/logrotate.d/slurm-pool",
        "usr/bin/slurm-pool",
        f"usr/share/slurm-pool/wheels/{WHEEL}",
        "usr/share/slurm-pool/spank/README",
        "usr/share/doc/slurm-pool/README.md",
        "usr/share/doc/slurm-pool/CHANGELOG.md",
        *(f"usr/share/slurm-pool/spank/{p.name}" for p in (REPO / "spank").iterdir() if p.suffix in (".c", ".h")),
        "usr/share/slurm-pool/spank/Makefile",
        *(f"usr/share/slurm-pool/cron/{p.name}" for p in (REPO / "docs" / "cron").iterdir()),
        *(f"usr/share/slurm-pool/sudoers/{p.name}" for p in (REPO / "docs" / "sudoers").iterdir()),
        *(f"UNITDIR/{p.name}" for p in (REPO / "docs" / "systemd").iterdir()),
        *(f"usr/share/doc/slurm-pool/docs/{p.name}" for p in (REPO / "docs").glob("*.md") if ".template" not in p.name),
    ]
)
#: The environment of the installed venv's commands: nothing points them at the checkout.
VENV_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
#: A write to Slurm's configuration: its directory (not /etc/slurm-pool) or slurm.conf by name.
SLURM_CONFIG = re.compile(r"/etc/slurm(?![-\w])|slurm\.conf")


@pytest.fixture(scope="module")
def dist(current_dist) -> Path:
    return current_dist


@pytest.fixture(scope="module")
def listing(dist) -> dict[str, set[str]]:
    """Each package's paths, without the leading ``./`` or ``/``."""
    deb = {line.split(None, 5)[5].split(" -> ")[0][2:] for line in run("dpkg-deb", "-c", dist / DEB).splitlines()}
    rpm = {line[1:] for line in run("rpm", "-qlp", dist / RPM).splitlines()}
    return {"deb": deb, "rpm": rpm}


@pytest.fixture(scope="module")
def scripts(dist, tmp_path_factory) -> dict[str, str]:
    """The .deb's maintainer scripts and the .rpm's scriptlets, by name."""
    ctl = tmp_path_factory.mktemp("control")
    run("dpkg-deb", "-e", dist / DEB, ctl)
    found = {f"deb:{n}": (ctl / n).read_text() for n in ("postinst", "prerm", "postrm")}
    parts = re.split(r"^(\w+) scriptlet \(using /bin/sh\):$", run("rpm", "-qp", "--scripts", dist / RPM), flags=re.M)
    found.update({f"rpm:{name}": body for name, body in zip(parts[1::2], parts[2::2], strict=True)})
    return found


def test_the_four_artefacts_carry_the_version(dist):
    assert sorted(p.name for p in dist.iterdir()) == sorted([WHEEL, SDIST, DEB, RPM])


@pytest.mark.parametrize("kind", ["deb", "rpm"])
@pytest.mark.parametrize("path", PAYLOAD)
def test_each_package_ships(listing, kind, path):
    assert path.replace("UNITDIR", UNITDIR[kind]) in listing[kind]


@pytest.mark.parametrize(
    "cmd, want",
    [
        (["dpkg-deb", "-f", DEB, "Architecture"], "all"),
        (["dpkg-deb", "-f", DEB, "Version"], PKG_VERSION),
        (["dpkg-deb", "-f", DEB, "Depends"], "python3 (>= 3.11), python3-venv"),
        (["rpm", "-qp", "--qf", "%{ARCH} %{VERSION}-%{RELEASE}", RPM], f"noarch {PKG_VERSION}"),
        (["rpm", "-qp", "--requires", RPM], "(python3.11 or python3.12 or python3 >= 3.11)"),
        (["rpm", "-qpc", RPM], "/etc/logrotate.d/slurm-pool"),  # a config file: an upgrade keeps the site's edits
    ],
)
def test_package_metadata(dist, cmd, want):
    assert want in run(*cmd, cwd=dist).splitlines()


def test_the_deb_marks_the_logrotate_config_a_conffile(dist, tmp_path):
    run("dpkg-deb", "-e", dist / DEB, tmp_path / "ctl")
    assert (tmp_path / "ctl" / "conffiles").read_text() == "/etc/logrotate.d/slurm-pool\n"


@pytest.mark.parametrize(
    "name", ["deb:postinst", "deb:prerm", "deb:postrm", "rpm:postinstall", "rpm:preuninstall", "rpm:postuninstall"]
)
def test_no_maintainer_script_touches_slurms_configuration(scripts, name):
    assert not SLURM_CONFIG.findall(scripts[name])


@pytest.mark.parametrize("name", ["deb:postinst", "rpm:postinstall"])
def test_post_install_builds_the_venv_from_the_bundled_wheels(scripts, name):
    text = scripts[name]
    for want in ("PREFIX=/opt/slurm-pool", '-m venv "$PREFIX"', '--no-index --find-links "$WHEELS"'):
        assert want in text
    assert f"REQUIREMENT='slurm-pool[{','.join(build.EXTRAS)}]=={__version__}'" in text


@pytest.mark.parametrize("name", ["deb:postrm", "rpm:postuninstall"])
def test_removal_takes_the_venv_and_leaves_config_and_logs(scripts, name):
    removals = [line for line in scripts[name].splitlines() if line.lstrip().startswith("rm ")]
    assert removals == ["rm -rf /opt/slurm-pool /opt/slurm-pool.old"]


def test_the_rpm_runs_the_same_post_install_as_the_deb(scripts):
    assert scripts["rpm:postinstall"].strip() in scripts["deb:postinst"]


@pytest.mark.parametrize(
    "member",
    [
        "slurm_pool/__init__.py",
        "slurm_pool/render/render.py",
        *(
            f"slurm_pool-{__version__}.data/data/share/slurm-pool/conf_templates/{p.name}"
            for p in (REPO / "conf_templates").glob("*.j2")
        ),
        *(f"slurm_pool-{__version__}.data/data/share/slurm-pool/spank/{n}" for n in build.SPANK),
    ],
)
def test_the_wheel_holds_the_package_and_what_render_needs(dist, member):
    assert member in zipfile.ZipFile(dist / WHEEL).namelist()


@pytest.mark.parametrize(
    "member",
    [
        "setup.cfg",
        "pyproject.toml",
        "slurm_pool/__init__.py",
        "conf_templates/slurm.conf.j2",
        "spank/slurm_pool_spank.c",
    ],
)
def test_the_sdist_builds_a_wheel(dist, member):
    with tarfile.open(dist / SDIST) as tar:
        assert f"slurm-pool-{__version__}/{member}" in tar.getnames()


@pytest.fixture(scope="module")
def scratch(dist, tmp_path_factory) -> Path:
    """The .deb unpacked and its postinst run with every path it writes moved under one scratch root."""
    root = tmp_path_factory.mktemp("root")
    install_deb(dist / DEB, root)
    return root


def test_the_installed_venv_reports_the_version(scratch):
    assert run(scratch / "opt/slurm-pool/bin/slurm-pool", "--version", env=VENV_ENV).split()[-1] == __version__


def test_the_installed_venv_renders_the_golden_files(scratch, tmp_path):
    run(
        scratch / "opt/slurm-pool/bin/slurm-pool",
        "render",
        EXAMPLE,
        "-o",
        tmp_path,
        "--slurm-version",
        "22.05",
        cwd=tmp_path.parent,
        env=VENV_ENV,
    )
    got = golden_view({p.name: p.read_text() for p in tmp_path.iterdir()})
    manifest, golden = (
        json.loads(got.pop("manifest.json")),
        json.loads((GOLDEN / "22.05" / "manifest.json").read_text()),
    )
    assert manifest["spec_sha256"] == hashlib.sha256(EXAMPLE.read_bytes()).hexdigest()
    assert {**manifest, "spec_sha256": None} == golden
    assert got == {name: (GOLDEN / "22.05" / name).read_text() for name in got}
    assert sorted(got) == sorted(p.name for p in (GOLDEN / "22.05").iterdir() if p.name != "manifest.json")


@pytest.mark.parametrize(
    "path, others",
    [("opt/slurm-pool", 0o005), ("opt/slurm-pool/bin/slurm-pool", 0o005), ("opt/slurm-pool/pyvenv.cfg", 0o004)],
)
def test_the_venv_is_readable_by_the_jobs_users_under_a_strict_umask(scratch, path, others):
    assert (scratch / path).stat().st_mode & others == others
    assert all(p.stat().st_mode & 0o004 for p in (scratch / "opt/slurm-pool/lib").rglob("__init__.py"))


def test_the_post_install_makes_the_config_and_log_directories(scratch):
    assert (scratch / "etc/slurm-pool").is_dir()
    assert (scratch / "var/log/slurm-pool").stat().st_mode & 0o777 == 0o750


def test_removal_takes_the_venv_and_keeps_config_and_logs(scratch):
    """Last in the module: it removes the venv the tests above use."""
    (scratch / "etc/slurm-pool/pool.yaml").write_text("site's spec\n")
    (scratch / "var/log/slurm-pool/rebalance.log").write_text("a run\n")
    run("sh", scratch / "postrm", "remove")
    assert not (scratch / "opt/slurm-pool").exists()
    assert (scratch / "etc/slurm-pool/pool.yaml").read_text() == "site's spec\n"
    assert (scratch / "var/log/slurm-pool/rebalance.log").read_text() == "a run\n"
