"""The wheel a user installs: built from the source, installed into a fresh venv outside the tree, and run.

The venv gets only the wheel; its dependencies come from the test venv through
a ``.pth`` line (no network here), which adds that directory to ``sys.path``
without running its editable-install hook, so ``slurm_pool`` can only come from
the wheel.  ``validate``, ``render`` and ``mig plan`` run from a directory
outside the source tree and must give what the source tree gives.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from slurm_pool import __version__

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "pool.yaml"
# What the build reads: the package, its data files and the metadata.
BUILD_INPUTS = ("setup.cfg", "pyproject.toml", "README.md", "slurm_pool", "conf_templates", "spank")
SLURM = "26.05"
PLAN_ARGS = ["mig", "plan", "--spec", str(EXAMPLE), "--model", "A100-40GB", "--demand", "1g.5gb=4,3g.20gb=1", "--json"]


def _run(argv: list[str], cwd: Path, **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=300, check=False, **kw)  # type: ignore[call-overload]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    src = tmp_path_factory.mktemp("src")
    for name in BUILD_INPUTS:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(path, src / name)
    dist = tmp_path_factory.mktemp("dist")
    done = _run(
        [sys.executable, "-m", "pip", "wheel", ".", "--no-deps", "--no-build-isolation", "--no-index", "-w", str(dist)],
        src,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    (whl,) = dist.glob("slurm_pool-*.whl")
    return whl


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    env = tmp_path_factory.mktemp("venv")
    done = _run([sys.executable, "-m", "venv", str(env)], env)
    assert done.returncode == 0, done.stderr
    py = env / "bin" / "python"
    site = _run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], env).stdout.strip()
    # The dependencies (click, pydantic, Jinja2, ...) from the test venv; not its slurm_pool.
    (Path(site) / "deps-from-test-venv.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    done = _run([str(py), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)], env)
    assert done.returncode == 0, done.stdout + done.stderr
    return env


def test_wheel_contents(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    assert wheel.name.startswith(f"slurm_pool-{__version__}-")
    assert "slurm_pool/policy/job_submit.lua" in names and "slurm_pool/py.typed" in names
    data = f"slurm_pool-{__version__}.data/data/share/slurm-pool/conf_templates/"
    want = {data + p.name for p in (ROOT / "conf_templates").glob("*.j2")}
    assert want and want <= set(names)
    # The SPANK plugin's source, for `slurm-pool spank build` against the site's own Slurm.
    spank = f"slurm_pool-{__version__}.data/data/share/slurm-pool/spank/"
    assert {spank + "slurm_pool_spank.c", spank + "Makefile"} <= set(names)
    shipped = {n.split("/")[0] for n in names}
    assert shipped == {"slurm_pool", f"slurm_pool-{__version__}.data", f"slurm_pool-{__version__}.dist-info"}
    leaves = {Path(n).stem for n in names if n.endswith(".py")}
    assert not leaves & {"testing", "harness", "conftest", "lua_policy", "slurm_cluster", "k8s_build"}


def test_installed_package_comes_from_the_wheel(venv: Path, tmp_path: Path) -> None:
    done = _run([str(venv / "bin" / "python"), "-c", "import slurm_pool; print(slurm_pool.__file__)"], tmp_path)
    assert done.returncode == 0, done.stderr
    assert Path(done.stdout.strip()).is_relative_to(venv), done.stdout


def test_validate_render_and_mig_plan_from_the_wheel(venv: Path, tmp_path: Path) -> None:
    cli = str(venv / "bin" / "slurm-pool")
    done = _run([cli, "validate", str(EXAMPLE)], tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr

    # No --templates: the installed package finds its data files.
    out = tmp_path / "rendered"
    done = _run([cli, "render", str(EXAMPLE), "-o", str(out), "--slurm-version", SLURM], tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    ref = tmp_path / "from-source"
    here = _run(
        [sys.executable, "-m", "slurm_pool", "render", str(EXAMPLE), "-o", str(ref), "--slurm-version", SLURM], ROOT
    )
    assert here.returncode == 0, here.stderr
    names = sorted(p.name for p in ref.iterdir())
    assert "job_submit.lua" in names and "slurm.conf" in names
    assert sorted(p.name for p in out.iterdir()) == names
    for name in names:
        assert (out / name).read_bytes() == (ref / name).read_bytes(), name

    plan = _run([cli, *PLAN_ARGS, "--slurm-version", SLURM], tmp_path)
    assert plan.returncode == 0, plan.stderr
    ref_plan = _run([sys.executable, "-m", "slurm_pool", *PLAN_ARGS, "--slurm-version", SLURM], ROOT)
    assert plan.stdout == ref_plan.stdout and '"model": "A100-40GB"' in plan.stdout

    # Bad input from the installed command: exit 2, the error named, no traceback.
    bad = tmp_path / "bad.yaml"
    bad.write_text(EXAMPLE.read_text().replace("version: 1", "version: 9", 1))
    done = _run([cli, "validate", str(bad)], tmp_path)
    assert done.returncode == 2 and "version" in done.stderr and "Traceback" not in done.stderr
