"""The one hardware seam: GPU health and MIG inventory as JSON snapshots.

Everything that reads GPUs goes through a :class:`GpuSource`, whose only
method returns one *snapshot*: a plain JSON-able dict.  :class:`NvmlSource`
takes it from the driver (read-only pynvml queries, the kernel log for XID
events, ``/proc`` for MIG capability minors); :class:`ReplaySource` returns a
recorded one from a file.  Health decisions (``slurm_pool.node.health``) and
the MIG inventory (``slurm_pool.mig.inventory``) are pure functions of it.

Record a snapshot on a real node with ``python3 -m slurm_pool.adapters.nvml``.

Snapshot schema (``schema: "slurm-pool/gpu-snapshot"``, ``version: 1``)::

    schema, version       "slurm-pool/gpu-snapshot", 1
    taken_at              unix time (float)
    host                  node name it was taken on (informational)
    boot_id               /proc/sys/kernel/random/boot_id ("" if unknown)
    driver_version        e.g. "550.54.15" (null if unknown)
    error                 null, or why NVML could not be used at all
                          (e.g. "NVMLError_LibraryNotFound"); gpus is then []
    gpus                  list, one per physical GPU, in NVML index order:
      index               NVML index (int)
      minor               /dev/nvidia<minor> (int or null)
      uuid, name          "GPU-...", NVML device name ("NVIDIA H100 80GB HBM3")
      pci_bus_id          NVML form, "00000000:18:00.0"
      memory_mib          total memory (int or null)
      architecture        "ampere", "hopper", ... or null
      cpu_affinity        the machine CPUs nearest the GPU (nvmlDeviceGetCpuAffinity) as
                          a cpulist ("0-55,112-167"), or null when NVML cannot say
                          (absent in older snapshots)
      ecc                 {enabled, volatile_uncorrected, volatile_corrected,
                           aggregate_uncorrected}; each null when unsupported
      remapped_rows       {correctable, uncorrectable, pending, failure} or null
                          (Ampere and later)
      retired_pages       {pending, single_bit, double_bit} or null
                          (pre-Ampere page retirement)
      mig_capable         bool
      mig_enabled         current MIG mode (bool)
      mig_pending         pending MIG mode (bool; differs until a GPU reset)
      gpu_instances       MIG GPU instances (also those without a compute
                          instance), each {gi_id, profile ("3g.20gb", no "MIG "
                          prefix), profile_id (NVML GI profile ID), gi_slices,
                          memory_mib, start, size (placement in memory slots),
                          access_minor (/dev/nvidia-caps/nvidia-cap<N> or null),
                          ci_ids}
      processes           pids of the compute processes on the GPU (its MIG
                          devices' too); only in snapshots taken with
                          processes, and absent where NVML cannot say
      mig_devices         MIG devices (one per compute instance), each {uuid,
                          gi_id, ci_id, profile, profile_id, gi_slices,
                          memory_mib, start, size, gi_access_minor,
                          ci_access_minor}
    xid_source            "kmsg", "replay" or "none"
    xid_events            kernel-log XID reports still in the ring buffer, each
                          {seq (kmsg sequence number), time_us (since boot),
                          pci ("0000:3b:00"), gpu_index (int or null), xid,
                          text}

Unknown keys are ignored by readers; writers add keys, never change meaning.
"""

from __future__ import annotations

import errno
import json
import os
import re
import time
from typing import Any, Callable, Protocol, Sequence

from slurm_pool.errors import InputError
from slurm_pool.text import INDEX_LIST_RE, index_ranges, matches

SCHEMA = "slurm-pool/gpu-snapshot"
VERSION = 1

#: Words of NVML's CPU affinity mask asked for: Slurm asks for as many (gpu_nvml.c CPU_SET_SIZE, 32768 CPUs).
CPU_SET_WORDS = 512

KMSG = "/dev/kmsg"
MIG_MINORS = "/proc/driver/nvidia-caps/mig-minors"
BOOT_ID = "/proc/sys/kernel/random/boot_id"

_ARCH = {
    2: "kepler",
    3: "maxwell",
    4: "pascal",
    5: "volta",
    6: "turing",
    7: "ampere",
    8: "ada",
    9: "hopper",
    10: "blackwell",
    13: "rubin",
}
_XID_RE = re.compile(r"NVRM: Xid \(PCI:([0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})(?:\.\d)?\): (\d+)")
_MINOR_RE = re.compile(r"gpu([0-9]+)/gi([0-9]+)(?:/ci([0-9]+))?/access\s+([0-9]+)")


class GpuSource(Protocol):
    """Anything that can produce a GPU snapshot (schema above)."""

    def snapshot(self) -> dict[str, Any]: ...


class SnapshotError(InputError):
    """A snapshot file is missing, unsafe or malformed."""


# -- pure helpers -----------------------------------------------------------


def empty_snapshot(error: str | None = None, *, host: str = "", boot_id: str = "") -> dict[str, Any]:
    """A snapshot with no GPUs (and optionally the reason NVML was unusable)."""
    return {
        "schema": SCHEMA,
        "version": VERSION,
        "taken_at": time.time(),
        "host": host,
        "boot_id": boot_id,
        "driver_version": None,
        "error": error,
        "gpus": [],
        "xid_source": "none",
        "xid_events": [],
    }


def affinity_cpus(words: Sequence[int] | None, bits: int = 64) -> str | None:
    """The CPUs set in NVML's affinity mask (word ``j`` bit ``b`` is CPU ``j * bits + b``) as a cpulist
    (``0-55,112-167``); None when NVML cannot say or names none."""
    if words is None:
        return None
    return index_ranges(j * bits + b for j, word in enumerate(words) for b in range(bits) if int(word) >> b & 1) or None


def pci_key(bus_id: str) -> str:
    """Normalise an NVML or kernel PCI id to ``dddd:bb:dd`` (lower case)."""
    head = bus_id.strip().lower().split(".")[0]
    parts = head.split(":")
    if len(parts) != 3:
        return head
    dom, bus, dev = parts
    return f"{int(dom, 16):04x}:{int(bus, 16):02x}:{int(dev, 16):02x}"


def parse_kmsg_record(record: str) -> tuple[int, int, str] | None:
    """``(seq, time_us, message)`` of one /dev/kmsg record, or None."""
    head, sep, msg = record.partition(";")
    if not sep:
        return None
    fields = head.split(",")
    if len(fields) < 3:
        return None
    try:
        return int(fields[1]), int(fields[2]), msg.split("\n", 1)[0]
    except ValueError:
        return None


def parse_xid(message: str) -> tuple[str, int] | None:
    """``(pci key, xid)`` from an ``NVRM: Xid (PCI:...): N, ...`` kernel line."""
    m = _XID_RE.search(message)
    if not m:
        return None
    return pci_key(m.group(1)), int(m.group(2))


def xid_events(records: list[tuple[int, int, str]], pci_to_index: dict[str, int]) -> list[dict[str, Any]]:
    """XID events from parsed kmsg records, mapped to GPU indices."""
    out = []
    for seq, time_us, msg in records:
        hit = parse_xid(msg)
        if hit is None:
            continue
        pci, xid = hit
        out.append(
            {
                "seq": seq,
                "time_us": time_us,
                "pci": pci,
                "gpu_index": pci_to_index.get(pci),
                "xid": xid,
                "text": msg[:240],
            }
        )
    return out


def parse_mig_minors(text: str) -> dict[tuple[int, int, int | None], int]:
    """``{(gpu minor, gi, ci or None): cap minor}`` from ``mig-minors``."""
    out: dict[tuple[int, int, int | None], int] = {}
    for line in text.splitlines():
        m = _MINOR_RE.fullmatch(line.strip())
        if m:
            ci = None if m.group(3) is None else int(m.group(3))
            out[(int(m.group(1)), int(m.group(2)), ci)] = int(m.group(4))
    return out


def profile_name(raw: str | bytes | None, slices: int, memory_mib: int) -> str:
    """``3g.20gb`` from NVML's ``MIG 3g.20gb`` (or from slices and memory)."""
    if isinstance(raw, bytes):
        raw = raw.decode(errors="replace")
    if raw:
        return raw.strip().removeprefix("MIG").strip()
    return f"{slices}g.{int(memory_mib / 1024 + 0.5)}gb"


def gpu_processes(snap: dict[str, Any]) -> dict[int, list[int]] | None:
    """GPU index -> pids of its compute processes; None unless every GPU says (or there is no GPU)."""
    out = {}
    for g in snap.get("gpus", []):
        pids = g.get("processes")
        if not isinstance(pids, list) or not all(isinstance(p, int) for p in pids):
            return None
        out[g["index"]] = list(pids)
    return out


def validate_snapshot(snap: Any) -> list[str]:
    """Problems that make ``snap`` unusable (empty list: fine)."""
    if not isinstance(snap, dict):
        return ["a snapshot is a JSON object"]
    problems = []
    if snap.get("schema") != SCHEMA:
        problems.append(f"schema is {snap.get('schema')!r}, not {SCHEMA!r}")
    if snap.get("version") != VERSION:
        problems.append(f"version {snap.get('version')!r} is not supported (want {VERSION})")
    gpus = snap.get("gpus")
    if not isinstance(gpus, list):
        problems.append("gpus must be a list")
    else:
        for i, g in enumerate(gpus):
            if not isinstance(g, dict) or not _whole(g.get("index")):
                problems.append(f"gpus[{i}] needs an integer index")
                continue
            for key in ("ecc", "remapped_rows", "retired_pages"):
                if not isinstance(g.get(key) or {}, dict):
                    problems.append(f"gpus[{i}].{key} must be an object")
            if not isinstance(g.get("mig_devices") or [], list):
                problems.append(f"gpus[{i}].mig_devices must be a list")
            aff = g.get("cpu_affinity")
            if aff is not None and not matches(INDEX_LIST_RE, aff):
                problems.append(f"gpus[{i}].cpu_affinity must be a cpulist such as 0-55,112-167")
    events = snap.get("xid_events", [])
    if not isinstance(events, list):
        problems.append("xid_events must be a list")
    else:
        for i, ev in enumerate(events):
            if not isinstance(ev, dict) or not _whole(ev.get("seq")) or not _whole(ev.get("xid")):
                problems.append(f"xid_events[{i}] needs integer seq and xid")
    return problems


def _whole(value: Any) -> bool:
    """An integer from JSON: not a bool, not a string of digits."""
    return isinstance(value, int) and not isinstance(value, bool)


# -- replay -----------------------------------------------------------------


def check_private_file(path: str, *, owner: int | None = None) -> os.stat_result:
    """Stat ``path`` (no symlinks) and insist on a root/owner-owned, not group/world-writable file."""
    try:
        st = os.stat(path, follow_symlinks=False)
    except OSError as exc:
        raise SnapshotError(f"{path}: {exc.strerror}") from None
    import stat as _stat

    if not _stat.S_ISREG(st.st_mode):
        raise SnapshotError(f"{path}: not a regular file")
    allowed = {0, os.geteuid() if owner is None else owner}
    if st.st_uid not in allowed:
        raise SnapshotError(f"{path}: owned by uid {st.st_uid}, not root")
    if st.st_mode & 0o022:
        raise SnapshotError(f"{path}: writable by group or others (mode {st.st_mode & 0o777:o})")
    return st


class ReplaySource:
    """Returns a recorded snapshot from a JSON file.

    With ``trusted=True`` (how the node hooks use it) the file must be owned by
    root (or this process's user) and not group/world-writable: injected
    snapshots decide whether a node is drained.
    """

    def __init__(self, path: str, *, trusted: bool = True):
        self.path = path
        self.trusted = trusted

    def snapshot(self) -> dict[str, Any]:
        checked = check_private_file(self.path) if self.trusted else None
        try:  # read the file that was checked: no link followed, no FIFO waited on, not a swapped one
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC | (os.O_NOFOLLOW | os.O_NONBLOCK if checked else 0))
            with open(fd, encoding="utf-8") as fh:
                st = os.fstat(fd)
                if checked is not None and (st.st_dev, st.st_ino) != (checked.st_dev, checked.st_ino):
                    raise SnapshotError(f"{self.path}: replaced while being read")
                snap = json.load(fh)
        except OSError as exc:
            raise SnapshotError(f"{self.path}: {exc.strerror}") from None
        except ValueError as exc:
            raise SnapshotError(f"{self.path}: not JSON ({exc})") from None
        problems = validate_snapshot(snap)
        if problems:
            raise SnapshotError(f"{self.path}: " + "; ".join(problems))
        snap.setdefault("xid_events", [])
        snap.setdefault("xid_source", "replay")
        snap.setdefault("error", None)
        return snap


# -- the real thing ---------------------------------------------------------


def read_kmsg(path: str = KMSG) -> list[tuple[int, int, str]] | None:
    """Every record still in the kernel ring buffer (None if unreadable)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    out: list[tuple[int, int, str]] = []
    carry = b""

    def take(lines: list[bytes]) -> None:
        for line in lines:  # continuation lines (" KEY=value") start with a space
            if b"NVRM" in line and not line.startswith(b" "):  # cheap filter: only XIDs matter
                rec = parse_kmsg_record(line.decode(errors="replace"))
                if rec:
                    out.append(rec)

    try:
        while True:  # /dev/kmsg returns one record per read; a saved dump, many lines
            try:
                chunk = os.read(fd, 8192)
            except BlockingIOError:
                break
            except OSError as exc:
                if exc.errno == errno.EPIPE:  # record overwritten while reading: go on
                    continue
                break
            if not chunk:
                break
            lines = (carry + chunk).split(b"\n")
            carry = lines.pop()
            take(lines)
        take([carry])
    finally:
        os.close(fd)
    return out


def _read_text(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read()
    except OSError:
        return ""


class PynvmlLib:
    """pynvml behind a handful of read-only, JSON-returning calls.

    Every query that the GPU or driver does not support yields ``None`` in its
    field instead of failing the whole snapshot.
    """

    def __init__(self, module: Any = None):
        if module is None:
            import pynvml  # noqa: PLC0415 (imported only where NVML is used)

            module = pynvml
        self.nv = module

    def _try(self, fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return fn(*args)
        except self.nv.NVMLError:
            return None

    def init(self) -> None:
        self.nv.nvmlInit()

    def shutdown(self) -> None:
        self._try(self.nv.nvmlShutdown)

    def driver_version(self) -> str | None:
        v = self._try(self.nv.nvmlSystemGetDriverVersion)
        return v.decode() if isinstance(v, bytes) else v

    def device_count(self) -> int:
        return int(self.nv.nvmlDeviceGetCount())

    def handle(self, index: int) -> Any:
        return self.nv.nvmlDeviceGetHandleByIndex(index)

    def gpu(self, index: int, h: Any) -> dict[str, Any]:
        nv, t = self.nv, self._try
        name = t(nv.nvmlDeviceGetName, h)
        uuid = t(nv.nvmlDeviceGetUUID, h)
        pci = t(nv.nvmlDeviceGetPciInfo, h)
        bus = getattr(pci, "busId", None) if pci is not None else None
        mem = t(nv.nvmlDeviceGetMemoryInfo, h)
        arch = t(nv.nvmlDeviceGetArchitecture, h)
        ecc_mode = t(nv.nvmlDeviceGetEccMode, h)
        unc = nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
        rows = t(nv.nvmlDeviceGetRemappedRows, h)
        pending_pages = t(nv.nvmlDeviceGetRetiredPagesPendingStatus, h)
        retired = None
        if pending_pages is not None:
            sbe = t(nv.nvmlDeviceGetRetiredPages, h, nv.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS)
            dbe = t(nv.nvmlDeviceGetRetiredPages, h, nv.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)
            retired = {
                "pending": bool(pending_pages == nv.NVML_FEATURE_ENABLED),
                "single_bit": None if sbe is None else len(sbe),
                "double_bit": None if dbe is None else len(dbe),
            }
        return {
            "index": index,
            "minor": t(nv.nvmlDeviceGetMinorNumber, h),
            "uuid": uuid.decode() if isinstance(uuid, bytes) else uuid,
            "name": name.decode() if isinstance(name, bytes) else name,
            "pci_bus_id": bus.decode() if isinstance(bus, bytes) else bus,
            "memory_mib": None if mem is None else int(mem.total // (1024 * 1024)),
            "architecture": _ARCH.get(arch) if arch is not None else None,
            "ecc": {
                "enabled": None if ecc_mode is None else bool(ecc_mode[0]),
                "volatile_uncorrected": t(nv.nvmlDeviceGetTotalEccErrors, h, unc, nv.NVML_VOLATILE_ECC),
                "volatile_corrected": t(
                    nv.nvmlDeviceGetTotalEccErrors, h, nv.NVML_MEMORY_ERROR_TYPE_CORRECTED, nv.NVML_VOLATILE_ECC
                ),
                "aggregate_uncorrected": t(nv.nvmlDeviceGetTotalEccErrors, h, unc, nv.NVML_AGGREGATE_ECC),
            },
            "remapped_rows": None
            if rows is None
            else {
                "correctable": int(rows[0]),
                "uncorrectable": int(rows[1]),
                "pending": bool(rows[2]),
                "failure": bool(rows[3]),
            },
            "retired_pages": retired,
            "cpu_affinity": affinity_cpus(t(nv.nvmlDeviceGetCpuAffinity, h, CPU_SET_WORDS)),
        }

    def processes(self, h: Any) -> list[int] | None:
        """Pids of the compute processes on one GPU (None: NVML cannot say)."""
        procs = self._try(self.nv.nvmlDeviceGetComputeRunningProcesses, h)
        return None if procs is None else sorted({int(p.pid) for p in procs})

    def gi_profiles(self, h: Any) -> dict[int, dict[str, Any]]:
        """``{profile_id: {profile, gi_slices, memory_mib}}`` of one GPU."""
        out = {}
        for p in range(getattr(self.nv, "NVML_GPU_INSTANCE_PROFILE_COUNT", 0)):
            info = self._try(self.nv.nvmlDeviceGetGpuInstanceProfileInfo, h, p)
            if info is None or not getattr(info, "instanceCount", 1):
                continue
            mem = int(info.memorySizeMB)
            out[int(info.id)] = {
                "profile": profile_name(getattr(info, "name", None), int(info.sliceCount), mem),
                "gi_slices": int(info.sliceCount),
                "memory_mib": mem,
            }
        return out

    def gpu_instances(self, h: Any, profile_id: int, max_count: int) -> list[Any]:
        """GPU instance handles of one profile (ctypes plumbing)."""
        import ctypes

        arr = (self.nv.c_nvmlGpuInstance_t * max(1, max_count))()
        count = ctypes.c_uint(0)
        if self._try(self.nv.nvmlDeviceGetGpuInstances, h, profile_id, arr, ctypes.byref(count)) is None:
            return []
        return [arr[i] for i in range(count.value)]

    def mig(self, h: Any, minor: int | None, minors: dict[tuple[int, int, int | None], int]) -> dict[str, Any]:
        """The MIG fields of one GPU."""
        nv, t = self.nv, self._try
        mode = t(nv.nvmlDeviceGetMigMode, h)
        out: dict[str, Any] = {
            "mig_capable": mode is not None,
            "mig_enabled": bool(mode and mode[0]),
            "mig_pending": bool(mode and mode[1]),
            "gpu_instances": [],
            "mig_devices": [],
        }
        if not out["mig_enabled"]:
            return out
        profiles = self.gi_profiles(h)
        gis: dict[int, dict[str, Any]] = {}
        for pid, prof in profiles.items():
            for gi in self.gpu_instances(h, pid, 8):
                info = t(nv.nvmlGpuInstanceGetInfo, gi)
                if info is None:
                    continue
                gid = int(info.id)
                gis[gid] = {
                    "gi_id": gid,
                    "profile": prof["profile"],
                    "profile_id": pid,
                    "gi_slices": prof["gi_slices"],
                    "memory_mib": prof["memory_mib"],
                    "start": int(info.placement.start),
                    "size": int(info.placement.size),
                    "access_minor": minors.get((minor, gid, None)) if minor is not None else None,
                    "ci_ids": [],
                }
        for i in range(t(nv.nvmlDeviceGetMaxMigDeviceCount, h) or 0):
            mh = t(nv.nvmlDeviceGetMigDeviceHandleByIndex, h, i)
            if mh is None:
                continue
            gid, cid = t(nv.nvmlDeviceGetGpuInstanceId, mh), t(nv.nvmlDeviceGetComputeInstanceId, mh)
            if gid is None or cid is None:
                continue
            uuid = t(nv.nvmlDeviceGetUUID, mh)
            mem = t(nv.nvmlDeviceGetMemoryInfo, mh)
            gi = gis.get(int(gid), {})
            if gi:
                gi["ci_ids"].append(int(cid))
            out["mig_devices"].append(
                {
                    "uuid": uuid.decode() if isinstance(uuid, bytes) else uuid,
                    "gi_id": int(gid),
                    "ci_id": int(cid),
                    "profile": gi.get("profile"),
                    "profile_id": gi.get("profile_id"),
                    "gi_slices": gi.get("gi_slices"),
                    "memory_mib": gi.get("memory_mib") or (None if mem is None else int(mem.total // 2**20)),
                    "start": gi.get("start"),
                    "size": gi.get("size"),
                    "gi_access_minor": gi.get("access_minor"),
                    "ci_access_minor": minors.get((minor, int(gid), int(cid))) if minor is not None else None,
                }
            )
        out["gpu_instances"] = [gis[k] for k in sorted(gis)]
        return out


class NvmlSource:
    """Snapshots from the driver: pynvml (read-only), /dev/kmsg and /proc."""

    def __init__(
        self,
        lib: Any = None,
        *,
        kmsg: str | None = KMSG,
        mig_minors: str = MIG_MINORS,
        boot_id: str = BOOT_ID,
        host: str | None = None,
        with_mig: bool = True,
        with_processes: bool = False,
    ):
        self._lib = lib
        self.with_processes = with_processes
        self.kmsg = kmsg
        self.mig_minors = mig_minors
        self.boot_id = boot_id
        self.host = host
        self.with_mig = with_mig

    def snapshot(self) -> dict[str, Any]:
        host = self.host or os.uname().nodename.split(".")[0]
        boot = _read_text(self.boot_id).strip()
        try:
            lib = self._lib if self._lib is not None else PynvmlLib()
            lib.init()
        except ImportError as exc:
            return empty_snapshot(f"pynvml not importable: {exc}", host=host, boot_id=boot)
        except Exception as exc:  # NVMLError_* and friends: no usable driver
            return empty_snapshot(type(exc).__name__ + (f": {exc}" if str(exc) else ""), host=host, boot_id=boot)
        try:
            snap = empty_snapshot(None, host=host, boot_id=boot)
            snap["driver_version"] = lib.driver_version()
            minors = parse_mig_minors(_read_text(self.mig_minors)) if self.with_mig else {}
            for i in range(lib.device_count()):
                h = lib.handle(i)
                gpu = lib.gpu(i, h)
                if self.with_mig:
                    gpu.update(lib.mig(h, gpu.get("minor"), minors))
                if self.with_processes and (pids := lib.processes(h)) is not None:
                    gpu["processes"] = pids
                snap["gpus"].append(gpu)
        except Exception as exc:  # a device vanished mid-query, driver wedged, ...
            snap = empty_snapshot(type(exc).__name__ + (f": {exc}" if str(exc) else ""), host=host, boot_id=boot)
        finally:
            lib.shutdown()
        records = read_kmsg(self.kmsg) if self.kmsg else None
        if records is not None:
            index = {pci_key(g["pci_bus_id"]): g["index"] for g in snap["gpus"] if g.get("pci_bus_id")}
            snap["xid_source"] = "kmsg"
            snap["xid_events"] = xid_events(records, index)
        return snap


def main() -> None:
    """Print a snapshot of this machine's GPUs (for recording test data)."""
    import sys

    json.dump(NvmlSource().snapshot(), sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
