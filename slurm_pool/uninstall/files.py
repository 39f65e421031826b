"""The files ``slurm-pool uninstall`` removes or edits: planned from what is on disk, then applied.

Only what the pool put there, as docs/adoption.md and docs/operations.md
install it: the files ``manifest.json`` lists in the installed directory
(each a regular file whose sha256 is still the manifest's; a link, a changed
file or anything the manifest does not list is left and reported), the
``Include`` lines of the site's slurm.conf, gres.conf and plugstack.conf
(:mod:`slurm_pool.render.remove`), the pool's hook ``50-slurm-pool`` in the
prolog and epilog directories, the site's job_submit.lua moved back in place
of the pool's, and the documented cron entries and systemd units.

Assert, then apply: :func:`plan` reads everything and decides; :func:`apply`
first checks that every file is still as it was read (else nothing is
changed), then edits each site file by a rename of a complete new version
(same mode and owner), so a reader never sees half a file.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from slurm_pool.errors import InputError, PoolError
from slurm_pool.render.remove import TOP_FILES, cut_lines, documented_line, fragments
from slurm_pool.spec.model import PoolSpec

MANIFEST = "manifest.json"
#: The pool's hook in the site's prolog and epilog directories (docs/adoption.md, "Prolog, epilog and the health check").
HOOK_NAME = "50-slurm-pool"
#: The cron entries docs/operations.md installs (``docs/cron/``), by name in the cron directory.
CRON_FILES: tuple[str, ...] = ("slurm-pool-rebalance", "slurm-pool-guarantees-reconcile")
#: The systemd units docs/operations.md installs (``docs/systemd/``), by name in the units directory.
UNIT_FILES: tuple[str, ...] = (
    "slurm-pool-exporter.service",
    "slurm-pool-rebalance.service",
    "slurm-pool-serve.service",
    "slurm-pool-rebalance.timer",
)
#: A file name a manifest may list: one plain file in the directory.
_PLAIN_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]{0,254}")
_SHA256 = re.compile(r"[0-9a-f]{64}")
#: What marks a hook, cron entry or unit as the pool's: its text names the pool.
_POOL_MARK = (b"slurm-pool", b"slurm_pool")

Action = Literal["edit", "remove", "move"]


@dataclass(frozen=True)
class Paths:
    """Where the site's files are: the directory the pool's files are installed in, and the three top files."""

    installed: Path
    tops: dict[str, Path]
    cron_dir: Path = Path("/etc/cron.d")
    unit_dir: Path = Path("/etc/systemd/system")


@dataclass(frozen=True)
class FileStep:
    """One change to one file; ``before`` is the file's bytes as the plan read them (checked before applying)."""

    action: Action
    path: Path
    #: What is removed, one line each (``'Include /etc/slurm/slurm-pool.conf' (line 42) from /etc/slurm/slurm.conf``).
    lines: tuple[str, ...]
    before: bytes
    #: edit: the file's new bytes; move: unused.
    after: bytes = b""
    #: move: the file moved to ``path`` (in place of the one there).
    source: Path | None = None
    #: A unit to stop and disable before its file goes.
    unit: str = ""


@dataclass
class FilePlan:
    steps: list[FileStep] = field(default_factory=list)
    #: What is left as it is, and why (one line each).
    left: list[str] = field(default_factory=list)


def _read(path: Path) -> bytes | None:
    """The bytes of a regular file (None: absent); a link or anything else is an InputError."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise InputError(f"{path}: {exc.strerror} (a symbolic link?): left as it is, nothing changed") from None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise InputError(f"{path}: not a regular file; nothing changed")
        return f.read()


def _kind(path: Path) -> str:
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return "missing"
    return "file" if stat.S_ISREG(mode) else "link" if stat.S_ISLNK(mode) else "other"


def read_manifest(directory: Path) -> dict[str, str] | None:
    """The files ``directory/manifest.json`` lists, name -> sha256 (None: no manifest there).

    InputError naming the field when it is not slurm-pool's manifest.
    """
    path = directory / MANIFEST
    if _kind(path) == "missing":
        return None
    if _kind(path) != "file":
        raise InputError(f"{path}: not a regular file (a link?); nothing changed")
    raw = _read(path) or b""
    try:
        data = json.loads(raw[: 1 << 20])
    except ValueError:
        raise InputError(f"{path}: not JSON; nothing changed") from None
    if not isinstance(data, dict) or data.get("generator") != "slurm-pool":
        raise InputError(f'{path}: "generator" is not "slurm-pool": not a manifest slurm-pool wrote; nothing changed')
    files = data.get("files")
    if not isinstance(files, dict):
        raise InputError(f'{path}: "files" is not an object of names and sha256 sums; nothing changed')
    out: dict[str, str] = {}
    for name, digest in files.items():
        if not isinstance(name, str) or not _PLAIN_NAME.fullmatch(name) or name in (".", "..", MANIFEST):
            raise InputError(f'{path}: "files" names {str(name)[:80]!r}, not a plain file name; nothing changed')
        if not isinstance(digest, str) or not _SHA256.fullmatch(digest):
            raise InputError(f'{path}: "files.{name}" is not a sha256 sum; nothing changed')
        out[name] = digest
    return out


def _ours(path: Path, what: str, left: list[str]) -> bytes | None:
    """The bytes of a documented file of the pool's at ``path`` (None: absent, or left and said why)."""
    kind = _kind(path)
    if kind == "missing":
        return None
    if kind != "file":
        left.append(f"{path}: a {kind}, not a regular file: left ({what})")
        return None
    data = _read(path) or b""
    if not any(m in data for m in _POOL_MARK):
        left.append(f"{path}: does not name slurm-pool: left, it is not the pool's {what}")
        return None
    return data


def plan(spec: PoolSpec, paths: Paths) -> FilePlan:
    """Every file change uninstall makes, decided from what is on disk now; nothing is changed."""
    if spec.coexist is None:
        raise InputError(
            "coexist: the spec has no coexist section: the pool owns this cluster (slurm.conf is its render); "
            "uninstall takes a pool out of a site's cluster"
        )
    out = FilePlan()
    d = paths.installed
    listed = read_manifest(d)
    if listed is None:
        out.left.append(f"{d / MANIFEST}: not there: no rendered file is removed (only files a manifest lists are)")
        listed = {}
    keep: set[str] = set()  # listed fragments an Include still names (left as written)
    for top, names in fragments(spec, listed).items():
        path = paths.tops[top]
        if _kind(path) not in ("file", "missing"):
            keep.update(names)
            out.left.append(f"{path}: a {_kind(path)}: its Include lines are left (edit the file it stands for)")
            continue
        text = _read(path)
        if text is None:
            continue
        cut = cut_lines(text, {n: documented_line(top, str(d), n) for n in names})
        for no, line, name in cut.left:
            keep.add(name)
            out.left.append(
                f"{path}: line {no} {line!r} includes the pool's {name} but is not the documented "
                f"{documented_line(top, str(d), name)!r}: left, and {name} with it (remove both by hand)"
            )
        if cut.removed:
            out.steps.append(
                FileStep(
                    "edit",
                    path,
                    tuple(f"{line!r} (line {no}) from {path}" for no, line in cut.removed),
                    text,
                    cut.text,
                )
            )
    for kind_dir in (spec.coexist.prolog_dir, spec.coexist.epilog_dir):
        hook = Path(kind_dir) / HOOK_NAME
        data = _ours(hook, "hook", out.left)
        if data is not None:
            out.steps.append(FileStep("remove", hook, (f"{hook} (the pool's hook)",), data))
    settings = d / "site-settings.conf"
    if "site-settings.conf" in listed and _kind(settings) == "file":
        merged = [
            line.split("=", 1)[0]
            for line in (_read(settings) or b"").decode("utf-8", "replace").splitlines()
            if "=" in line and not line.lstrip().startswith("#")
        ]
        out.left.append(
            f"{paths.tops['slurm.conf']}: the settings you merged from site-settings.conf "
            f"({', '.join(dict.fromkeys(merged))}) and the DenyQos= of your partitions stay: the pool cannot tell "
            "them from yours; take out what you do not want, before you restart slurmctld"
        )
    job_submit = spec.coexist.job_submit
    for name, digest in sorted(listed.items()):
        path = d / name
        kind = _kind(path)
        if kind == "missing":
            continue
        if kind != "file":
            out.left.append(f"{path}: listed in {MANIFEST} but a {kind}, not a regular file: left")
            keep.add(name)
            continue
        data = _read(path) or b""
        if hashlib.sha256(data).hexdigest() != digest:
            out.left.append(f"{path}: changed since it was rendered (its sha256 is not {MANIFEST}'s): left")
            keep.add(name)
            continue
        if name in keep:
            continue
        if name == "job_submit.lua" and job_submit is not None and _kind(Path(job_submit.script)) == "file":
            site = Path(job_submit.script)
            out.steps.append(
                FileStep(
                    "move",
                    path,
                    (f"the site's {site} back to {path}, in place of the pool's",),
                    data,
                    source=site,
                )
            )
            continue
        if name == "job_submit.lua" and job_submit is not None:
            out.left.append(f"{job_submit.script}: the site's job_submit.lua is not there: put yours back by hand")
        out.steps.append(FileStep("remove", path, (f"{path} (rendered, listed in {MANIFEST})",), data))
    for unit_dir, documented, what in (
        (paths.cron_dir, CRON_FILES, "cron entry"),
        (paths.unit_dir, UNIT_FILES, "unit"),
    ):
        for name in documented:
            path = unit_dir / name
            data = _ours(path, what, out.left)
            if data is not None:
                unit = name if what == "unit" else ""
                out.steps.append(FileStep("remove", path, (f"{path} (the pool's {what})",), data, unit=unit))
    if listed and (d / MANIFEST).exists():
        manifest = _read(d / MANIFEST) or b""
        if keep:
            out.left.append(f"{d / MANIFEST}: left, it lists what was left ({', '.join(sorted(keep))})")
        else:
            out.steps.append(FileStep("remove", d / MANIFEST, (f"{d / MANIFEST}",), manifest))
    return out


def check(steps: list[FileStep]) -> None:
    """PoolError unless every file is still what the plan read: then nothing is changed."""
    changed = []
    for s in steps:
        try:
            now = _read(s.path)
        except InputError:
            now = None
        if now != s.before:
            changed.append(str(s.path))
        if s.source is not None and _kind(s.source) != "file":
            changed.append(str(s.source))
    if changed:
        raise PoolError(f"changed while uninstall read them, nothing changed (run it again): {', '.join(changed)}")


def apply_step(s: FileStep) -> None:
    """Make one planned change."""
    if s.action == "edit":
        st = os.stat(s.path)
        tmp = s.path.with_name(f".{s.path.name}.slurm-pool-uninstall")
        tmp.unlink(missing_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(s.after)
                f.flush()
                os.fsync(f.fileno())
                if os.geteuid() == 0:
                    os.fchown(f.fileno(), st.st_uid, st.st_gid)
                os.fchmod(f.fileno(), stat.S_IMODE(st.st_mode))
            os.replace(tmp, s.path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
    elif s.action == "move":
        assert s.source is not None
        os.replace(s.source, s.path)
    else:
        s.path.unlink()


__all__ = ["CRON_FILES", "HOOK_NAME", "TOP_FILES", "UNIT_FILES", "FilePlan", "FileStep", "Paths", "plan"]
