"""The desired accounting state, derived from the spec.  Pure.

Everything is expressed as sacctmgr field values (strings), so the diff
against what ``sacctmgr show -P`` reports is a plain string comparison.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from slurm_pool.spec.model import PoolSpec, Tier

#: Marker written into descriptions of objects slurm-pool creates, so that
#: ``--prune`` removes only those.
OWNER_TAG = "slurm-pool"


def untagged(fields: dict[str, str]) -> dict[str, str]:
    """The fields of an adopted object the site created: slurm-pool's tag is never written into it.

    Its description becomes the spec's own text where the spec has one, else stays the site's.
    """
    out = {k: v for k, v in fields.items() if k not in ("Description", "Organization")}
    desc = fields.get("Description", "")
    if desc.startswith(f"{OWNER_TAG}: "):
        out["Description"] = desc[len(OWNER_TAG) + 2 :]
    return out


def _tres(d: dict[str, int]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(d.items()))


@dataclass(frozen=True)
class QosPlan:
    name: str
    fields: dict[str, str]
    #: Listed in the spec's ``adopt.qos``: managed even where the site created it.
    adopted: bool = False


@dataclass(frozen=True)
class AccountPlan:
    name: str
    fields: dict[str, str]
    #: Listed in the spec's ``adopt.accounts``: managed even where the site created it.
    adopted: bool = False


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

    def to_json(self) -> dict[str, object]:
        return {
            "cluster": self.cluster,
            "qos": [{"name": q.name, **q.fields, **({"adopted": True} if q.adopted else {})} for q in self.qos],
            "accounts": [
                {"name": a.name, **a.fields, **({"adopted": True} if a.adopted else {})} for a in self.accounts
            ],
            "users": [{"name": u.name, "account": u.account, **u.fields} for u in self.users],
        }


def _qos_fields(tier: Tier) -> dict[str, str]:
    desc = f"{OWNER_TAG}: {tier.description}" if tier.description else OWNER_TAG
    return {
        "Description": desc,
        "Priority": str(tier.priority),
        "Preempt": ",".join(sorted(tier.preempt)),
        "PreemptMode": tier.preempt_mode.upper() if tier.preempt_mode != "off" else "OFF",
        "GraceTime": str(tier.grace_time),
        "UsageFactor": f"{tier.usage_factor:.6f}",
        "GrpTRES": _tres(tier.grp_tres),
        "MaxTRESPU": _tres(tier.max_tres_per_user),
        # The hard per-job GPU limit behind job_submit.lua's friendlier check.
        "MaxTRES": _tres({"gres/gpu": tier.policy.max_gpus_per_job} if tier.policy.max_gpus_per_job else {}),
    }


def build_plan(spec: PoolSpec) -> AccountingPlan:
    """The accounting objects a spec asks for, in a stable order."""
    default_tier = spec.policy.default_tier
    qos = [QosPlan(t.name, _qos_fields(t), t.name in spec.adopt.qos) for t in spec.tiers]
    accounts = [
        AccountPlan(
            p.name,
            {
                "Description": f"{OWNER_TAG}: {p.description}" if p.description else OWNER_TAG,
                "Organization": OWNER_TAG,
                "Fairshare": str(p.fairshare),
                "QOS": ",".join(sorted(p.tiers)),
                "DefaultQOS": p.default_tier or (default_tier if default_tier in p.tiers else p.tiers[0]),
            },
            p.name in spec.adopt.accounts,
        )
        for p in spec.projects
    ]
    users = []
    first_account: dict[str, str] = {}
    for p in spec.projects:
        for u in p.users:
            first_account.setdefault(u, p.name)
    for p in spec.projects:
        acct_default = p.default_tier or (default_tier if default_tier in p.tiers else p.tiers[0])
        for u in sorted(p.users):
            users.append(
                UserPlan(
                    u,
                    p.name,
                    {
                        "DefaultAccount": first_account[u],
                        "QOS": ",".join(sorted(p.tiers)),
                        "DefaultQOS": acct_default,
                    },
                )
            )
    return AccountingPlan(spec.cluster.name, qos, accounts, users)
