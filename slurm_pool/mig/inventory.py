"""Current MIG layouts from a GPU inventory snapshot.

The NVML adapter (``slurm_pool.adapters.nvml``) is owned elsewhere; this
module only needs the small read-only shape below, so it works with that
adapter's snapshot objects, with plain dicts (e.g. a recorded JSON snapshot)
and with test fakes alike.  Attribute names tried, in order:

* GPU: ``index``; ``minor`` (default: the index); ``name`` (NVML device name);
  ``mig_enabled`` / ``mig_mode`` (bool or ``"Enabled"``); ``mig_devices`` /
  ``migs`` (list of MIG devices).
* MIG device: ``gi_id`` / ``gpu_instance_id``; ``ci_id`` / ``compute_instance_id``;
  ``profile`` (``3g.40gb``) or ``gi_slices`` / ``gpu_instance_slice_count`` with
  ``memory_mib`` / ``memory_size_mb``; optional ``start`` / ``placement_start``.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Protocol, Sequence

from slurm_pool.mig.catalogue import GPU_MODELS, canonical_model, mig_gres_type, mig_type_by_memory
from slurm_pool.mig.emit import MigDevice
from slurm_pool.mig.placement import Layout, canonical
from slurm_pool.mig.profiles import geometry
from slurm_pool.text import strict_int
from slurm_pool.versions import DEFAULT_VERSION


class MigDeviceSnapshot(Protocol):
    gi_id: int
    ci_id: int


class GpuSnapshot(Protocol):
    """What this module reads from one GPU of an inventory snapshot."""

    index: int
    name: str
    mig_enabled: bool
    mig_devices: Sequence[Any]


def _get(obj: Any, *names: str, default: Any = None) -> Any:
    for n in names:
        if isinstance(obj, Mapping) and n in obj:
            return obj[n]
        if not isinstance(obj, Mapping) and hasattr(obj, n):
            return getattr(obj, n)
    return default


def model_for_nvml_name(name: str) -> str | None:
    """Catalogue model whose NVML name is ``name`` (case and ``NVIDIA`` prefix ignored)."""
    return canonical_model(name)


def _profile(model: str, dev: Any) -> str:
    prof = _get(dev, "profile", "profile_name")
    if prof:
        name = str(prof).removeprefix("MIG ").strip()
        if geometry(model).profile(name) is None:
            raise ValueError(f"profile: {prof!r} is not a {model} MIG profile")
        return name
    slices = strict_int(_get(dev, "gi_slices", "gpu_instance_slice_count"), "gi_slices")
    mib = strict_int(_get(dev, "memory_mib", "memory_size_mb"), "memory_mib")
    # the plain profile that Slurm's memory-based naming (22.05) gives the same type
    want = mig_type_by_memory(GPU_MODELS[model].nvml_name, slices, mib)
    for p in geometry(model).profiles.values():
        if not p.media_ext and p.compute == slices and mig_gres_type(model, p.name, DEFAULT_VERSION) == want:
            return p.name
    for p in geometry(model).profiles.values():  # else nearest memory with the same slices
        if not p.media_ext and p.compute == slices and abs(p.memory_gb * 1024 - mib) < 3 * 1024:
            return p.name
    raise ValueError(f"no {model} profile with {slices} slices and {mib} MiB")


def _mig_on(gpu: Any) -> bool:
    mode = _get(gpu, "mig_enabled", "mig_mode", default=False)
    return mode.strip().lower() == "enabled" if isinstance(mode, str) else bool(mode)


def layouts_from_snapshot(model: str, gpus: Iterable[Any]) -> dict[int, Layout | None]:
    """Current layout per GPU index (None where MIG is off)."""
    geo = geometry(model)
    out: dict[int, Layout | None] = {}
    for gpu in gpus:
        idx = strict_int(_get(gpu, "index"), "index")
        if not _mig_on(gpu):
            out[idx] = None
            continue
        devs = _get(gpu, "mig_devices", "migs", default=()) or ()
        seen: dict[int, str] = {}
        for d in devs:  # one entry per GPU instance, even with several CIs
            seen.setdefault(strict_int(_get(d, "gi_id", "gpu_instance_id"), "gi_id"), _profile(model, d))
        out[idx] = canonical(geo, seen.values())
    return out


def devices_from_snapshot(model: str, gpus: Iterable[Any]) -> list[MigDevice]:
    """Every MIG device with its IDs, for explicit gres.conf lines."""
    out = []
    for gpu in gpus:
        if not _mig_on(gpu):
            continue
        idx = strict_int(_get(gpu, "index"), "index")
        minor = _get(gpu, "minor", "minor_number", default=idx)
        for d in _get(gpu, "mig_devices", "migs", default=()) or ():
            mib = _get(d, "memory_mib", "memory_size_mb")
            start = _get(d, "start", "placement_start")
            out.append(
                MigDevice(
                    idx,
                    strict_int(_get(d, "gi_id", "gpu_instance_id"), "gi_id"),
                    strict_int(_get(d, "ci_id", "compute_instance_id", default=0), "ci_id"),
                    _profile(model, d),
                    gpu_minor=strict_int(minor, "minor"),
                    start=None if start is None else strict_int(start, "start"),
                    memory_mib=None if mib is None else strict_int(mib, "memory_mib"),
                )
            )
    return out
