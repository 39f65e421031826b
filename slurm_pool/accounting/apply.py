"""Sync accounting objects through sacctmgr: diff first, then apply the diff.

Assert, then apply: the current state is read, the difference against the
plan is computed as a list of :class:`Change`, printed, and only then run.  A
second run finds nothing to change and issues no sacctmgr modification.
Adopt, never seize: only objects slurm-pool created (an account with
``Organization=slurm-pool``, a QOS whose description starts ``slurm-pool``) or
that the spec's ``adopt`` section names are changed; any other existing account
or QOS under a project's or tier's name is reported (``= ...``) and left
exactly as it is, with no pool user added to such an account -- also one that
carries the tag under another parent than the pool's (``root``): whoever may
make accounts under a site's account may tag one too -- and a user's
existing default account that is not slurm-pool's is kept.  ``prune`` removes
only tagged objects (an adopted one is never tagged), never a QOS a site's
object still names.

QOS come before slurmctld: from Slurm 25.11 slurmctld will not start while a
partition's AllowQOS names a QOS slurmdbd lacks.  But a limit on a TRES such
as ``gres/gpu`` can only be set once slurmctld has registered that TRES (from
``AccountingStorageTRES``) with slurmdbd.  So a limit naming a TRES slurmdbd
does not know yet is *deferred*: reported, left out of this run, and set by
the next run after slurmctld has started -- the bootstrap is
``apply accounting`` -> start slurmctld -> ``apply accounting``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from slurm_pool.accounting.plan import OWNER_TAG, AccountingPlan, build_plan, untagged
from slurm_pool.adapters.records import skipped
from slurm_pool.adapters.runner import CommandError
from slurm_pool.adapters.slurm import SlurmClient
from slurm_pool.adapters.slurmjson import parse_duration
from slurm_pool.spec.model import PoolSpec

QOS_FIELDS = [
    "Name",
    "Description",
    "Priority",
    "Preempt",
    "PreemptMode",
    "GraceTime",
    "UsageFactor",
    "GrpTRES",
    "MaxTRESPU",
    "MaxTRES",
]
ASSOC_FIELDS = ["Account", "User", "Fairshare", "QOS", "DefaultQOS", "ParentName"]
#: The parent of every account slurm-pool makes (``sacctmgr add account`` with no parent).
POOL_PARENT = "root"
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
    for f in TRES_LIMITS:
        keep = []
        for kv in (x for x in fields.get(f, "").split(",") if x):
            if kv.split("=", 1)[0] in known:
                keep.append(kv)
            else:
                deferred.append(f"{f} {kv}")
        out[f] = ",".join(keep)
    return out, deferred


def qos_ours(row: dict[str, str]) -> bool:
    """Whether a QOS as ``sacctmgr show qos`` reports it carries slurm-pool's tag (it created it)."""
    desc = row.get("Description", "").strip().lower()
    return desc == OWNER_TAG or desc.startswith(f"{OWNER_TAG}:")


def account_ours(row: dict[str, str]) -> bool:
    """Whether an account carries slurm-pool's tag (``Organization=slurm-pool``: it created it)."""
    return row.get("Org", "").strip().lower() == OWNER_TAG


def _not_ours(kind: str, name: str, more: str = "", why: str = "exists and is not slurm-pool's") -> str:
    return (
        f"= {kind} {name}: {why}; left as it is{more} "
        f"(adopt it in the spec's adopt.{'qos' if kind == 'qos' else 'accounts'} to manage it)"
    )


def pool_accounts(accts_have: dict[str, dict[str, str]], assoc_have: dict[tuple[str, str], dict[str, str]]) -> set[str]:
    """The accounts slurm-pool made: tagged, under the pool's parent."""
    return {name for name, r in accts_have.items() if account_ours(r) and not foreign_parent(assoc_have, name)}


def foreign_parent(assoc_have: dict[tuple[str, str], dict[str, str]], name: str) -> str:
    """The parent of account ``name`` on this cluster when it is not the pool's (``""``: the pool's, or unknown)."""
    parent = assoc_have.get((name, ""), {}).get("ParentName", "").strip()
    return parent if parent and parent != POOL_PARENT else ""


def diff(
    plan: AccountingPlan,
    slurm: SlurmClient,
    prune: bool = False,
    deferred: list[str] | None = None,
    notes: list[str] | None = None,
) -> list[Change]:
    """The changes that bring Slurm's accounting in line with ``plan``.

    Only objects slurm-pool created (tagged) or the plan adopts are changed; an
    existing one of neither kind is left exactly as it is and a line saying so
    is appended to ``notes`` (as is a pre-existing user's default account that
    is kept).  Limits on TRES slurmdbd does not know yet are left out and
    appended to ``deferred`` as ``"qos NAME: FIELD TRES=N"`` (see the module
    docstring).
    """
    notes = [] if notes is None else notes
    changes: list[Change] = []
    cluster = plan.cluster
    clusters = {r["Cluster"] for r in slurm.sacctmgr_show("cluster", ["Cluster"])}
    if cluster not in clusters:
        changes.append(Change(f"+ cluster {cluster}", ("add", "cluster", cluster)))

    qos_have = {r["Name"]: r for r in slurm.sacctmgr_show("qos", QOS_FIELDS)}
    tres = known_tres(slurm)
    preempt_later: list[Change] = []
    for q in plan.qos:
        have = qos_have.get(q.name)
        want = q.fields
        if have is None:
            changes.append(Change(f"+ qos {q.name}", ("add", "qos", q.name)))
            have = {}
        elif not qos_ours(have):
            if not q.adopted:
                notes.append(_not_ours("qos", q.name))
                continue
            want = untagged(want)
        fields, later = _known_limits(want, tres)
        if deferred is not None:
            deferred.extend(f"qos {q.name}: {d}" for d in later)
        direct = {k: v for k, v in fields.items() if k != "Preempt"}
        fc = _field_changes(direct, have)
        if fc:
            changes.append(_modify(f"qos {q.name}", "qos", [f"name={q.name}"], fc))
        pc = _field_changes({"Preempt": want["Preempt"]}, have)
        if pc:
            preempt_later.append(_modify(f"qos {q.name}", "qos", [f"name={q.name}"], pc))
    changes.extend(preempt_later)

    accts_have = _accounts(slurm)
    assoc_rows = slurm.sacctmgr_show("assoc", ASSOC_FIELDS, where=["where", f"cluster={cluster}"])
    assoc_have = {(r["Account"], r["User"]): r for r in assoc_rows}
    managed: list[str] = []  # the plan's accounts slurm-pool keeps: its own (made now or before) and adopted ones
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
        elif not account_ours(acct) or foreign_parent(assoc_have, a.name):
            if not a.adopted:
                parent = foreign_parent(assoc_have, a.name)
                why = f"carries slurm-pool's tag under the site's account {parent}" if account_ours(acct) else ""
                notes.append(_not_ours("account", a.name, ", and no pool user is added to it", *([why] if why else [])))
                continue
            want = untagged(want)
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
        fc = _field_changes({k: want[k] for k in ("Fairshare", "QOS", "DefaultQOS")}, have)
        if fc:
            changes.append(_modify(f"account {a.name}", "account", [f"name={a.name}", f"cluster={cluster}"], fc))

    changes.extend(_user_changes(plan, slurm, managed, accts_have, assoc_have, notes))
    if prune:
        changes.extend(_prune(plan, qos_have, accts_have, assoc_have, managed, notes))
    return changes


def _user_changes(
    plan: AccountingPlan,
    slurm: SlurmClient,
    managed: list[str],
    accts_have: dict[str, dict[str, str]],
    assoc_have: dict[tuple[str, str], dict[str, str]],
    notes: list[str],
) -> list[Change]:
    """Users' associations in the accounts slurm-pool keeps, and their default accounts.

    A user's default is their first such account in the spec's order; a user who
    already had a default account that is not slurm-pool's keeps it.
    """
    changes: list[Change] = []
    cluster = plan.cluster
    pools = set(managed) | pool_accounts(accts_have, assoc_have)
    default_of: dict[str, str] = {}
    for u in plan.users:
        if u.account in managed:
            default_of.setdefault(u.name, u.account)
    users_have = {r["User"]: r for r in slurm.sacctmgr_show("user", ["User", "DefaultAccount"])}
    kept: set[str] = set()
    for u in plan.users:
        key = (u.account, u.name)
        if u.account not in managed:
            if key not in assoc_have:
                notes.append(f"= user {u.name} in {u.account}: not added, the account is not slurm-pool's")
            continue
        wanted_default = default_of[u.name]
        if key not in assoc_have:
            argv = ["add", "user", u.name, f"Account={u.account}", f"Cluster={cluster}"]
            if u.name not in users_have:
                argv.append(f"DefaultAccount={wanted_default}")
            changes.append(Change(f"+ user {u.name} in {u.account}", tuple(argv)))
            users_have.setdefault(u.name, {"User": u.name, "DefaultAccount": wanted_default})
        have = assoc_have.get(key, {})
        fc = _field_changes({k: u.fields[k] for k in ("QOS", "DefaultQOS")}, have)
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
        if not cur_default or cur_default == wanted_default:
            continue
        if cur_default not in pools:
            if u.name not in kept:
                kept.add(u.name)
                notes.append(f"= user {u.name}: keeps DefaultAccount {cur_default}, which is not slurm-pool's")
        elif key in assoc_have:
            changes.append(
                Change(
                    f"~ user {u.name}: DefaultAccount: {cur_default} -> {wanted_default}",
                    ("modify", "user", "where", f"name={u.name}", "set", f"DefaultAccount={wanted_default}"),
                )
            )
            users_have[u.name]["DefaultAccount"] = wanted_default
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


def _listed(value: str) -> set[str]:
    return {x for x in value.split(",") if x}


def _prune(
    plan: AccountingPlan,
    qos_have: dict[str, dict[str, str]],
    accts_have: dict[str, dict[str, str]],
    assoc_have: dict[tuple[str, str], dict[str, str]],
    managed: list[str],
    notes: list[str],
) -> list[Change]:
    """Deletions of slurm-pool's own objects the plan no longer has; nothing else is ever deleted.

    A QOS of slurm-pool's that a site's association or QOS still names is kept
    (deleting it would edit theirs: slurmdbd drops a deleted QOS from every list).
    """
    out: list[Change] = []
    ours = pool_accounts(accts_have, assoc_have)
    wanted_users = {(u.account, u.name) for u in plan.users}
    for acct, user in sorted(assoc_have):
        if user and acct in ours and (acct, user) not in wanted_users:
            out.append(
                Change(
                    f"- user {user} from {acct}",
                    ("delete", "user", "where", f"name={user}", f"account={acct}", f"cluster={plan.cluster}"),
                )
            )
    for name in sorted(ours - {a.name for a in plan.accounts}):
        out.append(Change(f"- account {name}", ("delete", "account", "where", f"name={name}")))
    planned = {(a, "") for a in managed} | {(u.account, u.name) for u in plan.users if u.account in managed}
    users: dict[str, set[str]] = {}
    for (acct, user), r in assoc_have.items():
        if acct not in ours and (acct, user) not in planned:
            for q in _listed(r.get("QOS", "")) | _listed(r.get("DefaultQOS", "")):
                users.setdefault(q, set()).add(f"account {acct}" + (f" user {user}" if user else ""))
    adopted = {q.name for q in plan.qos if q.adopted}
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
) -> list[Change]:
    """Print and (unless ``dry_run``) apply the accounting diff; return it."""
    plan = build_plan(spec)
    deferred: list[str] = []
    notes: list[str] = []
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
        echo(f"accounting: applied {len(changes)} change(s)")
    else:
        echo(f"accounting: {len(changes)} change(s) (dry run, nothing applied)")
    return changes
