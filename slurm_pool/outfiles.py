"""Writing a set of output files all or nothing.

:func:`write_all` checks every target first (the directory is one, each
target is absent or a regular file), writes every file into a staging
directory beside the targets, then moves them into place one by one; if a
move fails, the files already moved are put back as they were.  Readers
never see a half-written file: each target is replaced by a rename.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from pathlib import Path
from typing import Mapping

from slurm_pool.errors import InputError, PoolError


def replace_file(path: Path, text: str, mode: int) -> None:
    """Replace ``path`` with ``text`` by a rename, with exactly ``mode``; never readable wider than that.

    The staging file beside it is created owner-only without following a link, then given ``mode``.
    """
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)
        os.fchmod(out.fileno(), mode)
    os.replace(tmp, path)


def _problem(target: Path) -> str | None:
    try:
        st = os.lstat(target)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"{target}: {exc.strerror}"
    if stat.S_ISLNK(st.st_mode):
        return f"{target} is a symbolic link, not a file (replace it by hand or render elsewhere)"
    if not stat.S_ISREG(st.st_mode):
        return f"{target} exists and is not a regular file"
    return None


def check_targets(outdir: Path, names: list[str], option: str = "-o") -> None:
    """InputError naming every target that cannot be replaced, before anything is written."""
    for parent in (outdir, *outdir.parents):
        if os.path.lexists(parent):
            if not parent.is_dir():
                raise InputError(f"{option} {outdir}: {parent} is not a directory; nothing written")
            break
    problems = [p for p in (_problem(outdir / n) for n in names) if p]
    if problems:
        raise InputError("\n".join(f"{option} {outdir}: {p}; nothing written" for p in problems))


def write_all(outdir: Path, files: Mapping[str, str | bytes], option: str = "-o", make_dir: bool = True) -> list[Path]:
    """Write ``files`` (name -> text or bytes) into ``outdir``: every one, or none.  The paths written, in order.

    ``make_dir``: create ``outdir`` (and its parents) when missing; else a missing one is an error.
    """
    names = list(files)
    check_targets(outdir, names, option)
    if not make_dir and not outdir.is_dir():
        raise InputError(f"{option} {outdir}: no such directory; nothing written")
    try:
        outdir.mkdir(parents=True, exist_ok=True)
        stage = Path(tempfile.mkdtemp(prefix=".slurm-pool-", dir=outdir))
    except OSError as exc:
        raise PoolError(f"{option} {outdir}: {exc.strerror or exc}; nothing written") from None
    moved: list[tuple[Path, Path | None]] = []  # (target, its old content kept in the stage, or None)
    try:
        for name, data in files.items():
            if isinstance(data, bytes):
                (stage / name).write_bytes(data)
            else:
                (stage / name).write_text(data)
        for name in names:
            target = outdir / name
            old: Path | None = stage / f".old-{name}"
            try:
                os.link(target, old)  # type: ignore[arg-type]
            except FileNotFoundError:
                old = None
            os.replace(stage / name, target)
            moved.append((target, old))
    except OSError as exc:
        for target, old in reversed(moved):
            if old is None:
                target.unlink(missing_ok=True)
            else:
                os.replace(old, target)
        raise PoolError(f"{option} {outdir}: {exc}; nothing written (the files already moved were put back)") from None
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return [outdir / n for n in names]
