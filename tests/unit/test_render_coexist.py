"""Rendering a pool that shares a site's cluster (``coexist``): fragments only, and the settings the site needs."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_pool.diff.conf import parse_conf
from slurm_pool.render.render import render_all
from slurm_pool.render.required import Setting, cluster_settings, missing, satisfied, settings_text
from slurm_pool.render.site import Site
from slurm_pool.spec import load_spec, load_spec_text
from slurm_pool.versions import SlurmVersion

ROOT = Path(__file__).resolve().parents[2]
COEXIST = load_spec(ROOT / "examples" / "pool-coexist.yaml")
OWNED = load_spec(ROOT / "examples" / "pool.yaml")
VERSIONS = [SlurmVersion(22, 5, 8), SlurmVersion(24, 11, 5), SlurmVersion(26, 5, 3)]


@pytest.fixture(params=VERSIONS, ids=str)
def version(request: pytest.FixtureRequest) -> SlurmVersion:
    return request.param


def test_shared_cluster_gets_fragments_not_whole_files(version: SlurmVersion) -> None:
    files = render_all(COEXIST, version=version)
    assert not {"slurm.conf", "gres.conf", "plugstack.conf"} & set(files)
    assert {"slurm-pool.conf", "gres-a.conf", "gres-b.conf", "gres-c.conf", "plugstack-slurm-pool.conf"} <= set(files)
    assert {"site-settings.conf", "job_submit.lua", "accounting.json", "manifest.json"} <= set(files)


def test_fragment_holds_only_the_pools_nodes_and_partitions(version: SlurmVersion) -> None:
    frag = render_all(COEXIST, version=version)["slurm-pool.conf"]
    keys = {line.split("=", 1)[0] for line in frag.splitlines() if line and not line.startswith("#")}
    assert keys == {"NodeName", "PartitionName"}
    assert "Nodes=ALL" not in frag
    assert "PartitionName=shared Nodes=a-gpu[1-2],b-gpu1,c-gpu1 " in frag
    assert "Default=YES" not in frag


def test_owned_cluster_is_unchanged_by_the_option(version: SlurmVersion) -> None:
    files = render_all(OWNED, version=version)
    assert "Nodes=ALL" in files["slurm-pool.conf"] and "PreemptType=preempt/qos" in files["slurm-pool.conf"]
    assert "site-settings.conf" not in files


def test_every_required_setting_is_what_the_owned_render_sets(version: SlurmVersion) -> None:
    """The list for a site's slurm.conf and the pool's own slurm.conf say the same thing."""
    owned = render_all(OWNED, version=version)
    as_config = dict(parse_conf(owned["slurm.conf"]).settings)  # every key is set once there
    as_config["PreemptExemptTime"] = "NONE"  # how scontrol prints the rendered -1
    for s in cluster_settings(OWNED, version):
        assert satisfied(s, as_config), (s, as_config.get(s.key))


@pytest.mark.parametrize(
    "setting,config,ok",
    [
        (Setting("PreemptType", "preempt/qos", ""), {"PreemptType": "preempt/qos"}, True),
        (Setting("PreemptType", "preempt/qos", ""), {"PreemptType": "preempt/partition_prio"}, False),
        (Setting("PreemptType", "preempt/qos", ""), {}, False),
        (Setting("GresTypes", "gpu", "", "contains"), {"GresTypes": "gpu,mps"}, True),
        (Setting("GresTypes", "gpu,shard", "", "contains"), {"GresTypes": "gpu"}, False),
        (Setting("PreemptMode", "REQUEUE", "", "contains"), {"PreemptMode": "GANG,REQUEUE"}, True),
        (Setting("PriorityWeightQOS", "10000", "", "positive"), {"PriorityWeightQOS": "1"}, True),
        (Setting("PriorityWeightQOS", "10000", "", "positive"), {"PriorityWeightQOS": "0"}, False),
        (Setting("MaxBatchRequeue", "1000", "", "at_least"), {"MaxBatchRequeue": "5"}, False),
        (Setting("MaxBatchRequeue", "1000", "", "at_least"), {"MaxBatchRequeue": "1000"}, True),
        (Setting("PreemptExemptTime", "-1", "", "one_of", ("none", "-1")), {"PreemptExemptTime": "NONE"}, True),
        (Setting("PreemptExemptTime", "-1", "", "one_of", ("none", "-1")), {"PreemptExemptTime": "00:05:00"}, False),
        (Setting("Prolog", "/etc/slurm/prolog.d/*", ""), {"Prolog[0]": "/etc/slurm/prolog.d/*"}, True),
        (Setting("Prolog", "/etc/slurm/prolog.d/*", ""), {"Prolog": "/etc/slurm/prolog.sh"}, False),
        (Setting("Prolog", "/etc/slurm/prolog.d/*", ""), {"PrologFlags": "Alloc"}, False),
        (Setting("gres.conf", "Include ...", "", "manual"), {}, True),
    ],
)
def test_satisfied(setting: Setting, config: dict[str, str], ok: bool) -> None:
    assert satisfied(setting, config) is ok
    assert (missing([setting], config) == []) is ok


def test_settings_for_a_shared_cluster(version: SlurmVersion) -> None:
    keys = [s.key for s in cluster_settings(COEXIST, version)]
    assert "Prolog" in keys and "Epilog" in keys and "JobSubmitPlugins" in keys
    assert ("MaxBatchRequeue" in keys) is version.has("max_batch_requeue")
    assert ("PreemptParameters" in keys) is version.has("preempt_params_line")
    text = settings_text(COEXIST, version)
    assert "Prolog=/etc/slurm/prolog.d/*" in text and "PreemptType=preempt/qos" in text
    assert all(line.startswith("#") or "=" in line for line in text.splitlines())


def test_gres_fragment_per_group_on_the_emulated_cluster() -> None:
    site = Site(emulated_devices=True, dev_dir="/var/tmp/dev", node_ports={"a-gpu1": 7001, "a-gpu2": 7002})
    files = render_all(COEXIST, site, SlurmVersion(26, 5, 3))
    lines = [x for x in files["gres-a.conf"].splitlines() if x and not x.startswith("#")]
    assert lines == [
        f"NodeName={n} AutoDetect=off Name=gpu Type=nvidia_a100-sxm4-80gb File=/var/tmp/dev/{n}/nvidia{i}"
        for n in ("a-gpu1", "a-gpu2")
        for i in (0, 1)
    ]
    assert "AutoDetect=off\n" not in files["gres-a.conf"]


def test_site_script_and_hook_dirs_are_plain_paths() -> None:
    from slurm_pool.errors import SpecError

    text = (ROOT / "examples" / "pool-coexist.yaml").read_text()
    for bad in ("etc/site.lua", "/etc/../site.lua", "/etc/site\nx.lua"):
        with pytest.raises(SpecError) as exc:
            load_spec_text(
                text.replace(
                    "/etc/slurm/site_job_submit.lua", repr(bad)[1:-1] if "\n" not in bad else '"/etc/site\\nx.lua"'
                )
            )
        assert "coexist.job_submit.script" in str(exc.value)


def test_each_site_partition_gets_its_deny_qos_line(version: SlurmVersion) -> None:
    text = settings_text(COEXIST, version)
    line = [x for x in text.splitlines() if x.startswith("# PartitionName=site-gpu:")]
    assert line == [
        "# PartitionName=site-gpu: add DenyQos=guaranteed,shared,spot,k8s-lend to the site's partition line "
        "(or keep an AllowQos= of yours free of these) -- it holds pool nodes: a pool QOS there would skip the "
        "pool's job rules (checkpoint, limits) and preempt the pool's jobs on them"
    ]
    none = load_spec_text(
        (ROOT / "examples" / "pool-coexist.yaml").read_text().replace("  site_partitions: [site-gpu]\n", "")
    )
    assert "DenyQos" not in settings_text(none, version)


def test_the_pool_qos_include_the_guarantees() -> None:
    from slurm_pool.render.required import pool_qos

    floating = load_spec(ROOT / "examples" / "pool-floating.yaml")
    names = pool_qos(floating)
    assert names[: len(floating.tiers)] == [t.name for t in floating.tiers]
    assert {f"guaranteed-{p.name}" for p in floating.projects if p.guarantee} == set(names[len(floating.tiers) :])
    assert pool_qos(COEXIST) == ["guaranteed", "shared", "spot", "k8s-lend"]


# (site_partitions, the field refused (None: accepted), message fragment)
SITE_PARTITIONS = [
    ("[site-gpu, GPU.big, gpu_2]", None, ""),
    ("[shared]", "coexist.site_partitions[0]", "one of the pool's partitions"),
    ("[site-gpu, site-gpu]", "coexist.site_partitions[1]", "listed twice"),
    ('["a,b"]', "coexist.site_partitions[0]", "a partition name"),
    ('["a=b"]', "coexist.site_partitions[0]", "a partition name"),
    ('[""]', "coexist.site_partitions[0]", "a partition name"),
]


@pytest.mark.parametrize("value,field,fragment", SITE_PARTITIONS)
def test_site_partitions_are_validated(value: str, field: str | None, fragment: str) -> None:
    from slurm_pool.errors import SpecError

    text = (ROOT / "examples" / "pool-coexist.yaml").read_text()
    assert "  site_partitions: [site-gpu]\n" in text
    text = text.replace("  site_partitions: [site-gpu]\n", f"  site_partitions: {value}\n")
    if field is None:
        assert load_spec_text(text).coexist.site_partitions == ["site-gpu", "GPU.big", "gpu_2"]
        return
    with pytest.raises(SpecError) as exc:
        load_spec_text(text)
    assert field in str(exc.value) and fragment in str(exc.value)
