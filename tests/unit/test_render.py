"""Rendering: golden files for every output, byte-identical re-renders, versions."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from slurm_pool.cli import main
from slurm_pool.errors import SpecError
from slurm_pool.render import Site, SlurmVersion, render_all
from slurm_pool.spec import load_spec
from tests.support.golden import GOLDEN, check_golden, golden_view

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "pool.yaml"
VERSIONS = ["22.05", "24.11", "26.05"]


@pytest.fixture(scope="module")
def spec():
    return load_spec(EXAMPLE)


@pytest.mark.parametrize("version", VERSIONS)
def test_golden_files(spec, version):
    check_golden(golden_view(render_all(spec, Site(), SlurmVersion.parse(version))), version)


def test_render_twice_byte_identical(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for out in (a, b):
        with pytest.raises(SystemExit) as exc:
            main(["render", str(EXAMPLE), "-o", str(out), "--slurm-version", "22.05"])
        assert exc.value.code == 0
    names = sorted(p.name for p in a.iterdir())
    assert names == sorted(p.name for p in b.iterdir())
    assert all((a / n).read_bytes() == (b / n).read_bytes() for n in names)
    manifest = json.loads((a / "manifest.json").read_text())
    assert set(manifest["files"]) == set(names) - {"manifest.json"}


@pytest.mark.parametrize(
    "version,present,absent",
    [
        ("22.05", "SlurmctldParameters=preempt_send_user_signal", "PreemptParameters"),
        ("23.02", "PreemptParameters=send_user_signal", "preempt_send_user_signal"),
        ("24.11", "PreemptParameters=send_user_signal", "preempt_send_user_signal"),
        # Preemption requeues count against MaxBatchRequeue (24.05+); the key exists from 23.02.
        ("22.05", "PreemptMode=REQUEUE", "MaxBatchRequeue"),
        ("23.02", "MaxBatchRequeue=1000\n", "MaxBatchRequeue=5"),
        ("26.05", "MaxBatchRequeue=1000\n", "MaxBatchRequeue=5"),
    ],
)
def test_version_specific_parameters(spec, version, present, absent):
    text = render_all(spec, Site(), SlurmVersion.parse(version))["slurm.conf"]
    assert present in text and absent not in text


@pytest.mark.parametrize(
    "bad",
    ["21.08", "banana", "30.01", "26.05\nX", "26.05\n", " 26.05", "x26.05", "26.05 and more", "２６.05", "26.05.3.1"],
    ids=ascii,
)
def test_unsupported_version_is_a_clear_error(bad):
    # Issue 30: "26.05\nX" was read as 26.05 (the version was searched for, not matched in full).
    with pytest.raises(SpecError, match="--slurm-version"):
        SlurmVersion.parse(bad)


@pytest.mark.parametrize(
    "output,want",
    [("slurm 22.05.8\n", "22.05.8"), ("slurm-wlm 22.05.8\n", "22.05.8"), ("26.05.3", "26.05.3"),
     ("slurm 23.02.7-1\n", "23.02.7")],
)  # fmt: skip
def test_a_command_s_version_output_is_read_with_its_newline(output, want):
    assert str(SlurmVersion.parse(output, what="scontrol --version", output=True)) == want
    with pytest.raises(SpecError, match="scontrol --version"):
        SlurmVersion.parse(output + "garbage\n", what="scontrol --version", output=True)


def test_fragment_is_the_same_content_as_in_slurm_conf(spec):
    files = render_all(spec, Site(), SlurmVersion(22, 5))
    assert files["slurm-pool.conf"] in files["slurm.conf"]


def test_custom_templates_dir(tmp_path, spec):
    tdir = tmp_path / "tpl"
    tdir.mkdir()
    for f in (REPO / "conf_templates").iterdir():
        (tdir / f.name).write_text(f.read_text())
    (tdir / "gres.conf.j2").write_text("# site-modified\n" + (tdir / "gres.conf.j2").read_text())
    files = render_all(spec, Site(), SlurmVersion(22, 5), templates_dir=tdir)
    assert files["gres.conf"].startswith("# site-modified\n")


def test_emulated_site_names_every_device(spec):
    site = Site(
        emulated_devices=True, dev_dir="/x/dev", node_ports={"a-gpu1": 1, "a-gpu2": 2, "b-gpu1": 3, "c-gpu1": 4}
    )
    gres = render_all(spec, site, SlurmVersion(22, 5))["gres.conf"]
    assert "AutoDetect=off" in gres
    lines = [ln for ln in gres.splitlines() if ln.startswith("NodeName=c-gpu1")]
    assert len(lines) == 5  # 4 MIG instances on GPU 0 and one whole GPU 1
    assert any("File=/x/dev/c-gpu1/nvidia0-mig3" in ln for ln in lines)


# -- render writes every file or none (issue 30, class 6) ------------------------------------------------


def _tree(root: Path) -> dict[str, bytes | str]:
    """Every entry below ``root``: a file's bytes, a directory or a link by its kind."""
    out: dict[str, bytes | str] = {}
    for p in sorted(root.rglob("*")):
        rel = str(p.relative_to(root))
        out[rel] = "link" if p.is_symlink() else ("dir" if p.is_dir() else p.read_bytes())
    return out


def _spoil_target_dir(out: Path) -> None:
    (out / "slurm.conf").write_text("old\n")
    (out / "job_submit.lua").mkdir()  # a later target that cannot be replaced


def _spoil_target_link(out: Path) -> None:
    (out / "gres.conf").symlink_to("/etc/hostname")


@pytest.mark.parametrize(
    "spoil,words",
    [(_spoil_target_dir, "job_submit.lua exists and is not a regular file"),
     (_spoil_target_link, "gres.conf is a symbolic link")],
    ids=["a-target-is-a-directory", "a-target-is-a-symlink"],
)  # fmt: skip
def test_render_checks_every_target_before_writing_any(tmp_path, capsys, spoil, words):
    out = tmp_path / "out"
    out.mkdir()
    spoil(out)
    before = _tree(out)
    with pytest.raises(SystemExit) as exc:
        main(["render", str(EXAMPLE), "-o", str(out), "--slurm-version", "26.05"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert words in err and "nothing written" in err and "Traceback" not in err, err
    assert _tree(out) == before


def test_render_below_a_file_is_a_clear_error(tmp_path, capsys):
    (tmp_path / "f").write_text("x")
    with pytest.raises(SystemExit) as exc:
        main(["render", str(EXAMPLE), "-o", str(tmp_path / "f" / "out"), "--slurm-version", "26.05"])
    assert exc.value.code == 2
    assert "is not a directory" in capsys.readouterr().err
    assert (tmp_path / "f").read_text() == "x"


def test_a_failed_move_puts_back_the_files_already_moved(tmp_path, capsys, monkeypatch):
    from slurm_pool import outfiles

    out = tmp_path / "out"
    out.mkdir()
    (out / "slurm.conf").write_text("old slurm.conf\n")
    before = _tree(out)
    real, calls = os.replace, []

    def failing_third(src, dst):
        calls.append(dst)
        if len(calls) == 3:
            raise OSError(28, "No space left on device")
        return real(src, dst)

    monkeypatch.setattr(outfiles.os, "replace", failing_third)
    with pytest.raises(SystemExit) as exc:
        main(["render", str(EXAMPLE), "-o", str(out), "--slurm-version", "26.05"])
    assert exc.value.code == 1 and "put back" in capsys.readouterr().err
    assert _tree(out) == before  # slurm.conf is the old one again; no new file stays


# -- auth/jwt for the console (issue 27) -------------------------------------------------------------------

#: What a console section changes: slurm.conf (AuthAltTypes) and, through its hash, the manifest.
CONSOLE_GOLDEN = ("slurm.conf", "manifest.json")


@pytest.fixture(scope="module")
def console_spec(spec):
    from slurm_pool.spec.console import Console

    return spec.model_copy(update={"console": Console()})


@pytest.mark.parametrize("version", ["22.05", "26.05"])
def test_golden_console(spec, console_spec, version):
    plain = golden_view(render_all(spec, Site(), SlurmVersion.parse(version)))
    files = golden_view(render_all(console_spec, Site(), SlurmVersion.parse(version)))
    gdir = GOLDEN / f"console-{version}"
    if os.environ.get("UPDATE_GOLDEN"):
        gdir.mkdir(parents=True, exist_ok=True)
        for name in CONSOLE_GOLDEN:
            (gdir / name).write_text(files[name])
    assert sorted(p.name for p in gdir.iterdir()) == sorted(CONSOLE_GOLDEN)
    for name, text in files.items():
        want = (gdir / name).read_text() if name in CONSOLE_GOLDEN else plain[name]
        assert text == want, f"console-{version}/{name} differs from its golden file"


@pytest.mark.parametrize(
    "with_console, site_key, want",
    [
        (False, None, None),
        (True, None, "/var/spool/slurm/statesave/jwt_hs256.key"),
        (False, "/st/etc/jwt_hs256.key", "/st/etc/jwt_hs256.key"),
        (True, "/st/etc/jwt_hs256.key", "/st/etc/jwt_hs256.key"),  # the site wins
    ],
)
def test_jwt_key_turns_on_auth_jwt(spec, console_spec, with_console, site_key, want):
    from slurm_pool.render.context import build_context
    from slurm_pool.render.templates import default_templates_dir, jinja_environment, render_template

    s = console_spec if with_console else spec
    site = Site(jwt_key=site_key)
    conf = render_all(s, site, SlurmVersion(26, 5))["slurm.conf"]
    dbd = render_template(
        jinja_environment(default_templates_dir()),
        "slurmdbd.conf.j2",
        build_context(s, site, SlurmVersion(26, 5)),
    )
    for text in (conf, dbd):
        alt = [ln for ln in text.splitlines() if ln.startswith("AuthAlt")]
        assert alt == ([] if want is None else ["AuthAltTypes=auth/jwt", f"AuthAltParameters=jwt_key={want}"])


@pytest.mark.parametrize("bad", ["relative/key", "/a,b", "/k=v", "/a b", "/a/../b", "/a\nAuthType=none", ""], ids=ascii)
def test_a_site_jwt_key_must_be_a_plain_path(spec, bad):
    with pytest.raises(SpecError, match="jwt_key"):
        render_all(spec, Site(jwt_key=bad), SlurmVersion(22, 5))


def test_a_console_jwt_key_must_be_a_plain_path(spec):
    from slurm_pool.spec.load import parse_spec

    data = spec.model_dump(mode="json", exclude_none=True)
    data["console"] = {"jwt_key": "/k,AuthType=none"}
    with pytest.raises(SpecError, match="jwt_key"):
        parse_spec(data)
