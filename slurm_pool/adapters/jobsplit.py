"""The jobs of a ``sacct --json`` document as Slurm prints it, cut apart by their indent and decoded by ``msgspec``.

The fast path of :func:`~slurm_pool.adapters.sacct_stream.sacct_jobs` (``ijson``, its reference
reader, builds every value of every job; a replay reads a few keys of each).

* Slurm prints each job of ``jobs`` on lines of its own at one indent (``\\n  {`` ... ``\\n  },``).
  A JSON string cannot hold a newline, so ``\\n  },\\n  {`` lies between two values: the text read
  so far is cut there, and each job decoded alone keeping only the keys asked for (the others are
  checked as JSON and skipped).  A job that decodes so is exactly the reference's: it starts where a
  job starts, and a valid object ends where its text ends, so the cut after it was between two jobs.
* A job that does not decode, or that may hold a number the reference refuses (19 digits in a row,
  an exponent of three digits), is decoded by ``ijson``.  At the first job that does not decode
  that way either (the cut was not between jobs, or the document is wrong) the rest of the document
  goes back to the reference reader (:attr:`Splitter.rest`), as it does after the last cut (the last
  job and what follows ``jobs``): every object and every refusal is the reference's.
"""

from __future__ import annotations

import io
from typing import IO, Any, Iterator

import ijson  # type: ignore[import-untyped]
import msgspec

#: Bytes read at a time.
CHUNK = 1 << 20
#: Bytes with no cut between jobs after which the rest goes back to the reference reader.
LIMIT = 64 << 20
#: Each byte as the screen for numbers sees it: digits as 0, exponent letters as e, signs as +, the rest as space.
_SCREEN = bytes(
    ord("0") if c in b"0123456789" else ord("e") if c in b"eE" else ord("+") if c in b"+-" else 32 for c in range(256)
)
_SUSPECT = (b"0" * 19, b"e000", b"e+000")
_FAILED = (msgspec.DecodeError, msgspec.ValidationError, RecursionError)


def suspect(data: bytes) -> bool:
    """Whether ``data`` may hold a number past 64 bits or past a float's range (ijson refuses those, msgspec not)."""
    screened = data.translate(_SCREEN)
    return any(s in screened for s in _SUSPECT)


class Splitter:
    """Jobs printed at ``indent`` (a newline and spaces), each as a dict of the keys in ``fields`` it has."""

    def __init__(self, indent: bytes, fields: tuple[str, ...]):
        self.fields = fields
        self.end = indent + b"}"
        self.cut = indent + b"}," + indent + b"{"
        job = msgspec.defstruct("Job", [(f, Any, msgspec.UNSET) for f in fields])
        self.one = msgspec.json.Decoder(job)
        #: Where the reference reader goes on: the text from the first job not read here (``{``) to what was read.
        self.rest = b""

    def jobs(self, buf: bytearray, stream: IO[bytes]) -> Iterator[tuple[int, dict[str, Any] | None]]:
        """``(index, job)`` of the jobs from ``buf`` (the first job's ``{`` on) then ``stream``;
        ``(index, None)`` last: the job of that index on are in :attr:`rest`, then the rest of ``stream``."""
        i, searched = 0, 0
        while True:
            k = buf.rfind(self.cut, max(0, searched - len(self.cut)))
            if k < 0:
                data = stream.read(CHUNK) if len(buf) <= LIMIT else b""
                if not data:
                    break
                searched = len(buf)
                buf += data
                continue
            run = bytes(buf[: k + len(self.end)])
            del buf[: k + len(self.cut) - 1]
            searched = 0
            screened = suspect(run)
            parts = run.split(self.cut)
            for n, part in enumerate(parts):  # one at a time: no run of decoded jobs kept alive (the GC's work)
                job = self._job((b"{" if n else b"") + part + (self.end if n + 1 < len(parts) else b""), screened)
                if job is None:
                    self.rest = (b"{" if n else b"") + self.cut.join(parts[n:]) + b"," + bytes(buf)
                    yield i, None
                    return
                yield i, job
                i += 1
        self.rest = bytes(buf)
        yield i, None

    def _job(self, piece: bytes, screened: bool) -> dict[str, Any] | None:
        """The job whose text is ``piece`` (None: not one job, as far as msgspec and ijson tell); ``screened``:
        the run it is in may hold a number msgspec reads and ijson refuses."""
        if not (screened and suspect(piece)):
            try:
                return self._dict(self.one.decode(piece))
            except _FAILED:
                pass
        try:
            found = list(ijson.items(io.BytesIO(piece), "", use_float=True))
        except Exception:  # whatever it is, the reference reader meets it again and says so
            return None
        if len(found) != 1 or not isinstance(found[0], dict):
            return None
        return {k: found[0][k] for k in self.fields if k in found[0]}

    def _dict(self, job: Any) -> dict[str, Any]:
        return {k: v for k, v in zip(self.fields, msgspec.structs.astuple(job), strict=True) if v is not msgspec.UNSET}
