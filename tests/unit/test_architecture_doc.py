"""docs/architecture.md is what docs/architecture_graph.py makes of the code now."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("architecture_graph", ROOT / "docs" / "architecture_graph.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_architecture_doc_is_current() -> None:
    gen = _generator()
    want = gen.markdown()
    have = (ROOT / "docs" / "architecture.md").read_text()
    assert have == want, f"docs/architecture.md is stale: run `{gen.COMMAND}` and commit the result"


def test_the_doc_is_derived_from_the_code() -> None:
    gen = _generator()
    text = gen.markdown()
    assert "{{" not in text
    # Every package is listed with the first line of its docstring.
    for name in ("spec", "policy", "adapters", "web"):
        assert f"| `{name}/` | {gen.purpose('slurm_pool.' + name)} |" in text
    where = gen.where_section()
    assert "`slurm_pool/adapters/slurm.py`" in where  # where SlurmClient is defined
    assert "`slurm_pool/spec/model.py`" in where  # where PoolSpec is defined
    assert "## Where do I put ..." in text
