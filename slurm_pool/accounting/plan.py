"""The desired accounting state, derived from the spec.  Pure.

Everything is expressed as sacctmgr field values (strings), so the diff
against what ``sacctmgr show -P`` reports is a plain string comparison.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from slurm_pool.accounting.priority import fit_priorities
from slurm_pool.spec.guarantees import floating_projects, guarantee_qos
from slurm_pool.spec.model import PoolSpec, Project, Tier
from slurm_pool.spec.ranges import USAGE_FACTOR_DECIMALS

#: Marker written into descriptions of objects slurm-pool creates, so that
#: ``--prune`` removes only those.
OWNER_TAG = "slurm-pool"


def untagged(fields: dict[str, str], allowed: frozenset[str]) -> dict[str, str]:
    """The fields of an adopted object the site created that the spec's ``adopt`` entry hands over.

    slurm-pool's tag is never written into it: a named Description becomes the
    spec's own text where the spec has one, else stays the site's.
    """
    out = {k: v for k, v in fields.items() if k in allowed and k not in ("Description", "Organization")}
    desc = fields.get("Description", "")
    if "Description" in allowed and desc.startswith(f"{OWNER_TAG}: "):
        out["Description"] = desc[len(OWNER_TAG) + 2 :]
    return out


def _tres(d: dict[str, int]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(d.items()))


@dataclass(frozen=True)
class QosPlan:
    name: str
    fields: dict[str, str]
    #: Listed in the spec's ``adopt.qos``: the fields the pool may set where the site created it (None: not adopted).
    adopted: frozenset[str] | None = None
    #: A tier's QOS (which the spec may adopt), not a guarantee's.
    tier: bool = True


@dataclass(frozen=True)
class AccountPlan:
    name: str
    fields: dict[str, str]
    #: Listed in the spec's ``adopt.accounts``: the fields the pool may set where the site created it.
    adopted: frozenset[str] | None = None


@dataclass(frozen=True)
class UserPlan:
    name: str
    account: str
    fields: dict[str, str]


@dataclass(frozen=True)
class AccountingPlan:
    cluster: str
    qos: list[QosPlan] = field(default_factory=list)
    accounts: list[AccountPlan] = field(default_factory=list)
    users: list[UserPlan] = field(default_factory=list)
    #: What the plan changed of the spec to keep the site's jobs as they were (one line each).
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, object]:
        def adopted(fields: frozenset[str] | None) -> dict[str, object]:
            return {} if fields is None else {"adopted": sorted(fields)}

        return {
            "cluster": self.cluster,
            "qos": [{"name": q.name, **q.fields, **adopted(q.adopted)} for q in self.qos],
            "accounts": [{"name": a.name, **a.fields, **adopted(a.adopted)} for a in self.accounts],
            "users": [{"name": u.name, "account": u.account, **u.fields} for u in self.users],
        }


def _qos_fields(tier: Tier, priority: int | None = None) -> dict[str, str]:
    desc = f"{OWNER_TAG}: {tier.description}" if tier.description else OWNER_TAG
    return {
        "Description": desc,
        "Priority": str(tier.priority if priority is None else priority),
        "Preempt": ",".join(sorted(tier.preempt)),
        "PreemptMode": tier.preempt_mode.upper() if tier.preempt_mode != "off" else "OFF",
        "GraceTime": str(tier.grace_time),
        "UsageFactor": f"{tier.usage_factor:.{USAGE_FACTOR_DECIMALS}f}",  # as sacctmgr prints it
        "GrpTRES": _tres(tier.grp_tres),
        "MaxTRESPU": _tres(tier.max_tres_per_user),
        # The hard per-job GPU limit behind job_submit.lua's friendlier check.
        "MaxTRES": _tres({"gres/gpu": tier.policy.max_gpus_per_job} if tier.policy.max_gpus_per_job else {}),
    }


def guarantee_qos_plans(spec: PoolSpec, priorities: dict[str, int] | None = None) -> list[QosPlan]:
    """One QOS per project with a guarantee: the guarantees' tier's fields, ``GrpTRES`` = the guarantee.

    The guarantee wins over the tier's own ``grp_tres`` on the same TRES; no
    other QOS preempts it (the tiers' Preempt lists name tiers only).
    """
    g = spec.guarantees
    if g is None or g.tier not in {t.name for t in spec.tiers}:
        return []
    tier = spec.tier(g.tier)
    out = []
    for p in floating_projects(spec):
        fields = _qos_fields(tier, (priorities or {}).get(tier.name))
        fields["Description"] = f"{OWNER_TAG}: guarantee of {p.name}"
        fields["GrpTRES"] = _tres(guarantee_grp_tres(spec, p))
        out.append(QosPlan(guarantee_qos(tier.name, p.name), fields, tier=False))
    return out


def guarantee_grp_tres(spec: PoolSpec, project: Project) -> dict[str, int]:
    """``GrpTRES`` of ``project``'s guarantee QOS: the guarantees' tier's ``grp_tres``, then the guarantee.

    A typed guarantee also caps ``gres/gpu`` at its sum: Slurm counts a job
    that asks for GPUs of no type in ``gres/gpu`` only, never in a typed TRES
    (26.05.3 src/stepmgr/gres_stepmgr.c ``_set_type_tres_cnt``), so without it
    such jobs would run in the QOS unbounded.
    """
    assert spec.guarantees is not None
    out = {**spec.tier(spec.guarantees.tier).grp_tres, **project.guarantee}
    if "gres/gpu" not in project.guarantee:
        out["gres/gpu"] = sum(project.guarantee.values())
    return out


def association_qos(spec: PoolSpec, project: Project) -> tuple[list[str], str]:
    """The QOS list and DefaultQOS of ``project``'s associations (account and users).

    Each tier is its own QOS, except the guarantees' tier for a project with a
    guarantee: that is its guarantee's QOS, so it cannot use another project's.
    A project that also owns nodes keeps the tier's QOS, which its own
    partition allows.
    """
    g = spec.guarantees
    names = set(project.tiers)
    policy_default = spec.policy.default_tier
    default = project.default_tier or (policy_default if policy_default in project.tiers else project.tiers[0])
    if g is not None and project.guarantee and g.tier in project.tiers:
        names.add(guarantee_qos(g.tier, project.name))
        if not project.owns:
            names.discard(g.tier)
        if default == g.tier:
            default = guarantee_qos(g.tier, project.name)
    return sorted(names), default


def build_plan(spec: PoolSpec, site_priority: int | None = None, raw_qos_priority: bool = False) -> AccountingPlan:
    """The accounting objects a spec asks for, in a stable order: the tiers' QOS, then the guarantees'.

    ``site_priority`` is the highest Priority among the site's own QOS (None:
    not known, or the pool owns the cluster); in coexist mode the tiers'
    priorities are then fitted at or below it (:func:`fit_priorities`), so
    that no site job's QOS factor changes.
    """
    notes: list[str] = []
    priorities = None
    if spec.coexist is not None and site_priority is not None:
        priorities = fit_priorities({t.name: t.priority for t in spec.tiers}, site_priority, raw_qos_priority, notes)
    qos = [
        QosPlan(t.name, _qos_fields(t, (priorities or {}).get(t.name)), spec.adopt.qos_fields(t.name))
        for t in spec.tiers
    ]
    qos.extend(guarantee_qos_plans(spec, priorities))
    accounts = [
        AccountPlan(
            p.name,
            {
                "Description": f"{OWNER_TAG}: {p.description}" if p.description else OWNER_TAG,
                "Organization": OWNER_TAG,
                "Fairshare": str(p.fairshare),
                "QOS": ",".join(association_qos(spec, p)[0]),
                "DefaultQOS": association_qos(spec, p)[1],
            },
            spec.adopt.account_fields(p.name),
        )
        for p in spec.projects
    ]
    users = []
    first_account: dict[str, str] = {}
    for p in spec.projects:
        for u in p.users:
            first_account.setdefault(u, p.name)
    for p in spec.projects:
        qos_names, default_qos = association_qos(spec, p)
        qos_list = ",".join(qos_names)
        for u in sorted(p.users):
            users.append(
                UserPlan(u, p.name, {"DefaultAccount": first_account[u], "QOS": qos_list, "DefaultQOS": default_qos})
            )
    return AccountingPlan(spec.cluster.name, qos, accounts, users, notes)
