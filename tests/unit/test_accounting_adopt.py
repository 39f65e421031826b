"""Names are owned: a site's QOS or account under a spec's name is an error unless adopted, field by field."""

from __future__ import annotations

import copy
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

import pytest
import yaml
from click.testing import CliRunner

from slurm_pool.accounting.apply import apply_accounting, diff
from slurm_pool.accounting.owned import NameCollision
from slurm_pool.accounting.plan import build_plan
from slurm_pool.adapters.runner import RecordingRunner
from slurm_pool.adapters.slurm import SlurmClient
from slurm_pool.errors import SpecError
from slurm_pool.spec import parse_spec
from slurm_pool.spec.adopt import check_adopt
from tests.unit.test_accounting import FakeSacctmgr

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "pool.yaml"
QOS_WAY = "rename the tier 'shared' in the spec, or adopt the site's QOS in the spec: adopt: {qos: [{name: shared, "
ACCOUNT_WAY = "rename the project 'proja' in the spec, or adopt the site's account in the spec: adopt: {accounts: "


def _spec(adopt: dict[str, Any] | None = None):
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


def _state(fake: FakeSacctmgr) -> dict[str, Any]:
    return copy.deepcopy({k: getattr(fake, k) for k in ("clusters", "qos", "accounts", "assoc", "users")})


def _site_qos(fake: FakeSacctmgr) -> None:
    fake.qos["shared"] = {"Description": "the site's shared qos", "Priority": "7", "GraceTime": "00:01:00"}


def _site_account(fake: FakeSacctmgr) -> None:
    fake.accounts["proja"] = {"Descr": "physics group a", "Org": "physics"}
    fake.assoc[("proja", "")] = {"Fairshare": "5", "QOS": "normal", "DefaultQOS": "normal"}
    fake.assoc[("proja", "erin")] = {"QOS": "normal"}
    fake.users["erin"] = "proja"


def _site_account_with_alice(fake: FakeSacctmgr) -> None:
    _site_account(fake)
    fake.assoc[("proja", "alice")] = {"QOS": "normal"}  # the site had her there already
    fake.users["alice"] = "proja"


def _tagged_under_site(fake: FakeSacctmgr) -> None:
    fake.accounts["proja"] = {"Descr": "slurm-pool", "Org": "slurm-pool"}
    fake.assoc[("proja", "")] = {"ParentName": "physics", "Fairshare": "1"}


def _site_user(fake: FakeSacctmgr) -> None:
    fake.accounts["physics"] = {"Descr": "physics", "Org": "physics"}
    fake.assoc[("physics", "")] = {"Fairshare": "1", "QOS": "normal"}
    fake.assoc[("physics", "alice")] = {"QOS": "normal"}
    fake.users["alice"] = "physics"


def _both(fake: FakeSacctmgr) -> None:
    _site_qos(fake)
    _site_account(fake)


# (case, the site's objects, the spec's adopt section, the collisions' first words, a way out each names)
COLLISIONS = [
    (
        "a site's qos with a tier's name",
        _site_qos,
        None,
        ["qos shared: exists in slurmdbd and slurm-pool did not create it; "],
        [QOS_WAY],
    ),
    (
        "a site's account with a project's name",
        _site_account,
        None,
        ["account proja: exists in slurmdbd and slurm-pool did not create it; "],
        [ACCOUNT_WAY],
    ),
    (
        "a tagged account under a site's parent",
        _tagged_under_site,
        None,
        ["account proja: carries slurm-pool's tag under the site's account physics; "],
        [ACCOUNT_WAY],
    ),
    # adopting one kind of object does not adopt the other
    (
        "a site's qos, an account adopted",
        _both,
        {"accounts": [{"name": "proja", "fields": []}]},
        ["qos shared: "],
        [QOS_WAY],
    ),
    ("both, none adopted: one line each", _both, None, ["qos shared: ", "account proja: "], [QOS_WAY, ACCOUNT_WAY]),
]


@pytest.mark.parametrize("case,site,adopt,said,ways", COLLISIONS, ids=[c[0] for c in COLLISIONS])
@pytest.mark.parametrize("prune", [False, True])
def test_a_name_the_site_owns_is_an_error_and_nothing_changes(case, site, adopt, said, ways, prune):
    fake, runner, slurm = _world(site)
    before = _state(fake)
    with pytest.raises(NameCollision) as err:
        _apply(_spec(adopt), slurm, prune=prune)
    lines = err.value.lines()
    assert len(lines) == len(said), lines
    for line, start, way in zip(lines, said, ways, strict=True):
        assert line.startswith(start) and way in line, line
    assert err.value.exit_code == 2
    assert _changes(runner) == [], "assert, then apply: not one sacctmgr change"
    assert _state(fake) == before, case


def test_the_cli_exits_2_naming_the_collision(tmp_path, monkeypatch):
    from slurm_pool.adapters import slurm as slurm_mod
    from slurm_pool.cli import cli

    fake, runner, _slurm = _world(_site_qos)
    monkeypatch.setattr(slurm_mod, "SlurmClient", lambda *a, **k: SlurmClient(runner))
    result = CliRunner().invoke(cli, ["apply", "accounting", str(EXAMPLE)])
    assert result.exit_code == 2, result.output
    assert "error: qos shared: exists in slurmdbd and slurm-pool did not create it; rename" in result.output
    assert _changes(runner) == []


def test_a_pool_user_with_a_site_default_gets_the_pool_association_only():
    fake, runner, slurm = _world(_site_user)
    _summaries, lines = _apply(_spec(), slurm)
    assert ("sacctmgr", "-i", "add", "user", "alice", "Account=proja", "Cluster=pool") in runner.calls
    assert ("proja", "alice") in fake.assoc and fake.users["alice"] == "physics"
    assert any(line.startswith("= user alice: keeps DefaultAccount physics") for line in lines), lines
    assert not [c for c in _changes(runner) if any("physics" in a for a in c)]
    summaries, _lines = _apply(_spec(), slurm)
    assert summaries == []


def test_a_default_account_the_site_moved_to_another_pool_account_stays():
    fake, _runner, slurm = _world(lambda f: None)
    spec = _spec()
    data = yaml.safe_load(EXAMPLE.read_text())
    data["projects"][1]["users"].append("alice")  # alice in proja (her first: the pool's default) and projb
    spec = parse_spec(data)
    _apply(spec, slurm)
    assert fake.users["alice"] == "proja"
    fake.users["alice"] = "projb"  # the site's choice
    summaries, lines = _apply(spec, slurm, prune=True)
    assert summaries == [] and fake.users["alice"] == "projb"
    assert "= user alice: keeps DefaultAccount projb" in " ".join(lines)


def _apply_and_prune(spec, slurm) -> tuple[list[str], list[str]]:
    _apply(spec, slurm)
    return _apply(spec, slurm, prune=True)


# (case, the site's objects, the adopt section, the site's objects that stay byte-identical after --prune)
PRUNE_KEEPS = [
    (
        "a user's default in a retired pool account",
        lambda f: (
            f.accounts.update({"old-proj": {"Descr": "slurm-pool", "Org": "slurm-pool"}}),
            f.assoc.update({("old-proj", ""): {}, ("old-proj", "alice"): {}}),
            f.users.update({"alice": "old-proj"}),
        ),
        None,
        [("users", "alice"), ("accounts", "old-proj"), ("assoc", ("old-proj", "alice"))],
    ),
    (
        "a user pruned from the pool account the site made their default",
        lambda f: (
            f.accounts.update({"projb": {"Descr": "slurm-pool", "Org": "slurm-pool"}}),
            f.assoc.update({("projb", ""): {}, ("projb", "dave"): {"QOS": "normal"}}),
            f.users.update({"dave": "projb"}),
        ),
        None,
        [("users", "dave"), ("assoc", ("projb", "dave"))],
    ),
    (
        "an adopted account's own fairshare and QOS",
        _site_account,
        {"accounts": [{"name": "proja", "fields": []}]},
        [("accounts", "proja"), ("assoc", ("proja", "")), ("assoc", ("proja", "erin")), ("users", "erin")],
    ),
]


@pytest.mark.parametrize("case,site,adopt,kept", PRUNE_KEEPS, ids=[c[0] for c in PRUNE_KEEPS])
def test_prune_never_removes_what_the_site_set(case, site, adopt, kept):
    fake, runner, slurm = _world(site)
    before = {(kind, key): copy.deepcopy(getattr(fake, kind)[key]) for kind, key in kept}
    summaries, _lines = _apply_and_prune(_spec(adopt), slurm)
    assert {(kind, key): getattr(fake, kind).get(key) for kind, key in kept} == before, (case, summaries)
    assert _apply(_spec(adopt), slurm, prune=True)[0] == []


def test_a_kept_default_is_said_with_the_way_to_move_it():
    fake, _runner, slurm = _world(PRUNE_KEEPS[0][1])
    _summaries, lines = _apply_and_prune(_spec(), slurm)
    assert "= user alice in old-proj: no longer in the spec, but kept: it is the user's default account" in "\n".join(
        lines
    )
    assert "= account old-proj: slurm-pool's and no longer in the spec, but kept: a user's default" in lines


# (case, the site's objects, adopt, {(kind, key): {field: value after}}: every field of the object, site's included)
ADOPTED = [
    (
        "qos, GraceTime only",
        _site_qos,
        {"qos": [{"name": "shared", "fields": ["GraceTime"]}]},
        {("qos", "shared"): {"Description": "the site's shared qos", "Priority": "7", "GraceTime": "20"}},
    ),
    (
        "qos, no field",
        _site_qos,
        {"qos": [{"name": "shared", "fields": []}]},
        {("qos", "shared"): {"Description": "the site's shared qos", "Priority": "7", "GraceTime": "00:01:00"}},
    ),
    (
        "qos, Description and Preempt",
        _site_qos,
        {"qos": [{"name": "shared", "fields": ["Description", "Preempt"]}]},
        {
            ("qos", "shared"): {
                "Description": "Pool-wide borrowing within a fair share; preemptible.",
                "Priority": "7",
                "GraceTime": "00:01:00",
                "Preempt": "k8s-lend,scavenger",
            }
        },
    ),
    (
        "account, no field: the pool's users only",
        _site_account,
        {"accounts": [{"name": "proja", "fields": []}]},
        {
            ("accounts", "proja"): {"Descr": "physics group a", "Org": "physics"},
            ("assoc", ("proja", "")): {"Fairshare": "5", "QOS": "normal", "DefaultQOS": "normal"},
            ("assoc", ("proja", "erin")): {"QOS": "normal"},
            ("assoc", ("proja", "alice")): {"QOS": "guaranteed,scavenger,shared", "DefaultQOS": "guaranteed"},
        },
    ),
    (
        "account, Fairshare only",
        _site_account,
        {"accounts": [{"name": "proja", "fields": ["Fairshare"]}]},
        {
            ("accounts", "proja"): {"Descr": "physics group a", "Org": "physics"},
            ("assoc", ("proja", "")): {"Fairshare": "1", "QOS": "normal", "DefaultQOS": "normal"},
        },
    ),
    (
        "account, no field: a pool user's association the site made keeps its QOS",
        _site_account_with_alice,
        {"accounts": [{"name": "proja", "fields": []}]},
        {("assoc", ("proja", "alice")): {"QOS": "normal"}, ("users", "alice"): "proja"},
    ),
    (
        "account, QOS handed over: the pool user's association follows",
        _site_account_with_alice,
        {"accounts": [{"name": "proja", "fields": ["QOS"]}]},
        {
            ("assoc", ("proja", "alice")): {"QOS": "guaranteed,scavenger,shared"},
            ("assoc", ("proja", "erin")): {"QOS": "normal"},
        },
    ),
    (
        "account, QOS lists",
        _site_account,
        {"accounts": [{"name": "proja", "fields": ["QOS", "DefaultQOS"]}]},
        {
            ("assoc", ("proja", "")): {
                "Fairshare": "5",
                "QOS": "guaranteed,scavenger,shared",
                "DefaultQOS": "guaranteed",
            }
        },
    ),
]


@pytest.mark.parametrize("case,site,adopt,after", ADOPTED, ids=[c[0] for c in ADOPTED])
def test_an_adopted_object_gets_only_the_fields_it_names(case, site, adopt, after):
    fake, runner, slurm = _world(site)
    spec = _spec(adopt)
    summaries, lines = _apply(spec, slurm)
    got = {(kind, key): getattr(fake, kind).get(key) for kind, key in after}
    assert got == after, (case, summaries)
    if "accounts" in adopt:  # never tagged: --prune can never delete it
        assert not [c for c in _changes(runner) if any(a.startswith("Organization=") for a in c) and "proja" in c]
    assert _apply(spec, slurm) == ([], ["accounting: no changes"])
    # dropped from the spec later (its adopt entry with it): --prune still leaves it, it is the site's
    names = {e["name"] for e in adopt.get("qos", []) + adopt.get("accounts", [])}
    plan = build_plan(spec)
    plan = replace(
        plan,
        qos=[q for q in plan.qos if q.name not in names],
        accounts=[a for a in plan.accounts if a.name not in names],
        users=[u for u in plan.users if u.account not in names],
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
    spec = _spec({"qos": [{"name": "shared", "fields": ["Priority"]}], "accounts": [{"name": "proja", "fields": []}]})
    _apply(spec, slurm)
    fake.assoc[("proja", "frank")] = {}  # a site user added by hand to the adopted account
    site_before = copy.deepcopy(
        {
            "qos": {n: fake.qos[n] for n in ("site-normal", "normal")},
            "accounts": {n: fake.accounts[n] for n in ("physics", "slurm-pool-ish", "proja")},
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
        "accounts": {n: fake.accounts[n] for n in ("physics", "slurm-pool-ish", "proja")},
        "assoc": {k: v for k, v in fake.assoc.items() if k[0] in ("physics", "proja") and k[1] != "alice"},
        "users": dict(fake.users),
    } == site_before
    assert "shared" in fake.qos and "proja" in fake.accounts


def _q(name: str, *fields: str) -> dict[str, Any]:
    return {"name": name, "fields": list(fields)}


# (adopt section, expected issues as "path: message" prefixes)
RULES: list[tuple[dict[str, Any], list[str]]] = [
    ({"accounts": [_q("proja", "Fairshare")], "qos": [_q("shared", "GraceTime", "PreemptMode")]}, []),
    ({"accounts": [_q("physics")]}, ["adopt.accounts[0].name: 'physics' is not a project of this spec"]),
    ({"qos": [_q("normal")]}, ["adopt.qos[0].name: 'normal' is not a tier of this spec"]),
    ({"qos": [_q("shared"), _q("shared")]}, ["adopt.qos[1].name: 'shared' is listed twice"]),
    ({"qos": [_q("shared", "Priority", "Priority")]}, ["adopt.qos[0].fields[1]: 'Priority' is listed twice"]),
    (
        {"accounts": [_q("shared")], "qos": [_q("proja")]},
        ["adopt.accounts[0].name: 'shared'", "adopt.qos[0].name: 'proja'"],
    ),
]


@pytest.mark.parametrize("adopt,want", RULES)
def test_only_a_projects_or_tiers_own_name_can_be_adopted(adopt, want):
    spec = _spec({})
    spec = spec.model_copy(update={"adopt": type(spec.adopt).model_validate(adopt)})
    issues = [str(i) for i in check_adopt(spec)]
    assert len(issues) == len(want), issues
    assert all(i.startswith(w) for i, w in zip(issues, want, strict=True)), issues


@pytest.mark.parametrize(
    "adopt,path,words",
    [
        ({"qos": ["shared"]}, "adopt.qos", "write {name: shared, fields: [...]}"),  # the old form says the new one
        ({"accounts": ["proja"]}, "adopt.accounts", "write {name: proja, fields: [...]}"),
        ({"qos": [_q("bad name")]}, "adopt.qos[0].name", ""),
        ({"qos": [_q("shared", "MaxWall")]}, "adopt.qos[0].fields[0]", "'GraceTime'"),
        ({"accounts": [_q("proja", "Organization")]}, "adopt.accounts[0].fields[0]", "'Fairshare'"),
        ({"accounts": [{"name": "proja"}]}, "adopt.accounts[0].fields", ""),
        ({"accounts": "proja"}, "adopt.accounts", ""),
        ({"accounts": [_q("proja")], "users": ["alice"]}, "adopt.users", ""),
    ],
)
def test_a_bad_adopt_section_names_its_field(adopt, path, words):
    with pytest.raises(SpecError) as err:
        _spec(adopt)
    hits = [str(i) for i in err.value.issues if str(i).startswith(path)]
    assert hits and words in hits[0], str(err.value)
