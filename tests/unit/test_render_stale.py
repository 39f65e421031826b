"""Rendering again into a directory: files the previous render listed and this one no longer produces go.

Only names the old manifest.json lists, only regular files, never through a
symbolic link, and in the same all-or-nothing step as the writes.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from slurm_pool.cli import main
from slurm_pool.errors import PoolError
from slurm_pool.outfiles import previous_outputs, write_all

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "pool.yaml"
RBAC = "k8s-bridge-rbac.yaml"


def render(spec: Path, out: Path, capsys) -> tuple[str, str]:
    with pytest.raises(SystemExit) as exc:
        main(["render", str(spec), "-o", str(out), "--slurm-version", "22.05"])
    assert exc.value.code == 0
    got = capsys.readouterr()
    return got.out, got.err


@pytest.fixture
def no_bridge(tmp_path) -> Path:
    data = yaml.safe_load(EXAMPLE.read_text())
    del data["bridge"]
    path = tmp_path / "no-bridge.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def snapshot(d: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in d.iterdir() if p.is_file() and not p.is_symlink()}


def test_a_removed_bridge_leaves_no_rbac_file(tmp_path, no_bridge, capsys):
    out = tmp_path / "out"
    render(EXAMPLE, out, capsys)
    assert (out / RBAC).is_file()
    (out / "notes.txt").write_text("a human's file\n")
    stdout, stderr = render(no_bridge, out, capsys)
    assert not (out / RBAC).exists()
    assert (out / "notes.txt").read_text() == "a human's file\n"
    assert f"removed {out / RBAC} (no longer rendered)" in stderr
    assert RBAC not in stdout
    manifest = json.loads((out / "manifest.json").read_text())
    assert RBAC not in manifest["files"]
    assert manifest["generator_version"]
    # Rendering it back brings it back; a third identical render removes nothing.
    render(EXAMPLE, out, capsys)
    assert (out / RBAC).is_file()
    _, stderr = render(EXAMPLE, out, capsys)
    assert "removed" not in stderr


def test_the_manifest_carries_slurm_pools_version(tmp_path, capsys):
    from slurm_pool import __version__

    render(EXAMPLE, tmp_path, capsys)
    assert json.loads((tmp_path / "manifest.json").read_text())["generator_version"] == __version__


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(b"", id="as-is"),
        pytest.param(b"# a comment only\n", id="comment"),  # the same spec, other bytes: another hash
        pytest.param(b"\n", id="blank-line"),
    ],
)
def test_the_manifest_carries_the_hash_of_the_spec_files_bytes(tmp_path, capsys, change):
    import hashlib

    spec = tmp_path / "pool.yaml"
    spec.write_bytes(EXAMPLE.read_bytes() + change)
    render(spec, tmp_path / "out", capsys)
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["spec_sha256"] == hashlib.sha256(spec.read_bytes()).hexdigest()
    assert (manifest["spec_sha256"] == hashlib.sha256(EXAMPLE.read_bytes()).hexdigest()) == (change == b"")


@pytest.mark.parametrize("bad", ["", "0" * 63, "G" * 64, "A" * 64, "0" * 64 + "\n"], ids=ascii)
def test_a_spec_hash_must_be_a_sha256_in_hex(bad):
    from slurm_pool.render import render_all
    from slurm_pool.spec import load_spec

    with pytest.raises(ValueError, match="spec_sha256"):
        render_all(load_spec(EXAMPLE), spec_sha256=bad)


def _listed(out: Path, names: list[str]) -> None:
    m = json.loads((out / "manifest.json").read_text())
    m["files"].update({n: "0" * 64 for n in names})
    (out / "manifest.json").write_text(json.dumps(m))


@pytest.mark.parametrize(
    "name, make, note",
    [
        ("link.conf", "symlink", "not a regular file"),
        ("adir", "dir", "not a regular file"),
        ("../escape.conf", "outside", "not a plain file name"),
        ("sub/x.conf", None, "not a plain file name"),
        (".hidden\nx", None, "not a plain file name"),
    ],
)
def test_what_is_never_removed(tmp_path, no_bridge, capsys, name, make, note):
    out = tmp_path / "out"
    render(EXAMPLE, out, capsys)
    victim = tmp_path / "victim.conf"
    victim.write_text("keep\n")
    if make == "symlink":
        os.symlink(victim, out / name)
    elif make == "dir":
        (out / name).mkdir()
    elif make == "outside":
        (tmp_path / "escape.conf").write_text("keep\n")
    _listed(out, [name])
    _, stderr = render(no_bridge, out, capsys)
    assert note in stderr
    assert victim.read_text() == "keep\n"
    if make == "symlink":
        assert (out / name).is_symlink()
    if make == "dir":
        assert (out / name).is_dir()
    if make == "outside":
        assert (tmp_path / "escape.conf").read_text() == "keep\n"


@pytest.mark.parametrize(
    "manifest, note",
    [
        ("not json", "not readable JSON"),
        ('{"files": 3}', '"files" is not a list'),
        ("[1, 2]", "not readable JSON"),
    ],
)
def test_an_unreadable_manifest_removes_nothing(tmp_path, manifest, note):
    (tmp_path / "old.conf").write_text("x\n")
    (tmp_path / "manifest.json").write_text(manifest)
    remove, notes = previous_outputs(tmp_path, ["slurm.conf"])
    assert remove == [] and note in notes[0]


def test_a_manifest_behind_a_link_is_not_read(tmp_path):
    real = tmp_path / "real.json"
    real.write_text(json.dumps({"files": {"old.conf": ""}}))
    (tmp_path / "old.conf").write_text("x\n")
    os.symlink(real, tmp_path / "manifest.json")
    remove, notes = previous_outputs(tmp_path, [])
    assert remove == [] and "files it listed are left" in notes[0]


def test_no_manifest_no_removal(tmp_path):
    (tmp_path / "old.conf").write_text("x\n")
    assert previous_outputs(tmp_path, []) == ([], [])


def test_a_failed_removal_puts_everything_back(tmp_path, monkeypatch):
    (tmp_path / "a.conf").write_text("old a\n")
    (tmp_path / "stale1").write_text("s1\n")
    (tmp_path / "stale2").write_text("s2\n")
    before = snapshot(tmp_path)
    real_unlink = os.unlink

    def unlink(path, *args, **kwargs):
        if Path(path).name == "stale2":
            raise OSError(13, "Permission denied")
        return real_unlink(path, *args, **kwargs)

    monkeypatch.setattr(os, "unlink", unlink)
    removed: list[Path] = []
    with pytest.raises(PoolError, match="nothing written"):
        write_all(tmp_path, {"a.conf": "new a\n", "b.conf": "new b\n"}, remove=["stale1", "stale2"], removed=removed)
    monkeypatch.undo()
    assert snapshot(tmp_path) == before
    assert removed == []


def test_removal_in_write_all(tmp_path):
    (tmp_path / "stale").write_text("s\n")
    removed: list[Path] = []
    written = write_all(tmp_path, {"a.conf": "a\n"}, remove=["stale", "missing", "a.conf"], removed=removed)
    assert written == [tmp_path / "a.conf"] and removed == [tmp_path / "stale"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.conf"]
