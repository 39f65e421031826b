"""GPU model names: catalogue names, documented aliases and the names NVML and nvidia-smi print."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from slurm_pool.cli import cli
from slurm_pool.errors import SpecError
from slurm_pool.mig.catalogue import GPU_MODELS, MODEL_ALIASES, canonical_model, known_models
from slurm_pool.render import Site, SlurmVersion, render_all
from slurm_pool.spec import load_spec_text


@pytest.mark.parametrize(
    "given,want",
    [
        ("A30", "A30"),
        ("A30-24GB", "A30"),
        ("a30-24gb", "A30"),
        ("NVIDIA A30", "A30"),
        ("NVIDIA A100-SXM4-80GB", "A100-80GB"),
        ("A100-SXM4-80GB", "A100-80GB"),
        ("nvidia  a100-sxm4-40gb", "A100-40GB"),
        ("NVIDIA H100 80GB HBM3", "H100-80GB"),
        ("H100 NVL", "H100-94GB"),
        ("H200", "H200-141GB"),
        ("NVIDIA H200", "H200-141GB"),
        ("B200-180GB", "B200"),
        ("V100", None),
        ("", None),
    ],
)
def test_model_names_aliases_and_nvml_names(given, want):
    # Issue 11, defect 12: the documented aliases and what nvidia-smi prints name the same model.
    assert canonical_model(given) == want


def test_every_alias_names_a_known_model_and_the_error_lists_them():
    assert set(MODEL_ALIASES.values()) <= set(GPU_MODELS)
    text = known_models()
    assert "A30 (also A30-24GB, NVIDIA A30)" in text and "NVIDIA A100-SXM4-80GB" in text


SPEC = """
version: 1
cluster: {name: t}
node_groups:
  - {name: g, hosts: "g[1-2]", cpus: 8, memory_mb: 8000, gpus: {model: MODEL, count: 2}}
tiers:
  - {name: normal, priority: 100}
partitions:
  - {name: p, nodes: [ALL], tier: normal, priority_tier: 10}
projects:
  - {name: team, users: [dora], tiers: [normal]}
"""


@pytest.mark.parametrize("alias", ["NVIDIA A100-SXM4-80GB", "a100-sxm4-80gb"])
def test_a_spec_may_name_the_model_as_nvidia_smi_prints_it(alias):
    spec = load_spec_text(SPEC.replace("MODEL", f'"{alias}"'))
    assert spec.node_groups[0].gpus.model == "A100-80GB"
    same = load_spec_text(SPEC.replace("MODEL", "A100-80GB"))
    v = SlurmVersion.parse("26.05")
    assert render_all(spec, Site(), v) == render_all(same, Site(), v)


def test_an_unknown_model_in_the_spec_lists_the_known_ones():
    with pytest.raises(SpecError) as exc:
        load_spec_text(SPEC.replace("MODEL", "V100"))
    assert "node_groups[0].gpus.model" in str(exc.value) and "A30 (also A30-24GB" in str(exc.value)


@pytest.mark.parametrize("model,code", [("A30-24GB", 0), ("NVIDIA A30", 0), ("V100", 2), ("B300", 2)])
def test_mig_check_takes_aliases(model, code):
    res = CliRunner().invoke(cli, ["mig", "check", "--model", model, "4g.24gb"])
    assert res.exit_code == code, res.output
    if code:
        assert "unknown MIG-capable GPU model" in res.output and "A30-24GB" in res.output
