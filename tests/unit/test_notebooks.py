"""The notebook tier (issue 14): the spec's ``notebooks`` section and the jupyterhub_config.py fragment."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import yaml

from slurm_pool.cli import main
from slurm_pool.render.render import render_all
from slurm_pool.render.site import Site
from slurm_pool.spec import load_spec, load_spec_text
from slurm_pool.spec.notebooks import limit_seconds
from slurm_pool.versions import SlurmVersion
from tests.support.notebooks import notebook_spec, notebook_spec_text
from tests.support.refusal import assert_render_refuses
from tests.support.shards import shard_spec

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "pool.yaml"
V2205, V2605 = SlurmVersion(22, 5, 8), SlurmVersion(26, 5, 3)


def _assignments(text: str) -> dict[str, object]:
    """``c.X.y = literal`` and ``c.X.y.append/update(literal)`` of a fragment, evaluated as literals."""
    out: dict[str, object] = {}
    for node in ast.parse(text).body:
        if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]).startswith("c."):
            out[ast.unparse(node.targets[0])] = ast.literal_eval(node.value)
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
            call = node.value
            arg = ast.unparse(call.args[0]).replace("sys.executable", "'PYTHON'")
            out[ast.unparse(call.func)] = ast.literal_eval(arg)
    return out


@pytest.mark.parametrize(
    "version,gres",
    [(V2205, "gpu:nvidia_a100_1g.5gb:1"), (SlurmVersion(24, 11, 5), "gpu:nvidia_a100_1g.5gb:1"), (SlurmVersion(25, 5, 0), "gpu:nvidia_a100_1g.5gb:1"), (V2605, "gpu:nvidia_a100_1g.5gb:1")],
)  # fmt: skip
def test_the_fragment_sets_what_the_pool_decides(version: SlurmVersion, gres: str) -> None:
    files = render_all(load_spec_text(notebook_spec_text()), Site(), version)
    got = _assignments(files["jupyterhub_config.py"])
    assert got["c.JupyterHub.spawner_class"] == "batchspawner.SlurmSpawner"
    assert got["c.SlurmSpawner.req_partition"] == "notebook"
    assert got["c.SlurmSpawner.req_qos"] == "notebook"
    script = str(got["c.SlurmSpawner.batch_script"])
    assert "#SBATCH --qos={{qos}}\n" in script and "#SBATCH --partition={{partition}}\n" in script
    assert ("#SBATCH --get-user-env\n" in script) == version.has("get_user_env_takes_no_mode")
    assert ("#SBATCH --get-user-env=L\n" in script) != version.has("get_user_env_takes_no_mode")
    assert got["c.SlurmSpawner.req_gres"] == gres
    assert got["c.SlurmSpawner.req_runtime"] == "01:00:00"
    assert (got["c.SlurmSpawner.req_nprocs"], got["c.SlurmSpawner.req_memory"]) == ("1", "1000M")
    assert got["c.Authenticator.allowed_users"] == {"alice", "bob", "carol"}  # not slurmpool: k8s-bridge has no tier
    assert got["c.JupyterHub.last_activity_interval"] == 15
    assert got["c.Spawner.environment.update"] == {"JUPYTERHUB_ACTIVITY_INTERVAL": "15"}
    culler = got["c.JupyterHub.services.append"]
    assert culler == {
        "name": "slurm-pool-idle-culler",
        "command": ["PYTHON", "-m", "jupyterhub_idle_culler", "--timeout=60", "--cull-every=15"],
    }
    role = got["c.JupyterHub.load_roles.append"]
    assert isinstance(role, dict) and role["services"] == ["slurm-pool-idle-culler"]
    assert "delete:servers" in role["scopes"]
    assert "import batchspawner" in files["jupyterhub_config.py"]
    assert "jupyterhub_config.py" in files["manifest.json"]


def test_the_mig_type_follows_the_release() -> None:
    """A100-80GB's 3g.40gb was nvidia_a100_3g.39gb before 23.02.6 (see the versions issue)."""
    data = notebook_spec()
    data["node_groups"][0]["gpus"]["mig"] = [["3g.40gb", "3g.40gb"], None]
    data["partitions"][6]["nodes"] = ["a"]
    data["notebooks"]["gpu"] = {"mig": "3g.40gb"}
    spec = load_spec_text(yaml.safe_dump(data))
    old = _assignments(render_all(spec, Site(), V2205)["jupyterhub_config.py"])
    new = _assignments(render_all(spec, Site(), V2605)["jupyterhub_config.py"])
    assert (old["c.SlurmSpawner.req_gres"], new["c.SlurmSpawner.req_gres"]) == (
        "gpu:nvidia_a100_3g.39gb:1",
        "gpu:nvidia_a100_3g.40gb:1",
    )


def _shard_notebooks() -> dict:
    data = shard_spec()
    data["notebooks"] = {"partition": "dev", "gpu": {"shards": 2}, "idle_timeout": 600}
    data["tiers"][4]["preempt_mode"] = "cancel"
    data["notebooks"]["preemptible"] = True
    return data


def test_a_server_on_shards() -> None:
    files = render_all(load_spec_text(yaml.safe_dump(_shard_notebooks())), Site(), V2605)
    got = _assignments(files["jupyterhub_config.py"])
    assert got["c.SlurmSpawner.req_gres"] == "shard:2"
    assert got["c.SlurmSpawner.req_qos"] == "dev"
    assert got["c.JupyterHub.last_activity_interval"] == 150
    assert "a higher tier may preempt them" in files["jupyterhub_config.py"]


def test_a_spec_without_notebooks_renders_no_fragment() -> None:
    assert "jupyterhub_config.py" not in render_all(load_spec(EXAMPLE), Site(), V2605)


def _mutated(fn, base=notebook_spec) -> str:
    data = base()
    fn(data)
    return yaml.safe_dump(data, sort_keys=False)


def _nb(**kv):
    return lambda d: d["notebooks"].update(kv)


def _preempted(d) -> None:
    d["tiers"][0]["preempt"].append("notebook")


def _cancel_preempted(d) -> None:
    _preempted(d)
    d["tiers"][4]["preempt_mode"] = "cancel"


# (case, spec text, path named, words)
BAD = [
    ("unknown key", _mutated(_nb(gpus=1)), "notebooks.gpus", "unknown key 'gpus'"),
    ("unknown partition", _mutated(_nb(partition="nope")), "notebooks.partition", "unknown partition 'nope'"),
    ("both mig and shards", _mutated(_nb(gpu={"mig": "1g.5gb", "shards": 1})), "notebooks.gpu", "exactly one"),
    ("neither", _mutated(_nb(gpu={})), "notebooks.gpu", "exactly one"),
    ("bad profile", _mutated(_nb(gpu={"mig": "big"})), "notebooks.gpu.mig", "big"),
    (
        "a profile the partition lacks",
        _mutated(_nb(gpu={"mig": "2g.20gb"})),
        "notebooks.gpu.mig",
        "no node group of partition 'notebook' has 2g.20gb instances",
    ),
    ("shards where there are none", _mutated(_nb(gpu={"shards": 1})), "notebooks.gpu.shards", "no node group with gpus.shards"),
    ("idle timeout too short", _mutated(_nb(idle_timeout=10)), "notebooks.idle_timeout", "10 is too small (minimum 60)"),
    ("unlimited time", _mutated(_nb(time_limit="UNLIMITED")), "notebooks.time_limit", "finite time limit"),
    ("malformed time", _mutated(_nb(time_limit="soon")), "notebooks.time_limit", "'soon' is not a Slurm time"),
    ("over max_time", _mutated(_nb(time_limit="1-00:00:00")), "notebooks.time_limit", "over partition 'notebook'"),
    (
        "preempted but said not",
        _mutated(_cancel_preempted),
        "notebooks.preemptible",
        "false, but tier 'notebook' of partition 'notebook' is preempted by guaranteed",
    ),
    ("said preemptible but not", _mutated(_nb(preemptible=True)), "notebooks.preemptible", "no tier preempts"),
    (
        "requeued when preempted",
        _mutated(lambda d: (_preempted(d), d["tiers"][4].update(preempt_mode="requeue"), _nb(preemptible=True)(d))),
        "notebooks.partition",
        "would be requeued",
    ),
    (
        "a tier that demands checkpoints",
        _mutated(lambda d: d["tiers"][4].update(policy={"checkpoint": "reject"})),
        "notebooks.partition",
        "demands checkpointing",
    ),
    (
        "nobody may use the tier",
        _mutated(lambda d: [p["tiers"].remove("notebook") for p in d["projects"] if "notebook" in p["tiers"]]),
        "notebooks.partition",
        "no project with users may use tier 'notebook'",
    ),
]  # fmt: skip


@pytest.mark.parametrize("case,text,path,words", BAD, ids=[c[0] for c in BAD])
def test_bad_notebook_specs_exit_2_and_name_the_path(tmp_path, capsys, case, text, path, words) -> None:
    assert_render_refuses(tmp_path, capsys, text, path, words)


def test_notebook_shards_are_refused_before_23_11_5(tmp_path, capsys) -> None:
    spec = tmp_path / "nb.yaml"
    spec.write_text(yaml.safe_dump(_shard_notebooks()))
    with pytest.raises(SystemExit) as exc:
        main(["render", str(spec), "-o", str(tmp_path / "out"), "--slurm-version", "22.05"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "GPU shards need Slurm 23.11.5 or later" in err, err


@pytest.mark.parametrize(
    "text,seconds",
    [("30", 1800), ("30:15", 1815), ("1:00:00", 3600), ("2-0", 172800), ("2-3:04", 183840), ("1-00:00:01", 86401),
     ("UNLIMITED", None), ("INFINITE", None)],
)  # fmt: skip
def test_slurm_time_limits(text: str, seconds: int | None) -> None:
    assert limit_seconds(text) == seconds


@pytest.mark.parametrize("text", ["", "1:2:3:4", "-1", "1-", "abc", "1:60x"])
def test_malformed_time_limits(text: str) -> None:
    with pytest.raises(ValueError, match="is not a Slurm time"):
        limit_seconds(text)
