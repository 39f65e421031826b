"""Placement checker against NVIDIA's published MIG placements.

Reference data (NVIDIA MIG User Guide, "Supported MIG Profiles", and the
``nvidia-smi mig -lgipp`` listings it shows; mig-parted's known configs):
every 7-compute-slice GPU lists the same placements per GPU instance profile
ID, ``{starts}:size``.
"""

from __future__ import annotations

import pytest

from slurm_pool.mig.placement import (
    canonical,
    find_placement,
    layout_problem,
    maximal_layouts,
    placement_problem,
    valid_layouts,
)
from slurm_pool.mig.profiles import GEOMETRIES

SEVEN = ["A100-40GB", "A100-80GB", "H100-80GB", "H100-94GB", "H200-141GB", "B200"]

# nvidia-smi mig -lgipp on 7-slice GPUs: profile ID -> (starts, size)
LGIPP_7 = {
    19: ((0, 1, 2, 3, 4, 5, 6), 1),
    20: ((0, 1, 2, 3, 4, 5, 6), 1),
    15: ((0, 2, 4, 6), 2),
    14: ((0, 2, 4), 2),
    9: ((0, 4), 4),
    5: ((0,), 4),
    0: ((0,), 8),
}
# A30 (4 memory slots): 1g, 1g+me, 2g, 2g+me, 4g
LGIPP_A30 = {14: ((0, 1, 2, 3), 1), 21: ((0, 1, 2, 3), 1), 5: ((0, 2), 2), 6: ((0, 2), 2), 0: ((0,), 4)}

# Profile names and instance counts per model (MIG User Guide tables).
PROFILES = {
    "A100-40GB": {"1g.5gb": 7, "1g.5gb+me": 1, "1g.10gb": 4, "2g.10gb": 3, "3g.20gb": 2, "4g.20gb": 1, "7g.40gb": 1},
    "A100-80GB": {"1g.10gb": 7, "1g.10gb+me": 1, "1g.20gb": 4, "2g.20gb": 3, "3g.40gb": 2, "4g.40gb": 1, "7g.80gb": 1},
    "A30": {"1g.6gb": 4, "1g.6gb+me": 1, "2g.12gb": 2, "2g.12gb+me": 1, "4g.24gb": 1},
    "H100-80GB": {"1g.10gb": 7, "1g.10gb+me": 1, "1g.20gb": 4, "2g.20gb": 3, "3g.40gb": 2, "4g.40gb": 1, "7g.80gb": 1},
    "H100-94GB": {"1g.12gb": 7, "1g.12gb+me": 1, "1g.24gb": 4, "2g.24gb": 3, "3g.47gb": 2, "4g.47gb": 1, "7g.94gb": 1},
    "H200-141GB": {
        "1g.18gb": 7,
        "1g.18gb+me": 1,
        "1g.35gb": 4,
        "2g.35gb": 3,
        "3g.71gb": 2,
        "4g.71gb": 1,
        "7g.141gb": 1,
    },
    "B200": {"1g.23gb": 7, "1g.23gb+me": 1, "1g.45gb": 4, "2g.45gb": 3, "3g.90gb": 2, "4g.90gb": 1, "7g.180gb": 1},
    # PCIe, NVL and Grace Hopper forms (issue 45): the profile sets of their memory size
    "A100-PCIE-40GB": {
        "1g.5gb": 7,
        "1g.5gb+me": 1,
        "1g.10gb": 4,
        "2g.10gb": 3,
        "3g.20gb": 2,
        "4g.20gb": 1,
        "7g.40gb": 1,
    },
    "A100-PCIE-80GB": {
        "1g.10gb": 7,
        "1g.10gb+me": 1,
        "1g.20gb": 4,
        "2g.20gb": 3,
        "3g.40gb": 2,
        "4g.40gb": 1,
        "7g.80gb": 1,
    },
    "H100-PCIE-80GB": {
        "1g.10gb": 7,
        "1g.10gb+me": 1,
        "1g.20gb": 4,
        "2g.20gb": 3,
        "3g.40gb": 2,
        "4g.40gb": 1,
        "7g.80gb": 1,
    },
    "H200-NVL": {"1g.18gb": 7, "1g.18gb+me": 1, "1g.35gb": 4, "2g.35gb": 3, "3g.71gb": 2, "4g.71gb": 1, "7g.141gb": 1},
    "GH200-96GB": {"1g.12gb": 7, "1g.12gb+me": 1, "1g.24gb": 4, "2g.24gb": 3, "3g.48gb": 2, "4g.48gb": 1, "7g.96gb": 1},
    "GH200-144GB": {
        "1g.18gb": 7,
        "1g.18gb+me": 1,
        "1g.36gb": 4,
        "2g.36gb": 3,
        "3g.72gb": 2,
        "4g.72gb": 1,
        "7g.144gb": 1,
    },
}


def test_every_model_is_covered() -> None:
    assert set(GEOMETRIES) == set(PROFILES)


@pytest.mark.parametrize("model", list(PROFILES))
def test_profile_names_and_counts(model: str) -> None:
    geo = GEOMETRIES[model]
    assert {n: p.max_count for n, p in geo.profiles.items()} == PROFILES[model]


@pytest.mark.parametrize("model", list(PROFILES))
def test_placements_match_lgipp(model: str) -> None:
    table = LGIPP_A30 if model == "A30" else LGIPP_7
    geo = GEOMETRIES[model]
    assert {p.profile_id: (p.starts, p.memory) for p in geo.profiles.values()} == table
    for p in geo.profiles.values():
        for start in range(geo.memory_slots):
            ok = placement_problem(model, [(p.name, start)]) is None
            assert ok == (start in table[p.profile_id][0]), (p.name, start)


# Layouts NVIDIA documents as valid (guide figures, mig-parted example configs).
VALID = {
    "A100-40GB": [
        "7g.40gb",
        "4g.20gb,3g.20gb",
        "4g.20gb,2g.10gb,1g.5gb",
        "4g.20gb,1g.5gb,1g.5gb,1g.5gb",
        "3g.20gb,3g.20gb",
        "3g.20gb,2g.10gb,2g.10gb",
        "3g.20gb,2g.10gb,1g.5gb,1g.5gb",
        "3g.20gb,1g.5gb,1g.5gb,1g.5gb,1g.5gb",
        "2g.10gb,2g.10gb,2g.10gb,1g.5gb",
        "2g.10gb,2g.10gb,1g.5gb,1g.5gb,1g.5gb",
        "2g.10gb,1g.5gb,1g.5gb,1g.5gb,1g.5gb,1g.5gb",
        "1g.5gb,1g.5gb,1g.5gb,1g.5gb,1g.5gb,1g.5gb,1g.5gb",
        "1g.10gb,1g.10gb,1g.10gb,1g.10gb",
        "1g.5gb+me,1g.5gb,1g.5gb,1g.5gb,1g.5gb,1g.5gb,1g.5gb",
        "3g.20gb,2g.10gb,1g.10gb",
        "1g.5gb,1g.5gb,2g.10gb,3g.20gb",  # mig-parted all-balanced
        "",
    ],
    "H100-80GB": [
        "7g.80gb",
        "4g.40gb,3g.40gb",
        "3g.40gb,2g.20gb,1g.10gb,1g.10gb",
        "1g.20gb,1g.20gb,1g.20gb,1g.20gb",
        "2g.20gb,2g.20gb,2g.20gb,1g.10gb",
        "3g.40gb,1g.20gb,1g.10gb,1g.10gb",
        "1g.10gb+me,3g.40gb,2g.20gb,1g.10gb",
    ],
    "A30": [
        "4g.24gb",
        "2g.12gb,2g.12gb",
        "2g.12gb,1g.6gb,1g.6gb",
        "1g.6gb,1g.6gb,1g.6gb,1g.6gb",
        "2g.12gb+me,1g.6gb,1g.6gb",
        "1g.6gb+me,1g.6gb,1g.6gb,1g.6gb",
    ],
    "B200": ["3g.90gb,2g.45gb,1g.23gb,1g.23gb", "7g.180gb"],
}

INVALID = [
    ("A100-40GB", "4g.20gb,4g.20gb", "count"),
    ("A100-40GB", "2g.10gb,2g.10gb,2g.10gb,2g.10gb", "count"),
    ("A100-40GB", "1g.10gb,1g.10gb,1g.10gb,1g.10gb,1g.10gb", "count"),
    ("A100-40GB", ",".join(["1g.5gb"] * 8), "count"),
    ("A100-40GB", "1g.5gb+me,1g.5gb+me", "count"),
    ("A100-40GB", "7g.40gb,1g.5gb", "compute total"),
    ("A100-40GB", "4g.20gb,3g.20gb,1g.5gb", "compute total"),
    ("A100-40GB", "3g.20gb,3g.20gb,1g.5gb", "overlap"),
    ("A100-40GB", "1g.10gb,1g.10gb,1g.10gb,2g.10gb,1g.5gb", "overlap"),
    ("A100-40GB", "3g.40gb", "unknown profile '3g.40gb'"),
    ("H100-80GB", "1g.5gb", "unknown profile '1g.5gb'"),
    ("A30", "2g.12gb+me,1g.6gb+me", "count"),
    ("A30", "4g.24gb,1g.6gb", "compute total"),
    ("A30", "2g.12gb,2g.12gb,1g.6gb", "compute total"),
    ("H200-141GB", "3g.71gb,3g.71gb,1g.18gb", "overlap"),
    ("V100", "1g.5gb", "unknown MIG-capable GPU model"),
]


@pytest.mark.parametrize("model,layout", [(m, lay) for m, lays in VALID.items() for lay in lays])
def test_published_layouts_are_valid(model: str, layout: str) -> None:
    profiles = [p for p in layout.split(",") if p]
    assert layout_problem(model, profiles) is None
    placement = find_placement(model, profiles)
    assert placement is not None
    assert placement_problem(model, placement) is None
    assert sorted(p for p, _ in placement) == sorted(profiles)


@pytest.mark.parametrize("model,layout,why", INVALID)
def test_invalid_layouts_say_why(model: str, layout: str, why: str) -> None:
    problem = layout_problem(model, layout.split(","))
    assert problem is not None and why in problem
    if not why.startswith("unknown"):
        assert find_placement(model, layout.split(",")) is None


@pytest.mark.parametrize(
    "placement,why",
    [
        ([("3g.20gb", 2)], "start position"),
        ([("1g.5gb", 7)], "start position"),
        ([("2g.10gb", 6)], "start position"),
        ([("1g.10gb", 1)], "start position"),
        ([("4g.20gb", 4)], "start position"),
        ([("3g.20gb", 0), ("2g.10gb", 2)], "overlap"),
        ([("1g.5gb", 3), ("1g.5gb", 3)], "overlap"),
        ([("3g.20gb", 0), ("3g.20gb", 4), ("1g.5gb", 7)], "start position"),
    ],
)
def test_explicit_placements(placement: list[tuple[str, int]], why: str) -> None:
    problem = placement_problem("A100-40GB", placement)
    assert problem is not None and why in problem


def test_checker_and_search_agree_on_every_multiset() -> None:
    """Brute force: a multiset is valid iff some explicit placement passes."""
    from itertools import combinations_with_replacement, product

    for model in ("A30", "A100-40GB"):
        geo = GEOMETRIES[model]
        valid = valid_layouts(model)
        names = list(geo.profiles)
        for k in range(0, 5):
            for combo in combinations_with_replacement(names, k):
                starts = [geo.profiles[n].starts for n in combo]
                brute = any(
                    placement_problem(model, list(zip(combo, s, strict=False))) is None for s in product(*starts)
                )
                assert brute == (layout_problem(model, combo) is None), combo
                assert brute == (canonical(geo, combo) in valid), combo


def test_layout_counts() -> None:
    # every layout of a 7-slice GPU, including the empty one
    assert len(valid_layouts("A100-40GB")) == len(valid_layouts("B200"))
    assert () in valid_layouts("A30")
    for model in ("A30", "H100-80GB"):
        for lay in maximal_layouts(model):
            assert layout_problem(model, lay) is None


def test_best_placement_leaves_room_for_the_largest_profile() -> None:
    # three 1g instances at 4..6 leave slots 0-3 for a 4g.20gb
    assert find_placement("A100-40GB", ["1g.5gb"] * 3) == (("1g.5gb", 4), ("1g.5gb", 5), ("1g.5gb", 6))
    assert find_placement("A100-40GB", []) == ()
