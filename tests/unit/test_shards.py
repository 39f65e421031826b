"""GPU sharing without MIG (issue 14): Slurm's gres/shard from the spec, and the dev tier's routing to it."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from slurm_pool.adapters.gres import tres_shards
from slurm_pool.cli import cli, main
from slurm_pool.policy.lua import render_job_submit
from slurm_pool.render.context import gres_string, shard_lines
from slurm_pool.render.render import render_all
from slurm_pool.render.site import Site
from slurm_pool.spec import load_spec, load_spec_text
from slurm_pool.versions import SlurmVersion
from tests.support.lua_policy import LUA_VERSIONS, LuaPolicy, unset_job
from tests.support.refusal import assert_render_refuses
from tests.support.shards import shard_spec, shard_spec_text

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "pool.yaml"
V2205, V2311, V2605 = SlurmVersion(22, 5, 8), SlurmVersion(23, 11, 5), SlurmVersion(26, 5, 3)
H100 = "nvidia_h100_80gb_hbm3"
WARN = (
    "slurm-pool: tier 'dev' shares GPUs: this job gets 1 shard(s) of one GPU instead of a whole GPU. "
    "To get a whole GPU, ask for a GPU type (--gres=gpu:TYPE:1)."
)


@pytest.fixture(scope="module")
def spec_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("shards") / "pool.yaml"
    path.write_text(shard_spec_text())
    return path


def _mutated(fn) -> str:
    data = shard_spec()
    fn(data)
    return yaml.safe_dump(data, sort_keys=False)


def _set(*path_value):
    *path, value = path_value

    def f(d):
        for p in path[:-1]:
            d = d[p]
        d[path[-1]] = value

    return f


# (case, spec text, path named, words)
BAD = [
    ("zero shards", _mutated(_set("node_groups", 1, "gpus", "shards", 0)), "node_groups[1].gpus.shards", "0"),
    (
        "shards on a MIG group",
        _mutated(_set("node_groups", 2, "gpus", "shards", 2)),
        "node_groups[2].gpus.shards",
        "MIG or by shards, not both",
    ),
    ("shards of no GPU", _mutated(_set("node_groups", 1, "gpus", "count", 0)), "node_groups[1].gpus.shards", "no GPUs"),
    (
        "more shards per job than per GPU",
        _mutated(_set("tiers", 4, "policy", "gpu_shards", 5)),
        "tiers[4].policy.gpu_shards",
        "5 shards do not fit one GPU of partition 'dev' (at most 4 per GPU)",
    ),
    (
        "a shard tier without shared GPUs",
        _mutated(_set("partitions", 6, "nodes", ["a"])),
        "tiers[4].policy.gpu_shards",
        "partition 'dev' of tier 'dev' has no node group with gpus.shards",
    ),
]


@pytest.mark.parametrize("case,text,path,words", BAD, ids=[c[0] for c in BAD])
def test_bad_shard_specs_exit_2_and_name_the_path(tmp_path, capsys, case, text, path, words) -> None:
    assert_render_refuses(tmp_path, capsys, text, path, words)


@pytest.mark.parametrize("version", ["22.05", "23.11.4"])
def test_shards_are_refused_before_slurm_23_11_5(spec_file, tmp_path, capsys, version) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["render", str(spec_file), "-o", str(tmp_path), "--slurm-version", version])
    err = capsys.readouterr().err
    assert exc.value.code == 2, err
    assert "error: node_groups[1].gpus.shards: GPU shards need Slurm 23.11.5 or later" in err, err
    assert list(tmp_path.iterdir()) == []


def test_gres_counts_every_whole_gpu_times_its_shards() -> None:
    spec = load_spec_text(shard_spec_text())
    b = spec.group("b")
    assert gres_string(b, V2605) == f"gpu:{H100}:2,shard:8"
    assert gres_string(spec.group("a"), V2605) == "gpu:nvidia_a100-sxm4-80gb:2"  # no shards, no entry
    assert shard_lines(b, "b-gpu1", "/dev") == [
        "NodeName=b-gpu1 Name=shard Count=4 File=/dev/nvidia0",
        "NodeName=b-gpu1 Name=shard Count=4 File=/dev/nvidia1",
    ]


@pytest.mark.parametrize("emulated", [False, True])
def test_rendered_configs_name_shards_once(emulated: bool) -> None:
    files = render_all(load_spec_text(shard_spec_text()), Site(emulated_devices=emulated), V2311)
    assert "GresTypes=gpu,shard\n" in files["slurm-pool.conf"]
    assert files["slurm.conf"].count("gres/shard") == 1  # AccountingStorageTRES
    lines = [ln for ln in files["gres.conf"].splitlines() if "Name=shard" in ln]
    dev = "/dev/b-gpu1" if emulated else "/dev"
    assert lines == [f"NodeName=b-gpu1 Name=shard Count=4 File={dev}/nvidia{i}" for i in (0, 1)]


def test_a_spec_without_shards_keeps_gres_types_gpu() -> None:
    files = render_all(load_spec(EXAMPLE), Site(), V2205)
    assert "GresTypes=gpu\n" in files["slurm-pool.conf"]
    assert "shard" not in files["gres.conf"] + files["slurm.conf"]


def test_mig_planner_never_takes_a_shared_gpu(spec_file: Path) -> None:
    res = CliRunner().invoke(
        cli, ["mig", "plan", "--spec", str(spec_file), "--model", "H100-80GB", "--demand", "1g.10gb=2"]
    )
    assert res.exit_code == 2, res.output
    assert "shared by shards (node groups b), not MIG" in res.output


@pytest.fixture(scope="module", params=LUA_VERSIONS, ids=lambda v: f"lua{v}")
def dev(request: pytest.FixtureRequest) -> LuaPolicy:
    return LuaPolicy(render_job_submit(load_spec_text(shard_spec_text()), V2205), lua=str(request.param))


DEV = dict(account="projb", qos="dev", time_limit=60)
# (case, job fields, tres_per_node after, tres_per_job after, shared?)
ROUTES = [
    ("--gres=gpu:1 (22.05 spelling)", dict(tres_per_node="gres:gpu:1"), "gres:shard:1", None, True),
    ("--gres=gpu:1 (later spelling)", dict(tres_per_node="gres/gpu:1"), "gres/shard:1", None, True),
    (
        "--gres=gpu beside another GRES",
        dict(tres_per_node="gres:nic:1,gres:gpu:1"),
        "gres:nic:1,gres:shard:1",
        None,
        True,
    ),
    ("--gpus=1 moves to the node", dict(tres_per_job="gres/gpu:1"), "gres/shard:1", "", True),
    ("a GPU type keeps a whole GPU", dict(tres_per_node=f"gres:gpu:{H100}:1"), f"gres:gpu:{H100}:1", None, False),
    ("shards asked for directly", dict(tres_per_node="gres:shard:2"), "gres:shard:2", None, False),
    ("per task is left alone", dict(tres_per_task="gres/gpu:1"), None, None, False),
    ("--gpus=1 on two nodes is left alone", dict(tres_per_job="gres/gpu:1", min_nodes=2), None, "gres/gpu:1", False),
]


@pytest.mark.parametrize("case,fields,per_node,per_job,shared", ROUTES, ids=[c[0] for c in ROUTES])
def test_dev_tier_routes_one_gpu_to_a_shard(
    dev: LuaPolicy, case: str, fields: dict, per_node: str | None, per_job: str | None, shared: bool
) -> None:
    out = dev.submit(unset_job(**DEV, **fields))
    assert out.rc == 0, out.message
    assert out.job.get("tres_per_node") == per_node
    assert out.job.get("tres_per_job") == per_job
    assert out.user == ([WARN] if shared else [])


def test_other_tiers_keep_whole_gpus(dev: LuaPolicy) -> None:
    out = dev.submit(unset_job(account="projb", qos="guaranteed", tres_per_node="gres:gpu:1"))
    assert (out.rc, out.job["tres_per_node"], out.user) == (0, "gres:gpu:1", [])


def test_two_gpus_in_the_dev_tier_are_refused(dev: LuaPolicy) -> None:
    out = dev.submit(unset_job(**DEV, tres_per_node="gres:gpu:2"))
    assert out.rc == 2050
    assert "tier 'dev' allows at most 1 GPU(s) per job; this job asks for 2." in out.message
    assert out.job["tres_per_node"] == "gres:gpu:2"


SHARD_TRES = [
    ("squeue allocation", "cpu=1,mem=1G,node=1,billing=1,gres/shard=1", 1),
    ("typed allocation", "cpu=1,gres/shard:nvidia_h100_80gb_hbm3=2", 2),
    ("22.05 request", "gres:shard:3", 3),
    ("later request", "gres/shard:2", 2),
    ("request without a count", "gres/shard", 1),
    ("whole GPUs only", "cpu=1,gres/gpu=2", 0),
    ("sacct list", [{"type": "gres", "name": "shard", "count": 4}, {"type": "gres", "name": "gpu", "count": 1}], 4),
    ("nothing", None, 0),
]


@pytest.mark.parametrize("case,value,n", SHARD_TRES, ids=[c[0] for c in SHARD_TRES])
def test_shards_in_tres(case: str, value, n: int) -> None:
    assert tres_shards(value) == n
