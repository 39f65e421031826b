"""The tiers' QOS priorities in a site's cluster: no site job's QOS factor moves (issue 44, item 5)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from slurm_pool.accounting.apply import apply_accounting, cluster_plan
from slurm_pool.accounting.plan import build_plan
from slurm_pool.accounting.priority import PriorityFitError, fit_priorities
from slurm_pool.adapters.runner import RecordingRunner, Result
from slurm_pool.adapters.slurm import SlurmClient
from slurm_pool.doctor import diagnose as doctor
from slurm_pool.spec import load_spec, parse_spec
from tests.unit.test_accounting import FakeSacctmgr
from tests.unit.test_doctor_guarantees import nodes_json, replay

ROOT = Path(__file__).resolve().parents[2]
COEXIST = ROOT / "examples" / "pool-coexist.yaml"
OWNED = ROOT / "examples" / "pool.yaml"
FOUR = {"guaranteed": 1000, "shared": 500, "spot": 100, "k8s-lend": 10}

# (case, the tiers' priorities, the site's highest, NO_NORMAL_QOS, what the tiers get)
FIT: list[tuple[str, dict[str, int], int, bool, dict[str, int]]] = [
    ("the issue's site: 10 above all", FOUR, 10, False, {"guaranteed": 10, "shared": 5, "spot": 2, "k8s-lend": 1}),
    (
        "scaled, then spread to stay in order",
        {"a": 1000, "b": 5, "c": 3, "d": 0},
        3,
        False,
        {"a": 3, "b": 2, "c": 1, "d": 0},
    ),
    ("exactly as many levels as room", {"a": 9, "b": 8, "c": 7}, 3, False, {"a": 3, "b": 2, "c": 1}),
    ("ties stay ties", {"a": 1000, "b": 1000, "c": 1}, 10, False, {"a": 10, "b": 10, "c": 1}),
    ("already at or below: kept", {"a": 10, "b": 3}, 10, False, {"a": 10, "b": 3}),
    ("the site's highest is 0: kept", FOUR, 0, False, FOUR),
    ("NO_NORMAL_QOS: kept", FOUR, 10, True, FOUR),
    ("a wide site range keeps the ratios", FOUR, 10000, False, FOUR),
    ("scaled down by 10", FOUR, 100, False, {"guaranteed": 100, "shared": 50, "spot": 10, "k8s-lend": 1}),
]


@pytest.mark.parametrize("case,tiers,site_max,raw,want", FIT, ids=[c[0] for c in FIT])
def test_fit_priorities(case, tiers, site_max, raw, want):
    notes: list[str] = []
    got = fit_priorities(tiers, site_max, raw, notes)
    assert got == want, case
    # the order is the tiers' (ties included), and every site QOS keeps its factor
    names = list(tiers)
    for a in names:
        for b in names:
            assert (tiers[a] > tiers[b]) == (got[a] > got[b]) and (tiers[a] == tiers[b]) == (got[a] == got[b])
    assert bool(notes) == (got != tiers)


# (the site's QOS priorities): the site's factors as Slurm computes them, before and after
SITES = [[10, 5, 0], [0, 0], [1, 1], [3], [7, 10000], [1]]


@pytest.mark.parametrize("site", SITES)
def test_no_site_qos_factor_moves(site):
    """Slurm's factor: Priority / the highest Priority of all QOS, 0 for Priority 0 (see accounting.priority)."""

    def factors(all_qos: list[int]) -> list[float]:
        top = max(all_qos)
        return [p / top if p and top else 0.0 for p in site]

    try:
        tiers = fit_priorities(FOUR, max(site))
    except PriorityFitError:
        assert len(FOUR) > max(site) > 0
        return
    assert factors(site + list(tiers.values())) == factors(site)


def test_too_many_levels_fail_naming_the_ways_out():
    with pytest.raises(PriorityFitError) as err:
        fit_priorities(FOUR, 3)
    msg = str(err.value)
    assert err.value.exit_code == 2
    assert "4 distinct QOS priorities (10, 100, 500, 1000) do not fit at or below 3" in msg
    assert "PriorityFlags=NO_NORMAL_QOS" in msg


def _tier_priorities(plan) -> dict[str, str]:
    return {q.name: q.fields["Priority"] for q in plan.qos}


def test_the_plan_fits_only_in_a_sites_cluster():
    coexist, owned = load_spec(COEXIST), load_spec(OWNED)
    spec_values = {t.name: str(t.priority) for t in coexist.tiers}
    assert _tier_priorities(build_plan(coexist)) == spec_values  # the render's accounting.json: the spec's
    fitted = build_plan(coexist, site_priority=10)
    assert max(int(v) for v in _tier_priorities(fitted).values()) == 10
    assert fitted.notes and "at or below 10, the highest of the site's own QOS" in fitted.notes[0]
    assert _tier_priorities(build_plan(owned, site_priority=10)) == {t.name: str(t.priority) for t in owned.tiers}


def _coexist_world(site_qos: dict[str, dict[str, str]], config: str | None = "PriorityType = priority/multifactor\n"):
    fake = FakeSacctmgr()
    fake.register_gres()
    fake.qos.update(site_qos)
    runner = RecordingRunner()
    runner.respond(["sacctmgr"], fake)
    if config is None:
        runner.fail(["scontrol", "show", "config"])
    else:
        runner.on(["scontrol", "show", "config"], config)
    return fake, runner, SlurmClient(runner)


def _coexist(adopt: dict[str, Any] | None = None):
    data = yaml.safe_load(COEXIST.read_text())
    if adopt:
        data["adopt"] = adopt
    return parse_spec(data)


# (case, the QOS slurmdbd has, scontrol show config (None: it fails), adopt, the highest tier priority planned)
READS = [
    ("the site's highest", {"normal": {"Priority": "10"}, "site-normal": {"Priority": "5"}}, "", None, "10"),
    (
        "the pool's own QOS do not count",
        {"normal": {"Priority": "10"}, "old-tier": {"Description": "slurm-pool: retired", "Priority": "5000"}},
        "",
        None,
        "10",
    ),
    (
        "NO_NORMAL_QOS",
        {"normal": {"Priority": "10"}},
        "PriorityFlags = SMALL_RELATIVE_TO_TIME,NO_NORMAL_QOS\n",
        None,
        "1000",
    ),
    ("scontrol cannot be asked: fitted", {"normal": {"Priority": "10"}}, None, None, "10"),
    ("every site QOS at 0", {"normal": {"Priority": "0"}}, "", None, "1000"),
    (
        "a Priority that is no number is skipped",
        {"normal": {"Priority": "10"}, "odd": {"Priority": "x9"}},
        "",
        None,
        "10",
    ),
    (
        "a digit that is not 0-9 is no number",
        {"normal": {"Priority": "10"}, "odd": {"Priority": "\u00b2"}},
        "",
        None,
        "10",
    ),
    (
        "an adopted tier whose Priority the pool sets is not the site's",
        {"normal": {"Priority": "20"}, "shared": {"Description": "site", "Priority": "500000"}},
        "",
        {"qos": [{"name": "shared", "fields": ["Priority"]}]},
        "20",
    ),
    (
        "an adopted tier that keeps its Priority is the site's",
        {"normal": {"Priority": "20"}, "shared": {"Description": "site", "Priority": "50"}},
        "",
        {"qos": [{"name": "shared", "fields": ["GraceTime"]}]},
        "50",
    ),
]


@pytest.mark.parametrize("case,qos,config,adopt,top", READS, ids=[r[0] for r in READS])
def test_the_site_range_is_read_at_apply_time(case, qos, config, adopt, top):
    _fake, _runner, slurm = _coexist_world(qos, config)
    plan = cluster_plan(_coexist(adopt), slurm)
    assert str(max(int(v) for v in _tier_priorities(plan).values())) == top, case


def test_apply_sets_the_fitted_priorities_and_says_so():
    fake, _runner, slurm = _coexist_world({"normal": {"Priority": "10"}, "site-normal": {"Priority": "5"}})
    lines: list[str] = []
    apply_accounting(_coexist(), slurm, echo=lines.append)
    assert lines[0].startswith("priorities: the tiers' QOS priorities are fitted at or below 10")
    spec = _coexist()
    assert {t.name: fake.qos[t.name]["Priority"] for t in spec.tiers} == {
        t.name: str(fit_priorities({u.name: u.priority for u in spec.tiers}, 10)[t.name]) for t in spec.tiers
    }
    assert fake.qos["normal"] == {"Priority": "10"}


def test_doctor_names_each_collision_with_both_ways_out():
    fake = FakeSacctmgr()
    fake.qos["shared"] = {"Description": "the site's", "Priority": "3"}
    fake.accounts["proja"] = {"Descr": "site", "Org": "physics"}
    fake.assoc[("proja", "")] = {}
    r = replay("22.05", nodes_json("22.05"))
    r.respond(["sacctmgr"], lambda argv, inp: fake(argv, inp) if argv[2] == "-P" else Result(argv, 0, "", ""))
    s = load_spec(OWNED)
    found = [f for f in doctor.diagnose(s, doctor.gather(s, r)) if f.check == "accounting"]
    assert [f.problem for f in found] == [
        "qos shared: exists in slurmdbd and slurm-pool did not create it",
        "account proja: exists in slurmdbd and slurm-pool did not create it",
    ]
    assert (
        "rename the tier 'shared'" in found[0].fix and "adopt: {qos: [{name: shared, fields: [...]}]}" in found[0].fix
    )
    assert "rename the project 'proja'" in found[1].fix


def test_doctor_reports_a_site_range_too_small_for_the_tiers():
    fake = FakeSacctmgr()
    fake.qos["normal"] = {"Priority": "3"}
    r = replay("22.05", nodes_json("22.05"))
    r.respond(["sacctmgr"], lambda argv, inp: fake(argv, inp) if argv[2] == "-P" else Result(argv, 0, "", ""))
    s = load_spec(COEXIST)
    found = [f for f in doctor.diagnose(s, doctor.gather(s, r)) if f.check == "accounting"]
    assert len(found) == 1 and "do not fit at or below 3" in found[0].problem, found
    assert "PriorityFlags=NO_NORMAL_QOS" in found[0].fix
