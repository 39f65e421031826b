"""Which accounting objects are slurm-pool's, and the names the spec shares with the site's.  Pure.

Names are owned: every QOS and account the plan names is either slurm-pool's
(it created it and tagged it: a QOS whose description starts ``slurm-pool``,
an account with ``Organization=slurm-pool`` under ``root``), adopted in the
spec's ``adopt`` section, absent, or a collision.  A collision is an error
(:class:`NameCollision`, exit 2) raised before anything is changed: otherwise
the pool would silently run its tier on the site's QOS, with the site's
PreemptMode and GraceTime.
"""

from __future__ import annotations

from slurm_pool.accounting.plan import OWNER_TAG, AccountingPlan
from slurm_pool.errors import InputError
from slurm_pool.spec.adopt import ACCOUNT_FIELDS, QOS_FIELDS

#: The parent of every account slurm-pool makes (``sacctmgr add account`` with no parent).
POOL_PARENT = "root"


class NameCollision(InputError):
    """The spec names QOS or accounts the site made and the spec does not adopt.  Exit status 2."""

    def __init__(self, found: list[tuple[str, str]]):
        #: (the object and what is wrong with it, both ways out) per collision.
        self.collisions = list(found)
        super().__init__("\n".join(f"{what}; {ways}" for what, ways in found))


def qos_ours(row: dict[str, str]) -> bool:
    """Whether a QOS as ``sacctmgr show qos`` reports it carries slurm-pool's tag (it created it)."""
    desc = row.get("Description", "").strip().lower()
    return desc == OWNER_TAG or desc.startswith(f"{OWNER_TAG}:")


def account_ours(row: dict[str, str]) -> bool:
    """Whether an account carries slurm-pool's tag (``Organization=slurm-pool``: it created it)."""
    return row.get("Org", "").strip().lower() == OWNER_TAG


def foreign_parent(assoc_have: dict[tuple[str, str], dict[str, str]], name: str) -> str:
    """The parent of account ``name`` on this cluster when it is not the pool's (``""``: the pool's, or unknown)."""
    parent = assoc_have.get((name, ""), {}).get("ParentName", "").strip()
    return parent if parent and parent != POOL_PARENT else ""


def pool_accounts(accts_have: dict[str, dict[str, str]], assoc_have: dict[tuple[str, str], dict[str, str]]) -> set[str]:
    """The accounts slurm-pool made: tagged, under the pool's parent."""
    return {name for name, r in accts_have.items() if account_ours(r) and not foreign_parent(assoc_have, name)}


def collisions(
    plan: AccountingPlan,
    qos_have: dict[str, dict[str, str]],
    accts_have: dict[str, dict[str, str]],
    assoc_have: dict[tuple[str, str], dict[str, str]],
) -> list[tuple[str, str]]:
    """(what, ways out) per QOS or account the plan names that exists, is not slurm-pool's and is not adopted.

    A tier's QOS can be adopted; a guarantee's can only be renamed.
    """
    out = []
    for q in plan.qos:
        have = qos_have.get(q.name)
        if have is None or qos_ours(have) or q.adopted is not None:
            continue
        if q.tier:
            way = (
                f"rename the tier {q.name!r} in the spec, or adopt the site's QOS in the spec: "
                f"adopt: {{qos: [{{name: {q.name}, fields: [...]}}]}}, naming the fields the pool may set "
                f"(of {', '.join(QOS_FIELDS)}; the others stay the site's)"
            )
        else:
            way = "rename the tier or the project whose guarantee it is"
        out.append((f"qos {q.name}: exists in slurmdbd and slurm-pool did not create it", way))
    for a in plan.accounts:
        acct = accts_have.get(a.name)
        if acct is None or a.adopted is not None:
            continue
        parent = foreign_parent(assoc_have, a.name)
        if account_ours(acct) and not parent:
            continue
        what = (
            f"carries slurm-pool's tag under the site's account {parent}"
            if account_ours(acct)
            else "exists in slurmdbd and slurm-pool did not create it"
        )
        out.append(
            (
                f"account {a.name}: {what}",
                f"rename the project {a.name!r} in the spec, or adopt the site's account in the spec: "
                f"adopt: {{accounts: [{{name: {a.name}, fields: [...]}}]}}, naming the fields the pool may set "
                f"(of {', '.join(ACCOUNT_FIELDS)}; fields: [] only adds the pool's users)",
            )
        )
    return out
