"""Cached Slurm builds and their variants (``26.05-nolua``): which prefix ``--slurm`` picks."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from slurm_pool.localcluster import slurmbuild
from slurm_pool.localcluster.slurmbuild import PROGRAMS, BuildError, cached_builds, resolve_prefix, variant_flags


def fake_build(root: Path, name: str, version: str, flags: tuple[str, ...]) -> Path:
    prefix = root / name
    for p in PROGRAMS:
        (prefix / p).parent.mkdir(parents=True, exist_ok=True)
        (prefix / p).write_text("#!/bin/sh\n")
        os.chmod(prefix / p, 0o755)
    (prefix / "build.json").write_text(json.dumps({"version": version, "configure_flags": list(flags)}))
    return prefix


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SLURM_POOL_SLURM_CACHE", str(tmp_path))
    return {
        "plain": fake_build(tmp_path, "slurm-26.05.3-aaaa", "26.05.3", variant_flags()),
        "nolua": fake_build(tmp_path, "slurm-26.05.3-bbbb", "26.05.3", variant_flags("nolua")),
        "old": fake_build(tmp_path, "slurm-24.11.1-cccc", "24.11.1", variant_flags()),
    }


@pytest.mark.parametrize(
    "wanted, which",
    [("26.05", "plain"), ("26.05.3", "plain"), ("26.05-nolua", "nolua"), ("26.05.3-nolua", "nolua"), ("24.11", "old")],
)
def test_resolve_prefix_picks_the_variant_asked_for(cache, wanted, which):
    assert resolve_prefix(wanted) == cache[which]


@pytest.mark.parametrize(
    "wanted, message",
    [
        ("26.05-nope", "--slurm: '26.05-nope' names no known variant (nolua)"),
        ("24.11-nolua", "--slurm: no Slurm 24.11-nolua built in"),
        ("26.05-", "--slurm: '26.05-' is neither a Slurm version"),
    ],
)
def test_resolve_prefix_errors_name_the_option(cache, wanted, message):
    with pytest.raises(BuildError) as exc:
        resolve_prefix(wanted)
    assert str(exc.value).startswith(message)
    if "24.11-nolua" in wanted:
        assert "build --variant nolua" in str(exc.value)


def test_the_variant_flags_and_cache_listing(cache):
    assert variant_flags("nolua") == (*slurmbuild.CONFIGURE_FLAGS, "--without-lua", "--disable-slurmrestd")
    assert [p for _, p in cached_builds()] == [cache["old"], cache["plain"]]
    assert [p for _, p in cached_builds("nolua")] == [cache["nolua"]]
    with pytest.raises(BuildError, match="--variant: 'x' is not one of nolua"):
        variant_flags("x")


def test_a_variant_has_its_own_prefix(tmp_path, monkeypatch):
    monkeypatch.setenv("SLURM_POOL_SLURM_CACHE", str(tmp_path))
    tarball = tmp_path / "slurm-26.05.3.tar.gz"
    tarball.write_bytes(b"x")
    sha = "0" * 64
    plain = slurmbuild.SlurmBuild.for_source(tarball, sha)
    nolua = slurmbuild.SlurmBuild.for_source(tarball, sha, variant_flags("nolua"))
    assert plain.prefix != nolua.prefix and plain.prefix.parent == nolua.prefix.parent == tmp_path
