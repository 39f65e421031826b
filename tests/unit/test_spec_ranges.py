"""Spec numbers against Slurm's field ranges (issue 49, class 4): a value past its field is refused naming
the field's path and the value; one at the edge is accepted and rendered as given."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from slurm_pool.errors import SpecError
from slurm_pool.render import Site, SlurmVersion, render_all
from slurm_pool.spec import parse_spec
from slurm_pool.spec.ranges import NO_CONSUME_VAL64, NO_VAL, NO_VAL16, RANGES, time_seconds
from tests.support.spec_positions import BASE, dotted, owned

NEW = SlurmVersion.parse("26.05")

REFUSED: list[tuple[tuple[Any, ...], Any, str]] = [  # fmt: skip
    # path, value, words the issue holds
    (("tiers", 0, "priority"), 10**20, "QOS Priority"),
    (("tiers", 0, "priority"), NO_VAL, "QOS Priority"),  # Slurm's "unset"
    (("tiers", 0, "priority"), 2**32 - 1, "QOS Priority"),  # INFINITE
    (("tiers", 0, "priority"), -1, "negative"),
    (("tiers", 0, "grace_time"), 10**12, "QOS GraceTime"),
    (("tiers", 0, "grace_time"), NO_VAL, "QOS GraceTime"),
    (("tiers", 0, "usage_factor"), 1e-7, "6 decimals"),  # rendered 0.000000: free
    (("tiers", 0, "usage_factor"), 0.1234567, "6 decimals"),
    (("tiers", 0, "usage_factor"), 1e20, "QOS UsageFactor"),
    (("tiers", 0, "usage_factor"), float(NO_VAL), "QOS UsageFactor"),  # sacctmgr prints it as unset
    (("tiers", 0, "grp_tres"), {"gres/gpu": 10**30}, "TRES count"),
    (("tiers", 0, "grp_tres"), {"cpu": 2**64 - 1}, "TRES count"),  # INFINITE64: unlimited
    (("tiers", 0, "grp_tres"), {"mem": NO_CONSUME_VAL64}, "TRES count"),
    (("tiers", 0, "max_tres_per_user"), {"gres/gpu": 2**64}, "TRES count"),
    (("tiers", 0, "policy", "max_gpus_per_job"), 2**64, "TRES count"),
    (("cluster", "name"), "c" * 41, "40"),
    (("cluster", "name"), "a" * 63, "ClusterName"),
    (("partitions", 0, "priority_tier"), NO_VAL16, "PriorityTier"),
    (("partitions", 0, "grace_time"), 2**32, "partition GraceTime"),
    (("partitions", 0, "max_time"), "99999999999999999999", "time limit"),
    (("partitions", 0, "default_time"), "24856-0", "time limit"),
    (("projects", 0, "fairshare"), 2**40, "Fairshare"),
    (("node_groups", 0, "cpus"), 65535, "node CPUs"),  # INFINITE16
    (("node_groups", 0, "memory_mb"), 2**64, "RealMemory"),
    (("scheduler", "message_timeout"), 70000, "MessageTimeout"),
    (("scheduler", "kill_wait"), NO_VAL16, "KillWait"),
    (("scheduler", "sched_interval"), 2**31, "sched_interval"),
    (("scheduler", "sched_min_interval_us"), 2**31, "sched_min_interval"),
    (("scheduler", "bf_interval"), 10801, "bf_interval"),
    (("scheduler", "def_mem_per_cpu"), 2**63, "DefMemPerCPU"),
    (("scheduler", "requeue_exit"), [85, 256], "exit code"),
    (("scheduler", "requeue_exit"), [-1], "negative"),
    (("health", "health_check_interval"), 65535, "HealthCheckInterval"),
    (("notebooks", "time_limit"), "9999999999999999999999:00:00", "time limit"),
]


def put(doc: dict[str, Any], path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    """``doc`` with ``value`` at ``path``, the dicts on the way made where the document has none."""
    out = copy.deepcopy(doc)
    parent: Any = out
    for p in path[:-1]:
        parent = parent.setdefault(p, {}) if isinstance(parent, dict) else parent[p]
    parent[path[-1]] = value
    return out


def _ids(case: tuple[Any, ...]) -> str:
    return f"{dotted(case[0])}={str(case[1])[:24]}"


@pytest.mark.parametrize(("path", "value", "words"), REFUSED, ids=[_ids(c) for c in REFUSED])
def test_a_number_past_slurms_field_is_refused_naming_path_and_value(path, value, words: str) -> None:
    with pytest.raises(SpecError) as exc:
        parse_spec(put(BASE, path, value))
    field = dotted(path)
    hits = [i for i in exc.value.issues if i.path.startswith(field)]
    assert hits, (field, [str(i) for i in exc.value.issues])
    assert any(words in i.message for i in hits), [str(i) for i in hits]
    shown = value if not isinstance(value, (dict, list)) else next(iter(value.values() if isinstance(value, dict)
                                                                        else value[-1:]))  # fmt: skip
    assert any(repr(shown)[:20] in i.message or str(shown)[:20] in i.message for i in hits), [str(i) for i in hits]


EDGES: list[tuple[tuple[Any, ...], Any, str, str]] = [  # fmt: skip
    # path, value, the file, what it holds
    (("tiers", 0, "priority"), NO_VAL - 1, "accounting.json", '"Priority": "4294967293"'),
    (("tiers", 0, "grace_time"), NO_VAL - 1, "accounting.json", '"GraceTime": "4294967293"'),
    (("tiers", 0, "usage_factor"), 0.000001, "accounting.json", '"UsageFactor": "0.000001"'),
    (("tiers", 0, "usage_factor"), 0.3, "accounting.json", '"UsageFactor": "0.300000"'),
    (("tiers", 0, "grp_tres"), {"gres/gpu": NO_CONSUME_VAL64 - 1}, "accounting.json", "gres/gpu=18446744073709551612"),
    (("cluster", "name"), "c" * 40, "slurm.conf", "ClusterName=" + "c" * 40),
]


@pytest.mark.parametrize(("path", "value", "name", "held"), EDGES, ids=[_ids(c) for c in EDGES])
def test_the_edge_of_a_field_is_accepted_and_rendered_as_given(path, value, name: str, held: str) -> None:
    files = render_all(parse_spec(owned(put(BASE, path, value))), Site(), NEW)
    body = files[name]
    if name.endswith(".json"):
        body = json.dumps(json.loads(body))
    assert held in body


def test_every_range_names_its_source_and_stops_short_of_slurms_markers() -> None:
    markers = {2**16 - 1, 2**16 - 2, 2**32 - 1, 2**32 - 2, 2**64 - 1, 2**64 - 2, 2**64 - 3}
    for key, r in RANGES.items():
        assert r.source and r.lo <= r.hi, key
        assert r.hi not in markers and r.hi < 2**64 - 3, key


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("0", 0), ("1", 60), ("1:30", 90), ("1:00:00", 3600), ("2-3", 2 * 86400 + 3 * 3600), ("1-0:1", 86460),
     ("1-0:0:1", 86401), ("UNLIMITED", None), ("INFINITE", None), ("24855-3:14:07", 2**31 - 1)],
)  # fmt: skip
def test_time_seconds_reads_slurms_forms(text: str, seconds: int | None) -> None:
    assert time_seconds(text) == seconds


@pytest.mark.parametrize("text", ["24855-3:14:08", "99999999999999999999", "1-", "-1", "1:", "a", "1:2:3:4", ""])
def test_time_seconds_refuses_what_slurm_misreads(text: str) -> None:
    with pytest.raises(ValueError, match=repr(text).replace("(", r"\(")[:10]):
        time_seconds(text)
