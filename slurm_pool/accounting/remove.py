"""What ``slurm-pool uninstall`` deletes from slurmdbd: the objects slurm-pool created, nothing else.

slurm-pool's own objects carry its tag (:mod:`slurm_pool.accounting.owned`):
a QOS whose description starts ``slurm-pool``, an account with
``Organization=slurm-pool`` under ``root``.  Everything else -- the site's
objects and the ones the spec adopts -- stays exactly as it is, field by
field.  The deletions, in the order they run:

1. a user whose every association is in the pool's accounts on this cluster
   (slurm-pool created the user) is deleted whole;
2. a user of the site's loses only the associations in the pool's accounts,
   but never their default account's (slurmdbd refuses it while others remain,
   ``ESLURM_NO_REMOVE_DEFAULT_ACCOUNT``): that one and its account are kept and
   reported;
3. the pool's accounts, then the pool's QOS -- but a QOS that an object left in
   slurmdbd still names (a site's association's QOS list, a site QOS's
   ``Preempt``) is kept and reported: deleting it would edit that object too.

A user's association in an adopted account is left: nothing tells who made it.
"""

from __future__ import annotations

from dataclasses import dataclass

from slurm_pool.accounting.apply import Change, read_accounts
from slurm_pool.accounting.owned import pool_accounts, qos_ours
from slurm_pool.adapters.slurm import SlurmClient
from slurm_pool.spec.model import PoolSpec

ASSOC_FIELDS = ["Cluster", "Account", "User", "QOS", "DefaultQOS", "ParentName"]


@dataclass(frozen=True)
class Removal:
    """The deletions (in order) and what is kept, one line each with the reason."""

    changes: list[Change]
    kept: list[str]


def _listed(value: str) -> set[str]:
    return {x for x in value.split(",") if x}


def removal(spec: PoolSpec, slurm: SlurmClient) -> Removal:
    """The sacctmgr deletions that take slurm-pool's own objects out of this cluster's accounting."""
    cluster = spec.cluster.name
    qos_have = {r["Name"]: r for r in slurm.sacctmgr_show("qos", ["Name", "Description", "Preempt"])}
    accts_have = read_accounts(slurm)
    rows = slurm.sacctmgr_show("assoc", ASSOC_FIELDS)
    here = {(r["Account"], r["User"]): r for r in rows if r["Cluster"] == cluster}
    ours = pool_accounts(accts_have, here)
    users = {r["User"]: r["DefaultAccount"] for r in slurm.sacctmgr_show("user", ["User", "DefaultAccount"])}
    changes: list[Change] = []
    kept: list[str] = []
    kept_accounts: set[str] = set()
    gone: set[tuple[str, str, str]] = set()  # (cluster, account, user) of every association deleted

    def pool_assoc(r: dict[str, str]) -> bool:
        return r["Cluster"] == cluster and r["Account"] in ours

    by_user: dict[str, list[dict[str, str]]] = {}
    for r in rows:
        if r["User"]:
            by_user.setdefault(r["User"], []).append(r)
    for user in sorted(by_user):
        mine = [r for r in by_user[user] if pool_assoc(r)]
        if not mine:
            continue
        if len(mine) == len(by_user[user]):
            changes.append(
                Change(
                    f"user {user} (every association in the pool's accounts: {', '.join(r['Account'] for r in mine)})",
                    ("delete", "user", "where", f"name={user}"),
                )
            )
            gone |= {(r["Cluster"], r["Account"], user) for r in mine}
            continue
        for r in sorted(mine, key=lambda r: r["Account"]):
            acct = r["Account"]
            if users.get(user) == acct:
                kept_accounts.add(acct)
                kept.append(
                    f"user {user} in {acct}: kept, it is the user's default account and the user has the site's "
                    f"associations too (move it with `sacctmgr modify user {user} set DefaultAccount=...`, "
                    "then run uninstall again)"
                )
                continue
            changes.append(
                Change(
                    f"user {user} from account {acct}",
                    ("delete", "user", "where", f"name={user}", f"account={acct}", f"cluster={cluster}"),
                )
            )
            gone.add((cluster, acct, user))
    for name in sorted(ours):
        if name in kept_accounts:
            kept.append(f"account {name}: kept, a user's default account (see above)")
            continue
        changes.append(Change(f"account {name}", ("delete", "account", "where", f"name={name}")))
        gone |= {(r["Cluster"], name, r["User"]) for r in rows if r["Account"] == name}

    named_by: dict[str, set[str]] = {}
    for r in rows:
        if (r["Cluster"], r["Account"], r["User"]) in gone:
            continue
        for q in _listed(r["QOS"]) | _listed(r["DefaultQOS"]):
            who = f"account {r['Account']}" + (f" user {r['User']}" if r["User"] else "")
            named_by.setdefault(q, set()).add(who + (f" on cluster {r['Cluster']}" if r["Cluster"] != cluster else ""))
    for name, r in qos_have.items():
        if not qos_ours(r):
            for q in _listed(r["Preempt"]):
                named_by.setdefault(q, set()).add(f"qos {name}")
    for name, r in sorted(qos_have.items()):
        if not qos_ours(r):
            continue
        if name in named_by:
            kept.append(
                f"qos {name}: kept, {', '.join(sorted(named_by[name]))} still name it (deleting it would edit them; "
                "take it out of their lists with sacctmgr, then run uninstall again)"
            )
            continue
        changes.append(Change(f"qos {name}", ("delete", "qos", "where", f"name={name}")))
    adopted = {a.name for a in spec.adopt.accounts}
    for a in spec.projects:
        if a.name in adopted:
            for u in sorted(a.users):
                if (a.name, u) in here:
                    kept.append(
                        f"user {u} in adopted account {a.name}: left (slurm-pool cannot tell whether it added the "
                        f"association; `sacctmgr delete user where name={u} account={a.name}` if it did)"
                    )
    return Removal(changes, kept)


def pool_objects(spec: PoolSpec, slurm: SlurmClient) -> tuple[set[str], set[str]]:
    """(the pool's QOS, the pool's accounts) as slurmdbd has them now: the tagged ones."""
    qos = {r["Name"] for r in slurm.sacctmgr_show("qos", ["Name", "Description"]) if qos_ours(r)}
    rows = slurm.sacctmgr_show("assoc", ASSOC_FIELDS, where=["where", f"cluster={spec.cluster.name}"])
    return qos, pool_accounts(read_accounts(slurm), {(r["Account"], r["User"]): r for r in rows})
