"""Sync accounting objects through sacctmgr: diff first, then apply the diff.

Assert, then apply: the current state is read, the difference against the
plan is computed as a list of :class:`Change`, printed, and only then run.  A
second run finds nothing to change and issues no sacctmgr modification.
Names are owned (:mod:`slurm_pool.accounting.owned`): a QOS or account the
spec names that the site made and the spec does not adopt is an error
(:class:`~slurm_pool.accounting.owned.NameCollision`), raised before anything
is changed.  An adopted object gets only the fields its ``adopt`` entry names,
and the pool's users' associations; it is never tagged.  A user's default
account is set only when slurm-pool creates the user: whatever it is later
(the site's choice), it stays.  ``prune`` removes only tagged objects (an
adopted one is never tagged), never a QOS a site's object still names, never
a user's association with their default account, nor an account that is
someone's default.

QOS come before slurmctld: from Slurm 25.11 slurmctld will not start while a
partition's AllowQOS names a QOS slurmdbd lacks.  But a limit on a TRES such
as ``gres/gpu`` can only be set once slurmctld has registered that TRES (from
``AccountingStorageTRES``) with slurmdbd.  So a limit naming a TRES slurmdbd
does not know yet is *deferred*: reported, left out of this run, and set by
the next run after slurmctld has started -- the bootstrap is
``apply accounting`` -> start slurmctld -> ``apply accounting``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

from slurm_pool.accounting.owned import (
    NameCollision,
    account_ours,
    collisions,
    foreign_parent,
    pool_accounts,
    qos_ours,
)
from slurm_pool.accounting.plan import AccountingPlan, build_plan, untagged
from slurm_pool.adapters.records import skipped
from slurm_pool.adapters.runner import CommandError
from slurm_pool.adapters.slurm import SlurmClient
from slurm_pool.adapters.slurmjson import parse_duration
from slurm_pool.spec.adopt import QOS_FIELDS as ADOPTABLE_QOS_FIELDS
from slurm_pool.spec.model import PoolSpec

#: What ``sacctmgr show qos`` is asked for: the name and every field the plan sets.
QOS_FIELDS = ["Name", *ADOPTABLE_QOS_FIELDS]
ASSOC_FIELDS = ["Account", "User", "Fairshare", "QOS", "DefaultQOS", "ParentName"]
TRES_LIMITS = ("GrpTRES", "MaxTRESPU", "MaxTRES")


@dataclass(frozen=True)
class Change:
    """One sacctmgr action, with the human-readable line that describes it."""

    summary: str
    argv: tuple[str, ...]


def _norm(field: str, value: str) -> str:
    v = value.strip()
    if field in ("QOS", "Preempt", "GrpTRES", "MaxTRESPU", "MaxTRES"):
        return ",".join(sorted(x for x in v.split(",") if x))
    if field == "PreemptMode":
        # sacctmgr shows an unset (OFF) mode as "cluster".
        return "OFF" if v.upper() in ("", "CLUSTER", "OFF") else v.upper()
    if field in ("Description", "Descr"):
        return v.lower()  # sacctmgr stores descriptions lower-cased
    if field == "UsageFactor":
        return f"{float(v or 1):.6f}"
    if field == "Fairshare":
        return v or "1"
    if field == "GraceTime":
        return str(_seconds(v))
    return v


def _seconds(v: str) -> int:
    """sacctmgr prints GraceTime as [D-]HH:MM:SS; the plan holds seconds."""
    if not v:
        return 0
    n = parse_duration(v)
    if n is None:
        raise ValueError(f"GraceTime {v!r} is not [D-]HH:MM:SS")
    return int(n)


def _clear_value(field: str, current: str) -> str:
    """The sacctmgr value that clears a TRES/list field."""
    if field in ("GrpTRES", "MaxTRESPU", "MaxTRES"):
        return ",".join(f"{kv.split('=')[0]}=-1" for kv in current.split(",") if kv)
    return "''" if field in ("Preempt",) else ""


def _field_changes(want: dict[str, str], have: dict[str, str]) -> list[tuple[str, str, str]]:
    out = []
    for f, v in want.items():
        if _norm(f, v) != _norm(f, have.get(f, "")):
            out.append((f, have.get(f, ""), v))
    return out


def _set_args(changes: list[tuple[str, str, str]]) -> list[str]:
    args = []
    for f, old, new in changes:
        if f == "Preempt" and not new:
            args.append("Preempt=")
        elif f in ("GrpTRES", "MaxTRESPU", "MaxTRES") and not new:
            args.append(f"{f}={_clear_value(f, old)}")
        elif f in ("GrpTRES", "MaxTRESPU", "MaxTRES"):
            dropped = {kv.split("=")[0] for kv in old.split(",") if kv} - {kv.split("=")[0] for kv in new.split(",")}
            args.append(f"{f}=" + ",".join([new] + [f"{k}=-1" for k in sorted(dropped)]))
        else:
            args.append(f"{f}={new}")
    return args


def _modify(label: str, entity: str, where: list[str], fc: list[tuple[str, str, str]]) -> Change:
    """``sacctmgr modify ENTITY where ... set ...`` for field changes, with its summary line."""
    desc = ", ".join(f"{f}: {o or '-'} -> {n or '-'}" for f, o, n in fc)
    return Change(f"~ {label}: {desc}", ("modify", entity, "where", *where, "set", *_set_args(fc)))


def known_tres(slurm: SlurmClient) -> set[str]:
    """TRES slurmdbd knows, as limits name them (``cpu``, ``gres/gpu``, ``gres/gpu:TYPE``)."""
    return {
        f"{r['Type']}/{r['Name']}" if r["Name"] else r["Type"] for r in slurm.sacctmgr_show("tres", ["Type", "Name"])
    }


def _known_limits(fields: dict[str, str], known: set[str]) -> tuple[dict[str, str], list[str]]:
    """``fields`` without limits on TRES slurmdbd lacks, and those limits."""
    out, deferred = dict(fields), []
    for f in (f for f in TRES_LIMITS if f in fields):
        keep = []
        for kv in (x for x in fields.get(f, "").split(",") if x):
            if kv.split("=", 1)[0] in known:
                keep.append(kv)
            else:
                deferred.append(f"{f} {kv}")
        out[f] = ",".join(keep)
    return out, deferred


def site_priority(spec: PoolSpec, slurm: SlurmClient) -> int | None:
    """The highest Priority among the site's own QOS (None: the pool owns the cluster, nothing to keep).

    The site's QOS are those slurm-pool did not tag, but for an adopted tier
    whose Priority the spec hands to the pool.  A Priority that is not a number
    is reported and skipped.
    """
    if spec.coexist is None:
        return None
    ours = {q.name for q in spec.adopt.qos if "Priority" in q.fields}
    top = 0
    for r in slurm.sacctmgr_show("qos", ["Name", "Description", "Priority"]):
        if qos_ours(r) or r["Name"] in ours:
            continue
        if not re.fullmatch(r"[0-9]{1,10}", r["Priority"]):
            skipped(f"sacctmgr show qos: {r['Name']!r} has Priority {r['Priority'][:40]!r}, not a number")
            continue
        top = max(top, int(r["Priority"]))
    return top


def cluster_plan(spec: PoolSpec, slurm: SlurmClient) -> AccountingPlan:
    """The plan for this cluster: in a site's cluster, the tiers' priorities fitted beside the site's QOS."""
    top = site_priority(spec, slurm)
    return build_plan(spec, top, slurm.qos_priority_raw() if top is not None else False)


def diff(
    plan: AccountingPlan,
    slurm: SlurmClient,
    prune: bool = False,
    deferred: list[str] | None = None,
    notes: list[str] | None = None,
) -> list[Change]:
    """The changes that bring Slurm's accounting in line with ``plan``.

    Raises :class:`NameCollision` (one line per object) before computing any
    change when the plan names a QOS or account the site made and the spec
    does not adopt.  An adopted object gets only the fields it hands over.
    Lines about what is kept as it is are appended to ``notes``; limits on TRES
    slurmdbd does not know yet are left out and appended to ``deferred`` as
    ``"qos NAME: FIELD TRES=N"`` (see the module docstring).
    """
    notes = [] if notes is None else notes
    cluster = plan.cluster
    qos_have = {r["Name"]: r for r in slurm.sacctmgr_show("qos", QOS_FIELDS)}
    accts_have = _accounts(slurm)
    assoc_rows = slurm.sacctmgr_show("assoc", ASSOC_FIELDS, where=["where", f"cluster={cluster}"])
    assoc_have = {(r["Account"], r["User"]): r for r in assoc_rows}
    found = collisions(plan, qos_have, accts_have, assoc_have)
    if found:
        raise NameCollision(found)

    changes: list[Change] = []
    clusters = {r["Cluster"] for r in slurm.sacctmgr_show("cluster", ["Cluster"])}
    if cluster not in clusters:
        changes.append(Change(f"+ cluster {cluster}", ("add", "cluster", cluster)))
    tres = known_tres(slurm)
    preempt_later: list[Change] = []
    for q in plan.qos:
        have = qos_have.get(q.name)
        want = q.fields
        if have is None:
            changes.append(Change(f"+ qos {q.name}", ("add", "qos", q.name)))
            have = {}
        elif not qos_ours(have) and q.adopted is not None:
            want = untagged(want, q.adopted)
        fields, later = _known_limits(want, tres)
        if deferred is not None:
            deferred.extend(f"qos {q.name}: {d}" for d in later)
        direct = {k: v for k, v in fields.items() if k != "Preempt"}
        fc = _field_changes(direct, have)
        if fc:
            changes.append(_modify(f"qos {q.name}", "qos", [f"name={q.name}"], fc))
        pc = _field_changes({k: v for k, v in want.items() if k == "Preempt"}, have)
        if pc:
            preempt_later.append(_modify(f"qos {q.name}", "qos", [f"name={q.name}"], pc))
    changes.extend(preempt_later)

    managed: list[str] = []  # the plan's accounts slurm-pool keeps: its own (made now or before) and adopted ones
    site_accounts: dict[str, frozenset[str]] = {}  # adopted accounts the site made: the fields handed over
    for a in plan.accounts:
        acct = accts_have.get(a.name)
        want = a.fields
        if acct is None:
            changes.append(
                Change(
                    f"+ account {a.name}",
                    (
                        "add",
                        "account",
                        a.name,
                        f"Cluster={cluster}",
                        f"Description={a.fields['Description']}",
                        f"Organization={a.fields['Organization']}",
                    ),
                )
            )
        elif a.adopted is not None and (not account_ours(acct) or foreign_parent(assoc_have, a.name)):
            want = untagged(want, a.adopted)
            site_accounts[a.name] = a.adopted
        managed.append(a.name)
        if (
            acct is not None
            and "Description" in want
            and _norm("Descr", acct.get("Descr", "")) != _norm("Descr", want["Description"])
        ):
            changes.append(
                Change(
                    f"~ account {a.name}: Description",
                    ("modify", "account", "where", f"name={a.name}", "set", f"Description={want['Description']}"),
                )
            )
        have = assoc_have.get((a.name, ""), {})
        fc = _field_changes({k: want[k] for k in ("Fairshare", "QOS", "DefaultQOS") if k in want}, have)
        if fc:
            changes.append(_modify(f"account {a.name}", "account", [f"name={a.name}", f"cluster={cluster}"], fc))

    users_have = {r["User"]: r for r in slurm.sacctmgr_show("user", ["User", "DefaultAccount"])}
    changes.extend(_user_changes(plan, managed, site_accounts, users_have, assoc_have, notes))
    if prune:
        changes.extend(_prune(plan, qos_have, accts_have, assoc_have, managed, users_have, notes))
    return changes


def _user_changes(
    plan: AccountingPlan,
    managed: list[str],
    site_accounts: dict[str, frozenset[str]],
    users_have: dict[str, dict[str, str]],
    assoc_have: dict[tuple[str, str], dict[str, str]],
    notes: list[str],
) -> list[Change]:
    """Users' associations in the accounts slurm-pool keeps; default accounts of the users it creates.

    A user's default is their first such account in the spec's order, set when
    slurm-pool creates the user; a user who already exists keeps theirs.  In an
    adopted account of the site's (``site_accounts``), an association that
    exists keeps its QOS lists unless the account hands ``QOS``/``DefaultQOS`` over.
    """
    changes: list[Change] = []
    cluster = plan.cluster
    default_of: dict[str, str] = {}
    for u in plan.users:
        if u.account in managed:
            default_of.setdefault(u.name, u.account)
    created: set[str] = set()
    kept: set[str] = set()
    for u in plan.users:
        key = (u.account, u.name)
        wanted_default = default_of[u.name]
        if key not in assoc_have:
            argv = ["add", "user", u.name, f"Account={u.account}", f"Cluster={cluster}"]
            if u.name not in users_have:
                argv.append(f"DefaultAccount={wanted_default}")
                created.add(u.name)
            changes.append(Change(f"+ user {u.name} in {u.account}", tuple(argv)))
            users_have.setdefault(u.name, {"User": u.name, "DefaultAccount": wanted_default})
        have = assoc_have.get(key, {})
        allowed = site_accounts.get(u.account, frozenset(("QOS", "DefaultQOS"))) if key in assoc_have else None
        fc = _field_changes({k: u.fields[k] for k in ("QOS", "DefaultQOS") if allowed is None or k in allowed}, have)
        if fc:
            changes.append(
                _modify(
                    f"user {u.name} in {u.account}",
                    "user",
                    [f"name={u.name}", f"account={u.account}", f"cluster={cluster}"],
                    fc,
                )
            )
        cur_default = users_have.get(u.name, {}).get("DefaultAccount", "")
        if cur_default and cur_default != wanted_default and u.name not in created | kept:
            kept.add(u.name)
            notes.append(
                f"= user {u.name}: keeps DefaultAccount {cur_default} "
                f"(slurm-pool sets a default account only for a user it creates; the spec's first is {wanted_default})"
            )
    return changes


def _accounts(slurm: SlurmClient) -> dict[str, dict[str, str]]:
    """Each account's Descr and Org as slurmdbd has them.

    One free-text field per query, before the account's name: a "|" or a line
    break a human put in either stays in its field (see ``parsable_rows``), so
    the ownership tag in Org is read from the right column.  But a "|" in an
    account's *name* (``x|proja``) lands in the free-text field too, and the row
    then names another account: a name listed twice is read as no one's tag
    (left alone and reported), never as whichever row came last.
    """
    have: dict[str, dict[str, str]] = {}
    for field in ("Descr", "Org"):
        seen: set[str] = set()
        for r in slurm.sacctmgr_show("account", [field, "Account"]):
            name = r["Account"]
            row = have.setdefault(name, {"Account": name})
            if name in seen:
                skipped(f"sacctmgr show account: {name!r} is listed twice (a '|' in another account's name)")
                row[field] = "(listed twice)"
                continue
            seen.add(name)
            row[field] = r[field]
    return have


def read_accounts(slurm: SlurmClient) -> dict[str, dict[str, str]]:
    """Each account's ``Descr`` and ``Org`` as slurmdbd has them (a name listed twice is no one's tag)."""
    return _accounts(slurm)


def _listed(value: str) -> set[str]:
    return {x for x in value.split(",") if x}


def _prune(
    plan: AccountingPlan,
    qos_have: dict[str, dict[str, str]],
    accts_have: dict[str, dict[str, str]],
    assoc_have: dict[tuple[str, str], dict[str, str]],
    managed: list[str],
    users_have: dict[str, dict[str, str]],
    notes: list[str],
) -> list[Change]:
    """Deletions of slurm-pool's own objects the plan no longer has; nothing else is ever deleted.

    A QOS of slurm-pool's that a site's association or QOS still names is kept
    (deleting it would edit theirs: slurmdbd drops a deleted QOS from every list).
    A user's association with their default account is kept, and so is an
    account that is someone's default: the default account is the site's to move.
    """
    out: list[Change] = []
    ours = pool_accounts(accts_have, assoc_have)
    wanted_users = {(u.account, u.name) for u in plan.users}
    default_of = {u: r.get("DefaultAccount", "") for u, r in users_have.items()}
    kept_accounts: set[str] = set()
    for acct, user in sorted(assoc_have):
        if user and acct in ours and (acct, user) not in wanted_users:
            if default_of.get(user) == acct:
                kept_accounts.add(acct)
                notes.append(
                    f"= user {user} in {acct}: no longer in the spec, but kept: it is the user's default account "
                    f"(move it with `sacctmgr modify user {user} set DefaultAccount=...`, then prune again)"
                )
                continue
            out.append(
                Change(
                    f"- user {user} from {acct}",
                    ("delete", "user", "where", f"name={user}", f"account={acct}", f"cluster={plan.cluster}"),
                )
            )
    for name in sorted(ours - {a.name for a in plan.accounts}):
        if name in kept_accounts or name in default_of.values():
            notes.append(f"= account {name}: slurm-pool's and no longer in the spec, but kept: a user's default")
            continue
        out.append(Change(f"- account {name}", ("delete", "account", "where", f"name={name}")))
    # an adopted account's own QOS lists stay the site's unless both are handed over
    own = {a.name for a in plan.accounts if a.adopted is None or {"QOS", "DefaultQOS"} <= a.adopted}
    planned = {(a, "") for a in managed if a in own} | {(u.account, u.name) for u in plan.users if u.account in managed}
    users: dict[str, set[str]] = {}
    for (acct, user), r in assoc_have.items():
        if acct not in ours and (acct, user) not in planned:
            for q in _listed(r.get("QOS", "")) | _listed(r.get("DefaultQOS", "")):
                users.setdefault(q, set()).add(f"account {acct}" + (f" user {user}" if user else ""))
    adopted = {q.name for q in plan.qos if q.adopted is not None and "Preempt" in q.adopted}
    for name, r in qos_have.items():
        if not qos_ours(r) and name not in adopted:
            for q in _listed(r.get("Preempt", "")):
                users.setdefault(q, set()).add(f"qos {name}")
    for name, r in sorted(qos_have.items()):
        if qos_ours(r) and name not in {q.name for q in plan.qos}:
            if name in users:
                notes.append(
                    f"= qos {name}: slurm-pool's and no longer in the spec, but kept: "
                    f"the site's {', '.join(sorted(users[name]))} still name it"
                )
                continue
            out.append(Change(f"- qos {name}", ("delete", "qos", "where", f"name={name}")))
    return out


def apply_accounting(
    spec: PoolSpec,
    slurm: SlurmClient,
    *,
    prune: bool = False,
    dry_run: bool = False,
    echo: Callable[[str], None] = print,
    progress: Callable[[int, int], None] | None = None,
) -> list[Change]:
    """Print and (unless ``dry_run``) apply the accounting diff; return it.  ``progress(applied, of)`` after
    each sacctmgr change.

    Raises :class:`NameCollision` before any change when the spec names a site's object it does not adopt.
    """
    plan = cluster_plan(spec, slurm)
    deferred: list[str] = []
    notes: list[str] = list(plan.notes)
    changes = diff(plan, slurm, prune=prune, deferred=deferred, notes=notes)
    for n in notes:
        echo(n)
    for d in deferred:
        echo(
            f"! {d}: deferred, slurmdbd has no such TRES yet (slurmctld registers it when it starts; "
            "run `slurm-pool apply accounting` again then)"
        )
    if not changes:
        echo("accounting: no changes")
        return []
    for c in changes:
        echo(c.summary)
    if not dry_run:
        for done, c in enumerate(changes):
            try:
                slurm.sacctmgr(*c.argv)
            except CommandError:
                echo(f"accounting: {done} of {len(changes)} change(s) applied; this one failed: {c.summary}")
                for rest in changes[done + 1 :]:
                    echo(f"  not applied: {rest.summary}")
                echo(
                    "accounting: run `slurm-pool apply accounting` again once the cause is fixed; it resumes from here"
                )
                raise
            if progress is not None:
                progress(done + 1, len(changes))
        echo(f"accounting: applied {len(changes)} change(s)")
    else:
        echo(f"accounting: {len(changes)} change(s) (dry run, nothing applied)")
    return changes
