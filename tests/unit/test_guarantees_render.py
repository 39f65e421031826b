"""Floating guarantees rendered (issue 28): the partition, AccountingStorageTRES, the preemption order, the
guarantees' QOS and the associations that list them, and goldens of examples/pool-floating.yaml."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from slurm_pool.accounting.apply import apply_accounting
from slurm_pool.accounting.owned import NameCollision
from slurm_pool.accounting.plan import association_qos, build_plan, guarantee_qos_plans
from slurm_pool.adapters.runner import RecordingRunner
from slurm_pool.adapters.slurm import SlurmClient
from slurm_pool.errors import SpecError
from slurm_pool.render import Site, SlurmVersion, render_all
from slurm_pool.render.required import cluster_settings
from slurm_pool.spec import load_spec, parse_spec
from tests.support.golden import check_golden, golden_view
from tests.unit.test_accounting import FakeSacctmgr
from tests.unit.test_guarantees_spec import BASE, H100

REPO = Path(__file__).resolve().parents[2]
FLOATING = REPO / "examples" / "pool-floating.yaml"


def _doc(**changes: Any) -> dict[str, Any]:
    """BASE with top-level keys or ``projects.N.key`` / ``partitions.N.key`` replaced."""
    doc = copy.deepcopy(BASE)
    for path, value in changes.items():
        parts = path.split("__")
        target = doc
        for p in parts[:-1]:
            target = target[int(p)] if p.isdigit() else target[p]
        target[parts[-1]] = value
    return doc


def _lines(text: str, start: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(start)]


def _partition(files: dict[str, str], name: str) -> str:
    (line,) = _lines(files["slurm-pool.conf"], f"PartitionName={name} ")
    return line


@pytest.mark.parametrize(
    "changes, allow",
    [
        ({}, "AllowQos=guaranteed-projd,guaranteed-proje AllowAccounts=projd,proje State=UP"),
        ({"partitions__1__allow_accounts": ["proje", "projd"]}, "AllowQos=guaranteed-projd,guaranteed-proje "
         "AllowAccounts=proje,projd State=UP"),
        ({"projects__1__guarantee": {}}, "AllowQos=guaranteed-proje AllowAccounts=proje State=UP"),
    ],
)  # fmt: skip
def test_the_floating_partition_allows_the_guarantees_qos_and_projects(changes, allow) -> None:
    files = render_all(parse_spec(_doc(**changes)), Site(), SlurmVersion.parse("26.05"))
    assert _partition(files, "floating").endswith(" " + allow)
    assert _partition(files, "a-owner").endswith(" AllowQos=guaranteed AllowAccounts=proja State=UP")
    assert _partition(files, "shared").endswith(" AllowQos=shared State=UP")


@pytest.mark.parametrize(
    "version, guarantee, want",
    [
        ("22.05", {f"gres/gpu:{H100}": 2}, f"gres/gpu,gres/gpu:nvidia_a100-sxm4-80gb,gres/gpu:{H100},"
         "gres/gpu:nvidia_a100_3g.39gb"),
        ("26.05", {"gres/gpu:nvidia_a100_3g.40gb": 1}, f"gres/gpu,gres/gpu:nvidia_a100-sxm4-80gb,gres/gpu:{H100},"
         "gres/gpu:nvidia_a100_3g.40gb"),
    ],
)  # fmt: skip
def test_accounting_tres_counts_every_guaranteed_type(version, guarantee, want) -> None:
    spec = parse_spec(_doc(projects__2__guarantee=guarantee))
    files = render_all(spec, Site(), SlurmVersion.parse(version))
    assert _lines(files["slurm.conf"], "AccountingStorageTRES=") == [f"AccountingStorageTRES={want}"]
    setting = next(s for s in cluster_settings(spec, SlurmVersion.parse(version)) if s.key == "AccountingStorageTRES")
    assert setting.value == want


@pytest.mark.parametrize(
    "version, guarantee",
    [("26.05", "nvidia_a100_3g.39gb"), ("22.05", "nvidia_a100_3g.40gb"), ("23.02.5", "nvidia_a100_3g.40gb")],
)
def test_a_mig_type_of_another_release_is_refused_at_render(version, guarantee) -> None:
    spec = parse_spec(_doc(projects__2__guarantee={f"gres/gpu:{guarantee}": 1}))  # valid in some release
    with pytest.raises(SpecError) as exc:
        render_all(spec, Site(), SlurmVersion.parse(version))
    (issue,) = exc.value.issues
    assert issue.path == f"projects[2].guarantee.gres/gpu:{guarantee}"
    assert f"Slurm {version} names no GPU of the pool {guarantee!r}" in issue.message


@pytest.mark.parametrize(
    "version, preempt, sched_tail",
    [
        ("22.05", [], ",nohold_on_prolog_fail,preempt_reorder_count=3,preempt_strict_order"),
        ("23.02", ["PreemptParameters=send_user_signal,reorder_count=3,strict_order"], ",nohold_on_prolog_fail"),
        ("24.11", ["PreemptParameters=send_user_signal,reorder_count=3,strict_order"], ",nohold_on_prolog_fail"),
        ("26.05", ["PreemptParameters=send_user_signal,reorder_count=3,strict_order"], ",nohold_on_prolog_fail"),
    ],
)
def test_preemption_reorders_candidates_in_each_release_s_words(version, preempt, sched_tail) -> None:
    files = render_all(parse_spec(BASE), Site(), SlurmVersion.parse(version))
    assert _lines(files["slurm-pool.conf"], "PreemptParameters=") == preempt
    (sched,) = _lines(files["slurm.conf"], "SchedulerParameters=")
    assert sched.endswith(sched_tail) and "youngest_first" not in files["slurm.conf"]
    settings = {s.key: s.value for s in cluster_settings(parse_spec(BASE), SlurmVersion.parse(version))}
    assert settings.get("PreemptParameters") == (preempt[0].split("=", 1)[1] if preempt else None)
    assert settings["SchedulerParameters"].endswith(sched_tail.split(",", 2)[-1])


def test_without_a_prolog_22_05_still_orders_preemption() -> None:
    spec = parse_spec(_doc(health={"prolog": False}))
    (sched,) = _lines(render_all(spec, Site(), SlurmVersion.parse("22.05"))["slurm.conf"], "SchedulerParameters=")
    assert sched == (
        "SchedulerParameters=sched_interval=60,sched_min_interval=2000000,bf_interval=30,"
        "preempt_reorder_count=3,preempt_strict_order"
    )
    settings = [s for s in cluster_settings(spec, SlurmVersion.parse("22.05")) if s.key == "SchedulerParameters"]
    assert [s.value for s in settings] == ["preempt_reorder_count=3,preempt_strict_order"]


# -- accounting ---------------------------------------------------------------------------------------------


def _qos(plan, name: str) -> dict[str, str]:
    return next(q.fields for q in plan.qos if q.name == name)


def test_each_guarantee_is_a_qos_of_the_tier_s_fields_and_its_grptres() -> None:
    doc = _doc()
    doc["tiers"][0].update(grp_tres={"gres/gpu": 8, "cpu": 64}, max_tres_per_user={"gres/gpu": 4}, grace_time=5)
    plan = build_plan(parse_spec(doc))
    assert [q.name for q in plan.qos] == ["guaranteed", "shared", "scavenger", "guaranteed-projd", "guaranteed-proje"]
    tier = _qos(plan, "guaranteed")
    for name, grp in (
        ("guaranteed-projd", "cpu=64,gres/gpu=2"),
        ("guaranteed-proje", f"cpu=64,gres/gpu=2,gres/gpu:{H100}=2"),
    ):
        fields = _qos(plan, name)
        assert fields == {**tier, "Description": f"slurm-pool: guarantee of {name.split('-')[1]}", "GrpTRES": grp}
    assert tier["GrpTRES"] == "cpu=64,gres/gpu=8"
    two_types = _doc(projects__2__guarantee={f"gres/gpu:{H100}": 2, "gres/gpu:nvidia_a100-sxm4-80gb": 1})
    assert _qos(build_plan(parse_spec(two_types)), "guaranteed-proje")["GrpTRES"] == (
        f"gres/gpu=3,gres/gpu:nvidia_a100-sxm4-80gb=1,gres/gpu:{H100}=2"
    )
    # nobody preempts a guarantee
    assert all("guaranteed-" not in q.fields["Preempt"] for q in plan.qos)
    assert [(q.adopted, q.tier) for q in guarantee_qos_plans(parse_spec(doc))] == [(None, False), (None, False)]


@pytest.mark.parametrize(
    "project, changes, qos, default",
    [
        ("projd", {}, "guaranteed-projd,shared", "guaranteed-projd"),
        ("projd", {"projects__1__default_tier": "shared"}, "guaranteed-projd,shared", "shared"),
        ("proje", {}, "guaranteed-proje,shared", "guaranteed-proje"),
        ("proja", {}, "guaranteed,scavenger,shared", "guaranteed"),
        ("projx", {}, "scavenger,shared", "shared"),  # its first tier
        # a project that owns nodes and has a guarantee keeps the tier's QOS for its own partition
        ("proja", {"projects__0__guarantee": {"gres/gpu": 1}}, "guaranteed,guaranteed-proja,scavenger,shared",
         "guaranteed-proja"),
    ],
)  # fmt: skip
def test_associations_list_the_guarantee_qos_instead_of_the_tier(project, changes, qos, default) -> None:
    spec = parse_spec(_doc(**changes))
    plan = build_plan(spec)
    account = next(a for a in plan.accounts if a.name == project)
    assert (account.fields["QOS"], account.fields["DefaultQOS"]) == (qos, default)
    for user in (u for u in plan.users if u.account == project):
        assert (user.fields["QOS"], user.fields["DefaultQOS"]) == (qos, default)
    proj = next(p for p in spec.projects if p.name == project)
    assert association_qos(spec, proj) == (qos.split(","), default)


def _world(fake: FakeSacctmgr) -> tuple[RecordingRunner, SlurmClient]:
    fake.register_gres()
    fake.tres.append(("gres", f"gpu:{H100}"))
    runner = RecordingRunner()
    runner.respond(["sacctmgr"], fake)
    return runner, SlurmClient(runner)


def test_apply_creates_tagged_guarantee_qos_and_prunes_a_dropped_one() -> None:
    fake = FakeSacctmgr()
    _, slurm = _world(fake)
    lines: list[str] = []
    apply_accounting(parse_spec(BASE), slurm, echo=lines.append)
    # a typed guarantee caps gres/gpu too: Slurm counts a job asking for GPUs of no type only there
    assert fake.qos["guaranteed-proje"]["GrpTRES"] == f"gres/gpu=2,gres/gpu:{H100}=2"
    assert fake.qos["guaranteed-projd"]["Description"].startswith("slurm-pool: guarantee of projd")
    assert apply_accounting(parse_spec(BASE), slurm, echo=lines.append) == []
    fewer = _doc(projects__2__guarantee={})
    summaries = [c.summary for c in apply_accounting(parse_spec(fewer), slurm, prune=True, echo=lines.append)]
    assert "- qos guaranteed-proje" in summaries and "- qos guaranteed-projd" not in summaries


def test_a_site_qos_under_a_guarantee_s_name_is_left_alone() -> None:
    fake = FakeSacctmgr()
    fake.qos["guaranteed-projd"] = {"Description": "the site's own", "Priority": "3"}
    runner, slurm = _world(fake)
    lines: list[str] = []
    with pytest.raises(NameCollision) as err:  # a collision: named, nothing applied; a guarantee's QOS is renamed
        apply_accounting(parse_spec(BASE), slurm, prune=True, echo=lines.append)
    assert err.value.lines() == [
        "qos guaranteed-projd: exists in slurmdbd and slurm-pool did not create it; "
        "rename the tier or the project whose guarantee it is"
    ]
    assert fake.qos["guaranteed-projd"] == {"Description": "the site's own", "Priority": "3"}
    changes = [c for c in runner.commands("sacctmgr") if c[1] == "-i"]
    assert not any("name=guaranteed-projd" in c for c in changes)


# -- goldens of examples/pool-floating.yaml -----------------------------------------------------------------


@pytest.mark.parametrize("version", ["22.05", "26.05"])
def test_golden_floating(version) -> None:
    """``UPDATE_GOLDEN=1`` rewrites them, as for the seed example's goldens."""
    check_golden(
        golden_view(render_all(load_spec(FLOATING), Site(), SlurmVersion.parse(version))), f"floating-{version}"
    )
