"""The one decoder of what commands print (Slurm's output above all).  Stdlib only.

UTF-8, and each byte that is not part of UTF-8 (a job name a user chose, ``sbatch -J
$'\\xff'``) as the four characters ``\\xNN``: never a traceback, never a read that
stops, the same value from every reader.  :class:`~slurm_pool.adapters.runner.SubprocessRunner`
decodes with :func:`decode_output`; JSON readers turn its escapes into JSON's
(:func:`json_text`, and :class:`EscapedJSON` for a stream), so a name holding 0xff
reads ``\\xff`` from squeue's text, ``--json`` and a streamed ``sacct --json`` alike.
Its own module so that readers the node hooks import need not load the runner.
"""

from __future__ import annotations

import codecs
import re
from typing import IO, Iterable


def decode_output(data: bytes) -> str:
    """A command's output as text: UTF-8, each byte that is not part of it as ``\\xNN`` (the one decoder)."""
    return data.decode("utf-8", "backslashreplace")


#: A backslash and the character it escapes (JSON's escapes are pairs; an escaped backslash is one).
_ESCAPE = re.compile(r"\\(.)", re.S)


def _json_escape(m: re.Match[str]) -> str:
    return "\\\\x" if m.group(1) == "x" else m.group(0)


def json_text(text: str) -> str:
    """:func:`decode_output`'s text with its ``\\xNN`` escapes as JSON's ``\\\\xNN`` (JSON has no ``\\x``).

    A JSON string that held the byte 0xff then reads ``\\xff``, as the text readers read it; JSON that
    held no such byte is unchanged (valid JSON never has ``\\x``).
    """
    if "\\x" not in text:
        return text
    return _ESCAPE.sub(_json_escape, text)


class EscapedJSON:
    """A binary JSON stream read through :func:`decode_output` and :func:`json_text`: always UTF-8.

    ``read`` may return more bytes than asked for (an escaped byte takes five).
    """

    def __init__(self, stream: IO[bytes]):
        self.stream = stream
        self.decoder = codecs.getincrementaldecoder("utf-8")("backslashreplace")
        self.held = ""  # trailing backslashes of the last chunk: the character they escape comes next

    def read(self, n: int = -1) -> bytes:
        if n == 0:  # a reader's probe of the file's type
            return b""
        while True:
            data = self.stream.read(n)
            if data.isascii() and not self.held and b"\\" not in data and not self.decoder.getstate()[0]:
                return data  # the common case: nothing to decode or escape
            text = self.held + self.decoder.decode(data, final=not data)
            cut = len(text.rstrip("\\")) if data else len(text)
            self.held, text = text[cut:], text[:cut]
            if text or not data:
                return json_text(text).encode("utf-8")


def key_values(words: Iterable[str]) -> dict[str, str]:
    """The ``KEY=value`` words of a line of Slurm's plain output (``scontrol show ... -o``), by key; a repeated
    key keeps its first value (a later one may be text a user chose)."""
    out: dict[str, str] = {}
    for word in words:
        key, sep, value = word.partition("=")
        if sep:
            out.setdefault(key, value)
    return out
