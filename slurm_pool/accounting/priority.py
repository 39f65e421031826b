"""The tiers' QOS priorities fitted beside a site's own QOS, so that no site job's priority changes.  Pure.

With ``PriorityType=priority/multifactor`` a job's QOS factor is its QOS's
Priority divided by the highest Priority of every QOS slurmdbd holds
(Slurm 26.05.3 src/common/assoc_mgr.c ``_post_qos_list`` keeps that maximum in
``g_qos_max_priority``, ``_set_qos_norm_priority`` divides by it), unless
``PriorityFlags`` has ``NO_NORMAL_QOS``: then the factor is the Priority
itself (src/plugins/priority/multifactor/priority_multifactor.c
``set_priority_factors`` and ``_create_prio_list_qos``).  A QOS whose Priority
is 0 adds nothing either way (both test ``qos_ptr->priority`` first).

So pool tiers above the site's highest QOS Priority would lower the QOS factor
of every site job (10 of 10 becomes 10 of 1000).  In a site's cluster the
tiers are therefore fitted at or below the site's highest Priority, in their
order; they keep their values where that cannot change a site factor: the site's
highest is 0 (every site QOS adds nothing), ``NO_NORMAL_QOS`` is set, or the
tiers already fit.
"""

from __future__ import annotations

from slurm_pool.errors import InputError


class PriorityFitError(InputError):
    """The site's QOS priority range cannot hold the tiers' order.  Exit status 2."""


def fit_priorities(
    tiers: dict[str, int], site_max: int, raw: bool = False, notes: list[str] | None = None
) -> dict[str, int]:
    """Each tier's QOS Priority such that the highest QOS Priority in slurmdbd stays ``site_max``.

    Distinct priorities stay distinct and in their order, 0 stays 0; each
    other value is scaled by ``site_max / highest tier`` (at least 1), then moved
    the least that keeps the order strict.  ``raw``: ``NO_NORMAL_QOS`` is set,
    nothing is fitted.  A line saying what was done is appended to ``notes``.
    """
    top = max(tiers.values(), default=0)
    if raw or site_max <= 0 or top <= site_max:
        return dict(tiers)
    levels = sorted({p for p in tiers.values() if p > 0})
    if len(levels) > site_max:
        raise PriorityFitError(
            f"tiers: {len(levels)} distinct QOS priorities ({', '.join(map(str, levels))}) do not fit at or below "
            f"{site_max}, the highest Priority of the site's own QOS; above it every site job's QOS factor would drop "
            "(Slurm divides each QOS Priority by the highest one). Give the tiers at most "
            f"{site_max} distinct priorities, raise a site QOS's Priority, or set PriorityFlags=NO_NORMAL_QOS"
        )
    fitted = [max(1, p * site_max // top) for p in levels]
    for i in range(1, len(fitted)):
        fitted[i] = max(fitted[i], fitted[i - 1] + 1)
    fitted[-1] = min(fitted[-1], site_max)
    for i in range(len(fitted) - 2, -1, -1):
        fitted[i] = min(fitted[i], fitted[i + 1] - 1)
    to = dict(zip(levels, fitted, strict=True))
    out = {name: to.get(p, 0) for name, p in tiers.items()}
    if notes is not None:
        moved = ", ".join(f"{name} {tiers[name]} -> {out[name]}" for name in tiers if out[name] != tiers[name])
        notes.append(
            f"priorities: the tiers' QOS priorities are fitted at or below {site_max}, the highest of the site's own "
            f"QOS, in their order, so that no site job's QOS factor changes: {moved}"
        )
    return out
