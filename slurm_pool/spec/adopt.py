"""The adopt section of the spec: a site's own accounts and QOS the pool takes over.

``slurm-pool apply accounting`` changes and prunes only what slurm-pool created
(an account with ``Organization=slurm-pool``, a QOS whose description starts
``slurm-pool``).  An account or QOS that already exists under a project's or a
tier's name is the site's: it is reported and left as it is, unless listed
here.  An adopted object is then kept as the spec says (limits, fairshare, QOS
lists, users' associations) but never tagged as slurm-pool's, so ``--prune``
never deletes it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

from slurm_pool.errors import Issue
from slurm_pool.spec.base import Name, Strict

if TYPE_CHECKING:
    from slurm_pool.spec.model import PoolSpec


class Adopt(Strict):
    """Names of pre-existing objects the spec manages although slurm-pool did not create them."""

    #: Existing Slurm accounts, each the name of one of the spec's projects.
    accounts: list[Name] = []
    #: Existing QOS, each the name of one of the spec's tiers.
    qos: list[Name] = []


def check_adopt(spec: PoolSpec) -> Iterator[Issue]:
    """Each adopted name must be a project (accounts) or a tier (qos) of the spec, listed once."""
    lists = (
        ("accounts", spec.adopt.accounts, [p.name for p in spec.projects], "project"),
        ("qos", spec.adopt.qos, [t.name for t in spec.tiers], "tier"),
    )
    for field, names, known, what in lists:
        seen: set[str] = set()
        for i, name in enumerate(names):
            if name in seen:
                yield Issue(f"adopt.{field}[{i}]", f"{name!r} is listed twice")
            elif name not in known:
                yield Issue(
                    f"adopt.{field}[{i}]",
                    f"{name!r} is not a {what} of this spec (known: {', '.join(sorted(known))}); "
                    f"only a {what}'s own name can be adopted",
                )
            seen.add(name)
