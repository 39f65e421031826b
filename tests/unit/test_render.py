"""Rendering: golden files for every output, byte-identical re-renders, versions."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from slurm_pool.cli import main
from slurm_pool.errors import SpecError
from slurm_pool.policy.lua import policy_code
from slurm_pool.render import Site, SlurmVersion, render_all
from slurm_pool.spec import load_spec

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "pool.yaml"
GOLDEN = REPO / "tests" / "golden" / "render"
VERSIONS = ["22.05", "24.11", "26.05"]


@pytest.fixture(scope="module")
def spec():
    return load_spec(EXAMPLE)


def _golden_view(files: dict[str, str]) -> dict[str, str]:
    """The rendered files as the golden directory keeps them: job_submit.lua as its data only."""
    out = dict(files)
    lua = out.pop("job_submit.lua", None)
    if lua is not None:
        code = policy_code()
        assert lua.endswith("\n\n" + code), "job_submit.lua does not end with the static policy code"
        out["job_submit.data.lua"] = lua[: -len(code)]
    return out


@pytest.mark.parametrize("version", VERSIONS)
def test_golden_files(spec, version):
    files = _golden_view(render_all(spec, Site(), SlurmVersion.parse(version)))
    gdir = GOLDEN / version
    if os.environ.get("UPDATE_GOLDEN"):
        gdir.mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            (gdir / name).write_text(text)
    assert sorted(files) == sorted(p.name for p in gdir.iterdir())
    for name, text in files.items():
        assert text == (gdir / name).read_text(), f"{version}/{name} differs from its golden file"


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


@pytest.mark.parametrize("bad", ["21.08", "banana", "30.01"])
def test_unsupported_version_is_a_clear_error(bad):
    with pytest.raises(SpecError, match="--slurm-version"):
        SlurmVersion.parse(bad)


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
