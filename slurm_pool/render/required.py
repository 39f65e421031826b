"""The cluster-wide slurm.conf settings a pool needs: what a site's own slurm.conf must carry.

A pool that owns its cluster renders them into its slurm.conf; a pool that
shares one (the spec's ``coexist``) renders only its nodes and partitions, and
lists these for the site's configuration management (``site-settings.conf``)
and for ``doctor`` to check against ``scontrol show config``.  Pure.

How each is read back from ``scontrol show config`` (src/api/config_info.c,
``slurm_ctl_conf_2_key_pairs``): lists such as SchedulerParameters print as
set, so a setting the pool needs is ``contains`` (the site may add its own
items); PreemptExemptTime -1 prints as ``NONE`` (INFINITE); from 26.05 each
Prolog/Epilog prints as ``Prolog[N]``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal, Mapping

from slurm_pool.render.context import accounting_tres, gres_string, preempt_parameters
from slurm_pool.spec.guarantees import floating_projects, guarantee_qos
from slurm_pool.spec.model import PoolSpec
from slurm_pool.versions import SlurmVersion

Match = Literal["equal", "contains", "positive", "at_least", "one_of", "manual"]


@dataclass(frozen=True)
class Setting:
    """One slurm.conf line the pool needs, why, and how ``scontrol show config`` shows it is there."""

    key: str
    value: str
    why: str
    match: Match = "equal"
    #: For ``one_of``: the spellings that count as set.
    accept: tuple[str, ...] = ()

    @property
    def line(self) -> str:
        """The line to put in slurm.conf (for ``manual`` ones: what to do)."""
        return self.value if self.match == "manual" else f"{self.key}={self.value}"


def _items(value: str) -> set[str]:
    return {i.strip().lower() for i in value.split(",") if i.strip()}


def _gres_tres(spec: PoolSpec, version: SlurmVersion) -> tuple[list[str], bool]:
    types: list[str] = []
    shards = False
    for g in spec.node_groups:
        for item in gres_string(g, version).split(","):
            if item.startswith("gpu:") and item.split(":")[1] not in types:
                types.append(item.split(":")[1])
            shards = shards or item.startswith("shard:")
    return types, shards


def pool_qos(spec: PoolSpec) -> list[str]:
    """Every QOS the pool's jobs run in: its tiers, then each floating project's guarantee QOS
    (those ``apply accounting`` makes)."""
    names = [t.name for t in spec.tiers]
    g = spec.guarantees
    if g is not None and g.tier in names:
        names += [guarantee_qos(g.tier, p.name) for p in floating_projects(spec)]
    return names


def deny_pool_qos(spec: PoolSpec, partition: str) -> Setting:
    """The ``DenyQos=`` a site partition that holds pool nodes needs (a ``manual`` setting)."""
    return Setting(
        f"PartitionName={partition}",
        f"add DenyQos={','.join(pool_qos(spec))} to the site's partition line "
        "(or keep an AllowQos= of yours free of these)",
        "it holds pool nodes: a pool QOS there would skip the pool's job rules (checkpoint, limits) "
        "and preempt the pool's jobs on them",
        "manual",
    )


def cluster_settings(spec: PoolSpec, version: SlurmVersion) -> list[Setting]:
    """Every cluster-wide setting ``spec`` relies on, for Slurm ``version``, in slurm.conf order."""
    types, shards = _gres_tres(spec, version)
    out = [
        Setting("SelectType", "select/cons_tres", "GPUs as GRES are scheduled per GPU only by cons_tres"),
        Setting("PriorityType", "priority/multifactor", "tiers order the queue through QOS priority"),
        Setting("PriorityWeightQOS", "10000", "a tier's QOS priority must weigh in the job priority", "positive"),
        Setting("AccountingStorageType", "accounting_storage/slurmdbd", "QOS, accounts and limits live in slurmdbd"),
        Setting(
            "AccountingStorageEnforce",
            "associations,limits,qos",
            "a tier is a QOS: without qos enforcement any job could use any tier",
            "contains",
        ),
        Setting(
            "AccountingStorageTRES",
            ",".join(accounting_tres(spec, types, shards)),
            "GPU limits (GrpTRES, MaxTRESPU) and GPU-hours per type are counted only for listed TRES",
            "contains",
        ),
        Setting("GresTypes", "gpu,shard" if shards else "gpu", "the pool's nodes declare these GRES", "contains"),
        Setting("PreemptType", "preempt/qos", "tiers preempt each other through their QOS"),
        Setting("PreemptMode", "REQUEUE", "a preempted borrower is requeued, not cancelled", "contains"),
        Setting(
            "PreemptExemptTime",
            "-1",
            "an owner's job must not wait for a borrower's exempt time",
            "one_of",
            ("none", "-1", "0", "00:00:00"),
        ),
        Setting("JobRequeue", "1", "preempted and failed batch jobs are requeued"),
    ]
    if spec.scheduler.requeue_exit:
        codes = ",".join(str(c) for c in spec.scheduler.requeue_exit)
        out.append(Setting("RequeueExit", codes, "`slurm-pool run` exits 85 when its own requeue failed", "contains"))
    if version.has("max_batch_requeue"):
        out.append(
            Setting(
                "MaxBatchRequeue",
                str(spec.scheduler.max_batch_requeue),
                "every preemption counts from 24.05 on; Slurm's default 5 holds a borrower on its 5th",
                "at_least",
            )
        )
    order_key, order_items = version.preempt_order()
    if version.has("preempt_params_line"):
        out.append(
            Setting(
                "PreemptParameters",
                ",".join(preempt_parameters(version)),
                "a borrower gets its checkpoint signal; as few jobs as possible are preempted",
                "contains",
            )
        )
    else:
        out.append(
            Setting(
                "SlurmctldParameters",
                "preempt_send_user_signal",
                "a borrower gets its checkpoint signal",
                "contains",
            )
        )
    sched = ["nohold_on_prolog_fail"] if spec.health.prolog else []
    whys = ["a job whose node fails the GPU check is requeued, not held"] if spec.health.prolog else []
    if order_key == "SchedulerParameters":
        sched += order_items
        whys.append("as few jobs as possible are preempted")
    if sched:
        out.append(Setting("SchedulerParameters", ",".join(sched), "; ".join(whys), "contains"))
    if spec.health.prolog:
        out.append(Setting("PrologFlags", "Alloc", "the GPU check runs when the job is allocated", "contains"))
    if spec.policy.job_submit or (spec.coexist is not None and spec.coexist.job_submit is not None):
        out.append(Setting("JobSubmitPlugins", "lua", "the pool's job_submit.lua (it chains the site's)", "contains"))
    if any(g.gpus and g.gpus.layouts for g in spec.node_groups):
        out.append(Setting("NodeFeaturesPlugins", "node_features/helpers", "MIG layouts are changeable node features"))
    coexist = spec.coexist
    if coexist is not None:
        if spec.health.prolog:
            out.append(
                Setting(
                    "Prolog", f"{coexist.prolog_dir}/*", "the pool's prolog runs beside the site's (a glob)", "equal"
                )
            )
        if spec.health.epilog:
            out.append(
                Setting(
                    "Epilog", f"{coexist.epilog_dir}/*", "the pool's epilog runs beside the site's (a glob)", "equal"
                )
            )
        if spec.health.health_check_interval:
            out.append(
                Setting(
                    "HealthCheckProgram",
                    "the pool's slurm-pool-healthcheck, with the site's own program as coexist.health_check",
                    "Slurm runs one health check program; the pool's runs the site's after its GPU checks",
                    "manual",
                )
            )
        out.append(
            Setting(
                "PlugStackConfig",
                "include plugstack-slurm-pool.conf from the site's plugstack.conf",
                "the checkpoint SPANK plugin",
                "manual",
            )
        )
        out.append(
            Setting(
                "gres.conf",
                "Include gres-GROUP.conf from the site's gres.conf, one line per pool node group with GPUs",
                "the pool's GPUs",
                "manual",
            )
        )
        out.extend(deny_pool_qos(spec, name) for name in coexist.site_partitions)
    if spec.console is not None:
        out.append(Setting("AuthAltTypes", "auth/jwt", "the console acts as each user with a Slurm JWT", "contains"))
    return out


def config_values(config: Mapping[str, str], key: str) -> list[str]:
    """The value(s) of ``key`` in ``scontrol show config``: from 26.05 scripts print as ``Key[0]``, ``Key[1]``..."""
    return [v for k, v in config.items() if k == key or (k.startswith(key + "[") and k.endswith("]"))]


def satisfied(setting: Setting, config: Mapping[str, str]) -> bool:
    """Whether ``scontrol show config`` (as a dict) shows ``setting`` in force; ``manual`` ones always are."""
    if setting.match == "manual":
        return True
    values = config_values(config, setting.key)
    if not values:
        return False
    if setting.match == "contains":
        have: set[str] = set()
        for v in values:
            have |= _items(v)
        return _items(setting.value) <= have
    if setting.match in ("positive", "at_least"):
        digits = values[0].split()[0] if values[0].split() else ""
        floor = int(setting.value) if setting.match == "at_least" else 1
        return re.fullmatch(r"[0-9]{1,12}", digits) is not None and int(digits) >= floor
    if setting.match == "one_of":
        return values[0].strip().lower() in setting.accept
    return any(v.strip().lower() == setting.value.lower() for v in values)


def missing(settings: list[Setting], config: Mapping[str, str]) -> list[Setting]:
    """The settings ``config`` does not carry, in order."""
    return [s for s in settings if not satisfied(s, config)]


def settings_text(spec: PoolSpec, version: SlurmVersion) -> str:
    """``site-settings.conf``: the lines to merge into the site's slurm.conf, each with its reason."""
    lines = [
        f"# Cluster-wide settings the slurm-pool pool {spec.cluster.name} needs, for Slurm {version}.",
        "# Merge them into your own slurm.conf (lists: add the items to yours), beside",
        "# 'Include slurm-pool.conf'; `slurm-pool doctor` checks them on the running cluster.",
    ]
    for s in cluster_settings(spec, version):
        kind = {"contains": " (add to your list)", "positive": " (any value above 0)", "at_least": " (or more)"}.get(
            s.match, ""
        )
        if s.match == "manual":
            lines.append(f"# {s.key}: {s.value} -- {s.why}")
            continue
        lines.append(f"# {s.why}{kind}")
        lines.append(s.line)
    return "\n".join(lines) + "\n"
