"""The Slurm documents of the site-scale bench (issue 32): seeded, scaled-up copies of what 26.05 printed.

:func:`generate` writes a spec (a node group and owner partition per owning
project, then shared, scavenger and k8s-lend), the node records and the job
records of one size, in the indented form Slurm prints; see
``bench/scale_slurm.py`` for the cases that read them.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import sys
from pathlib import Path
from typing import Any, Iterable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

FIXTURES = ROOT / "tests" / "data" / "slurm" / "26.05"
RELEASE = "26.05.3"
#: (nodes, jobs) of the full and the quick datasets.
FULL = (10_000, 200_000)
QUICK = (500, 5_000)
PROJECTS, PARTITIONS = 300, 50
MODELS = ("A100-80GB", "H100-80GB", "A100-40GB")
GPU_SIZES = ((1, 50), (2, 20), (4, 15), (8, 15))
NAMES = ("train", "eval", "sweep", "llm-ft", "infer-batch", "data-prep", "notebook")


def size_name(nodes: int, jobs: int | None = None) -> str:
    return f"{nodes}n" + (f"-{jobs}j" if jobs is not None else "")


# -- generating --------------------------------------------------------------------------------

_SENTINEL = re.compile(r'"@@([a-z_]+)@@"')


class Template:
    """A recorded record as Slurm prints it (indented), with some top-level values left open."""

    def __init__(self, record: dict[str, Any], keys: Iterable[str], depth: int = 2):
        rec = dict(record)
        for key in keys:
            rec[key] = f"@@{key}@@"
        pad = " " * depth
        text = pad + json.dumps(rec, indent=1).replace("\n", "\n" + pad)
        self.parts = _SENTINEL.split(text)  # literal, key, literal, key, ...
        self.inner = "\n" + " " * (depth + 1)

    def render(self, values: dict[str, Any]) -> str:
        out = []
        for i, part in enumerate(self.parts):
            if i % 2 == 0:
                out.append(part)
            else:
                v = values[part]
                out.append(
                    json.dumps(v, indent=1).replace("\n", self.inner) if isinstance(v, (dict, list)) else json.dumps(v)
                )
        return "".join(out)


def write_document(path: Path, head: dict[str, Any], key: str, records: Iterable[str]) -> None:
    """``head`` with ``key`` holding the rendered records, written as Slurm prints it."""
    text = json.dumps({**head, key: ["@@records@@"]}, indent=1, sort_keys=True)
    before, after = text.split('  "@@records@@"')
    tmp = path.with_suffix(".tmp")
    with tmp.open("w") as f:
        f.write(before)
        for i, rec in enumerate(records):
            f.write(",\n" if i else "")
            f.write(rec)
        f.write(after)
    tmp.replace(path)


def spec_document(nodes: int, projects: int, partitions: int) -> dict[str, Any]:
    """A pool spec: a node group and owner partition per owning project, then shared, scavenger, k8s-lend."""
    import yaml

    groups = partitions - 3
    per = nodes // groups
    node_groups, parts, projs = [], [], []
    for k in range(groups):
        a, b = k * per, (nodes - 1 if k == groups - 1 else (k + 1) * per - 1)
        node_groups.append(
            {
                "name": f"g{k:02d}",
                "hosts": f"gpu[{a:05d}-{b:05d}]",
                "cpus": 64,
                "memory_mb": 512000,
                "gpus": {"model": MODELS[k % len(MODELS)], "count": 8},
                "features": [f"p{k:03d}"],
            }
        )
        parts.append(
            {
                "name": f"g{k:02d}-owner",
                "nodes": [f"g{k:02d}"],
                "tier": "guaranteed",
                "priority_tier": 100,
                "allow_accounts": [f"p{k:03d}"],
            }
        )
    parts += [
        {"name": "shared", "nodes": ["ALL"], "tier": "shared", "priority_tier": 50, "max_time": "2-00:00:00"},
        {"name": "scavenger", "nodes": ["ALL"], "tier": "scavenger", "priority_tier": 10, "default": True},
        {
            "name": "k8s-lend",
            "nodes": ["ALL"],
            "tier": "k8s-lend",
            "priority_tier": 1,
            "allow_accounts": ["k8s-bridge"],
        },
    ]
    for p in range(projects - 1):
        proj: dict[str, Any] = {"name": f"p{p:03d}", "users": [f"u{p:03d}a", f"u{p:03d}b"]}
        if p < groups:
            proj.update(owns=[f"g{p:02d}"], tiers=["guaranteed", "shared", "scavenger"], default_tier="guaranteed")
        else:
            proj.update(tiers=["shared", "scavenger"], default_tier="shared")
        projs.append(proj)
    projs.append({"name": "k8s-bridge", "users": ["slurmpool"], "tiers": ["k8s-lend"]})
    base = yaml.safe_load((ROOT / "examples" / "pool.yaml").read_text())
    base.update(node_groups=node_groups, partitions=parts, projects=projs)
    base["bridge"]["max_lent_nodes"] = max(1, nodes // 10)
    return base


def _stamp(t: int) -> dict[str, Any]:
    return {"infinite": False, "number": t, "set": True}


def generate(where: Path, nodes: int, jobs: int, seed: int, projects: int, partitions: int) -> None:
    """Write the spec, node records and job records of one size under ``where`` (kept if already there)."""
    import yaml

    from slurm_pool.render.context import gres_string
    from slurm_pool.spec import load_spec
    from slurm_pool.spec.hosts import expand
    from slurm_pool.versions import SlurmVersion

    spec_path = where / f"spec-{size_name(nodes)}.yaml"
    nodes_path = where / f"nodes-{size_name(nodes)}.json"
    jobs_path = where / f"squeue-{size_name(nodes, jobs)}.json"
    stamp_path = where / f"made-{size_name(nodes, jobs)}.json"
    stamp = {"seed": seed, "projects": projects, "partitions": partitions, "generator": _generator_hash()}
    if not stamp_path.exists() or json.loads(stamp_path.read_text()) != stamp:  # another seed or generator
        for p in (spec_path, nodes_path, jobs_path, *where.glob("narrow-*.json"), *where.glob("spec-*part.yaml")):
            p.unlink(missing_ok=True)
    if not spec_path.exists():
        spec_path.write_text(yaml.safe_dump(spec_document(nodes, projects, partitions), sort_keys=False))
    if nodes_path.exists() and jobs_path.exists() and stamp_path.exists():
        return
    spec = load_spec(spec_path)
    version = SlurmVersion.parse(RELEASE)
    rng = random.Random(seed)
    node_doc = json.loads((FIXTURES / "nodes-busy.json").read_text())
    job_doc = json.loads((FIXTURES / "squeue-requeued.json").read_text())
    by_id = {j["job_id"]: j for j in job_doc["jobs"]}
    # nodes: name -> [group index, gres type, gpus, used, state words, reason, partitions]
    table: list[list[Any]] = []
    for k, group in enumerate(spec.node_groups):
        gres = gres_string(group, version)
        gtype, count = gres.split(":")[1], int(gres.split(":")[2])
        for _ in expand(group.hosts):
            roll = rng.random()
            state, reason = ["IDLE"], ""
            if roll < 0.01:
                state, reason = ["IDLE", "DRAIN"], "slurm-pool: lent to kubernetes"
            elif roll < 0.02:
                state, reason = ["IDLE", "DRAIN"], "replace DIMM (ticket 4711)"
            elif roll < 0.025:
                state, reason = ["DOWN", "NOT_RESPONDING"], "Not responding"
            table.append([k, gtype, count, 0, state, reason, [f"g{k:02d}-owner", "shared", "scavenger", "k8s-lend"]])
    per = len(table) // len(spec.node_groups)
    owners = len(spec.node_groups)
    sizes, weights = zip(*GPU_SIZES, strict=True)
    now = 1796234706
    job_keys = (
        "job_id name account user_name partition qos job_state nodes batch_host tres_alloc_str tres_req_str "
        "tres_per_node restart_cnt state_reason required_nodes submit_time start_time job_resources "
        "gres_detail node_count priority"
    ).split()
    templates = {s: Template(by_id[i], job_keys) for s, i in (("running", 1), ("pending", 2), ("requeued", 5))}

    def place(first: int, span: int, gpus: int) -> int | None:
        for _ in range(6):
            i = first + rng.randrange(span)
            row = table[i]
            if len(row[4]) == 1 and row[4][0] != "DOWN" and row[2] - row[3] >= gpus:
                return i
        return None

    def job_records() -> Iterable[str]:
        for n in range(jobs):
            job_id = 1000 + n
            p = rng.randrange(owners) if rng.random() < 0.5 else rng.randrange(projects - 1)
            own = p < owners and rng.random() < 0.4
            part = f"g{p:02d}-owner" if own else rng.choice(("shared", "shared", "scavenger"))
            qos = "guaranteed" if own else part
            gpus = rng.choices(sizes, weights)[0]
            lend = n % 97 == 0
            if lend:
                p, part, qos, gpus = -1, "k8s-lend", "k8s-lend", 8
            roll = rng.random()
            kind = "running" if roll < 0.4 or lend else "requeued" if roll < 0.45 else "pending"
            at = None
            if kind == "running":
                at = place(p * per, per, gpus) if own else place(0, len(table), gpus)
                kind = "running" if at is not None else "pending"
            account = "k8s-bridge" if lend else f"p{p:03d}"
            user = "slurmpool" if lend else f"u{p:03d}{'ab'[n % 2]}"
            typed = rng.random() < 0.3
            values: dict[str, Any] = {
                "job_id": job_id,
                "name": "placeholder" if lend else f"{rng.choice(NAMES)}-{n % 1000}",
                "account": account,
                "user_name": user,
                "partition": part,
                "qos": qos,
                "restart_cnt": 0,
                "submit_time": _stamp(now - rng.randrange(86400 * 3)),
                "priority": {"infinite": False, "number": rng.randrange(1, 100000), "set": True},
                "node_count": {"infinite": False, "number": 1, "set": True},
                "required_nodes": "",
            }
            if at is not None:
                row = table[at]
                gtype, first = row[1], row[3]
                row[3] += gpus
                name = f"gpu{at:05d}"
                idx = f"{first}" if gpus == 1 else f"{first}-{first + gpus - 1}"
                resources = json.loads(json.dumps(by_id[1]["job_resources"]))
                resources["nodes"]["list"] = name
                resources["nodes"]["allocation"][0]["name"] = name
                values.update(
                    job_state=["RUNNING"],
                    nodes=name,
                    batch_host=name,
                    state_reason="None",
                    start_time=_stamp(now - rng.randrange(86400)),
                    job_resources=resources,
                    gres_detail=[f"gpu:{gtype}:{gpus}(IDX:{idx})"],
                    tres_alloc_str=f"cpu={gpus * 4},mem={gpus * 32}G,node=1,billing={gpus * 4},"
                    f"gres/gpu={gpus},gres/gpu:{gtype}={gpus}",
                )
            else:
                gtype = MODELS_GRES[p % len(MODELS_GRES)] if p >= 0 else MODELS_GRES[0]
                values.update(
                    job_state=["PENDING"],
                    nodes="",
                    batch_host="",
                    state_reason="BeginTime" if kind == "requeued" else rng.choice(("Priority", "Resources")),
                    start_time=_stamp(0),
                    job_resources=by_id[2].get("job_resources", {}),
                    gres_detail=[],
                    tres_alloc_str="",
                )
                if kind == "requeued":
                    values["restart_cnt"] = rng.randrange(1, 4)
            req = f"gres/gpu:{gtype}:{gpus}" if typed else f"gres/gpu:{gpus}"
            values.update(
                tres_per_node=req,
                tres_req_str=f"cpu={gpus * 4},mem={gpus * 32}G,node=1,billing={gpus * 4},gres/gpu={gpus}"
                + (f",gres/gpu:{gtype}={gpus}" if typed else ""),
            )
            yield templates[kind if at is None else "running"].render(values)

    head = {k: v for k, v in job_doc.items() if k != "jobs"}
    write_document(jobs_path, head, "jobs", job_records())
    template = Template(
        node_doc["nodes"][0],
        "name hostname address gres gres_used state reason partitions features active_features tres tres_used "
        "alloc_cpus alloc_idle_cpus cpus real_memory".split(),
    )

    def node_records() -> Iterable[str]:
        for i, (k, gtype, count, used, state, reason, parts) in enumerate(table):
            name = f"gpu{i:05d}"
            if len(state) == 1 and state[0] == "IDLE":
                state = ["IDLE"] if used == 0 else ["ALLOCATED"] if used == count else ["MIXED"]
            idx = "N/A" if used == 0 else ("0" if used == 1 else f"0-{used - 1}")
            yield template.render(
                {
                    "name": name,
                    "hostname": name,
                    "address": f"10.{i // 65536}.{i // 256 % 256}.{i % 256}",
                    "gres": f"gpu:{gtype}:{count}",
                    "gres_used": f"gpu:{gtype}:{used}(IDX:{idx})",
                    "state": state,
                    "reason": reason,
                    "partitions": parts,
                    "features": [f"p{k:03d}"],
                    "active_features": [f"p{k:03d}"],
                    "tres": f"cpu=64,mem=500G,billing=64,gres/gpu={count},gres/gpu:{gtype}={count}",
                    "tres_used": f"cpu={used * 4},mem={used * 32}G,gres/gpu={used},gres/gpu:{gtype}={used}",
                    "alloc_cpus": used * 4,
                    "alloc_idle_cpus": 64 - used * 4,
                    "cpus": 64,
                    "real_memory": 512000,
                }
            )

    write_document(nodes_path, {k: v for k, v in node_doc.items() if k != "nodes"}, "nodes", node_records())
    stamp_path.write_text(json.dumps(stamp))


def _generator_hash() -> str:
    """What the generated files depend on: the generator's code and data, and the fixtures it scales up."""
    h = hashlib.sha256(Path(__file__).read_bytes())
    h.update(repr((RELEASE, MODELS, MODELS_GRES, GPU_SIZES, NAMES)).encode())
    for name in ("nodes-busy.json", "squeue-requeued.json"):
        h.update((FIXTURES / name).read_bytes())
    return h.hexdigest()[:16]


#: GRES type names of MODELS on 26.05 (what gres_string renders), for typed pending requests.
MODELS_GRES = ("nvidia_a100-sxm4-80gb", "nvidia_h100_80gb_hbm3", "nvidia_a100-sxm4-40gb")
