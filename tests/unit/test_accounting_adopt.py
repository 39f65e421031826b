"""Adopt, never seize: apply accounting changes and prunes only slurm-pool's own or adopted objects."""

from __future__ import annotations

import copy
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

import pytest
import yaml

from slurm_pool.accounting.apply import apply_accounting, diff
from slurm_pool.accounting.plan import build_plan
from slurm_pool.adapters.runner import RecordingRunner
from slurm_pool.adapters.slurm import SlurmClient
from slurm_pool.errors import SpecError
from slurm_pool.spec import parse_spec
from slurm_pool.spec.adopt import check_adopt
from tests.unit.test_accounting import FakeSacctmgr

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "pool.yaml"
NOT_OURS_QOS = (
    "= qos shared: exists and is not slurm-pool's; left as it is (adopt it in the spec's adopt.qos to manage it)"
)
NOT_OURS_ACCOUNT = (
    "= account proja: exists and is not slurm-pool's; left as it is, and no pool user is added to it "
    "(adopt it in the spec's adopt.accounts to manage it)"
)


def _spec(adopt: dict[str, list[str]] | None = None):
    data = yaml.safe_load(EXAMPLE.read_text())
    if adopt is not None:
        data["adopt"] = adopt
    return parse_spec(data)


def _world(site: Callable[[FakeSacctmgr], None]):
    fake = FakeSacctmgr()
    fake.register_gres()
    site(fake)
    runner = RecordingRunner()
    runner.respond(["sacctmgr"], fake)
    return fake, runner, SlurmClient(runner)


def _apply(spec, slurm, prune: bool = False) -> tuple[list[str], list[str]]:
    """(change summaries, every line printed)."""
    lines: list[str] = []
    changes = apply_accounting(spec, slurm, prune=prune, echo=lines.append)
    return [c.summary for c in changes], lines


def _changes(runner) -> list[tuple[str, ...]]:
    return [c for c in runner.commands("sacctmgr") if c[1] == "-i"]


def _site_qos(fake: FakeSacctmgr) -> None:
    fake.qos["shared"] = {"Description": "the site's shared qos", "Priority": "7", "GraceTime": "00:01:00"}


def _site_account(fake: FakeSacctmgr) -> None:
    fake.accounts["proja"] = {"Descr": "physics group a", "Org": "physics"}
    fake.assoc[("proja", "")] = {"Fairshare": "5", "QOS": "normal", "DefaultQOS": "normal"}
    fake.assoc[("proja", "erin")] = {"QOS": "normal"}
    fake.users["erin"] = "proja"


def _site_user(fake: FakeSacctmgr) -> None:
    fake.accounts["physics"] = {"Descr": "physics", "Org": "physics"}
    fake.assoc[("physics", "")] = {"Fairshare": "1", "QOS": "normal"}
    fake.assoc[("physics", "alice")] = {"QOS": "normal"}
    fake.users["alice"] = "physics"


# (case, the site's objects, the spec's adopt section, what the site keeps exactly, lines printed,
#  words no sacctmgr change may hold)
FOREIGN = [
    ("foreign qos with a tier's name", _site_qos, None, [("qos", "shared")], [NOT_OURS_QOS], ["name=shared"]),
    (
        "foreign account with a project's name",
        _site_account,
        None,
        [("accounts", "proja"), ("assoc", ("proja", "")), ("assoc", ("proja", "erin")), ("users", "erin")],
        [NOT_OURS_ACCOUNT, "= user alice in proja: not added, the account is not slurm-pool's"],
        ["name=proja", "account=proja", "Account=proja", "name=erin"],
    ),
    (
        "a pool user whose default account is the site's",
        _site_user,
        None,
        [("accounts", "physics"), ("assoc", ("physics", "")), ("assoc", ("physics", "alice")), ("users", "alice")],
        ["= user alice: keeps DefaultAccount physics, which is not slurm-pool's"],
        ["DefaultAccount=proja", "name=physics", "account=physics", "Account=physics"],
    ),
    # adopting one kind of object does not adopt the other
    (
        "foreign qos, an account adopted",
        _site_qos,
        {"accounts": ["proja"]},
        [("qos", "shared")],
        [NOT_OURS_QOS],
        ["name=shared"],
    ),
]


@pytest.mark.parametrize("case,site,adopt,kept,notes,never", FOREIGN, ids=[c[0] for c in FOREIGN])
def test_a_site_object_is_reported_and_left_exactly_as_it_is(case, site, adopt, kept, notes, never):
    fake, runner, slurm = _world(site)
    before = {(kind, key): copy.deepcopy(getattr(fake, kind)[key]) for kind, key in kept}
    spec = _spec(adopt)
    for prune in (False, True, False):  # and again: nothing converges onto the site's objects
        _summaries, lines = _apply(spec, slurm, prune=prune)
        assert [line for line in lines if line.startswith("= ")] == notes, case
        assert {(kind, key): getattr(fake, kind).get(key) for kind, key in kept} == before, case
    # no sacctmgr change ever named the site's object
    touched = [c for c in _changes(runner) if any(w in arg for arg in c for w in never)]
    assert not touched, touched


def test_a_pool_user_with_a_site_default_gets_the_pool_association_only():
    fake, runner, slurm = _world(_site_user)
    _apply(_spec(), slurm)
    assert ("sacctmgr", "-i", "add", "user", "alice", "Account=proja", "Cluster=pool") in runner.calls
    assert ("proja", "alice") in fake.assoc and fake.users["alice"] == "physics"
    summaries, _lines = _apply(_spec(), slurm)
    assert summaries == []


def test_a_pool_users_default_in_a_retired_pool_account_still_moves():
    def site(fake: FakeSacctmgr) -> None:
        fake.accounts["old-proj"] = {"Descr": "slurm-pool", "Org": "slurm-pool"}
        fake.assoc[("old-proj", "")] = {}
        fake.assoc[("old-proj", "alice")] = {}
        fake.users["alice"] = "old-proj"

    fake, _runner, slurm = _world(site)
    _apply(_spec(), slurm)
    summaries, _lines = _apply(_spec(), slurm)
    assert summaries == ["~ user alice: DefaultAccount: old-proj -> proja"]
    assert fake.users["alice"] == "proja"


# (case, the site's objects, adopt, (kind, key, field, value the spec gives), fields that must stay the site's)
ADOPTED = [
    (
        "adopted qos",
        _site_qos,
        {"qos": ["shared"]},
        ("qos", "shared", "Priority", "500"),
        {"Description": "Pool-wide borrowing within a fair share; preemptible."},
    ),
    (
        "adopted account",
        _site_account,
        {"accounts": ["proja"]},
        ("assoc", ("proja", ""), "DefaultQOS", "guaranteed"),
        {},
    ),
]


@pytest.mark.parametrize("case,site,adopt,managed,want", ADOPTED, ids=[c[0] for c in ADOPTED])
def test_an_adopted_object_follows_the_spec_but_is_never_tagged(case, site, adopt, managed, want):
    fake, runner, slurm = _world(site)
    spec = _spec(adopt)
    summaries, lines = _apply(spec, slurm)
    kind, key, field, value = managed
    assert getattr(fake, kind)[key][field] == value, (case, summaries)
    assert not [line for line in lines if line.startswith("= ")], lines
    for k, v in want.items():
        assert fake.qos["shared"][k] == v
    # never tagged: the site's description and organisation stay, so --prune can never delete it
    assert fake.accounts.get("proja", {}).get("Org") in (None, "physics", "slurm-pool")
    if "accounts" in adopt:
        assert fake.accounts["proja"] == {"Descr": "physics group a", "Org": "physics"}
        assert ("proja", "alice") in fake.assoc
    if "qos" in adopt:
        assert not fake.qos["shared"]["Description"].lower().startswith("slurm-pool")
    if "accounts" in adopt:
        assert not [c for c in _changes(runner) if any(a.startswith("Organization=") for a in c) and "proja" in c]
    assert _apply(spec, slurm) == ([], ["accounting: no changes"])
    # dropped from the spec later (its adopt entry with it): --prune still leaves it, it is the site's
    plan = build_plan(spec)
    plan = replace(
        plan,
        qos=[q for q in plan.qos if q.name not in adopt.get("qos", [])],
        accounts=[a for a in plan.accounts if a.name not in adopt.get("accounts", [])],
        users=[u for u in plan.users if u.account not in adopt.get("accounts", [])],
    )
    assert [c.summary for c in diff(plan, slurm, prune=True) if c.summary.startswith("-")] == []


def test_prune_with_site_and_adopted_objects_present_deletes_only_slurm_pools_own():
    def site(fake: FakeSacctmgr) -> None:
        _site_qos(fake)
        _site_account(fake)
        _site_user(fake)
        fake.qos["site-normal"] = {"Description": "site normal", "Preempt": "retired-used"}
        fake.qos["retired"] = {"Description": "slurm-pool: an old tier"}
        fake.qos["retired-used"] = {"Description": "slurm-pool"}  # a site QOS's preempt list names it
        fake.qos["retired-assoc"] = {"Description": "slurm-pool"}  # a site association names it
        fake.assoc[("physics", "dave")] = {"QOS": "normal,retired-assoc"}
        fake.accounts["old-proj"] = {"Descr": "slurm-pool", "Org": "slurm-pool"}
        fake.assoc[("old-proj", "")] = {}
        fake.accounts["slurm-pool-ish"] = {"Descr": "slurm-pool lookalike", "Org": "slurm-pool-lab"}

    fake, _runner, slurm = _world(site)
    spec = _spec({"qos": ["shared"], "accounts": ["proja"]})
    _apply(spec, slurm)
    fake.assoc[("proja", "frank")] = {}  # a site user added by hand to the adopted account
    site_before = copy.deepcopy(
        {
            "qos": {n: fake.qos[n] for n in ("site-normal", "normal")},
            "accounts": {n: fake.accounts[n] for n in ("physics", "slurm-pool-ish")},
            "assoc": {k: v for k, v in fake.assoc.items() if k[0] in ("physics", "proja") and k[1] != "alice"},
            "users": dict(fake.users),
        }
    )
    summaries, lines = _apply(spec, slurm, prune=True)
    assert summaries == ["- account old-proj", "- qos retired"]
    assert [line for line in lines if line.startswith("= qos retired")] == [
        "= qos retired-assoc: slurm-pool's and no longer in the spec, but kept: "
        "the site's account physics user dave still name it",
        "= qos retired-used: slurm-pool's and no longer in the spec, but kept: the site's qos site-normal still name it",
    ]
    assert {
        "qos": {n: fake.qos[n] for n in ("site-normal", "normal")},
        "accounts": {n: fake.accounts[n] for n in ("physics", "slurm-pool-ish")},
        "assoc": {k: v for k, v in fake.assoc.items() if k[0] in ("physics", "proja") and k[1] != "alice"},
        "users": dict(fake.users),
    } == site_before
    assert "shared" in fake.qos and "proja" in fake.accounts


# (adopt section, expected issues as "path: message" prefixes)
RULES: list[tuple[dict[str, Any], list[str]]] = [
    ({"accounts": ["proja"], "qos": ["shared"]}, []),
    ({"accounts": ["physics"]}, ["adopt.accounts[0]: 'physics' is not a project of this spec"]),
    ({"qos": ["normal"]}, ["adopt.qos[0]: 'normal' is not a tier of this spec"]),
    ({"qos": ["shared", "shared"]}, ["adopt.qos[1]: 'shared' is listed twice"]),
    ({"accounts": ["shared"], "qos": ["proja"]}, ["adopt.accounts[0]: 'shared'", "adopt.qos[0]: 'proja'"]),
]


@pytest.mark.parametrize("adopt,want", RULES)
def test_only_a_projects_or_tiers_own_name_can_be_adopted(adopt, want):
    spec = _spec({})
    spec = spec.model_copy(update={"adopt": type(spec.adopt).model_validate(adopt)})
    issues = [str(i) for i in check_adopt(spec)]
    assert len(issues) == len(want), issues
    assert all(i.startswith(w) for i, w in zip(issues, want, strict=True)), issues


@pytest.mark.parametrize(
    "adopt,path",
    [
        ({"qos": ["bad name"]}, "adopt.qos"),
        ({"accounts": "proja"}, "adopt.accounts"),
        ({"accounts": ["proja"], "users": ["alice"]}, "adopt.users"),
    ],
)
def test_a_bad_adopt_section_names_its_field(adopt, path):
    with pytest.raises(SpecError) as err:
        _spec(adopt)
    assert any(str(i).startswith(path) for i in err.value.issues), str(err.value)
