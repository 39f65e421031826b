"""``slurm-pool spank build``: options, the make it runs, and one real compile against Debian's 22.05 headers."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurm_pool.adapters.runner import RecordingRunner, Result
from slurm_pool.cli import cli
from slurm_pool.errors import InputError, PoolError
from slurm_pool.spank import cli as spank_cli
from slurm_pool.spank.cli import PLUGIN, build, include_dir, slurm_version, source_dir

ROOT = Path(__file__).resolve().parents[2]


def fake_slurm(root: Path, number: str = "0x1a0503") -> Path:
    """An include directory with the two headers the Makefile depends on."""
    (root / "include" / "slurm").mkdir(parents=True)
    (root / "include" / "slurm" / "spank.h").write_text("/* spank */\n")
    (root / "include" / "slurm" / "slurm_version.h").write_text(f"#define SLURM_VERSION_NUMBER {number}\n")
    return root


def test_the_source_is_the_checkouts_spank_dir():
    assert source_dir() == ROOT / "spank"


def test_include_dir_from_a_prefix_or_given(tmp_path):
    prefix = fake_slurm(tmp_path / "slurm")
    assert include_dir(None, str(prefix)) == prefix / "include"
    assert include_dir(str(prefix / "include"), None) == prefix / "include"
    assert slurm_version(prefix / "include") == "26.05.3"
    assert slurm_version(tmp_path) == "unknown"


@pytest.mark.parametrize(
    "args, option",
    [
        (["--slurm-include", "/nonexistent/include"], "--slurm-include"),
        (["--slurm-prefix", "/nonexistent"], "--slurm-prefix"),
        (["--slurm-include", "/usr/include", "--slurm-prefix", "/usr"], "--slurm-include and --slurm-prefix"),
    ],
)
def test_bad_options_exit_2_naming_the_option(args, option):
    res = CliRunner().invoke(cli, ["spank", "build", *args])
    assert res.exit_code == 2, res.output
    assert f"error: {option}" in res.output and "Traceback" not in res.output


@pytest.mark.parametrize("out", ["a dir", "x$(y)", "a:b", "new\nline"])
def test_paths_make_would_split_are_refused(tmp_path, out):
    inc = fake_slurm(tmp_path / "slurm") / "include"
    r = RecordingRunner()
    with pytest.raises(InputError, match="--out"):
        build(r, inc, tmp_path / out, ROOT / "spank")
    assert r.calls == []


def test_out_must_not_be_a_file(tmp_path):
    (tmp_path / "f").write_text("")
    with pytest.raises(InputError, match="--out: .* is not a directory"):
        build(RecordingRunner(), tmp_path, tmp_path / "f", ROOT / "spank")


def test_build_runs_make_against_the_headers_given(tmp_path):
    inc = fake_slurm(tmp_path / "slurm") / "include"
    out = tmp_path / "out"

    def make(argv, _input):
        (out / PLUGIN).write_bytes(b"\x7fELF")
        return Result(argv, 0, "", "")

    r = RecordingRunner()
    r.respond(["make"], make)
    assert build(r, inc, out, ROOT / "spank") == out / PLUGIN
    assert r.calls == [("make", "-s", "-B", "-C", str(ROOT / "spank"), f"OUT={out}", f"SLURM_INCLUDE={inc}")]


@pytest.mark.parametrize(
    "result",
    [Result(("make",), 2, "", "spank.h:1: error: unknown type"), Result(("make",), 0, "", "")],
    ids=["compiler error", "no plugin written"],
)
def test_a_failed_build_is_an_error_with_the_compilers_words(tmp_path, result):
    r = RecordingRunner()
    r.respond(["make"], lambda argv, _in: result)
    with pytest.raises(PoolError, match="building the SPANK plugin failed") as exc:
        build(r, fake_slurm(tmp_path / "s") / "include", tmp_path / "out", ROOT / "spank")
    assert exc.value.exit_code == 1 and result.stderr in str(exc.value)


@pytest.mark.skipif(
    not (shutil.which("cc") and shutil.which("make") and Path("/usr/include/slurm/spank.h").is_file()),
    reason="needs cc, make and Debian's libslurm-dev",
)
def test_it_really_compiles_against_debians_22_05_headers(tmp_path):
    res = CliRunner().invoke(cli, ["spank", "build", "--slurm-include", "/usr/include", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert f"built {tmp_path / PLUGIN} for Slurm 22.05." in res.output
    assert (tmp_path / PLUGIN).read_bytes()[:4] == b"\x7fELF"
    assert spank_cli.SOURCES and not list((ROOT / "spank").glob("*.o"))  # nothing written into the source
