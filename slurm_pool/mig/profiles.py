"""MIG profile tables per GPU model (hardware rules as data).

Each GPU instance profile occupies ``memory`` consecutive *memory slots* of the
GPU starting at one of ``starts`` and uses ``compute`` compute slices.  The
7-compute-slice GPUs (A100, H100, H200, GH200, B200) have 8 memory slots; the A30 has
4 compute slices and 4 memory slots.  ``+me`` profiles additionally own the
GPU's media engines (decoders, JPEG, OFA), so at most one ``+me`` instance can
exist per GPU.

Source: NVIDIA Multi-Instance GPU User Guide (v590), sections "Supported
GPUs", "Supported MIG Profiles" (profile tables per GPU: fraction of
memory/SMs, instance count, profile ID) and "A100 MIG placements" /
``nvidia-smi mig -lgipp`` output (placement ``{starts}:size`` per profile).
Profile IDs are the GPU instance profile IDs that ``nvidia-smi mig -lgip``
lists.  The PCIe forms of A100 and H100 and the H200 NVL have the profiles of
the SXM part with the same memory.  The GH200 profile names (96 GB: as the
H100 96GB; 144G HBM3e: ``1g.18gb`` to ``7g.144gb``) come from NVIDIA
mig-parted's ``deployments/systemd/config-default.yaml``, whose configs name
each; the guide's "Supported GPUs" lists "H100 on GH200" with 96 GB.
"""

from __future__ import annotations

from dataclasses import dataclass

from slurm_pool.mig.catalogue import GPU_MODELS, mig_gres_types


@dataclass(frozen=True)
class MigProfile:
    """One GPU instance profile of one GPU model."""

    name: str
    profile_id: int
    compute: int
    memory: int
    starts: tuple[int, ...]
    max_count: int
    media_ext: bool = False

    @property
    def memory_gb(self) -> int:
        """The GB figure in the profile name (``3g.40gb`` -> 40)."""
        return int(self.name.split(".")[1].split("gb")[0])


@dataclass(frozen=True)
class MigGeometry:
    """The MIG rules of one GPU model."""

    model: str
    compute_slices: int
    memory_slots: int
    profiles: dict[str, MigProfile]

    def profile(self, name: str) -> MigProfile | None:
        return self.profiles.get(name)


def _seven_slice(model: str, gb: tuple[int, int, int, int, int]) -> MigGeometry:
    """Profiles of a 7-compute-slice, 8-memory-slot GPU.

    ``gb`` is the memory in the names of the 1-slot, 2-slot, 4-slot and
    8-slot profiles plus, last, the memory of the double-memory 1g profile
    (the same as the 2-slot one).
    """
    one, two, four, eight, one_double = gb
    profs = (
        MigProfile(f"1g.{one}gb", 19, 1, 1, tuple(range(7)), 7),
        MigProfile(f"1g.{one}gb+me", 20, 1, 1, tuple(range(7)), 1, media_ext=True),
        MigProfile(f"1g.{one_double}gb", 15, 1, 2, (0, 2, 4, 6), 4),
        MigProfile(f"2g.{two}gb", 14, 2, 2, (0, 2, 4), 3),
        MigProfile(f"3g.{four}gb", 9, 3, 4, (0, 4), 2),
        MigProfile(f"4g.{four}gb", 5, 4, 4, (0,), 1),
        MigProfile(f"7g.{eight}gb", 0, 7, 8, (0,), 1),
    )
    return MigGeometry(model, 7, 8, {p.name: p for p in profs})


def _a30() -> MigGeometry:
    profs = (
        MigProfile("1g.6gb", 14, 1, 1, (0, 1, 2, 3), 4),
        MigProfile("1g.6gb+me", 21, 1, 1, (0, 1, 2, 3), 1, media_ext=True),
        MigProfile("2g.12gb", 5, 2, 2, (0, 2), 2),
        MigProfile("2g.12gb+me", 6, 2, 2, (0, 2), 1, media_ext=True),
        MigProfile("4g.24gb", 0, 4, 4, (0,), 1),
    )
    return MigGeometry("A30", 4, 4, {p.name: p for p in profs})


GEOMETRIES: dict[str, MigGeometry] = {
    g.model: g
    for g in (
        _seven_slice("A100-40GB", (5, 10, 20, 40, 10)),
        _seven_slice("A100-80GB", (10, 20, 40, 80, 20)),
        _a30(),
        _seven_slice("H100-80GB", (10, 20, 40, 80, 20)),
        _seven_slice("H100-94GB", (12, 24, 47, 94, 24)),
        _seven_slice("H200-141GB", (18, 35, 71, 141, 35)),
        _seven_slice("B200", (23, 45, 90, 180, 45)),
        _seven_slice("A100-PCIE-40GB", (5, 10, 20, 40, 10)),
        _seven_slice("A100-PCIE-80GB", (10, 20, 40, 80, 20)),
        _seven_slice("H100-PCIE-80GB", (10, 20, 40, 80, 20)),
        _seven_slice("H200-NVL", (18, 35, 71, 141, 35)),
        _seven_slice("GH200-96GB", (12, 24, 48, 96, 24)),
        _seven_slice("GH200-144GB", (18, 36, 72, 144, 36)),
    )
}

assert set(GEOMETRIES) <= set(GPU_MODELS)


def geometry(model: str) -> MigGeometry:
    """The MIG rules of ``model``; KeyError naming the known models otherwise."""
    try:
        return GEOMETRIES[model]
    except KeyError:
        raise KeyError(f"unknown MIG-capable GPU model {model!r} (known: {', '.join(GEOMETRIES)})") from None


def known_gres_types() -> dict[str, str]:
    """Every GRES Type the catalogue's GPUs take on any supported release (lower case) -> its model.

    Slurm compares a Type case-insensitively (``_match_type`` in src/interfaces/gres.c uses
    ``xstrcasecmp``), so a site's own name for a model must differ from all of these in more than case.
    """
    out: dict[str, str] = {}
    for name, model in GPU_MODELS.items():
        out.setdefault(model.slurm_type.lower(), name)
        geo = GEOMETRIES.get(name)
        for profile in geo.profiles if geo is not None else ():
            for gtype in mig_gres_types(name, profile):
                out.setdefault(gtype.lower(), name)
    return out
