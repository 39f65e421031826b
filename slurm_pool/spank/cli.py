"""``slurm-pool spank build``: compile the SPANK plugin against a given Slurm.

A SPANK plugin loads only into the Slurm whose headers it was compiled with
(Slurm refuses it: "Incompatible Slurm plugin ... version"), so it is built on
the site, against the site's Slurm: ``slurm-devel`` (EL) or ``libslurm-dev``
(Debian) put ``slurm/spank.h`` under ``/usr/include``; a Slurm built from
source has it under ``PREFIX/include``.  The source is the checkout's
``spank/`` or, from the wheel, ``<prefix>/share/slurm-pool/spank``.

    slurm-pool spank build [--slurm-include DIR | --slurm-prefix DIR] [--out DIR]
"""

from __future__ import annotations

import re
import sys
from importlib import metadata
from pathlib import Path

import click

from slurm_pool.adapters.runner import Runner
from slurm_pool.adapters.slurm import SlurmClient
from slurm_pool.errors import InputError, PoolError

PLUGIN = "slurm_pool_spank.so"
DATA_DIR = "share/slurm-pool/spank"
#: What the Makefile's default target compiles.
SOURCES = ("Makefile", "slurm_pool_spank.c", "pool_opts.c", "pool_opts.h")
#: slurm/slurm_version.h: ``#define SLURM_VERSION_NUMBER 0x1a0503`` (major, minor, micro bytes).
_VERSION_RE = re.compile(r"#define[ \t]+SLURM_VERSION_NUMBER[ \t]+0x([0-9a-fA-F]{6})")


class SpankBuildFailed(PoolError):
    """The compiler refused (exit status 1)."""


def source_dir() -> Path:
    """The checkout's ``spank/``, else the copy the wheel installed as data files."""
    here = Path(__file__).resolve().parents[2] / "spank"
    if all((here / n).is_file() for n in SOURCES):
        return here
    try:
        dist = metadata.distribution("slurm-pool")
    except metadata.PackageNotFoundError:
        dist = None
    for f in (dist.files or ()) if dist else ():
        if f.name == "slurm_pool_spank.c" and "spank" in f.parts:
            return Path(str(dist.locate_file(f))).resolve().parent  # type: ignore[union-attr]
    default = Path(sys.prefix) / DATA_DIR
    if all((default / n).is_file() for n in SOURCES):
        return default
    raise PoolError(f"the SPANK plugin's source is not installed (looked in {here} and {default})")


def include_dir(slurm_include: str | None, slurm_prefix: str | None) -> Path:
    """The directory holding ``slurm/spank.h``: given, under a prefix, or the Slurm on PATH's."""
    if slurm_include and slurm_prefix:
        raise InputError("--slurm-include and --slurm-prefix: give one of them")
    if slurm_include:
        option, inc = "--slurm-include", Path(slurm_include)
    elif slurm_prefix:
        option, inc = "--slurm-prefix", Path(slurm_prefix) / "include"
    else:
        prefix = SlurmClient.install_prefix()
        option = "--slurm-include"
        inc = Path(prefix) / "include" if prefix else Path("/usr/include")
        if not (inc / "slurm" / "spank.h").is_file():
            inc = Path("/usr/include")
    if not (inc / "slurm" / "spank.h").is_file() or not (inc / "slurm" / "slurm_version.h").is_file():
        given = slurm_include or slurm_prefix or str(inc)
        raise InputError(
            f"{option}: {given!r} holds no {inc / 'slurm' / 'spank.h'} "
            "(install slurm-devel on EL, libslurm-dev on Debian, or give a Slurm's include directory)"
        )
    return inc


def slurm_version(inc: Path) -> str:
    """The release the headers are from (``26.05.3``), or ``unknown``."""
    try:
        m = _VERSION_RE.search((inc / "slurm" / "slurm_version.h").read_text(errors="replace"))
    except OSError:
        m = None
    if not m:
        return "unknown"
    n = int(m.group(1), 16)
    return f"{n >> 16}.{(n >> 8) & 0xFF:02d}.{n & 0xFF}"


def build(runner: Runner, inc: Path, out: Path, source: Path) -> Path:
    """``make`` the plugin from ``source`` against ``inc`` into ``out``; the plugin's path.

    ``-B``: a plugin already in ``out`` may be newer than other headers, yet built for another Slurm."""
    if out.exists() and not out.is_dir():
        raise InputError(f"--out: {str(out)!r} is not a directory")
    for value, what in ((inc, "--slurm-include"), (out, "--out")):
        if any(c in str(value) for c in " $#=:\\\"'\n\t"):  # make would split or expand it
            raise InputError(f"{what}: {str(value)!r} has a character make cannot take in a path")
    out.mkdir(parents=True, exist_ok=True)
    res = runner.run(
        ["make", "-s", "-B", "-C", str(source), f"OUT={out.resolve()}", f"SLURM_INCLUDE={inc.resolve()}"], check=False
    )
    plugin = out.resolve() / PLUGIN
    if res.returncode != 0 or not plugin.is_file():
        raise SpankBuildFailed(f"building the SPANK plugin failed: {(res.stderr or res.stdout).strip()[-800:]}")
    return plugin


@click.group()
def spank() -> None:
    """The SPANK plugin (sbatch/srun --checkpoint and the pool's job options)."""


@spank.command("build")
@click.option("--slurm-include", metavar="DIR", help="Slurm's include directory (DIR/slurm/spank.h).")
@click.option("--slurm-prefix", metavar="DIR", help="A Slurm install prefix (its include/ is used).")
@click.option("--out", metavar="DIR", default=".", show_default=True, help=f"Where to write {PLUGIN}.")
def build_cmd(slurm_include: str | None, slurm_prefix: str | None, out: str) -> None:
    """Compile the SPANK plugin against one Slurm's headers (default: the Slurm on PATH, else /usr/include)."""
    from slurm_pool.adapters.runner import SubprocessRunner
    from slurm_pool.render.site import Site
    from slurm_pool.text import shown

    inc = include_dir(slurm_include, slurm_prefix)
    plugin = build(SubprocessRunner(), inc, Path(out), source_dir())
    click.echo(shown(f"built {plugin} for Slurm {slurm_version(inc)}"))
    click.echo(
        shown(
            f"install it on every node and login host as the rendered plugstack.conf names it "
            f"(by default {Site().spank_plugin})"
        )
    )


__all__ = ["spank", "build", "include_dir", "source_dir", "slurm_version"]
