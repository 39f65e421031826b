"""Reading the files users hand to the command line: UTF-8 text and JSON, or a clear error.

Every failure is an :class:`~slurm_pool.errors.InputError` (exit 2) that names
the file: a missing or unreadable file, bytes that are not UTF-8, JSON that
does not parse or nests too deeply to read.  ``-`` is standard input.

Text and JSON read whole are capped at :data:`MAX_BYTES`; inputs with no cap,
such as a site's ``sacct --json`` history, are read as a stream
(:func:`open_binary`) by readers that keep only what they need.
"""

from __future__ import annotations

import contextlib
import json
import sys
from typing import IO, TYPE_CHECKING, Any, Iterator

from slurm_pool.errors import InputError

if TYPE_CHECKING:  # pathlib only where a file is opened: the node hooks read JSON through here
    from pathlib import Path

#: Files read whole larger than this are refused (specs, plans and traces are far smaller).
MAX_BYTES = 256 * 1024 * 1024


def read_text(path: str) -> str:
    """The text of ``path`` (``-``: standard input), decoded as strict UTF-8."""
    from pathlib import Path

    try:
        data = sys.stdin.buffer.read(MAX_BYTES + 1) if path == "-" else _read_bytes(Path(path))
    except OSError as exc:
        raise InputError(f"{path}: {exc.strerror or exc}") from None
    if len(data) > MAX_BYTES:
        raise InputError(f"{path}: larger than {MAX_BYTES // (1024 * 1024)} MiB")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: not UTF-8 text (byte {exc.start})") from None


def _read_bytes(path: Path) -> bytes:
    with path.open("rb") as fh:
        return fh.read(MAX_BYTES + 1)


def parse_json(text: str, source: str) -> Any:
    """``json.loads`` with errors naming ``source``; NaN and Infinity are refused too."""
    try:
        return json.loads(text, parse_constant=_no_constant)
    except RecursionError:
        raise InputError(f"{source}: not JSON (nested too deeply)") from None
    except ValueError as exc:
        raise InputError(f"{source}: not JSON: {exc}") from None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def read_json(path: str) -> Any:
    """The JSON document in ``path`` (``-``: standard input)."""
    return parse_json(read_text(path), path)


@contextlib.contextmanager
def open_binary(path: str) -> Iterator[IO[bytes]]:
    """``path`` (``-``: standard input) as a binary file to stream, of any size; InputError naming it."""
    if path == "-":
        yield sys.stdin.buffer
        return
    from pathlib import Path

    try:
        fh = Path(path).open("rb")
    except OSError as exc:
        raise InputError(f"{path}: {exc.strerror or exc}") from None
    with fh:
        yield fh
