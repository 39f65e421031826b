"""Walking JSON-like documents to swap one value: shared by the fuzz tests and the robustness sweep."""

from __future__ import annotations

import copy
from typing import Any


def paths(doc: Any, prefix: tuple = ()) -> list[tuple]:
    """Every path to a value in a JSON-like document, the root (``()``) first."""
    out = [prefix]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out.extend(paths(v, (*prefix, k)))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out.extend(paths(v, (*prefix, i)))
    return out


def replaced(doc: Any, path: tuple, value: Any) -> Any:
    """A copy of ``doc`` with the value at ``path`` replaced (``()``: the whole document)."""
    if not path:
        return value
    out = copy.deepcopy(doc)
    cur = out
    for p in path[:-1]:
        cur = cur[p]
    cur[path[-1]] = value
    return out
