"""Issue 44 on real Slurm (checks 1, 5 and 7): names are owned, adoption sets only the fields it names,
``--prune`` keeps what the site set, and the site's jobs keep their priorities.

Every spec here is a variant of the brownfield site's own spec (``brownfield_site.spec_path``), written to
the test's directory; whatever a test changes in slurmdbd is put back in a ``finally``, and the site's
accounting snapshot is compared with the one taken before the pool was installed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import pytest
import yaml

from tests.support.brownfield import SiteCluster

pytestmark = pytest.mark.slurm

#: ``sacctmgr -n -P show qos``: every field an apply could touch.
QOS_FORMAT = "Name,Description,Flags,Priority,Preempt,PreemptMode,GraceTime,UsageFactor,GrpTRES,MaxTRES,MaxTRESPU"


@pytest.fixture
def site(brownfield_site):
    brownfield_site.cancel_all()
    yield brownfield_site
    brownfield_site.cancel_all()
    assert brownfield_site.snapshot() == brownfield_site.before, "the site's accounting is as the test found it"


def _renamed(old: str, new: str) -> Callable[[dict[str, Any]], None]:
    """Every string of the spec that is exactly ``old`` becomes ``new`` (a tier's or a project's name)."""

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            return {k: walk(v) for k, v in node.items()}
        if isinstance(node, list):
            return [walk(v) for v in node]
        return new if node == old else node

    def change(doc: dict[str, Any]) -> None:
        doc.update(walk(doc))

    return change


def _variant(site: SiteCluster, tmp_path: Path, *changes: Callable[[dict[str, Any]], None]) -> str:
    doc = yaml.safe_load(site.spec_path.read_text())
    for change in changes:
        change(doc)
    path = tmp_path / "variant.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return str(path)


def _sacctmgr(site: SiteCluster, *args: str, check: bool = True) -> str:
    return site.handle.run(["sacctmgr", *args], check=check).stdout


def _accounting(site: SiteCluster) -> dict[str, str]:
    """Every QOS, account, association and user as ``sacctmgr -P`` prints them."""
    return {
        "qos": _sacctmgr(site, "show", "qos", "-P"),
        "account": _sacctmgr(site, "show", "account", "-P", "format=Account,Descr,Org"),
        "assoc": _sacctmgr(site, "show", "assoc", "-P"),
        "user": _sacctmgr(site, "show", "user", "-P"),
    }


# (case, the variant's change, the collision's first words, the way out it names)
COLLISIONS = [
    (
        "a tier named like the site's scavenger",
        _renamed("spot", "scavenger"),
        "qos scavenger: exists in slurmdbd and slurm-pool did not create it",
        "rename the tier 'scavenger' in the spec, or adopt the site's QOS in the spec: "
        "adopt: {qos: [{name: scavenger, fields: [...]}]}",
    ),
    (
        "a project named like the site's physics",
        _renamed("proja", "physics"),
        "account physics: exists in slurmdbd and slurm-pool did not create it",
        "rename the project 'physics' in the spec, or adopt the site's account in the spec: "
        "adopt: {accounts: [{name: physics, fields: [...]}]}",
    ),
]


@pytest.mark.parametrize("case,change,what,way", COLLISIONS, ids=[c[0] for c in COLLISIONS])
def test_a_name_the_site_owns_is_refused_and_nothing_changes(site, tmp_path, case, change, what, way):
    variant = _variant(site, tmp_path, change)
    before = _accounting(site)
    for args in (["apply", "accounting", variant], ["apply", "accounting", variant, "--prune"]):
        res = site.handle.cli(*args)
        assert res.returncode == 2, (case, res.stdout, res.stderr)
        assert f"error: {what}; {way}" in res.stderr, res.stderr
        assert res.stdout == "", "nothing planned, nothing printed as done"
        assert _accounting(site) == before, case
    doctor = site.handle.cli("doctor", "--spec", variant)
    assert doctor.returncode == 1, doctor.stdout + doctor.stderr
    assert "FAIL  accounting" in doctor.stdout and f"problem: {what}" in doctor.stdout, doctor.stdout
    diff = site.handle.cli("diff", "--spec", variant)
    assert diff.returncode == 2 and f"error: {what}" in diff.stderr, diff.stdout + diff.stderr
    assert _accounting(site) == before


def _qos_row(site: SiteCluster, name: str) -> dict[str, str]:
    out = _sacctmgr(site, "-n", "-P", "show", "qos", f"name={name}", f"format={QOS_FORMAT}")
    return dict(zip(QOS_FORMAT.split(","), out.strip().split("|"), strict=True))


def test_an_adopted_qos_gets_only_the_field_it_names(site, tmp_path):
    def adopt(doc: dict[str, Any]) -> None:
        doc["adopt"] = {"qos": [{"name": "scavenger", "fields": ["GraceTime"]}]}

    variant = _variant(site, tmp_path, _renamed("spot", "scavenger"), adopt)
    tier = next(t for t in yaml.safe_load(Path(variant).read_text())["tiers"] if t["name"] == "scavenger")
    before = _qos_row(site, "scavenger")
    assert before["GraceTime"] == "00:00:00" and before["PreemptMode"] == "cancel", before
    try:
        res = site.handle.cli("apply", "accounting", variant)
        assert res.returncode == 0, res.stdout + res.stderr
        after = _qos_row(site, "scavenger")
        grace = f"00:00:{tier['grace_time']:02d}"
        assert after == {**before, "GraceTime": grace}, (before, after, res.stdout)
        again = site.handle.cli("apply", "accounting", variant)
        assert again.returncode == 0 and "~ qos scavenger" not in again.stdout, again.stdout
    finally:
        # sacctmgr takes GraceTime in seconds (it refuses "00:00:00"); the site's is 0 (asserted above)
        _sacctmgr(site, "-i", "modify", "qos", "where", "name=scavenger", "set", "GraceTime=0", check=False)
        site.apply_accounting()  # the site's own spec again: the pool's QOS lists as they were
    assert _qos_row(site, "scavenger") == before


def test_prune_keeps_a_site_set_default_and_an_adopted_accounts_fairshare(site, tmp_path):
    """dave (the site's user) gets a pool account as his default from the site; physics is adopted with no
    field: after ``--prune`` both are byte-identical, the pool's users' association added and nothing else."""
    name = site.pool.spec.cluster.name

    def adopt_physics(doc: dict[str, Any]) -> None:
        doc["projects"].append({"name": "physics", "users": ["alice"], "tiers": ["shared"]})
        doc["adopt"] = {"accounts": [{"name": "physics", "fields": []}]}

    variant = _variant(site, tmp_path, adopt_physics)
    _sacctmgr(site, "-i", "add", "user", "dave", "Account=proja", f"Cluster={name}")
    try:
        _sacctmgr(site, "-i", "modify", "user", "where", "name=dave", "set", "DefaultAccount=proja")
        before = _accounting(site)
        assert "dave|proja|" in before["user"], before["user"]
        for spec in (variant, str(site.spec_path)):
            res = site.handle.cli("apply", "accounting", spec, "--prune")
            assert res.returncode == 0, res.stdout + res.stderr
            assert "= user dave in proja: no longer in the spec, but kept: it is the user's default account" in (
                res.stdout
            ), res.stdout
            assert _accounting(site) == before, (spec, res.stdout)
    finally:
        _sacctmgr(site, "-i", "modify", "user", "where", "name=dave", "set", "DefaultAccount=physics")
        _sacctmgr(site, "-i", "delete", "user", "where", "name=dave", "account=proja", f"cluster={name}")


def test_the_site_jobs_priorities_are_as_before_the_pool(site):
    """Five waiting site jobs, submitted now as before the install: sprio shows the same factors and priority."""
    assert len(site.sprio_before) == 5
    assert site.pending_priorities() == site.sprio_before


def test_the_tiers_priorities_are_fitted_below_the_sites_highest(site):
    """The site's highest QOS Priority is 10 (normal): the tiers are fitted at or below it, in their order."""
    tiers = {t.name: t.priority for t in site.pool.spec.tiers}
    got = {name: int(_qos_row(site, name)["Priority"]) for name in tiers}
    assert max(got.values()) == 10, got
    assert sorted(tiers, key=lambda n: (tiers[n], n)) == sorted(got, key=lambda n: (got[n], n)), (tiers, got)
    assert "priorities: the tiers' QOS priorities are fitted at or below 10" in site.adoption[0], site.adoption
