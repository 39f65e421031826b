"""Sync accounting objects through sacctmgr: diff first, then apply the diff.

Assert, then apply: the current state is read, the difference against the
plan is computed as a list of :class:`Change`, printed, and only then run.  A
second run finds nothing to change and issues no sacctmgr modification.
Objects slurm-pool did not create are never removed unless ``prune`` is set,
and even then only objects carrying the ``slurm-pool`` tag.

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

from slurm_pool.accounting.plan import OWNER_TAG, AccountingPlan, build_plan
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
ASSOC_FIELDS = ["Account", "User", "Fairshare", "QOS", "DefaultQOS"]
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


def diff(
    plan: AccountingPlan, slurm: SlurmClient, prune: bool = False, deferred: list[str] | None = None
) -> list[Change]:
    """The changes that bring Slurm's accounting in line with ``plan``.

    Limits on TRES slurmdbd does not know yet are left out and appended to
    ``deferred`` as ``"qos NAME: FIELD TRES=N"`` (see the module docstring).
    """
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
        if have is None:
            changes.append(Change(f"+ qos {q.name}", ("add", "qos", q.name)))
            have = {}
        fields, later = _known_limits(q.fields, tres)
        if deferred is not None:
            deferred.extend(f"qos {q.name}: {d}" for d in later)
        direct = {k: v for k, v in fields.items() if k != "Preempt"}
        fc = _field_changes(direct, have)
        if fc:
            changes.append(_modify(f"qos {q.name}", "qos", [f"name={q.name}"], fc))
        pc = _field_changes({"Preempt": q.fields["Preempt"]}, have)
        if pc:
            preempt_later.append(_modify(f"qos {q.name}", "qos", [f"name={q.name}"], pc))
    changes.extend(preempt_later)

    accts_have = _accounts(slurm)
    assoc_rows = slurm.sacctmgr_show("assoc", ASSOC_FIELDS, where=["where", f"cluster={cluster}"])
    assoc_have = {(r["Account"], r["User"]): r for r in assoc_rows}
    for a in plan.accounts:
        if a.name not in accts_have:
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
        elif _norm("Descr", accts_have[a.name].get("Descr", "")) != _norm("Descr", a.fields["Description"]):
            changes.append(
                Change(
                    f"~ account {a.name}: Description",
                    ("modify", "account", "where", f"name={a.name}", "set", f"Description={a.fields['Description']}"),
                )
            )
        have = assoc_have.get((a.name, ""), {})
        want = {k: a.fields[k] for k in ("Fairshare", "QOS", "DefaultQOS")}
        fc = _field_changes(want, have)
        if fc:
            changes.append(_modify(f"account {a.name}", "account", [f"name={a.name}", f"cluster={cluster}"], fc))

    users_have = {r["User"]: r for r in slurm.sacctmgr_show("user", ["User", "DefaultAccount"])}
    for u in plan.users:
        key = (u.account, u.name)
        if key not in assoc_have:
            argv = ["add", "user", u.name, f"Account={u.account}", f"Cluster={cluster}"]
            if u.name not in users_have:
                argv.append(f"DefaultAccount={u.fields['DefaultAccount']}")
            changes.append(Change(f"+ user {u.name} in {u.account}", tuple(argv)))
            users_have.setdefault(u.name, {"User": u.name, "DefaultAccount": u.fields["DefaultAccount"]})
        have = assoc_have.get(key, {})
        want = {k: u.fields[k] for k in ("QOS", "DefaultQOS")}
        fc = _field_changes(want, have)
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
        if cur_default and cur_default != u.fields["DefaultAccount"] and key in assoc_have:
            changes.append(
                Change(
                    f"~ user {u.name}: DefaultAccount: {cur_default} -> {u.fields['DefaultAccount']}",
                    (
                        "modify",
                        "user",
                        "where",
                        f"name={u.name}",
                        "set",
                        f"DefaultAccount={u.fields['DefaultAccount']}",
                    ),
                )
            )
            users_have[u.name]["DefaultAccount"] = u.fields["DefaultAccount"]

    if prune:
        changes.extend(_prune(plan, qos_have, accts_have, assoc_have))
    return changes


def _accounts(slurm: SlurmClient) -> dict[str, dict[str, str]]:
    """Each account's Descr and Org as slurmdbd has them.

    One free-text field per query, before the account's name: a "|" or a line
    break a human put in either stays in its field (see ``parsable_rows``), so
    the ownership tag in Org is read from the right column.
    """
    have: dict[str, dict[str, str]] = {}
    for field in ("Descr", "Org"):
        for r in slurm.sacctmgr_show("account", [field, "Account"]):
            have.setdefault(r["Account"], {"Account": r["Account"]})[field] = r[field]
    return have


def _prune(plan: AccountingPlan, qos_have: dict, accts_have: dict, assoc_have: dict) -> list[Change]:
    out: list[Change] = []
    ours = {name for name, r in accts_have.items() if r.get("Org") == OWNER_TAG}
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
    for name, r in sorted(qos_have.items()):
        if r.get("Description", "").startswith(OWNER_TAG) and name not in {q.name for q in plan.qos}:
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
    changes = diff(plan, slurm, prune=prune, deferred=deferred)
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
