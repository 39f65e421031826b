"""Writing a set of output files all or nothing.

:func:`write_all` checks every target first (the directory is one, each
target is absent or a regular file), writes every file into a staging
directory beside the targets, then moves them into place one by one and
removes the files named in ``remove`` (those a previous write produced and
this one no longer does: :func:`previous_outputs`); if a move or removal
fails, the files already moved or removed are put back as they were.  Readers
never see a half-written file: each target is replaced by a rename.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import tempfile
from pathlib import Path
from typing import Iterable, Mapping, Sequence

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


#: A name a manifest may list for removal: one plain file in the directory, never a path.
_PLAIN_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]{0,254}")


def previous_outputs(outdir: Path, keep: Iterable[str], manifest: str = "manifest.json") -> tuple[list[str], list[str]]:
    """The files the previous write listed in ``outdir/manifest`` ("files") that ``keep`` lacks, and notes.

    Returns ``(names to remove, notes for the user)``.  Only plain names of
    regular files are removed: a name with a "/", a symbolic link, a directory
    is left and noted; a file the manifest does not list (a human's) is never
    considered.  A manifest that is missing says nothing; an unreadable one is noted.
    """
    try:
        fd = os.open(outdir / manifest, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return [], []
    except OSError as exc:  # a link (ELOOP), a directory, no permission: nothing to trust
        return [], [f"{outdir / manifest}: {exc.strerror}; files it listed are left"]
    try:
        with os.fdopen(fd, "rb") as f:
            listed = json.loads(f.read(1 << 20)).get("files", {})
    except (OSError, ValueError, AttributeError) as exc:
        return [], [f"{outdir / manifest} is not readable JSON ({type(exc).__name__}); files it listed are left"]
    if not isinstance(listed, (dict, list)):
        return [], [f'{outdir / manifest}: "files" is not a list of names; files it listed are left']
    wanted = set(keep) | {manifest}
    remove: list[str] = []
    notes: list[str] = []
    for name in listed:
        if not isinstance(name, str) or name in wanted:
            continue
        if not _PLAIN_NAME.fullmatch(name) or name in (".", ".."):
            notes.append(f"{outdir}: the old {manifest} lists {name!r}, not a plain file name; left")
            continue
        try:
            st = os.lstat(outdir / name)
        except FileNotFoundError:
            continue
        if not stat.S_ISREG(st.st_mode):
            notes.append(f"{outdir / name} is no longer rendered but is not a regular file (a link?); left")
            continue
        remove.append(name)
    return remove, notes


def _remove_one(target: Path, old: Path) -> bool:
    """Move a regular file ``target`` aside to ``old`` (for a rollback); False when it is no longer one."""
    try:
        if not stat.S_ISREG(os.lstat(target).st_mode):
            return False
    except FileNotFoundError:
        return False
    os.link(target, old, follow_symlinks=False)
    os.unlink(target)
    return True


def write_all(
    outdir: Path,
    files: Mapping[str, str | bytes],
    option: str = "-o",
    make_dir: bool = True,
    remove: Sequence[str] = (),
    removed: list[Path] | None = None,
) -> list[Path]:
    """Write ``files`` (name -> text or bytes) into ``outdir``: every one, or none.  The paths written, in order.

    ``make_dir``: create ``outdir`` (and its parents) when missing; else a missing one is an error.
    ``remove``: plain names of files to remove in the same all-or-nothing step (a symbolic link or
    anything not a regular file is left); the paths removed are appended to ``removed``.
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
        gone: list[Path] = []
        for name in remove:
            if name in files or not _PLAIN_NAME.fullmatch(name):
                continue
            aside = stage / f".gone-{name}"
            if _remove_one(outdir / name, aside):
                moved.append((outdir / name, aside))
                gone.append(outdir / name)
    except OSError as exc:
        for target, old in reversed(moved):
            if old is None:
                target.unlink(missing_ok=True)
            else:
                os.replace(old, target)
        raise PoolError(f"{option} {outdir}: {exc}; nothing written (the files already moved were put back)") from None
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    if removed is not None:
        removed.extend(gone)
    return [outdir / n for n in names]
