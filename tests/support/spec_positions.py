"""Every place a string sits in a pool spec, found from the schema, and a document that fills them all.

Used by ``tests/unit/test_spec_hostile.py`` and ``bench/robustness.py`` (issue 30): a
field added to the schema is tried with hostile values without being listed anywhere.
"""

from __future__ import annotations

import copy
import types
import typing
from typing import Any, Iterator, Union

from pydantic import BaseModel

from slurm_pool.spec.model import PoolSpec
from tests.support.notebooks import notebook_spec

#: Markers in a schema position: any list item, any dict key, any dict value.
ITEM, KEY, VALUE = "[*]", "{key}", "{value}"


def base_document() -> dict[str, Any]:
    """The example with a notebook tier, MIG layouts, a floating guarantee, and every optional string of the
    bridge and console set."""
    doc = notebook_spec()
    group = next(g for g in doc["node_groups"] if g["name"] == "c")
    group["gpus"]["layouts"] = {"mig_mixed": [["3g.20gb", "2g.10gb", "1g.5gb", "1g.5gb"], None]}
    doc["cluster"]["control_host"] = "ctl1"
    doc["tiers"][0]["grp_tres"] = {"gres/gpu": 8}
    doc["partitions"][0]["default_time"] = "01:00:00"
    doc["projects"][0]["description"] = "Project A"
    doc["policy"]["admin_contact"] = "the HPC desk"
    doc["checkpoint"]["base_dir"] = "/var/lib/slurm-pool/checkpoints"
    doc["bridge"].update(
        {
            "qos": "k8s-lend",
            "ignore_pending_reasons": ["JobHeldUser", "BeginTime"],
            "timezone": "UTC",
            "kserve_namespace": "serving",
            "kserve_selector": "app=llm",
            "node_selector": "pool=gpu",
            "gpu_resource": "nvidia.com/gpu",
            "lease_namespace": "default",
            "lease_name": "slurm-pool-rebalance",
            "fence_kubeconfig": "/etc/slurm-pool/fence.kubeconfig",
            "fence_command": "/usr/local/bin/slurm-pool",
            "k8s_user": "slurm-pool-rebalancer",
            "fence_user": "slurm-pool-node:{node}",
            "node_names": {
                "by": "rule",
                "label": "slurm-pool/slurm-node",
                "slurm": "{node}",
                "kubernetes": "k8s-{node}",
            },
            "forecast": {"prometheus_url": "http://127.0.0.1:9090", "inference_query": "sum(x)"},
            "gangs": {
                "scheduler_name": "volcano",
                "namespaces": ["training"],
                "grace_seconds": 20,
                "priority_classes": [{"name": "training-urgent", "value": 1000, "description": "urgent training"}],
            },
        }
    )
    doc["console"] = {
        "jwt_key": "/var/spool/slurm/statesave/jwt_hs256.key",
        "operators": ["carol"],
        "pam_service": "login",
        "trusted_proxies": ["10.0.0.0/24"],
        "user_header": "X-Remote-User",
        "prometheus_url": "http://127.0.0.1:9090",
        "hub_url": "https://hub.example.org/",
        "public_url": "https://pool.example.org/",
        "allowed_hosts": ["pool.example.org"],
    }
    doc["tiers"][3]["grace_time"] = 40  # the fence's seconds fit in k8s-lend's grace
    # A shared cluster (coexist) leaves the default partition to the site; tests render BASE both ways.
    for part in doc["partitions"]:
        part.pop("default", None)
    doc["coexist"] = {
        "job_submit": {"script": "/etc/slurm/site_job_submit.lua", "order": "after"},
        "prolog_dir": "/etc/slurm/prolog.d",
        "epilog_dir": "/etc/slurm/epilog.d",
        "health_check": "/usr/sbin/nhc",
        "site_partitions": ["site-gpu"],
    }
    doc["adopt"] = {
        "accounts": [{"name": "proja", "fields": ["Fairshare"]}],
        "qos": [{"name": "guaranteed", "fields": ["GraceTime", "PreemptMode"]}],
    }
    # A floating guarantee (issue 28) on an unowned group, appended last so the indexes above stay.
    doc["node_groups"].append(
        {
            "name": "f",
            "hosts": "f-gpu1",
            "cpus": 4,
            "memory_mb": 8000,
            # gres.conf Cores= (issue 45): each GPU's nearest cores; and the site's own GRES type name.
            "gpus": {"model": "H100-PCIE-80GB", "count": 2, "cores": ["0-1", "2-3"], "type": "h100pcie"},
        }
    )
    doc["partitions"].append({"name": "floating", "nodes": ["f"], "tier": "guaranteed", "priority_tier": 100})
    doc["projects"].append(
        {
            "name": "projd",
            "users": ["dave"],
            "guarantee": {"gres/gpu:h100pcie": 1},
            "tiers": ["guaranteed", "shared", "scavenger"],
        }
    )
    doc["guarantees"] = {"tier": "guaranteed", "partition": "floating", "overflow": "shared", "overcommit": 1.0}
    return doc


def owned(doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` as a cluster the pool owns: without its ``coexist`` section."""
    return {k: v for k, v in doc.items() if k != "coexist"}


BASE = base_document()


def _unwrap(tp: Any) -> list[Any]:
    """The types a field's annotation allows (Annotated and Optional unwrapped)."""
    origin = typing.get_origin(tp)
    if origin is typing.Annotated:
        return _unwrap(typing.get_args(tp)[0])
    if origin in (Union, types.UnionType):
        return [t for a in typing.get_args(tp) if a is not type(None) for t in _unwrap(a)]
    return [tp]


def _positions(tp: Any, path: tuple[str, ...]) -> Iterator[tuple[str, ...]]:
    for t in _unwrap(tp):
        origin = typing.get_origin(t)
        if t is str:
            yield path
        elif isinstance(t, type) and issubclass(t, BaseModel):
            for name, info in t.model_fields.items():
                yield from _positions(info.annotation, (*path, name))
        elif origin is list:
            yield from _positions(typing.get_args(t)[0], (*path, ITEM))
        elif origin is dict:
            key, value = typing.get_args(t)
            if key is str:
                yield (*path, KEY)
            yield from _positions(value, (*path, VALUE))


def string_positions() -> list[tuple[str, ...]]:
    """Every place a string sits in a spec, from the schema (Literal fields excluded: they take only their words)."""
    return sorted(set(_positions(PoolSpec, ())))


def concrete(doc: Any, position: tuple[str, ...]) -> tuple[Any, ...] | None:
    """The first path in ``doc`` that fills ``position``'s markers, or None when the document has none."""
    if not position:
        return ()
    head, rest = position[0], position[1:]
    if head == ITEM:
        for i, item in enumerate(doc if isinstance(doc, list) else []):
            tail = concrete(item, rest)
            if tail is not None:
                return (i, *tail)
        return None
    if head in (KEY, VALUE):
        for k, v in (doc if isinstance(doc, dict) else {}).items():
            if head == KEY:
                return ((KEY, k),)
            tail = concrete(v, rest)
            if tail is not None:
                return (k, *tail)
        return None
    if isinstance(doc, dict) and head in doc:
        tail = concrete(doc[head], rest)
        return None if tail is None else (head, *tail)
    return None


def with_value(doc: Any, path: tuple[Any, ...], value: str) -> Any:
    out = copy.deepcopy(doc)
    parent = out
    for p in path[:-1]:
        parent = parent[p]
    last = path[-1]
    if isinstance(last, tuple):  # a dict key: rename it, keeping its value
        parent[value] = parent.pop(last[1])
    else:
        parent[last] = value
    return out


def dotted(path: tuple[Any, ...]) -> str:
    """``partitions[0].tier``: the path an issue names (a renamed key: its dict's path)."""
    out = ""
    for p in path:
        if isinstance(p, tuple):
            break
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


POSITIONS = string_positions()
CONCRETE = {pos: concrete(BASE, pos) for pos in POSITIONS}


def value_at(doc: Any, path: tuple[Any, ...]) -> str:
    for p in path:
        doc = p[1] if isinstance(p, tuple) else doc[p]
    assert isinstance(doc, str)
    return doc
