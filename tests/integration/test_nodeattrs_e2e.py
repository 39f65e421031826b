"""Issue 45, check 1 (node attributes): ``examples/pool-nodeattrs.yaml`` boots as a cluster of its own, and
slurmctld reports each node's rendered sockets, cores, threads, memory, MemSpecLimit, TmpDisk, weight and
features; ``doctor``'s comparison of the same reads, and ``diff``'s, finds no difference; a job on the
lower-weight nodes is placed there first.  The GPUs go by the site's own type name (``gpus.type: h100``): slurmctld holds them as
``gpu:h100``, a job asking ``--gres=gpu:h100:1`` runs on them, and the model's NVML name is no type here.

The local cluster's slurmd registers what slurm.conf says (``SlurmdParameters=config_overrides``), so the
attributes reach slurmctld as a real node's would.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

import pytest

from slurm_pool.adapters.gres import parse_gres
from slurm_pool.adapters.nodeattrs import COMMAND, parse_node_attributes
from slurm_pool.doctor.nodes import NodeAttrFacts, findings
from slurm_pool.spec import load_spec
from tests.conftest import TEST_SLURM
from tests.support.slurm_cluster import ClusterHandle, start_session_cluster, stop_session_cluster

pytestmark = pytest.mark.slurm

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "pool-nodeattrs.yaml"

#: What scontrol show node shows for each node (its keys as scontrol prints them).
EXPECTED = {
    "n-gpu1": {"CPUTot": "16", "Sockets": "2", "CoresPerSocket": "4", "ThreadsPerCore": "2", "RealMemory": "8000",
               "MemSpecLimit": "1000", "TmpDisk": "4000", "Weight": "10", "AvailableFeatures": "hopper,ib"},
    "n-cpu1": {"CPUTot": "4", "Sockets": "1", "CoresPerSocket": "4", "ThreadsPerCore": "1", "RealMemory": "4000",
               "TmpDisk": "0", "Weight": "100", "AvailableFeatures": "cpuonly"},
}  # fmt: skip


@pytest.fixture(scope="module")
def attrs() -> Iterator[ClusterHandle]:
    handle, state = start_session_cluster(EXAMPLE, slurm=TEST_SLURM)
    try:
        yield handle
    finally:
        stop_session_cluster(handle, state)


def _fields(cluster: ClusterHandle, node: str) -> dict[str, str]:
    out = cluster.run([cluster.scontrol, "show", "node", node, "-o"], check=True).stdout
    return dict(w.partition("=")[::2] for w in out.split(" Reason=")[0].split() if "=" in w)


@pytest.mark.parametrize("node", sorted(EXPECTED))
def test_slurmctld_reports_the_rendered_attributes(attrs: ClusterHandle, node: str) -> None:
    fields = _fields(attrs, node)
    got = {k: fields.get(k) for k in EXPECTED[node]}
    assert got == EXPECTED[node]


def test_doctor_finds_no_difference_and_names_one(attrs: ClusterHandle) -> None:
    spec = load_spec(EXAMPLE)
    res = attrs.cli("diff", "--spec", str(EXAMPLE), "--json")
    assert res.returncode in (0, 1) and "Traceback" not in res.stderr, res.stderr
    assert [d for d in json.loads(res.stdout) if d["kind"] == "node"] == []
    out = attrs.run([attrs.scontrol, *COMMAND[1:]], check=True).stdout
    nodes, skipped = parse_node_attributes(out)
    assert skipped == [] and sorted(nodes) == ["n-cpu1", "n-gpu1", "n-gpu2"]
    assert findings(spec, NodeAttrFacts(nodes)) == []
    attrs.run([attrs.scontrol, "update", "NodeName=n-cpu1", "Weight=7"], check=True)
    try:
        nodes, _ = parse_node_attributes(attrs.run([attrs.scontrol, *COMMAND[1:]], check=True).stdout)
        (f,) = findings(spec, NodeAttrFacts(nodes))
        assert "node group cpu, n-cpu1: Weight: slurmctld has 7, the render 100" in f.problem
        # diff names the same difference, and only it among the nodes
        res = attrs.cli("diff", "--spec", str(EXAMPLE), "--json")
        assert res.returncode == 1 and "Traceback" not in res.stderr, res.stderr
        got = [d for d in json.loads(res.stdout) if d["kind"] == "node"]
        assert got == [{"kind": "node", "name": "n-cpu1", "field": "Weight", "cluster": "7", "rendered": "100"}]
    finally:
        attrs.run([attrs.scontrol, "update", "NodeName=n-cpu1", "Weight=100"], check=True)


def test_the_lowest_weight_that_fits_is_allocated_first(attrs: ClusterHandle) -> None:
    script = "#!/bin/bash\nsleep 60\n"
    job = attrs.sbatch(
        "-p", "main", "-A", "lab", "--qos=standard", "-n", "1", "-o", "/dev/null", user="alice", script=script
    )
    try:
        attrs.wait_state(job, ["RUNNING"], timeout=60)
        assert attrs.job_field(job, "%N") == "n-gpu1"
    finally:
        attrs.cancel_all()


def test_the_site_type_name_is_the_gres_slurm_holds(attrs: ClusterHandle) -> None:
    nodes, _ = parse_node_attributes(attrs.run([attrs.scontrol, *COMMAND[1:]], check=True).stdout)
    for node in ("n-gpu1", "n-gpu2"):
        assert [(g.name, g.type, g.count) for g in parse_gres(nodes[node]["Gres"])] == [("gpu", "h100", 2)], nodes[node]
    script = "#!/bin/bash\nsleep 60\n"
    job = attrs.sbatch(
        "-p", "main", "-A", "lab", "--qos=standard", "--gres=gpu:h100:1", "-o", "/dev/null", user="alice", script=script
    )
    try:
        attrs.wait_state(job, ["RUNNING"], timeout=60)
        assert attrs.job_field(job, "%N") in ("n-gpu1", "n-gpu2")
        assert "gpu:h100" in attrs.job_field(job, "%b")  # the GRES it asked for, by the site's name
    finally:
        attrs.cancel_all()
    refused = attrs.run(
        ["sbatch", "--uid=alice", "-p", "main", "-A", "lab", "--gres=gpu:nvidia_h100_80gb_hbm3:1", "--wrap", "true"]
    )
    assert refused.returncode != 0 and "does not exist in this pool" in refused.stderr, refused
