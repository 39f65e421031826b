"""Read back the policy data of a job_submit.lua that :mod:`slurm_pool.policy.lua` wrote.

The inverse of :func:`slurm_pool.policy.lua.lua_value` for the literals it
writes: ``nil``, ``true``/``false``, integers, double-quoted strings (escapes
``\\\\ \\" \\n \\r \\t`` and ``\\ddd`` bytes) and tables (``name = v``,
``[literal] = v`` or positional entries).  Nothing is evaluated: an installed
file is data here.  Pure.
"""

from __future__ import annotations

import re
from typing import Any

HEAD = "local SLURM_POOL = "
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_INT = re.compile(r"-?[0-9]+")
_SPACE = re.compile(r"\s*")
_SIMPLE = {"\\": "\\", '"': '"', "n": "\n", "r": "\r", "t": "\t"}


class LuaReadError(ValueError):
    """The text is not a literal as slurm-pool writes them."""


class _Reader:
    def __init__(self, text: str, pos: int):
        self.text, self.pos = text, pos

    def skip(self) -> None:
        self.pos = _SPACE.match(self.text, self.pos).end()  # type: ignore[union-attr]

    def peek(self) -> str:
        self.skip()
        return self.text[self.pos : self.pos + 1]

    def expect(self, ch: str) -> None:
        if self.peek() != ch:
            raise LuaReadError(f"expected {ch!r} at offset {self.pos}")
        self.pos += 1

    def value(self) -> Any:
        ch = self.peek()
        if ch == "{":
            return self.table()
        if ch == '"':
            return self.string()
        m = _INT.match(self.text, self.pos)
        if m:
            self.pos = m.end()
            return int(m.group())
        m = _WORD.match(self.text, self.pos)
        words = {"nil": None, "true": True, "false": False}
        if m and m.group() in words:
            self.pos = m.end()
            return words[m.group()]
        raise LuaReadError(f"no literal at offset {self.pos}")

    def string(self) -> str:
        self.expect('"')
        out = bytearray()
        text = self.text
        while True:
            if self.pos >= len(text):
                raise LuaReadError("unterminated string")
            ch = text[self.pos]
            self.pos += 1
            if ch == '"':
                return out.decode("utf-8", errors="replace")
            if ch != "\\":
                out += ch.encode("utf-8")
                continue
            nxt = text[self.pos : self.pos + 1]
            m = re.compile(r"[0-9]{1,3}").match(text, self.pos)
            if m:
                out.append(int(m.group()) & 0xFF)
                self.pos = m.end()
            elif nxt in _SIMPLE:
                out += _SIMPLE[nxt].encode()
                self.pos += 1
            else:
                raise LuaReadError(f"unknown escape at offset {self.pos}")

    def table(self) -> Any:
        self.expect("{")
        keyed: dict[Any, Any] = {}
        listed: list[Any] = []
        while self.peek() != "}":
            if self.peek() == "[":
                self.pos += 1
                key = self.value()
                self.expect("]")
                self.expect("=")
                keyed[key] = self.value()
            else:
                m = _WORD.match(self.text, self.pos)
                after = _SPACE.match(self.text, m.end()).end() if m else 0  # type: ignore[union-attr]
                if m and m.group() not in ("nil", "true", "false") and self.text[after : after + 1] == "=":
                    self.pos = after + 1
                    keyed[m.group()] = self.value()
                else:
                    listed.append(self.value())
            if self.peek() == ",":
                self.pos += 1
            elif self.peek() != "}":
                raise LuaReadError(f"expected ',' or '}}' at offset {self.pos}")
        self.pos += 1
        if keyed and listed:
            raise LuaReadError("a table with both keyed and listed entries")
        return listed if listed else keyed


def read_policy(text: str) -> tuple[dict[str, Any], str] | None:
    """``(SLURM_POOL data, the code after it)`` of a job_submit.lua; None when it is not slurm-pool's."""
    start = text.find("\n" + HEAD)
    if start < 0:
        return None
    reader = _Reader(text, start + 1 + len(HEAD))
    try:
        data = reader.value()
    except (LuaReadError, IndexError):
        return None
    if not isinstance(data, dict):
        return None
    return data, text[reader.pos :].lstrip("\n")
