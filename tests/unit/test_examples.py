"""The shipped examples validate, and the full pool renders for every release it names (and only those)."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_pool.cli import main
from slurm_pool.spec import load_spec
from slurm_pool.versions import SlurmVersion

REPO = Path(__file__).resolve().parents[2]
FULL = REPO / "examples" / "pool-full.yaml"


@pytest.mark.parametrize("name", ["pool.yaml", "pool-full.yaml"])
def test_example_validates(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["validate", str(REPO / "examples" / name)])
    out = capsys.readouterr()
    assert exc.value.code == 0, out.err
    assert ": valid (" in out.out


def test_full_pool_has_what_it_says() -> None:
    spec = load_spec(FULL)
    assert spec.console is not None and spec.console.hub_url and spec.console.prometheus_url
    assert spec.notebooks is not None and spec.notebooks.partition == "notebook"
    assert any(g.gpus is not None and g.gpus.shards for g in spec.node_groups)
    assert {t.name for t in spec.tiers} >= {"notebook", "dev", "guaranteed", "scavenger", "k8s-lend"}


RENDERS = [
    # target release (a series without a patch is its latest release), files written and what they hold
    ("23.11", {"slurm.conf": ["GresTypes=gpu,shard", "AuthAltTypes=auth/jwt"], "jupyterhub_config.py": []}),
    ("23.11.5", {"slurm.conf": ["GresTypes=gpu,shard", "AuthAltTypes=auth/jwt"], "jupyterhub_config.py": []}),
    ("24.05", {"slurm.conf": ["GresTypes=gpu,shard", "AuthAltTypes=auth/jwt"], "jupyterhub_config.py": []}),
    ("26.05", {"slurm.conf": ["GresTypes=gpu,shard", "AuthAltTypes=auth/jwt"], "jupyterhub_config.py": []}),
]


@pytest.mark.parametrize("version, files", RENDERS)
def test_full_pool_renders(
    version: str, files: dict[str, list[str]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    main_ok = _render(version, tmp_path)
    assert main_ok == 0, capsys.readouterr().err
    for name, words in files.items():
        body = (tmp_path / name).read_text()
        for word in words:
            assert word in body, (name, word)
    assert "shard" in (tmp_path / "gres.conf").read_text()


@pytest.mark.parametrize("version", ["22.05", "23.02", "23.11.0", "23.11.4"])
def test_full_pool_is_refused_before_23_11_5(version: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _render(version, tmp_path / "out") == 2
    assert "node_groups[1].gpus.shards: GPU shards need Slurm 23.11.5 or later" in capsys.readouterr().err
    assert not (tmp_path / "out").exists() or list((tmp_path / "out").iterdir()) == []


def test_the_header_says_why_23_11_5() -> None:
    """The comment at the top names the release and the fact, and versions.py still says so."""
    header = FULL.read_text().split("version: 1", 1)[0]
    assert "Slurm 23.11.5 or later" in header and "shard_excludes_gpu" in header
    assert not SlurmVersion(23, 11, 4).has("shard_excludes_gpu")
    assert SlurmVersion(23, 11, 5).has("shard_excludes_gpu")


def _render(version: str, out: Path) -> int | str | None:
    with pytest.raises(SystemExit) as exc:
        main(["render", str(FULL), "-o", str(out), "--slurm-version", version])
    return exc.value.code
