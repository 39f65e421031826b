"""The adopt section of the spec: a site's own accounts and QOS the pool takes over, field by field.

Names are owned.  Every QOS and account the spec names is either slurm-pool's
(it created it: an account with ``Organization=slurm-pool``, a QOS whose
description starts ``slurm-pool``), adopted here, or an error: ``apply
accounting``, ``doctor`` and ``diff`` refuse a spec whose tier or project is
named like an object the site made.  An adopted object names the fields the
pool may set; every other field stays the site's, and it is never tagged as
slurm-pool's, so ``--prune`` never deletes it::

    adopt:
      qos: [{name: scavenger, fields: [GraceTime, PreemptMode]}]
      accounts: [{name: physics, fields: []}]   # the pool's users are added, nothing else changes
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterator, Literal

from pydantic import field_validator

from slurm_pool.errors import Issue
from slurm_pool.spec.base import Name, Strict

if TYPE_CHECKING:
    from slurm_pool.spec.model import PoolSpec

#: The fields of a QOS the pool's plan sets (sacctmgr's names): the only ones an adopted QOS may hand over.
QOS_FIELDS = (
    "Description",
    "Priority",
    "Preempt",
    "PreemptMode",
    "GraceTime",
    "UsageFactor",
    "GrpTRES",
    "MaxTRESPU",
    "MaxTRES",
)
#: The fields of an account (its own association) the pool's plan sets.
ACCOUNT_FIELDS = ("Description", "Fairshare", "QOS", "DefaultQOS")

QosField = Literal[
    "Description", "Priority", "Preempt", "PreemptMode", "GraceTime", "UsageFactor", "GrpTRES", "MaxTRESPU", "MaxTRES"
]
AccountField = Literal["Description", "Fairshare", "QOS", "DefaultQOS"]


def _named(kind: str, fields: tuple[str, ...]) -> Any:
    """A before-validator: a bare name (the old form) is refused with the form that replaces it."""

    def check(v: Any) -> Any:
        if isinstance(v, list):
            for item in v:
                if isinstance(item, str):
                    raise ValueError(
                        f"{item!r}: an adopted {kind} names the fields the pool may set; write "
                        f"{{name: {item}, fields: [...]}} with fields among {', '.join(fields)} "
                        "(fields: [] sets none)"
                    )
        return v

    return check


class AdoptedQos(Strict):
    """A QOS the site made, used as a tier: the pool sets ``fields`` only."""

    name: Name
    fields: list[QosField]


class AdoptedAccount(Strict):
    """An account the site made, used as a project: the pool sets ``fields`` only and adds its users."""

    name: Name
    fields: list[AccountField]


class Adopt(Strict):
    """Pre-existing objects the spec uses although slurm-pool did not create them, and what it may set in them."""

    #: Existing Slurm accounts, each the name of one of the spec's projects.
    accounts: list[AdoptedAccount] = []
    #: Existing QOS, each the name of one of the spec's tiers.
    qos: list[AdoptedQos] = []

    _accounts_named = field_validator("accounts", mode="before")(_named("account", ACCOUNT_FIELDS))
    _qos_named = field_validator("qos", mode="before")(_named("QOS", QOS_FIELDS))

    def qos_fields(self, name: str) -> frozenset[str] | None:
        """The fields the pool may set in QOS ``name`` (None: not adopted)."""
        return next((frozenset(q.fields) for q in self.qos if q.name == name), None)

    def account_fields(self, name: str) -> frozenset[str] | None:
        """The fields the pool may set in account ``name`` (None: not adopted)."""
        return next((frozenset(a.fields) for a in self.accounts if a.name == name), None)


def check_adopt(spec: PoolSpec) -> Iterator[Issue]:
    """Each adopted name must be a project (accounts) or a tier (qos) of the spec, listed once; no field twice."""
    lists: list[tuple[str, list[tuple[str, list[str]]], list[str], str]] = [
        (
            "accounts",
            [(a.name, list(a.fields)) for a in spec.adopt.accounts],
            [p.name for p in spec.projects],
            "project",
        ),
        ("qos", [(q.name, list(q.fields)) for q in spec.adopt.qos], [t.name for t in spec.tiers], "tier"),
    ]
    for kind, entries, known, what in lists:
        seen: set[str] = set()
        for i, (name, fields) in enumerate(entries):
            if name in seen:
                yield Issue(f"adopt.{kind}[{i}].name", f"{name!r} is listed twice")
            elif name not in known:
                yield Issue(
                    f"adopt.{kind}[{i}].name",
                    f"{name!r} is not a {what} of this spec (known: {', '.join(sorted(known))}); "
                    f"only a {what}'s own name can be adopted",
                )
            seen.add(name)
            for j, f in enumerate(fields):
                if f in fields[:j]:
                    yield Issue(f"adopt.{kind}[{i}].fields[{j}]", f"{f!r} is listed twice")
