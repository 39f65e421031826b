"""GPU health decisions: pure functions over snapshots (see ``adapters.nvml``).

A check yields :class:`Failure` tuples; the node hooks turn them into one
drain reason ``slurm-pool: <check>: <detail>[; <check>: <detail>...]``.
Critical XIDs are *sticky*: once seen they keep failing until the node
reboots (new boot id) or an administrator acknowledges them
(``slurm-pool healthcheck --ack-xids``), because several XIDs (GSP, NVLink,
micro-controller faults) leave no other trace in NVML.
"""

from __future__ import annotations

from typing import Any, Iterable, NamedTuple

from slurm_pool.adapters.slurmjson import REASON_PREFIX

REASON_MAX = 240
MAX_STICKY_XIDS = 16
#: The highest GPU id (device minor) a job's GPU list may name.
MAX_GPU_ID = 1023


class Failure(NamedTuple):
    """One failed check: its name, the GPU index (None: node-wide) and a detail."""

    check: str
    gpu: int | None
    detail: str


def gpu_units(snap: dict[str, Any]) -> int:
    """What Slurm's GRES counts: one per whole GPU, one per MIG device."""
    n = 0
    for g in snap.get("gpus", []):
        n += len(g.get("mig_devices") or []) if g.get("mig_enabled") else 1
    return n


def _label(g: dict[str, Any]) -> str:
    pci = g.get("pci_bus_id")
    return f"GPU {g['index']}" + (f" ({pci})" if pci else "")


def _count(v: Any) -> int:
    return v if isinstance(v, int) and v > 0 else 0


def gpu_failures(g: dict[str, Any]) -> list[Failure]:
    """ECC, row-remapping and page-retirement problems of one GPU."""
    out = []
    idx = g["index"]
    ecc = g.get("ecc") or {}
    n = _count(ecc.get("volatile_uncorrected"))
    if n:
        out.append(Failure("ecc", idx, f"{_label(g)} has {n} uncorrected volatile ECC error{'s' * (n != 1)}"))
    rows = g.get("remapped_rows")
    if rows:
        if rows.get("failure"):
            out.append(Failure("row-remap", idx, f"{_label(g)} row remapping failed (replace the GPU)"))
        elif rows.get("pending"):
            out.append(Failure("row-remap", idx, f"{_label(g)} has row remapping pending (reset the GPU)"))
    pages = g.get("retired_pages")
    if pages and pages.get("pending"):
        out.append(Failure("retired-pages", idx, f"{_label(g)} has page retirement pending (reset the GPU)"))
    return out


def job_gpu_ids(value: str | None) -> set[int]:
    """GPU ids from ``SLURM_JOB_GPUS``/``CUDA_VISIBLE_DEVICES`` (``0,2`` or ``0-3``); UUIDs are skipped.

    So are ids above :data:`MAX_GPU_ID`: ``0-99999999999`` would fill the root prolog's memory.
    """
    out: set[int] = set()
    for part in (value or "").split(","):
        part = part.strip()
        lo, sep, hi = part.partition("-")
        if (lo.isascii() and lo.isdigit()) and (not sep or (hi.isascii() and hi.isdigit())):
            top = int(hi if sep else lo)
            if top <= MAX_GPU_ID:
                out.update(range(int(lo), top + 1))
    return out


def check_snapshot(snap: dict[str, Any], *, expected_gpus: int | None, job_gpus: Iterable[int] = ()) -> list[Failure]:
    """Every failed check of one snapshot except XIDs (see :func:`xid_failures`).

    ``expected_gpus`` is the node's GRES gpu count (None: unknown); ``job_gpus``
    are the GPU ids (device minors) allocated to a job, which must be present.
    """
    job_gpus = set(job_gpus)
    if snap.get("error"):
        if expected_gpus or (expected_gpus is None and job_gpus):
            return [Failure("nvml", None, f"cannot read the GPUs: {str(snap['error'])[:120]}")]
        return []
    out: list[Failure] = []
    units = gpu_units(snap)
    if expected_gpus is not None and units != expected_gpus:
        out.append(
            Failure(
                "gpu-count", None, f"NVML sees {units} GPU{'s' * (units != 1)}, the node's GRES has {expected_gpus}"
            )
        )
    # SLURM_JOB_GPUS numbers MIG devices, not GPUs: only whole GPUs can be matched.
    mig = any(g.get("mig_enabled") for g in snap.get("gpus", []))
    present = {g.get("minor") if isinstance(g.get("minor"), int) else g["index"] for g in snap.get("gpus", [])}
    missing = [] if mig else sorted(job_gpus - present)
    if missing:
        out.append(
            Failure(
                "gpu-count",
                None,
                f"GPU{'s' * (len(missing) > 1)} {','.join(map(str, missing))} of the job not visible to NVML",
            )
        )
    for g in snap.get("gpus", []):
        out.extend(gpu_failures(g))
    return out


def new_xid_state() -> dict[str, Any]:
    return {"boot_id": "", "last_seq": -1, "critical": []}


def update_xid_state(
    state: dict[str, Any] | None, snap: dict[str, Any], ignored: Iterable[int], *, ack: bool = False
) -> dict[str, Any]:
    """Fold the snapshot's XID events into the sticky state (returns a new dict).

    Events are new when their kmsg sequence number is above the last one seen
    in the same boot.  Critical (not ignored) ones are kept until reboot or
    ``ack``.
    """
    st = dict(state or new_xid_state())
    st["critical"] = [] if ack else list(st.get("critical") or [])
    boot = snap.get("boot_id") or ""
    if boot and boot != st.get("boot_id"):
        st.update(boot_id=boot, last_seq=-1, critical=[])
    if snap.get("xid_source", "none") == "none":
        return st
    ignored = set(ignored)
    last = int(st.get("last_seq", -1))
    top = last
    for ev in snap.get("xid_events") or []:
        seq = int(ev.get("seq", -1))
        top = max(top, seq)
        if seq <= last or int(ev.get("xid", 0)) in ignored:
            continue
        if len(st["critical"]) < MAX_STICKY_XIDS:
            st["critical"].append(
                {
                    "seq": seq,
                    "xid": int(ev["xid"]),
                    "gpu_index": ev.get("gpu_index"),
                    "pci": str(ev.get("pci", ""))[:16],
                }
            )
    if ack:
        st["critical"] = []
    st["last_seq"] = top
    return st


def xid_failures(state: dict[str, Any]) -> list[Failure]:
    """One failure per (GPU, XID) still sticky."""
    seen: dict[tuple[Any, int], None] = {}
    for ev in state.get("critical") or []:
        seen.setdefault((ev.get("gpu_index"), int(ev["xid"])), None)
    out = []
    for gpu, xid in seen:
        where = f"GPU {gpu}" if isinstance(gpu, int) else "a GPU"
        out.append(Failure("xid", gpu if isinstance(gpu, int) else None, f"{where} reported critical XID {xid}"))
    return out


def _clean(text: str) -> str:
    return "".join(c if c.isprintable() else " " for c in text)


def drain_reason(failures: list[Failure]) -> str:
    """``slurm-pool: <check>: <detail>`` for the first failures, within Slurm-friendly length."""
    parts = []
    for f in failures:
        parts.append(f"{f.check}: {_clean(f.detail)}")
    text = f"{REASON_PREFIX} " + "; ".join(parts)
    if len(text) > REASON_MAX:
        text = text[: REASON_MAX - 3].rstrip() + "..."
    return text


CHECKS = ("nvml", "gpu-count", "ecc", "row-remap", "retired-pages", "xid")


def is_ours(reason: str | None) -> bool:
    """A drain reason the GPU health checks set: ``slurm-pool: <check>: ...``.

    A human's reason never matches, and neither does one of another
    slurm-pool component (``slurm-pool: mig reconfigure``): the checker never
    clears or rewrites those.
    """
    text = (reason or "").lstrip()
    if not text.startswith(REASON_PREFIX):
        return False
    check = text[len(REASON_PREFIX) :].lstrip().split(":", 1)[0]
    return check in CHECKS


def busy_gpus(snap: dict[str, Any], job_gpus: Iterable[int]) -> dict[int, list[int]]:
    """Whole GPUs of the job (by device minor) on which NVML lists compute processes: minor -> pids.

    Run in the prolog, before the job's own processes exist: any process there
    is someone else's (an inference pod after a lend, a stray).  MIG GPUs and
    GPUs without a process list are skipped (their devices are shared).
    """
    want, out = set(job_gpus), {}
    for g in snap.get("gpus", []):
        minor = g.get("minor") if isinstance(g.get("minor"), int) else g["index"]
        pids = g.get("processes")
        if minor in want and not g.get("mig_enabled") and isinstance(pids, list) and pids:
            out[minor] = list(pids)
    return out


def busy_failures(snap: dict[str, Any], busy: dict[int, list[int]]) -> list[Failure]:
    """One ``gpu-busy`` failure per busy GPU (never cleared by the health check: a person resumes the node)."""
    index = {(g.get("minor") if isinstance(g.get("minor"), int) else g["index"]): g for g in snap.get("gpus", [])}
    return [
        Failure("gpu-busy", index[m]["index"], f"{_label(index[m])} is held by pid(s) {','.join(map(str, p))}")
        for m, p in sorted(busy.items())
    ]


def affects_job(f: Failure, job_gpus: set[int], snap: dict[str, Any]) -> bool:
    """Whether a failure concerns the job's GPUs (node-wide ones always do)."""
    if f.gpu is None or any(g.get("mig_enabled") for g in snap.get("gpus", [])):
        return True
    for g in snap.get("gpus", []):
        if g["index"] == f.gpu:
            minor = g.get("minor") if isinstance(g.get("minor"), int) else g["index"]
            return minor in job_gpus
    return True


def gres_gpu_count(gres: str | None) -> int:
    """GPU units in a node's ``Gres=`` string (``gpu:h100:8(S:0-1),gpu:a100_1g.5gb:2`` -> 10)."""
    from slurm_pool.adapters.gres import gpu_counts  # the health check's alone: not on the prolog's path

    return sum(gpu_counts(gres).values())
