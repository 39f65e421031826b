"""``slurm-pool render`` refusing a bad spec: exit 2, the error names the path, no traceback, nothing written."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_pool.cli import main


def assert_render_refuses(tmp_path: Path, capsys: pytest.CaptureFixture, text: str, path: str, words: str,
                          version: str = "26.05") -> str:  # fmt: skip
    """Render spec ``text`` for ``version``; it must be refused naming ``path`` and saying ``words``.  The error."""
    spec = tmp_path / "bad.yaml"
    spec.write_text(text)
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(SystemExit) as exc:
        main(["render", str(spec), "-o", str(out), "--slurm-version", version])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and f"error: {path}" in err and words in err, err
    assert "Traceback" not in err
    assert list(out.iterdir()) == []
    return err
