"""The render goldens (tests/golden/render/<label>/): the view they keep, and the comparison.

``UPDATE_GOLDEN=1`` rewrites a golden directory from the render instead of comparing.
"""

from __future__ import annotations

import os
from pathlib import Path

from slurm_pool.policy.lua import policy_code

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "render"


def golden_view(files: dict[str, str]) -> dict[str, str]:
    """The rendered files as the golden directory keeps them: job_submit.lua as its data only."""
    out = dict(files)
    lua = out.pop("job_submit.lua", None)
    if lua is not None:
        code = policy_code()
        assert lua.endswith("\n\n" + code), "job_submit.lua does not end with the static policy code"
        out["job_submit.data.lua"] = lua[: -len(code)]
    return out


def check_golden(files: dict[str, str], label: str) -> None:
    """``files`` (a :func:`golden_view`) equal, file for file, those in ``GOLDEN / label``."""
    gdir = GOLDEN / label
    if os.environ.get("UPDATE_GOLDEN"):
        gdir.mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            (gdir / name).write_text(text)
    assert sorted(files) == sorted(p.name for p in gdir.iterdir())
    for name, text in files.items():
        assert text == (gdir / name).read_text(), f"{label}/{name} differs from its golden file"
